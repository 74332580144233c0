"""The `keras-transformer` command line (also `python -m keras_transformer`):
its parser and `main`.

    keras-transformer demo
    keras-transformer train gpt2|bert|seq2seq [--data FILE] [--output DIR] ...
    keras-transformer evaluate --model DIR --data FILE
    keras-transformer generate --model DIR PROMPT...
    keras-transformer classify --model DIR TEXT...
    keras-transformer translate --model DIR SENTENCE...
    keras-transformer serve MODEL [--slots N] [--port P] [--api-key KEY]

`keras-transformer --help` (and every `COMMAND --help`, and every error in
the command line) is answered from here, before TensorFlow is imported, so
it takes a fraction of a second. Only a command that will run imports the
rest of the package (`commands.run`), with TensorFlow's C++ start-up log
lines silenced unless `--verbose` is given.

This module imports nothing but the standard library at its top: the
top-level `keras_transformer_cli` (the console script) loads it by its file
path, because importing it as `keras_transformer.cli.main` would first run
the package's `__init__`, which imports TensorFlow (it must: importing the
package is what registers its layers with Keras for
`keras.saving.load_model`). See docs/cli.md.
"""

import argparse
import importlib.util
import os

# The tasks `train` knows, as its --help describes them (their recipes are
# `registry.TASKS`, which imports TensorFlow; tests/cli/test_cli_layout.py
# checks that both name the same tasks).
TASK_HELP = {
    "gpt2": "a GPT-2 language model on a plain-text file (default: Tiny "
    "Shakespeare, character-level)",
    "bert": "a BERT classifier on a TSV file: text<TAB>label (label: last column)",
    "seq2seq": "an encoder-decoder translator on a TSV file: source<TAB>target",
}
# The names of 0.1, still accepted.
TASK_ALIASES = {"gpt": "gpt2", "translate": "seq2seq"}
TOKENIZERS = ["char", "wordpiece", "sentencepiece", "bpe"]
PRECISIONS = ["float32", "mixed_bfloat16", "mixed_float16"]
PRESETS = [
    "bert_tiny",
    "bert_base",
    "gpt2_tiny",
    "gpt2_small",
    "gpt2_medium",
    "seq2seq_tiny",
    "seq2seq_base",
]


class _Parser(argparse.ArgumentParser):
    """argparse, with a command-line error as one line (and exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _bounded(kind, minimum, maximum=None, name=None):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if value < minimum or (maximum is not None and value > maximum):
            limits = (
                f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            )
            raise argparse.ArgumentTypeError(f"must be {limits}, got {text}")
        return value

    parse.__name__ = name or kind.__name__
    return parse


_count = _bounded(int, 1)
_rate = _bounded(float, 0.0, 1.0, name="rate")
_positive = _bounded(float, 1e-12, name="number")


def _task_name(name):
    """An old name's task name (argparse checks `choices` after `type`)."""
    return TASK_ALIASES.get(name, name)


def _add_common(parser):
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's C++ log lines (hidden by default)",
    )


def _add_adapting(parser):
    parser.add_argument(
        "--lora",
        metavar="FILE",
        help="apply a LoRA adapter first: a file written by `train --lora` "
        "(adapter.safetensors) or a PEFT adapter folder",
    )
    parser.add_argument(
        "--quantize",
        choices=["int8"],
        help="quantize the weights (after merging --lora) before generating",
    )


def _add_train(commands):
    train = commands.add_parser(
        "train",
        help="train or fine-tune a model, measure it, export it",
        description="Train a model (from scratch, or from a checkpoint with "
        "--from), measure it on held-out data, and write model.keras, "
        "tokenizer.json, an exported SavedModel (saved_model/), config.json, "
        "history.csv and loss.png into --output. Without --data: Tiny "
        "Shakespeare for gpt2, a generated corpus for bert and seq2seq.",
    )
    train.add_argument(
        "task",
        type=_task_name,
        choices=[*TASK_HELP, *TASK_ALIASES],
        metavar="{" + ",".join(TASK_HELP) + "}",
        help="; ".join(f"{k}: {v}" for k, v in TASK_HELP.items()),
    )
    data = train.add_argument_group("data and output")
    data.add_argument(
        "--data", help="training file (plain text for gpt2, TSV otherwise)"
    )
    data.add_argument(
        "--validation-data",
        help="held-out file in the same format (default: the last tenth of "
        "--data for gpt2, a tenth/fifth of its lines otherwise)",
    )
    data.add_argument(
        "--output", default="model", help="output folder (default ./model)"
    )
    data.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a non-empty --output (and discard a killed run's backup)",
    )
    start = train.add_argument_group("starting point")
    start.add_argument(
        "--from",
        dest="from_path",
        metavar="PATH",
        help="fine-tune a checkpoint: a Hugging Face folder (BERT, GPT-2; "
        "config.json + model.safetensors + tokenizer files) or a folder "
        "written by `train`; its tokenizer comes along",
    )
    start.add_argument(
        "--resume",
        action="store_true",
        help="continue a killed run with the same flags from its last backup",
    )
    start.add_argument(
        "--lora",
        type=_count,
        metavar="RANK",
        help="gpt2 with --from: train rank-RANK LoRA updates of the query "
        "and value projections instead of every weight; also writes "
        "adapter.safetensors (model.keras holds the merged weights)",
    )
    size = train.add_argument_group("model size (from scratch)")
    size.add_argument(
        "--preset", choices=PRESETS, metavar="NAME", help=f"one of {PRESETS}"
    )
    size.add_argument("--layers", type=_count, help="blocks (per stack)")
    size.add_argument("--heads", type=_count, help="attention heads")
    size.add_argument("--hidden", type=_count, help="hidden size")
    size.add_argument(
        "--intermediate", type=_count, help="feed-forward size (default 4 x hidden)"
    )
    size.add_argument(
        "--context",
        type=_count,
        help="tokens per example: the GPT window, the BERT/seq2seq sequence length",
    )
    size.add_argument("--dropout", type=_rate, help="dropout rate in [0, 1]")
    tokens = train.add_argument_group("tokenizer (from scratch)")
    tokens.add_argument(
        "--tokenizer",
        choices=TOKENIZERS,
        help="char (default for gpt2 and the built-in seq2seq data), wordpiece "
        "(default for bert), sentencepiece (default for seq2seq on --data, "
        "needs the sentencepiece package), bpe (byte-level, as GPT-2)",
    )
    tokens.add_argument(
        "--vocabulary-size",
        type=_bounded(int, 16),
        help="subword vocabulary size (default 2000 for bert, 4000 otherwise)",
    )
    fit = train.add_argument_group("training")
    fit.add_argument("--batch-size", type=_count, help="examples per step")
    fit.add_argument("--learning-rate", type=_positive, help="peak learning rate")
    length = fit.add_mutually_exclusive_group()
    length.add_argument(
        "--steps", type=_count, help="training steps (default: per task)"
    )
    length.add_argument(
        "--epochs",
        type=_bounded(float, 1e-9, name="epochs"),
        help="passes over the data",
    )
    fit.add_argument(
        "--eval-every",
        type=_count,
        help="steps between held-out evaluations and backups (default: a "
        "tenth of the run, at most 500)",
    )
    fit.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="float32",
        help="float32 (default), mixed_bfloat16 (TPU, recent GPUs and CPUs), "
        "mixed_float16 (GPUs; loss scaling is automatic)",
    )
    fit.add_argument(
        "--distribute",
        choices=("none", "mirrored", "multi-worker"),
        default="none",
        help="none (default); mirrored: split each batch over this machine's "
        "devices; multi-worker: over the machines TF_CONFIG lists, each running "
        "this same command (worker 0 prints and writes --output)",
    )
    fit.add_argument("--seed", type=_bounded(int, 0), default=0, help="random seed")
    fit.add_argument(
        "--samples",
        type=_bounded(int, 0),
        default=3,
        help="generated samples / examples to print at the end (default 3)",
    )
    _add_common(train)
    return train


def build_parser():
    """The whole command line (no TensorFlow is imported)."""
    parser = _Parser(
        prog="keras-transformer",
        description="Train, fine-tune, evaluate, export and query Transformer "
        "models (Keras 3 on TensorFlow).",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, parser_class=_Parser
    )

    demo = commands.add_parser(
        "demo",
        help="compose the layers and learn to reverse sequences (offline, ~1 min)",
    )
    demo.add_argument(
        "--steps", type=_count, default=300, help="training steps (default 300)"
    )
    _add_common(demo)

    _add_train(commands)

    evaluate = commands.add_parser(
        "evaluate",
        help="score a folder written by `train` on a file",
        description="Score the export in a folder written by `train` on a file "
        "in its task's format: held-out loss and perplexity (gpt2), accuracy, "
        "macro-F1 and a confusion matrix (bert), corpus BLEU and chrF (seq2seq).",
    )
    evaluate.add_argument("--model", required=True, help="folder written by `train`")
    evaluate.add_argument(
        "--data", required=True, help="file to score (the task's --data format)"
    )
    evaluate.add_argument(
        "--batch-size", type=_count, default=64, help="examples per batch (default 64)"
    )
    evaluate.add_argument(
        "--predictions",
        metavar="FILE",
        help="also write each prediction (translation or label) to FILE",
    )
    _add_common(evaluate)

    generate = commands.add_parser(
        "generate", help="continue prompts with an exported GPT"
    )
    generate.add_argument(
        "--model", required=True, help="folder written by `train gpt2`"
    )
    generate.add_argument(
        "--max-new-tokens",
        type=_count,
        default=40,
        help="tokens to add to each prompt (default 40; stops early at [END])",
    )
    generate.add_argument(
        "--temperature",
        type=_bounded(float, 0.0, name="temperature"),
        default=0.8,
        help="sampling temperature (default 0.8; 0 = greedy)",
    )
    _add_adapting(generate)
    generate.add_argument("prompts", nargs="+", help="texts to continue")
    _add_common(generate)

    export = commands.add_parser(
        "export",
        help="export a trained GPT as a SavedModel, with an adapter or int8",
        description="Write the string SavedModel of a folder written by "
        "`train gpt2` (as `train` exports it), after applying a LoRA adapter "
        "(--lora) and/or quantizing its weights to int8 (--quantize int8).",
    )
    export.add_argument("--model", required=True, help="folder written by `train gpt2`")
    export.add_argument("--output", required=True, help="SavedModel folder to write")
    export.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty --output"
    )
    _add_adapting(export)
    _add_common(export)

    classify = commands.add_parser(
        "classify", help="label texts with an exported classifier"
    )
    classify.add_argument(
        "--model", required=True, help="folder written by `train bert`"
    )
    classify.add_argument("texts", nargs="+", help="texts to label")
    _add_common(classify)

    translate = commands.add_parser(
        "translate", help="translate with an exported model"
    )
    translate.add_argument(
        "--model", required=True, help="folder written by `train seq2seq`"
    )
    translate.add_argument("sentences", nargs="+", help="sentences to translate")
    _add_common(translate)
    _add_serve(commands)
    return parser


def _add_serve(commands):
    serve = commands.add_parser(
        "serve",
        help="serve a text generator over OpenAI's HTTP API, many users at once",
        description="Serve a folder, GGUF file or .keras text generator over "
        "OpenAI's HTTP API (/v1/chat/completions, /v1/completions, streaming) "
        "with continuous batching (docs/serving.md).",
    )
    serve.add_argument("model", help="folder, GGUF file or .keras task file")
    key = os.environ.get("KT_SERVE_API_KEY")
    for flag, kind, default, text in (
        ("--host", str, "127.0.0.1", "address to bind (default 127.0.0.1)"),
        ("--port", _count, 8000, "TCP port (default 8000)"),
        ("--slots", _count, 8, "requests decoded at once (default 8)"),
        ("--context", _count, None, "positions per slot, a multiple of 32 "
         "(default: the model's, at most 2048)"),
        ("--max-queue", _count, 64, "requests that wait for a slot (default "
         "64; one more gets 503)"),
        ("--api-key", str, key, "require `Authorization: Bearer KEY` "
         "(default: $KT_SERVE_API_KEY)"),
        ("--model-name", str, None, "the model name clients send (default: "
         "the folder or file name)"),
    ):  # fmt: skip
        serve.add_argument(flag, type=kind, default=default, help=text)
    _add_common(serve)


def main(argv=None):
    """Runs the command line `argv` (default: `sys.argv[1:]`); returns the
    exit status."""
    args = build_parser().parse_args(argv)
    # Loaded by its path, as this module is (keras_transformer_cli.py).
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "startup.py")
    spec = importlib.util.spec_from_file_location("keras_transformer_startup", path)
    startup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(startup)
    startup.start_tensorflow(args.verbose)
    from keras_transformer.cli import commands  # the package: TensorFlow

    return commands.run(args)
