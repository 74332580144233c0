"""The package's layout rules (docs/contributing.md), checked on the source.

Each room imports only the rooms below it, no module imports itself back
through others, nothing takes another module's private names, and no
module outside the command line grows past the size at which it usually
holds two concepts.
"""

import ast
import collections
import io
import pathlib
import re
import tokenize

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_transformer"

# What each room may import (besides itself and the root's private helper
# modules: _validation, _compat, _gguf, which several rooms share).
_BELOW_TASKS = {
    "layers",
    "models",
    "text",
    "training",
    "generation",
    "pretrained",
    "export",
}
ALLOWED = {
    "layers": set(),
    "text": set(),
    "training": {"layers"},
    "models": {"layers", "text", "training"},
    "generation": {"layers", "models"},
    "pretrained": {"layers", "models", "text", "generation"},
    # generation and pretrained sit side by side below export
    # (ARCHITECTURE.md): a family's plan (whisper_plan) serves both the
    # task and its SavedModel.
    "export": {"layers", "models", "text", "generation", "pretrained"},
    "tasks": _BELOW_TASKS,
    "serving": _BELOW_TASKS | {"tasks"},
    "cli": _BELOW_TASKS | {"tasks", "serving"},
}
# The contract's `kt.models.from_pretrained` / `save_pretrained` are the
# pretrained room's face, re-exported by the models package.
EXCEPTIONS = {("keras_transformer.models", "pretrained")}
LARGEST = 450  # lines, any module (the CLI's own test holds cli/ to 400)


def modules():
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name, path, known):
    """(module imported, names taken) for every import in `path`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                child = f"{base}.{alias.name}"
                if child in known:
                    yield child, ()
                else:
                    yield base, (alias.name,)


def graph():
    known = modules()
    edges = collections.defaultdict(set)
    taken = []
    for name, path in known.items():
        for target, names in imports(name, path, known):
            if target in known and target != name:
                edges[name].add(target)
                taken += [(name, target, n) for n in names]
    return known, edges, taken


def room(name):
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_circles():
    known, edges, _ = graph()
    # Tarjan's strongly connected components.
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in edges[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(known):
        if node not in index:
            visit(node)
    assert circles == []


def test_each_room_imports_only_the_rooms_below_it():
    _, edges, _ = graph()
    wrong = sorted(
        (source, target)
        for source, targets in edges.items()
        for target in targets
        if room(source) in ALLOWED
        and room(target) not in ALLOWED[room(source)] | {room(source)}
        and not room(target).startswith("_")
        and (source, room(target)) not in EXCEPTIONS
    )
    assert wrong == []


def test_tasks_take_only_the_exporters_from_export():
    """A task's checks and preprocessing live below both it and its
    exporter (`_validation`, `text.tokenizer_checks`, `models.vit_inputs`):
    from `export/` a task takes the `export_*` functions alone."""
    known, edges, taken = graph()
    named = collections.defaultdict(set)
    for source, target, name in taken:
        named[source, target].add(name)
    wrong = sorted(
        (source, target, name)
        for source in known
        if room(source) == "tasks"
        for target in edges[source]
        if room(target) == "export"
        for name in named[source, target] or {"(the module)"}
        if not name.startswith("export_")
    )
    assert wrong == []


def test_no_module_takes_another_modules_private_names():
    _, edges, taken = graph()
    wrong = [
        (source, f"{target}.{name}")
        for source, target, name in taken
        if name.startswith("_") and not name.startswith("__")
    ]
    # `module._name` attribute reads of a package module imported by name.
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        aliases = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("keras_transformer")
            for alias in node.names
            if f"{node.module}.{alias.name}" in modules()
            and alias.name != "_validation"
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
            ):
                wrong.append((name, f"{node.value.id}.{node.attr}"))
    assert wrong == []


def test_no_module_is_too_long():
    long = {
        str(path.relative_to(PACKAGE)): count
        for name, path in modules().items()
        if (count := len(path.read_text().splitlines())) > LARGEST
    }
    assert long == {}


# Dispatch on a model class or a `model_type` string (issue #44's check):
# a family's identity is its `Family` record, asked through the registry.
# Every model class `kt.models` exports counts, except the decoding
# protocols, which code asks about (`isinstance(model, CausalLM)`).
PROTOCOLS = {"CausalLM", "Seq2SeqLM"}


def model_classes():
    """`{class name: the modules that may name it}`: every model class of
    `kt.models` and its family's own modules, the one defining it and the
    checkpoint module whose `FAMILY` lists a class of that module (BERT's
    heads in pretrained/bert.py)."""
    import inspect

    import keras

    import keras_transformer as kt
    from keras_transformer.pretrained.registry import FAMILIES

    owners = collections.defaultdict(set)  # models module -> pretrained module
    for family in FAMILIES:
        for cls in family.classes:
            owners[cls.__module__].add(family.load.__module__)
    return {
        name: {cls.__module__, *owners[cls.__module__]}
        for name, cls in vars(kt.models).items()
        if inspect.isclass(cls)
        and issubclass(cls, keras.Model)
        and name not in PROTOCOLS
    }


def dispatch(classes):
    """A regex of `isinstance` / `issubclass` / `type(x) is` on any of
    `classes`, `__name__ ==` one of their names, or `model_type ==`."""
    names = "|".join(sorted(classes, key=len, reverse=True))
    return re.compile(
        rf"(?:isinstance|issubclass)\([^)]*\b(?:{names})\b[^)]*"  # all named
        rf"|\btype\([^)]*\)\s*(?:is|==)\s*(?:\w+\.)*(?:{names})\b"
        rf"|__name__\s*==\s*[\"'](?:{names})[\"']"
        r"|model_type[\"']?\]?\s*=="
    )


def test_the_dispatch_check_knows_every_family():
    classes = model_classes()
    assert {"GPT2", "BERT", "Llama", "Gemma3", "Seq2Seq", "T5", "ViT"} < set(classes)
    assert {"Whisper", "BERTMaskedLM", "BERTClassifier"} < set(classes)
    pattern = dispatch(classes)
    for line in [
        "if isinstance(model, T5):",
        "if isinstance(model, (kt.models.Llama, Whisper)):",
        "if isinstance(model, Seq2Seq | Gemma3):",
        "if type(model) is models.Whisper:",
        'if type(model).__name__ == "T5":',
        'if config["model_type"] == "t5":',
    ]:
        assert pattern.search(line), line
    assert not pattern.search("if isinstance(model, CausalLM | Seq2SeqLM):")


def test_nothing_dispatches_on_a_model_class_or_model_type():
    classes = model_classes()
    pattern = dispatch(classes)
    found = []
    for name, path in modules().items():
        if name == "keras_transformer.pretrained.registry":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                named = [n for n in re.findall(r"\w+", match[0]) if n in classes]
                if not named or any(name not in classes[n] for n in named):
                    found.append(
                        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
                    )
    assert found == []


def family_words():
    """Lower-case words that would mark a family's rule in code: every
    model class, every Hugging Face model type a family file declares, and
    the family-only rules that once lived in the sampler (timestamps)."""
    words = {name.lower() for name in model_classes()}
    for path in (PACKAGE / "pretrained").glob("*.py"):
        for group in re.findall(r"MODEL_TYPES = \(([^)]*)\)", path.read_text()):
            words |= set(re.findall(r"\w+", group))
    return words | {"whisper", "t5", "gemma", "qwen", "bart", "marian", "timestamp"}


def family_names(source, words):
    """The identifiers of `source` (code, not strings or comments) with one
    of `words` among their `_`-separated parts, and its `getattr(model, ...)` reads."""
    found = []
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    for i, token in enumerate(tokens):
        if token.type != tokenize.NAME:
            continue
        if words & set(token.string.lower().split("_")):
            found.append(f"{token.start[0]}: {token.string}")
        after = [t.string for t in tokens[i + 1 : i + 3]]
        if token.string == "getattr" and after == ["(", "model"]:
            found.append(f"{token.start[0]}: getattr(model")
    return found


def test_no_family_rule_lives_in_generation():
    """Adding a family changes nothing in generation/: no identifier in its
    code names a family or a family's rule, and no model attribute is read
    by `getattr` (a hook the protocol does not declare)."""
    words = family_words()
    assert {"llama", "qwen2", "whisper", "gpt2", "seq2seq", "t5"} <= words
    found = [
        f"{path.name}:{line}"
        for path in sorted((PACKAGE / "generation").glob("*.py"))
        for line in family_names(path.read_text(), words)
    ]
    assert found == []
    # What the check catches: the sampler's old Whisper option, the old hook.
    assert family_names("self.timestamp_token_id = t", words)
    assert family_names('m = getattr(model, "min_decode_buffer", 32)', words)
    assert family_names("is_whisper = True", words)
    assert not family_names('x = "GPT2"  # a Whisper comment', words)
    assert not family_names("isinstance(model, CausalLM | Seq2SeqLM)", words)


def test_no_exporter_function_is_too_long():
    """Each `export_*` is split into argument checks and graph building: no
    function in export/ runs over 60 lines of code (its docstring, the
    user's reference, not counted)."""
    long = []
    for path in sorted((PACKAGE / "export").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            lines = node.end_lineno - node.lineno + 1
            if ast.get_docstring(node):
                lines -= node.body[0].end_lineno - node.body[0].lineno + 1
            if lines > 60:
                long.append(f"{path.name}: {node.name} ({lines} lines)")
    assert long == []


def test_every_error_names_the_value_received():
    """Every `raise ValueError(...)` / `raise FileNotFoundError(...)` with a
    message names the value it refused ("Received: name=value"), in its own
    text or in a `received` string it formats in (the rope checks build one
    for several raises). A re-raise (`raise error`) or a bare class is not
    counted."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.Raise) or not isinstance(node.exc, ast.Call):
                continue
            call = node.exc
            if not isinstance(call.func, ast.Name) or call.func.id not in (
                "ValueError",
                "FileNotFoundError",
            ):
                continue
            if not call.args and not call.keywords:
                continue
            formats_received = any(
                isinstance(n, ast.Name) and n.id == "received" for n in ast.walk(call)
            )
            if "Received" not in ast.get_source_segment(source, node) and not (
                formats_received
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []
