"""The README's and docs/' Python code blocks, and the docstring examples, run."""

import doctest
import importlib
import pathlib
import pkgutil
import re
import subprocess
import sys

import pytest

import keras_transformer

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
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


def test_docs_site_builds_in_strict_mode(tmp_path):
    # Strict: a broken link, a page missing from the nav or a docstring that
    # does not parse (e.g. an argument that is not in the signature) fails.
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    page = (tmp_path / "api" / "layers" / "index.html").read_text()
    # The API reference is generated from the docstrings.
    for text in ["MultiHeadAttention", "Call arguments", "cache_update_index"]:
        assert text in page
    nav = (ROOT / "mkdocs.yml").read_text()
    for path in (ROOT / "docs").rglob("*.md"):
        assert str(path.relative_to(ROOT / "docs")) in nav, f"{path} not in nav"
