"""The Colab notebooks: stored clean, and run top to bottom in their small mode.

`KERAS_TRANSFORMER_SMALL=1` makes every notebook use tiny sizes and the
generated corpora of `keras_transformer.cli.datasets`, scikit-learn's
bundled digits or the repository's fixtures (no network). Each notebook ends
with assertions on what it learned, so running is not enough to pass.
Executed outputs stay in memory; nothing is written back into the repository.
"""

import pathlib

import nbclient
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDER = ROOT / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))
NAMES = [
    "01_layers",
    "02_gpt",
    "03_bert",
    "04_translation",
    "05_vision",
    "06_speech_to_text",
]
COLAB = "https://colab.research.google.com/github/keras-transformer/keras-transformer/blob/main/notebooks/"


def test_the_notebooks_exist_and_the_readme_links_each():
    assert [path.stem for path in NOTEBOOKS] == NAMES
    readme = (FOLDER / "README.md").read_text()
    for name in NAMES:
        assert f"{COLAB}{name}.ipynb" in readme


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_clean(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata.kernelspec.name == "python3"
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None
    # Installs only where the package is missing, then honours the small mode.
    assert 'find_spec("keras_transformer") is None' in code[0].source
    assert 'os.environ.get("KERAS_TRANSFORMER_SMALL") == "1"' in code[1].source


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_small_mode(path, monkeypatch):
    monkeypatch.setenv("KERAS_TRANSFORMER_SMALL", "1")  # the kernel inherits it
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    notebook = nbformat.read(path, as_version=4)
    before = sorted(p.name for p in FOLDER.iterdir())
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=300,  # per cell
        startup_timeout=120,
        resources={"metadata": {"path": str(FOLDER)}},  # the kernel's cwd
    )
    client.execute()  # raises CellExecutionError, with the traceback, on failure
    assert sorted(p.name for p in FOLDER.iterdir()) == before  # wrote nothing here
