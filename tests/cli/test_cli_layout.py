"""The command line's layout (issue #29): one registry of task recipes, no
task names compared elsewhere, short modules, and no import of the console
script from inside the package."""

import ast
import importlib
import pathlib

import pytest

from keras_transformer.cli.recipe import Recipe
from keras_transformer.cli.registry import TASKS

# The module (the package's `main` attribute is the function).
command_line = importlib.import_module("keras_transformer.cli.main")
ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = ROOT / "keras_transformer" / "cli"
LONGEST = 400  # lines


def cli_modules():
    return sorted(CLI.glob("*.py")) + [ROOT / "keras_transformer_cli.py"]


def test_the_parser_and_the_registry_name_the_same_tasks():
    assert list(command_line.TASK_HELP) == list(TASKS)
    assert set(command_line.TASK_ALIASES.values()) <= set(TASKS)
    for name, recipe in TASKS.items():
        assert isinstance(recipe, Recipe) and recipe.name == name


@pytest.mark.parametrize("given, task", [("gpt", "gpt2"), ("translate", "seq2seq")])
def test_an_old_task_name_parses_as_its_task(given, task):
    args = command_line.build_parser().parse_args(["train", given])
    assert args.task == task


def test_every_recipe_implements_each_step():
    steps = ("builtin_data", "train", "evaluate")
    for recipe in TASKS.values():
        for step in steps:
            assert getattr(type(recipe), step) is not getattr(Recipe, step), step
        assert set(recipe.defaults) >= {"layers", "heads", "hidden", "steps"}


def test_no_task_name_is_compared_outside_the_registry():
    names = set(TASKS) | set(command_line.TASK_ALIASES)
    compared = []
    for path in cli_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                literals = [
                    item
                    for operand in operands
                    for item in ast.walk(operand)
                    if isinstance(item, ast.Constant) and item.value in names
                ]
                if literals:
                    compared.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Dict) and path.name != "main.py":
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                if keys & set(TASKS):
                    compared.append(f"{path.name}:{node.lineno} (a dict by task)")
    assert compared == []


def test_no_command_line_module_is_too_long():
    long = {
        path.name: count
        for path in cli_modules()
        if (count := len(path.read_text().splitlines())) > LONGEST
    }
    assert long == {}


def test_the_package_never_imports_the_console_script():
    importers = []
    for path in (ROOT / "keras_transformer").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            if "keras_transformer_cli" in modules:
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []
