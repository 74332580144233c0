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
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Only the documents with Python blocks: one without would pass unchecked.
DOCUMENTS = [
    path
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    if BLOCK.search(path.read_text())
]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_python_blocks_run(path):
    blocks = BLOCK.findall(path.read_text())
    assert blocks, f"{path} has no python block"
    for number, block in enumerate(blocks, 1):
        namespace = {"__name__": f"{path.stem}_block_{number}"}
        exec(compile(block, f"{path.name} (python block {number})", "exec"), namespace)


def has_examples(module_name):
    """Whether the module's own docstrings hold examples; True when it does
    not import, so that its test reports the error."""
    try:
        module = importlib.import_module(module_name)
    except Exception:
        return True
    return any(test.examples for test in doctest.DocTestFinder().find(module))


def package_modules():
    """The package's modules whose docstrings have examples."""
    prefix = keras_transformer.__name__ + "."
    return [
        name
        for _, name, _ in pkgutil.walk_packages(keras_transformer.__path__, prefix)
        if not name.endswith("__main__") and has_examples(name)
    ]


MODULES = package_modules()


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted > 0, f"{module_name} has no docstring example"
    assert result.failed == 0


def test_there_are_documents_and_modules_with_examples():
    assert ROOT / "README.md" in DOCUMENTS and len(DOCUMENTS) > 1
    assert "keras_transformer.layers.attention" in MODULES and len(MODULES) > 1


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
