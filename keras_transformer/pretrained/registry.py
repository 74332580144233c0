"""The registry of checkpoint families, derived from their `Family`
records (`pretrained/family.py`): `model_type` -> the family that loads
it, model class -> the family that saves it, architecture -> our model
class and the task serving it, `model_type` -> its tokenizer reader, and a
model's PEFT module names. Registering a family is one line in `FAMILIES`.
"""

from keras_transformer.pretrained import (
    bert,
    gemma3,
    gpt2,
    llama,
    seq2seq,
    t5,
    vit,
    whisper,
)

FAMILIES = (
    bert.FAMILY,
    gpt2.FAMILY,
    llama.FAMILY,
    gemma3.FAMILY,
    seq2seq.FAMILY,
    t5.FAMILY,
    vit.FAMILY,
    whisper.FAMILY,
)

BY_MODEL_TYPE = {t: family for family in FAMILIES for t in family.model_types}
BY_CLASS = {cls: family for family in FAMILIES for cls in family.classes}
ARCHITECTURES = {
    architecture: pair
    for family in FAMILIES
    for architecture, pair in family.architectures.items()
}
DEFAULT_ARCHITECTURES = {
    model_type: architecture
    for family in FAMILIES
    for model_type, architecture in family.default_architectures.items()
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
    if model_type not in BY_MODEL_TYPE:
        raise ValueError(
            f"Unsupported checkpoint `model_type` (supported: "
            f"{sorted(BY_MODEL_TYPE)}). Received: model_type={model_type!r} in "
            f"{path!r}"
        )
    return BY_MODEL_TYPE[model_type].load


def loads_in_dtypes(model_type):
    """Whether the family of `model_type` loads in other dtypes than
    float32 (its `load` takes `dtype`)."""
    family = BY_MODEL_TYPE.get(model_type)
    return family is not None and len(family.dtypes) > 1


def dtype_model_types():
    """The `model_type`s that load in other dtypes than float32, for
    messages (`"llama, mistral and qwen2"`)."""
    types = [t for f in FAMILIES if len(f.dtypes) > 1 for t in f.model_types]
    return " and ".join([", ".join(types[:-1]), types[-1]] if len(types) > 1 else types)


def supported_table(indent=0):
    """The supported checkpoints, one line per family, for docstrings:
    its `model_type`s and `architecture -> kt.models class` pairs."""
    lines = []
    for family in FAMILIES:
        types = ", ".join(f"`{t}`" for t in family.model_types)
        pairs = ", ".join(
            f"`{a}` -> `kt.models.{cls.__name__}`"
            for a, (cls, _) in family.architectures.items()
        )
        lines.append(f"- {family.name} (`model_type` {types}): {pairs}")
    return ("\n" + " " * indent).join(lines)


def family_of(model):
    """The `Family` that writes `model`'s class (or the nearest class it
    derives from), or None."""
    for cls in type(model).__mro__:
        if cls in BY_CLASS:
            return BY_CLASS[cls]
    return None


def saver(model):
    """`save(model, path, tokenizer)` of the family that writes `model`'s
    class (or the nearest class it derives from), or a ValueError."""
    family = family_of(model)
    if family is None:
        names = [cls.__name__ for cls in BY_CLASS]
        raise ValueError(
            f"`model` must be a kt.models.{', '.join(names[:-1])} or {names[-1]}. "
            f"Received: model={model!r}"
        )
    return family.save


def task_for(name):
    """The name of the `kt.tasks` class serving a Hugging Face architecture
    or, where none is given, a `model_type`'s usual architecture; None when
    no task serves it."""
    name = DEFAULT_ARCHITECTURES.get(name, name)
    return ARCHITECTURES.get(name, (None, None))[1]


def architectures_of(task_class):
    """The architectures a `kt.tasks` class serves: those of the nearest
    class in its hierarchy that a family names (a subclass of
    `TextGenerator` serves what `TextGenerator` serves)."""
    for cls in task_class.__mro__:
        served = tuple(
            a for a, (_, task) in ARCHITECTURES.items() if task == cls.__name__
        ) + tuple(
            a
            for family in FAMILIES
            for a, tasks in family.also_served_by.items()
            if cls.__name__ in tasks
        )
        if served:
            return served
    return ()


def served_architectures():
    """Every architecture some task serves, sorted."""
    return sorted(a for a, (_, task) in ARCHITECTURES.items() if task is not None)


def tokenizer_for(model_type):
    """The reader `reader(path)` of a folder whose tokenizer is read by its
    `model_type`, or None (read by the files the folder holds)."""
    family = BY_MODEL_TYPE.get(model_type)
    return None if family is None else family.tokenizers.get(model_type)


def peft_family(model):
    """The `Family` record of `model`, whose PEFT fields (`peft_modules`,
    `peft_fan_in_fan_out`, `peft_task_type`) read and write its adapters;
    a ValueError for a family without PEFT adapters."""
    family = family_of(model)
    if family is None or family.peft_modules is None:
        names = [
            cls.__name__
            for f in FAMILIES
            if f.peft_modules is not None
            for cls in f.classes
        ]
        raise ValueError(
            f"PEFT adapters are read and written for {' and '.join(names)} "
            f"models. Received: a {type(model).__name__}"
        )
    return family


def tokenizer_readers():
    """`model_type` -> `reader(path)` for the folders whose tokenizer is
    read by their `model_type` (a family's record names a reader), which
    `keras_transformer/__init__.py` hands to `kt.text.tokenizer_from_pretrained`
    (text/ sits below pretrained/)."""
    return {t: tokenizer_for(t) for t in BY_MODEL_TYPE if tokenizer_for(t) is not None}
