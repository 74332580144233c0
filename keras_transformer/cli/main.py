"""The `keras-transformer` command (also `python -m keras_transformer`).

    keras-transformer demo
    keras-transformer train gpt2|bert|seq2seq [--data FILE] [--output DIR] ...
    keras-transformer evaluate --model DIR --data FILE
    keras-transformer generate --model DIR PROMPT...
    keras-transformer classify --model DIR TEXT...
    keras-transformer translate --model DIR SENTENCE...

The parser is `keras_transformer_cli.build_parser` (a top-level module, so
`--help` does not import TensorFlow); the commands are in `commands.py` and
the training recipes in `recipes.py`. See docs/cli.md.
"""

from keras_transformer_cli import TASK_ALIASES, TASKS, build_parser, main

__all__ = ["TASKS", "TASK_ALIASES", "build_parser", "main"]
