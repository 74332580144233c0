"""Held-out accuracy of a small encoder-decoder trained from scratch: our
`seq2seq` next to the same shape built from KerasHub's layers.

No translation corpus is installed, so the task is synthetic: a source
sentence of 5-12 random words (vocabulary 1,000) is "translated" by reversing
it and renaming every word through a fixed permutation into a second
vocabulary of 1,000. Both models are 2+2 layers, 128 hidden, 4 heads, 512
feed-forward, ReLU, post-LN, dropout 0.1, an untied output layer; Adam 1e-3,
batch 64, 3 epochs over 8,000 pairs, plain masked cross-entropy. Accuracy is
teacher-forced, over the 1,000 held-out pairs' real target tokens (the
end token included); exact is the share of pairs with every token right.

- `ours`: `kt.models.seq2seq(..., target_vocabulary_size=...)` with its
  defaults (learned positions, unscaled Keras-uniform tokens, embedding
  dropout);
- `ours_paper`: the same with the paper's embedding, our default before
  issue #28 (`position="sinusoidal", scale_embeddings=True`);
- `ours_normal`: `ours_paper` with N(0, 1/E) token draws (unit variance
  after the √E scale);
- `keras_hub`: `keras_hub.layers.TokenAndPositionEmbedding` (unscaled
  Keras-uniform tokens, learned positions), `TransformerEncoder`,
  `TransformerDecoder`, `Dense`: the layers of keras.io's KerasHub
  translation example.

    python benchmarks/seq2seq_init.py --seeds 0 1 2
"""

import argparse
import json
import time

import keras
import numpy as np

import keras_transformer as kt

VOCABULARY, LENGTH, PAIRS, HELD_OUT = 1000, 12, 8000, 1000
LAYERS, HEADS, HIDDEN, INTERMEDIATE, DROPOUT = 2, 4, 128, 512, 0.1
EPOCHS, BATCH, LEARNING_RATE = 3, 64, 1e-3
START, END = 1, 2  # target ids; 0 is padding, words are 3..VOCABULARY-1


def pairs(seed):
    """Source ids `(N, LENGTH)`, decoder inputs and labels `(N, LENGTH + 1)`."""
    rng = np.random.default_rng(1000 + seed)
    rename = rng.permutation(np.arange(3, VOCABULARY))  # word w -> rename[w - 3]
    count = PAIRS + HELD_OUT
    source = np.zeros((count, LENGTH), "int32")
    inputs = np.zeros((count, LENGTH + 1), "int32")
    labels = np.zeros((count, LENGTH + 1), "int32")
    for i in range(count):
        words = rng.integers(3, VOCABULARY, rng.integers(5, LENGTH + 1))
        target = rename[words[::-1] - 3]
        source[i, : len(words)] = words
        inputs[i, : len(target) + 1] = [START, *target]
        labels[i, : len(target) + 1] = [*target, END]
    return source, inputs, labels


def ours(**options):
    return kt.models.seq2seq(VOCABULARY, num_layers=LAYERS, num_heads=HEADS,
                             hidden_dim=HIDDEN, intermediate_dim=INTERMEDIATE,
                             max_sequence_length=LENGTH + 1, dropout=DROPOUT,
                             target_vocabulary_size=VOCABULARY, **options)  # fmt: skip


def ours_paper():
    """Ours with the paper's embedding, our defaults before issue #28:
    fixed sinusoids plus √E-scaled Keras-uniform(±0.05) tokens."""
    return ours(position="sinusoidal", scale_embeddings=True)


def ours_normal():
    """The paper's embedding with the paper's token draws, N(0, 1/E), scaled
    by √E to unit variance (tensor2tensor's and fairseq's pairing)."""
    model = ours_paper()
    for layer in (model.encoder_embeddings, model.decoder_embeddings):
        table = layer.token_embedding.embeddings
        table.assign(keras.random.normal(table.shape, stddev=HIDDEN**-0.5))
    return model


def keras_hub():
    import keras_hub  # only this row needs it

    layers = keras_hub.layers
    encoder_ids = keras.Input((None,), dtype="int32", name="encoder_token_ids")
    decoder_ids = keras.Input((None,), dtype="int32", name="decoder_token_ids")
    x = layers.TokenAndPositionEmbedding(VOCABULARY, LENGTH + 1, HIDDEN,
                                         mask_zero=True)(encoder_ids)  # fmt: skip
    for _ in range(LAYERS):
        x = layers.TransformerEncoder(INTERMEDIATE, HEADS, dropout=DROPOUT)(x)
    y = layers.TokenAndPositionEmbedding(VOCABULARY, LENGTH + 1, HIDDEN,
                                         mask_zero=True)(decoder_ids)  # fmt: skip
    for _ in range(LAYERS):
        y = layers.TransformerDecoder(INTERMEDIATE, HEADS, dropout=DROPOUT)(y, x)
    logits = keras.layers.Dense(VOCABULARY)(y)
    return keras.Model({"encoder_token_ids": encoder_ids,
                        "decoder_token_ids": decoder_ids}, logits)  # fmt: skip


def accuracy(name, seed):
    source, inputs, labels = pairs(seed)
    train, test = slice(0, PAIRS), slice(PAIRS, None)
    keras.utils.set_random_seed(seed)
    model = BUILDERS[name]()
    model.compile(
        optimizer=keras.optimizers.Adam(LEARNING_RATE),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
    )
    start = time.perf_counter()
    features = {"encoder_token_ids": source, "decoder_token_ids": inputs}
    model.fit(
        {key: value[train] for key, value in features.items()},
        labels[train],
        batch_size=BATCH,
        epochs=EPOCHS,
        verbose=0,
    )
    seconds = time.perf_counter() - start
    logits = model.predict({k: v[test] for k, v in features.items()}, verbose=0)
    predicted = np.argmax(keras.ops.convert_to_numpy(logits), axis=-1)
    real = labels[test] != 0
    right = (predicted == labels[test]) | ~real
    return {
        "model": name,
        "seed": seed,
        "parameters": model.count_params(),
        "accuracy": float(np.sum(right & real) / np.sum(real)),
        "exact": float(np.mean(np.all(right, axis=-1))),
        "seconds": round(seconds, 1),
    }


BUILDERS = {
    "ours": ours,
    "ours_paper": ours_paper,
    "ours_normal": ours_normal,
    "keras_hub": keras_hub,
}
MODELS = tuple(BUILDERS)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--results", help="JSON-lines file the runs append to")
    args = parser.parse_args()
    for seed in args.seeds:
        for name in args.models:
            row = accuracy(name, seed)
            print(json.dumps(row), flush=True)
            if args.results:
                with open(args.results, "a") as file:
                    file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
