"""`Family`: what one model family is to Hugging Face, as data.

Each family module of `pretrained/` (`bert.py`, `gemma3.py`, `gpt2.py`,
`llama.py`, `seq2seq.py`, `t5.py`, `vit.py`, `whisper.py`) ends with one
`FAMILY` record, and `pretrained/registry.py` derives every lookup from the
records: which
module loads a `model_type`, which saves a model class, which task serves
an architecture, which tokenizer reader a `model_type` needs, and the PEFT
module names of a model. Nothing outside `pretrained/` branches on a model
class or a `model_type` string.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family's Hugging Face identity.

    Attributes:
        name: the family's name in messages (`"GPT-2"`).
        model_types: the config `model_type`s it reads.
        classes: our model classes it writes (a subclass is written by the
            family of its nearest listed class).
        architectures: Hugging Face architecture -> `(our model class, the
            name of the `kt.tasks` class serving it, or None)`.
        also_served_by: architecture -> the names of other `kt.tasks`
            classes that serve it when asked by name (T5's `Summarizer`
            and `Translator`, beside `Text2Text`, which
            `kt.tasks.from_pretrained` picks).
        load: `load(path)` (with `dtype=` where `dtypes` lists more than
            float32): our model of a folder.
        save: `save(model, path, tokenizer)`: writes a folder.
        default_architectures: `model_type` -> the architecture of a config
            whose `architectures` is null or missing (as transformers
            resolves it).
        dtypes: the dtypes `load` builds in (`("float32",)`: no `dtype`).
        tokenizers: `model_type` -> `reader(path)`, for folders whose
            tokenizer is read by their `model_type` rather than by the
            files they hold (`kt.text.tokenizer_from_pretrained`).
        peft_modules: `peft_modules(model)` -> `{PEFT module name: [(our
            layer, rows of lora_B or None)]}`, built from the same names the
            weight table loads and saves; None: no PEFT adapters.
        peft_fan_in_fan_out: the family's PEFT `fan_in_fan_out` (GPT-2's
            Conv1D weights are `(in, out)`).
        peft_task_type: the `task_type` of the adapters we write, which
            picks the `PeftModel` class `PeftModel.from_pretrained` wraps
            the base in (None: `PeftModel` itself).
    """

    name: str
    model_types: tuple
    classes: tuple
    architectures: dict
    load: object
    save: object
    default_architectures: dict = dataclasses.field(default_factory=dict)
    also_served_by: dict = dataclasses.field(default_factory=dict)
    dtypes: tuple = ("float32",)
    tokenizers: dict = dataclasses.field(default_factory=dict)
    peft_modules: object = None
    peft_fan_in_fan_out: bool = False
    peft_task_type: object = "CAUSAL_LM"
