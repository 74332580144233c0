"""The registry of checkpoint families: `model_type` -> the module that
loads it, model class -> the module that saves it.

A family module exposes `MODEL_TYPES` (the config `model_type`s it reads),
`CLASSES` (our model classes it writes), `DEFAULT_ARCHITECTURES`
(`model_type` -> the architecture of a config without one), `load(path)` (with a `dtype`
argument where `DTYPES` lists the dtypes it loads in) and
`save(model, path, tokenizer)`. Registering one is adding it to `FAMILIES`.
"""

from keras_transformer.pretrained import bert, gpt2, llama, seq2seq, vit

FAMILIES = (bert, gpt2, llama, seq2seq, vit)
LOADERS = {
    model_type: family.load for family in FAMILIES for model_type in family.MODEL_TYPES
}
SAVERS = {cls: family.save for family in FAMILIES for cls in family.CLASSES}
DEFAULT_ARCHITECTURES = {
    model_type: architecture
    for family in FAMILIES
    for model_type, architecture in family.DEFAULT_ARCHITECTURES.items()
}


def architecture(config):
    """The config's first `architectures` entry; where it is null, empty
    or missing (as `config.save_pretrained` writes after some conversions),
    its `model_type`'s usual one, as transformers resolves it."""
    return (config.get("architectures") or [None])[0] or DEFAULT_ARCHITECTURES.get(
        config.get("model_type")
    )


def loader(model_type, path):
    """`load(path)` of the family that reads `model_type`, or a ValueError
    listing the supported ones."""
    if model_type not in LOADERS:
        raise ValueError(
            f"Unsupported checkpoint `model_type` (supported: {sorted(LOADERS)}). "
            f"Received: model_type={model_type!r} in {path!r}"
        )
    return LOADERS[model_type]


def loads_in_dtypes(model_type):
    """Whether the family of `model_type` loads in other dtypes than
    float32 (its `load` takes `dtype`)."""
    return any(
        model_type in family.MODEL_TYPES and hasattr(family, "DTYPES")
        for family in FAMILIES
    )


def saver(model):
    """`save(model, path, tokenizer)` of the family that writes `model`'s
    class (or the nearest class it derives from), or a ValueError."""
    for cls in type(model).__mro__:
        if cls in SAVERS:
            return SAVERS[cls]
    names = [cls.__name__ for cls in SAVERS]
    raise ValueError(
        f"`model` must be a kt.models.{', '.join(names[:-1])} or {names[-1]}. "
        f"Received: model={model!r}"
    )
