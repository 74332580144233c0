"""The `keras-transformer` console script: `main` and `build_parser` of
`keras_transformer/cli/main.py`, which answers `--help` without TensorFlow.

That module is loaded here by its file path, not imported as
`keras_transformer.cli.main`: importing anything inside the package first
runs the package's `__init__`, which imports TensorFlow (it must: importing
the package is what registers its layers with Keras for
`keras.saving.load_model`). Nothing in the package imports this module.
"""

import importlib.util
import os
import sys


def _load_command_line():
    # find_spec of a top-level package locates it without importing it.
    package = importlib.util.find_spec("keras_transformer")
    path = os.path.join(package.submodule_search_locations[0], "cli", "main.py")
    spec = importlib.util.spec_from_file_location("keras_transformer_cli_main", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_command_line = _load_command_line()
build_parser = _command_line.build_parser
main = _command_line.main

if __name__ == "__main__":
    sys.exit(main())
