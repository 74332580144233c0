"""The settings of a `train` run: the task's defaults, then `--preset`, a
checkpoint's (`--from`), then the flags, checked before any work; and the
run's length and evaluation interval."""

import math
import os

from keras_transformer import _validation as validation
from keras_transformer import models
from keras_transformer.cli.errors import CommandError

CHECKPOINT_SETTINGS = ("layers", "heads", "hidden", "intermediate", "preset")
TOKENIZER_SETTINGS = ("tokenizer", "vocabulary_size")
FLAG_SETTINGS = (
    "layers", "heads", "hidden", "intermediate", "context", "dropout",
    "tokenizer", "vocabulary_size", "batch_size", "learning_rate", "steps",
    "epochs", "eval_every", "preset",
)  # fmt: skip
# Fine-tuning a checkpoint: the usual small learning rate and a few epochs.
FINE_TUNE = {"learning_rate": 5e-5, "epochs": 3.0}


def checkpoint_kind(path, recipe, recipes):
    """`"huggingface"` or `"ours"` for the `--from` folder `path` of a run
    of `recipe`, or a CommandError saying what is wrong (`recipes`: every
    task's, to name the checkpoints that can be fine-tuned)."""
    if not os.path.isdir(path):
        raise CommandError(f"--from {path}: not a folder")
    try:
        config_path = os.path.join(path, "config.json")
        config = validation.read_json(config_path, missing_ok=True) or {}
    except ValueError as error:
        raise CommandError(f"--from {path}: {error}") from None
    if os.path.isfile(os.path.join(path, "model.keras")) and "task" in config:
        if config["task"] != recipe.name:
            raise CommandError(
                f"--from {path}: a `{config['task']}` model, not `{recipe.name}`"
            )
        return "ours"
    model_type = config.get("model_type")
    if model_type is None:
        raise CommandError(
            f"--from {path}: not a checkpoint (expected a Hugging Face "
            "config.json with model_type, or a folder written by `train`)"
        )
    if model_type != recipe.checkpoint_model_type:
        supported = ", ".join(
            sorted(
                f"{other.checkpoint_model_type} for {name}"
                for name, other in recipes.items()
                if other.checkpoint_model_type
            )
        )
        raise CommandError(
            f"--from {path}: model_type {model_type!r} cannot train "
            f"`{recipe.name}` (supported: {supported})"
        )
    return "huggingface"


def resolve(recipe, args, kind):
    """Every setting of the run, from the recipe's defaults, `--preset`, a
    checkpoint and the flags, in that order. Raises CommandError for flags
    that contradict each other."""
    settings = dict(recipe.defaults)
    given = {
        key: getattr(args, key)
        for key in FLAG_SETTINGS
        if getattr(args, key) is not None
    }
    if kind is not None:
        for key in CHECKPOINT_SETTINGS + TOKENIZER_SETTINGS:
            if key in given:
                flag = "--" + key.replace("_", "-")
                raise CommandError(
                    f"{flag} cannot be used with --from: the checkpoint fixes "
                    "the model's size and its tokenizer"
                )
        settings.update(FINE_TUNE)
        settings["steps"] = None
    if "preset" in given:
        preset = models.presets.PRESETS[given["preset"]]
        if preset["family"] != recipe.name:
            raise CommandError(
                f"--preset {given['preset']} is a {preset['family']} preset, "
                f"not {recipe.name}"
            )
        config = preset["config"]
        settings.update(
            layers=config["num_layers"],
            heads=config["num_heads"],
            hidden=config["hidden_dim"],
            intermediate=config["intermediate_dim"],
        )
        if recipe.preset_sets_context or "context" in given:
            settings["context"] = min(config["max_sequence_length"], 1024)
    if "epochs" in given:
        settings["steps"] = None
    if "steps" in given:
        settings["epochs"] = None
    settings.update(given)
    settings.setdefault("epochs", None)
    settings.setdefault("intermediate", None)
    if settings["intermediate"] is None and kind is None:
        settings["intermediate"] = 4 * settings["hidden"]
    if kind is None and settings["hidden"] % settings["heads"]:
        raise CommandError(
            f"--hidden {settings['hidden']} must be divisible by --heads "
            f"{settings['heads']}"
        )
    recipe.refine(settings, kind, args)
    settings["precision"] = args.precision
    settings["distribute"] = args.distribute
    settings["seed"] = args.seed
    settings["from"] = os.path.abspath(args.from_path) if args.from_path else None
    settings["lora"] = args.lora
    if args.lora is not None and not (recipe.supports_lora and args.from_path):
        raise CommandError(
            f"--lora {args.lora} fine-tunes a checkpoint's gpt2 model: it needs "
            f"`train gpt2 --from PATH` (received task {recipe.name}"
            + ("" if args.from_path else ", no --from")
            + ")"
        )
    settings["task"] = recipe.name
    return settings


def schedule(settings, examples):
    """`(steps, eval_every)`: the run's length from --steps or --epochs
    (`examples`: training examples, or GPT windows, per epoch), and the
    evaluation/backup interval, a divisor of the steps."""
    if settings["steps"] is None:
        epochs = settings["epochs"] or 1.0
        steps = max(1, math.ceil(epochs * examples / settings["batch_size"]))
    else:
        steps = settings["steps"]
    every = settings.get("eval_every")
    if every is None:
        target = max(1, min(500, steps // 10))
        every = max(d for d in range(1, target + 1) if steps % d == 0)
    elif steps % every:
        raise CommandError(f"--eval-every {every} must divide the run's {steps} steps")
    return steps, every
