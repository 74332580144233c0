"""What each `keras-transformer` command does, once its line is parsed.

The parser is `main.py`'s (it answers `--help` without TensorFlow);
`run(args)` is called with its result, task aliases already resolved. The
commands ask the task's recipe (`registry.TASKS`) for everything that
differs between tasks.

`train` works in a hidden folder beside `--output` (`.NAME.partial/`) and
renames it to `--output` only when everything is written: a failed run
leaves no half-written model, and a killed one leaves its backups there for
`--resume`.
"""

import json
import os
import shutil
import sys
import time

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.cli import demo, distribute
from keras_transformer.cli.data import file_digest, load_data
from keras_transformer.cli.errors import CommandError
from keras_transformer.cli.recipe_gpt2 import load_generator
from keras_transformer.cli.registry import TASKS
from keras_transformer.cli.report import print_results
from keras_transformer.cli.run import Run
from keras_transformer.cli.serving import load_export
from keras_transformer.cli.settings import checkpoint_kind, resolve

RUN_FILE = "run.json"  # in the work folder: the settings a resume must match


def run(args):
    """Runs a parsed command line; returns the exit status."""
    handler = {
        "demo": _demo,
        "train": _train,
        "evaluate": _evaluate,
        "generate": _generate,
        "export": _export,
        "classify": _classify,
        "translate": _translate,
        "serve": _serve,
    }[args.command]
    try:
        return handler(args)
    except (CommandError, ValueError, FileNotFoundError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(
            f"keras-transformer: error: {message or type(error).__name__}",
            file=sys.stderr,
        )
        return 2


# ---------------------------------------------------------------- train


def work_folder(output):
    parent, name = os.path.split(output)
    return os.path.join(parent, f".{name}.partial")


def check_output(output, overwrite):
    output = os.path.abspath(output)
    parent = os.path.dirname(output)
    if os.path.exists(output) and not os.path.isdir(output):
        raise CommandError(f"--output {output} is a file, not a folder")
    if os.path.exists(output) and os.listdir(output) and not overwrite:
        raise CommandError(f"output folder {output} is not empty (use --overwrite)")
    if not os.path.isdir(parent):
        raise CommandError(f"cannot write to {output}: {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise CommandError(f"cannot write to {output}: {parent} is not writable")
    return output


def _identity(settings, data_digest, validation_digest):
    # A backup resumes under another --distribute: the global batch is
    # the same, and so are the steps.
    keep = {k: v for k, v in settings.items() if k not in ("eval_every", "distribute")}
    return {**keep, "data": data_digest, "validation_data": validation_digest}


def _check_resume(work, resume, overwrite, identity, remove=True):
    """Decides between a new run and a resumed one; raises on a mismatch.
    With `remove` (worker 0 only), `overwrite` deletes a killed run's
    backup."""
    saved_path = os.path.join(work, RUN_FILE)
    exists = os.path.isdir(work)
    if resume:
        if not os.path.exists(saved_path):
            raise CommandError(
                f"--resume: no backup to resume in {work} (run without --resume)"
            )
        saved = validation.read_json(saved_path)
        differ = sorted(
            key
            for key in set(saved) | set(identity)
            if saved.get(key) != identity.get(key)
        )
        if differ:
            key = differ[0]
            raise CommandError(
                f"--resume: the backup in {work} is of another configuration "
                f"({key}: {saved.get(key)!r} there, {identity.get(key)!r} now)"
            )
        return
    if exists:
        if not overwrite:
            raise CommandError(
                f"a killed run's backup is in {work}: add --resume to continue "
                "it, or --overwrite to start again"
            )
        if remove:
            shutil.rmtree(work)


def _train(args):
    recipe = TASKS[args.task]
    worker = distribute.check_environment(args.distribute)
    # Worker 0 checks and writes the output; the others train in step.
    output = check_output(args.output, args.overwrite) if worker == 0 else args.output
    work = work_folder(os.path.abspath(output))
    kind = checkpoint_kind(args.from_path, recipe, TASKS) if args.from_path else None
    settings = resolve(recipe, args, kind)
    distribute.check_batch(settings["distribute"], settings["batch_size"])
    data = load_data(recipe, args.data, args.validation_data)
    identity = _identity(
        settings, file_digest(args.data), file_digest(args.validation_data)
    )
    # Every worker refuses what worker 0 refuses, before any of them joins
    # the cluster (where the others would wait for it forever).
    _check_resume(work, args.resume, args.overwrite, identity, remove=worker == 0)
    strategy = distribute.make_strategy(settings["distribute"], settings["batch_size"])
    if worker:
        with distribute.worker_folder(output, worker) as folder:
            Run(
                recipe,
                settings,
                data,
                folder,
                kind,
                args.resume,
                args.verbose,
                args.samples,
                strategy=strategy,
                # A new run reads nothing of worker 0's (a backup it
                # replaces with --overwrite may still be there).
                shared=work if args.resume else None,
            ).train()
        return 0
    train, held_out, source, notes = data
    size = f"{len(train):,} + {len(held_out):,} held-out {recipe.data_unit}"
    start = "fine-tuning " + settings["from"] if kind else "from scratch"
    print(f"Training {recipe.name} ({start}) on {source}: {size}.", flush=True)
    for note in notes:
        print(f"note: {note}")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, RUN_FILE), "w") as f:
        json.dump(identity, f, indent=2)
    began = time.time()
    job = Run(
        recipe,
        settings,
        data,
        work,
        kind,
        args.resume,
        args.verbose,
        args.samples,
        strategy=strategy,
    )
    try:
        results, _ = job.train()
    except KeyboardInterrupt:
        print(
            f"keras-transformer: interrupted; nothing was written to {output}. "
            f"Its backup is in {work}: add --resume to continue.",
            file=sys.stderr,
        )
        return 130
    except Exception as error:
        if distribute.peer_failed(settings["distribute"], work):
            print(
                f"keras-transformer: training stopped ({type(error).__name__}: "
                f"{str(error).strip().splitlines()[0][:300]}); nothing was "
                f"written to {output}. Its backup is in {work}: start every "
                "worker again with --resume.",
                file=sys.stderr,
            )
            return 1
        # Not resumable (a kill or Ctrl-C is): leave nothing behind.
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(os.path.join(work, "run"), ignore_errors=True)
    os.remove(os.path.join(work, RUN_FILE))
    if os.path.exists(output):
        shutil.rmtree(output)
    os.replace(work, output)  # all or nothing: no half-written model
    for note in job.notes[len(notes) :]:
        print(f"note: {note}")
    print_results(results)
    print(f"wall time: {time.time() - began:.0f} s")
    written = sorted(os.listdir(output))
    print(f"Wrote {output}: {', '.join(written)}.")
    return 0


# ---------------------------------------------------------------- evaluate


def _read_config(folder):
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise CommandError(f"--model {folder}: not a folder written by `train`")
    try:
        config = validation.read_json(path)
    except ValueError as error:
        raise CommandError(f"--model {folder}: {error}") from None
    if "task" not in config:
        raise CommandError(f"--model {folder}: config.json names no task")
    return config


def _evaluate(args):
    config = _read_config(args.model)
    recipe = TASKS.get(config["task"])
    if recipe is None:
        raise CommandError(
            f"--model {args.model}: config.json names the task "
            f"{config['task']!r}, not one of {list(TASKS)}"
        )
    if not os.path.isfile(args.data):
        raise CommandError(f"--data {args.data}: file not found")
    notes = []
    examples = recipe.read_examples(args.data, "--data", notes)
    for note in notes:
        print(f"note: {note}")
    later = []
    print_results(recipe.evaluate(args, config, examples, later))
    for note in later:
        print(f"note: {note}")
    return 0


# ---------------------------------------------------------------- serving


def _generate(args):
    if args.lora or args.quantize:
        # The model itself, adapted or quantized, not its SavedModel.
        generator = load_generator(args)
        temperature = args.temperature
        sampling = {"sampler": "temperature", "temperature": temperature}
        texts = generator.generate(
            args.prompts,
            max_new_tokens=args.max_new_tokens,
            return_full_text=True,
            **(sampling if temperature > 0 else {"sampler": "greedy"}),
        )
        for text in texts:
            print(text)
        return 0
    fn = load_export(args.model, "generate")
    out = fn(
        prompts=tf.constant(args.prompts),
        max_new_tokens=tf.constant(args.max_new_tokens),
        temperature=tf.constant(args.temperature),
    )
    for text in out["text"].numpy():
        print(text.decode("utf-8", "replace"))
    return 0


def _export(args):
    generator = load_generator(args)
    limit = generator.model.max_sequence_length
    path = generator.export(
        args.output, max_new_tokens=min(200, limit - 1), overwrite=args.overwrite
    )
    print(f"exported: {path}")
    return 0


def _classify(args):
    fn = load_export(args.model, "classify")
    out = fn(text=tf.constant(args.texts))
    for text, label, probs in zip(
        args.texts, out["label"].numpy(), out["probabilities"].numpy(), strict=True
    ):
        label = label.decode() if isinstance(label, bytes) else label
        print(f"{label}\t{probs.max():.3f}\t{text}")
    return 0


def _translate(args):
    fn = load_export(args.model, "translate")
    out = fn(sentences=tf.constant(args.sentences))
    for translation in out["translation"].numpy():
        print(translation.decode("utf-8", "replace"))
    return 0


def _demo(args):
    print(
        f"Training a 2-block Transformer encoder to reverse sequences of "
        f"{demo.SEQUENCE_LENGTH} tokens ({args.steps} steps, generated data)..."
    )
    results = demo.run(steps=args.steps, verbose=1 if args.verbose else 0)
    print(f"accuracy of a random guess:       {1 / (demo.VOCABULARY_SIZE - 1):.3f}")
    print(f"held-out token accuracy:          {results['token_accuracy']:.3f}")
    print(f"held-out whole-sequence accuracy: {results['sequence_accuracy']:.3f}")
    for source, predicted in results["examples"]:
        print(f"  {source} -> {predicted}")
    return 0


def _serve(args):
    try:
        from keras_transformer.serving.app import serve
    except ImportError as error:
        raise CommandError(
            f"serving needs the serve extra ({error.name} is missing): "
            "pip install 'keras-transformer[serve]'"
        ) from None
    print(
        f"keras-transformer: serving {args.model} on http://{args.host}:"
        f"{args.port}/v1 with {args.slots} slots (Ctrl-C stops)",
        file=sys.stderr,
    )
    serve(
        args.model, host=args.host, port=args.port, slots=args.slots,
        context_length=args.context, max_queue=args.max_queue,
        api_key=args.api_key, model_name=args.model_name,
    )  # fmt: skip
    return 0
