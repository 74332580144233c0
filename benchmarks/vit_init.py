"""Held-out accuracy of a small ViT trained from scratch: ours next to KerasHub.

The recipe of issue #28: scikit-learn's bundled 8×8 digits (no download),
patches of 2, 2 layers, 4 heads, 64 hidden, 128 feed-forward, no dropout,
Adam 1e-3, batch 32, 30 epochs, plain cross-entropy. Three models of the
same size (69,194 parameters):

- `before`: ours with every dense kernel, the patch projection, the class
  token and the positions drawn from N(0, 0.02²) (truncated), as `kt.models.ViT`
  was before the fix (re-drawn here, so the row stays reproducible);
- `ours`: `kt.models.ViT` as it is now;
- `keras_hub`: KerasHub's `ViTBackbone` under a `Dense` classifier on the
  class token (what `ViTImageClassifier` adds), with Keras' default
  initializers as KerasHub leaves them.

The test split (20 %, stratified) is fixed by the seed and is the same for
the three; so are the weights' seed and the batch order's seed.

    python benchmarks/vit_init.py                 # every model, seeds 0 1 2
    python benchmarks/vit_init.py --seeds 3 --models ours --results r.json
    python benchmarks/vit_init.py --results r.json --summary

Each run appends its accuracy to `--results` (JSON lines), so runs can be
made one at a time; `--summary` prints the per-seed table, the means and the
ratios to KerasHub from that file.
"""

import argparse
import json
import time

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import keras_transformer as kt

IMAGE, PATCH, CLASSES = 8, 2, 10
LAYERS, HEADS, HIDDEN, INTERMEDIATE = 2, 4, 64, 128
EPOCHS, BATCH, LEARNING_RATE = 30, 32, 1e-3
MODELS = ("before", "ours", "keras_hub")


def digits(seed):
    data = load_digits()
    x = (data.images / 16.0).astype("float32")[..., None]  # (1797, 8, 8, 1)
    y = data.target.astype("int32")
    return train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)


def ours():
    return kt.models.vit(IMAGE, PATCH, CLASSES, num_channels=1, num_layers=LAYERS,
                         num_heads=HEADS, hidden_dim=HIDDEN,
                         intermediate_dim=INTERMEDIATE)  # fmt: skip


def before():
    """Ours with the N(0, 0.02²) draws `kt.models.ViT` used before the fix:
    every kernel, the class token and the positions; biases zero."""
    model = ours()
    for variable in model.weights:
        name = variable.path.split("/")[-1]
        if name in ("kernel", "class_embedding", "position_embeddings"):
            draw = keras.initializers.TruncatedNormal(stddev=0.02)
            variable.assign(draw(variable.shape))
        elif name == "bias":
            variable.assign(np.zeros(variable.shape, "float32"))
    return model


def keras_hub():
    import keras_hub  # only this row needs it

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(IMAGE, IMAGE, 1),
        patch_size=PATCH,
        num_layers=LAYERS,
        num_heads=HEADS,
        hidden_dim=HIDDEN,
        mlp_dim=INTERMEDIATE,
    )
    # A plain functional model, not `ViTImageClassifier`: KerasHub's
    # `Task.fit` batches numpy inputs without shuffling them, which would
    # make the batch order differ from the two other rows.
    images = keras.Input((IMAGE, IMAGE, 1))
    logits = keras.layers.Dense(CLASSES)(backbone(images)[:, 0, :])  # class token
    return keras.Model(images, logits)


def accuracy(name, seed):
    x_train, x_test, y_train, y_test = digits(seed)
    keras.utils.set_random_seed(seed)
    model = {"before": before, "ours": ours, "keras_hub": keras_hub}[name]()
    model.compile(
        optimizer=keras.optimizers.Adam(LEARNING_RATE),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    start = time.perf_counter()
    model.fit(x_train, y_train, batch_size=BATCH, epochs=EPOCHS, verbose=0)
    seconds = time.perf_counter() - start
    logits = keras.ops.convert_to_numpy(model.predict(x_test, verbose=0))
    return {
        "model": name,
        "seed": seed,
        "parameters": model.count_params(),
        "accuracy": float(np.mean(np.argmax(logits, axis=-1) == y_test)),
        "seconds": round(seconds, 1),
    }


def summary(rows):
    seeds = sorted({row["seed"] for row in rows})
    names = [name for name in MODELS if any(row["model"] == name for row in rows)]
    table = {(row["model"], row["seed"]): row["accuracy"] for row in rows}
    header = "".join(f"seed {seed}".rjust(9) for seed in seeds)
    print("model".ljust(10) + header + "mean".rjust(9))
    means = {}
    for name in names:
        values = [table.get((name, seed)) for seed in seeds]
        known = [value for value in values if value is not None]
        means[name] = float(np.mean(known))
        cells = "".join(("-" if v is None else f"{v:.4f}").rjust(9) for v in values)
        print(name.ljust(10) + cells + f"{means[name]:.4f}".rjust(9))
    if "keras_hub" in means:
        for name in names[:-1] if names[-1] == "keras_hub" else names:
            ratio = means[name] / means["keras_hub"]
            print(f"{name} / keras_hub: {ratio:.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--results", help="JSON-lines file the runs append to")
    parser.add_argument(
        "--summary", action="store_true", help="print --results' table, train nothing"
    )
    args = parser.parse_args()
    rows = []
    if args.results and args.summary:
        with open(args.results) as file:
            rows = [json.loads(line) for line in file if line.strip()]
    else:
        for seed in args.seeds:
            for name in args.models:
                row = accuracy(name, seed)
                print(json.dumps(row), flush=True)
                rows.append(row)
                if args.results:
                    with open(args.results, "a") as file:
                        file.write(json.dumps(row) + "\n")
    summary(rows)


if __name__ == "__main__":
    main()
