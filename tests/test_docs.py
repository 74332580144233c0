"""The README's and docs/' Python code blocks, and the docstring examples, run."""

import doctest
import importlib
import pathlib
import pkgutil
import re

import pytest

import keras_transformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_markdown_python_blocks_run(path):
    blocks = BLOCK.findall(path.read_text())
    for number, block in enumerate(blocks, 1):
        namespace = {"__name__": f"{path.stem}_block_{number}"}
        exec(compile(block, f"{path.name} (python block {number})", "exec"), namespace)


def package_modules():
    prefix = keras_transformer.__name__ + "."
    return [
        name
        for _, name, _ in pkgutil.walk_packages(keras_transformer.__path__, prefix)
        if not name.endswith("__main__")
    ]


@pytest.mark.parametrize("module_name", package_modules())
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.failed == 0


def test_readme_opens_with_the_two_setup_commands():
    first_block = re.search(
        r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S
    )
    commands = first_block.group(1).strip().splitlines()
    ci = (ROOT / ".ci" / "run").read_text()
    assert len(commands) == 2
    assert commands[0].startswith("pip install . && keras-transformer")
    assert commands[1] in ci.splitlines()
