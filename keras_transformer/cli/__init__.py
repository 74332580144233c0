"""The `keras-transformer` command: `main.py` parses the command line,
`recipes.py` trains and exports one model per task, `datasets.py` generates
the built-in corpora, `demo.py` is the offline layer demo."""

from keras_transformer.cli.main import main

__all__ = ["main"]
