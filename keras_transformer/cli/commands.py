"""What each `keras-transformer` command does, once its line is parsed.

The parser lives in the top-level module `keras_transformer_cli`, so that
`--help` never imports TensorFlow; `run(args)` is called with its result.

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

import keras_transformer_cli as front
from keras_transformer import _validation as validation
from keras_transformer.cli.recipes import CommandError

RUN_FILE = "run.json"  # in the work folder: the settings a resume must match


def run(args):
    """Runs a parsed command line; returns the exit status."""
    handler = {
        "demo": _demo,
        "train": _train,
        "evaluate": _evaluate,
        "generate": _generate,
        "classify": _classify,
        "translate": _translate,
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
    keep = {k: v for k, v in settings.items() if k != "eval_every"}
    return {**keep, "data": data_digest, "validation_data": validation_digest}


def _check_resume(work, resume, overwrite, identity):
    """Decides between a new run and a resumed one; raises on a mismatch."""
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
        shutil.rmtree(work)


def _train(args):
    from keras_transformer.cli import recipes

    task = front.TASK_ALIASES.get(args.task, args.task)
    output = check_output(args.output, args.overwrite)
    work = work_folder(output)
    kind = recipes.checkpoint_kind(args.from_path, task) if args.from_path else None
    settings = recipes.resolve(task, args, kind)
    data = recipes.load_data(task, args.data, args.validation_data)
    identity = _identity(
        settings,
        recipes.file_digest(args.data),
        recipes.file_digest(args.validation_data),
    )
    _check_resume(work, args.resume, args.overwrite, identity)
    train, held_out, source, notes = data
    if task == "gpt2":
        size = f"{len(train):,} + {len(held_out):,} held-out characters"
    else:
        size = f"{len(train):,} + {len(held_out):,} held-out examples"
    start = "fine-tuning " + settings["from"] if kind else "from scratch"
    print(f"Training {task} ({start}) on {source}: {size}.", flush=True)
    for note in notes:
        print(f"note: {note}")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, RUN_FILE), "w") as f:
        json.dump(identity, f, indent=2)
    began = time.time()
    job = recipes.Run(
        task, settings, data, work, kind, args.resume, args.verbose, args.samples
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
    except Exception:
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
    _print_results(results)
    print(f"wall time: {time.time() - began:.0f} s")
    written = sorted(os.listdir(output))
    print(f"Wrote {output}: {', '.join(written)}.")
    return 0


def _print_results(results):
    for key, value in results.items():
        if isinstance(value, list):
            print(f"{key}:")
            multiline = any("\n" in str(item) for item in value)
            for number, item in enumerate(value):
                if multiline and number:
                    print("  ---")
                print("  " + str(item).replace("\n", "\n  "))
        elif isinstance(value, str) and "\n" in value:
            print(f"{key}:")
            print("  " + value.replace("\n", "\n  "))
        elif isinstance(value, float):
            print(f"{key}: {value:.4f}")
        elif value is None:
            continue
        else:
            print(f"{key}: {value}")


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
    from keras_transformer.cli import datasets, recipes, scores

    config = _read_config(args.model)
    task = config["task"]
    if not os.path.isfile(args.data):
        raise CommandError(f"--data {args.data}: file not found")
    if task == "gpt2":
        import keras

        corpus = datasets.read_text(args.data)
        if not corpus.strip():
            raise CommandError(f"--data {args.data}: no text in the file")
        model = keras.saving.load_model(os.path.join(args.model, "model.keras"))
        tokenizer = recipes.load_tokenizer(os.path.join(args.model, "tokenizer.json"))
        stream = recipes.token_stream(tokenizer, corpus)
        context = config.get("settings", {}).get("context") or model.max_sequence_length
        count = (len(stream) - 1) // context
        if count < 1:
            raise CommandError(
                f"--data {args.data}: {len(stream)} tokens, fewer than one "
                f"window of {context + 1}"
            )
        x = stream[: count * context].reshape(count, context)
        y = stream[1 : count * context + 1].reshape(count, context)
        model.compile(loss=_masked_loss())
        loss = recipes.evaluate_loss(model, x, y, batch_size=args.batch_size)
        _print_results(
            {
                "loss (nats per token)": loss,
                "perplexity": scores.perplexity(loss),
                "tokens": count * context,
            }
        )
        return 0
    notes = []
    rows = recipes.read_examples(task, args.data, "--data", notes)
    for note in notes:
        print(f"note: {note}")
    if task == "bert":
        class_names = config["settings"]["class_names"]
        unknown = sorted({label for _, label in rows} - set(class_names))
        if unknown:
            raise CommandError(
                f"--data {args.data}: labels {unknown[:5]} are not among the "
                f"model's classes {class_names}"
            )
        fn, tf = _load_export(args.model, "classify")
        predicted = []
        for i in range(0, len(rows), args.batch_size):
            batch = tf.constant([t for t, _ in rows[i : i + args.batch_size]])
            predicted.extend(
                label.decode() if isinstance(label, bytes) else class_names[int(label)]
                for label in fn(text=batch)["label"].numpy()
            )
        report = scores.classification_report(
            [label for _, label in rows], predicted, class_names
        )
        _write_predictions(args.predictions, predicted)
        _print_results(
            {
                "examples": len(rows),
                "accuracy": report["accuracy"],
                "macro-F1": report["macro_f1"],
                "confusion matrix": scores.format_confusion_matrix(
                    report["confusion_matrix"], class_names
                ),
            }
        )
        return 0
    path = os.path.join(args.model, "saved_model")
    _load_export(args.model, "translate")
    hypotheses = recipes.translate_all(path, [s for s, _ in rows], args.batch_size)
    result = scores.translation_scores(hypotheses, [t for _, t in rows])
    _write_predictions(args.predictions, hypotheses)
    _print_results(
        {
            "sentences": len(rows),
            "BLEU": result["bleu"],
            "chrF": result["chrf"],
            "exact-match accuracy": result["exact_match"],
        }
    )
    if result["bleu"] is None:
        print(
            'note: BLEU and chrF need sacrebleu: pip install "keras-transformer[cli]"'
        )
    return 0


def _masked_loss():
    from keras_transformer import training

    return training.MaskedSparseCategoricalCrossentropy()


def _write_predictions(path, predictions):
    if path is None:
        return
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        for line in predictions:
            f.write(line.replace("\n", " ") + "\n")
    os.replace(temporary, path)


# ---------------------------------------------------------------- serving


def _load_export(directory, signature):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    path = os.path.join(directory, "saved_model")
    if not os.path.isdir(path):
        raise CommandError(f"no exported model in {directory} (expected {path})")
    loaded = tf.saved_model.load(path)
    if signature not in loaded.signatures:
        raise CommandError(
            f"{path} cannot {signature}: it serves {', '.join(loaded.signatures)}"
        )
    return loaded.signatures[signature], tf


def _generate(args):
    fn, tf = _load_export(args.model, "generate")
    out = fn(
        prompts=tf.constant(args.prompts),
        max_new_tokens=tf.constant(args.max_new_tokens),
        temperature=tf.constant(args.temperature),
    )
    for text in out["text"].numpy():
        print(text.decode("utf-8", "replace"))
    return 0


def _classify(args):
    fn, tf = _load_export(args.model, "classify")
    out = fn(text=tf.constant(args.texts))
    for text, label, probs in zip(
        args.texts, out["label"].numpy(), out["probabilities"].numpy(), strict=True
    ):
        label = label.decode() if isinstance(label, bytes) else label
        print(f"{label}\t{probs.max():.3f}\t{text}")
    return 0


def _translate(args):
    fn, tf = _load_export(args.model, "translate")
    out = fn(sentences=tf.constant(args.sentences))
    for translation in out["translation"].numpy():
        print(translation.decode("utf-8", "replace"))
    return 0


def _demo(args):
    from keras_transformer.cli import demo

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
