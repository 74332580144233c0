"""Hugging Face checkpoint folders on disk: `config.json` and the weights in
`model.safetensors` (or shards listed in `model.safetensors.index.json`),
read and written with the `safetensors` package's numpy API (no torch)."""

import json
import os

INDEX = "model.safetensors.index.json"
WEIGHTS = "model.safetensors"


def check_folder(path):
    """`path` as a string, or a FileNotFoundError naming it."""
    path = os.fspath(path)
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            "`path` must be a checkpoint folder with a config.json. "
            f"Received: path={path!r}"
        )
    return path


def read_config(path):
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def read_weights(path):
    """All tensors of the folder as a dict of numpy arrays (float32)."""
    from safetensors.numpy import load_file

    if os.path.isfile(os.path.join(path, INDEX)):
        with open(os.path.join(path, INDEX), encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.isfile(os.path.join(path, WEIGHTS)):
        files = [WEIGHTS]
    else:
        raise FileNotFoundError(
            f"No {WEIGHTS} or {INDEX} in the checkpoint folder. Received: path={path!r}"
        )
    weights = {}
    for name in files:
        file = os.path.join(path, name)
        if not os.path.isfile(file):
            raise FileNotFoundError(
                f"The checkpoint's {INDEX} names a shard that is missing: {file!r}"
            )
        try:
            weights.update(load_file(file))
        except Exception as error:  # safetensors raises its own error types
            raise ValueError(
                f"Cannot read {file!r} as safetensors (broken or truncated?): {error}"
            ) from None
    return {k: v.astype("float32", copy=False) for k, v in weights.items()}


def write_folder(path, config, weights):
    """Writes `config.json` and `model.safetensors` into `path`."""
    from safetensors.numpy import save_file

    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    save_file(
        {k: v for k, v in weights.items()},
        os.path.join(path, WEIGHTS),
        metadata={"format": "pt"},
    )
