"""Probes of each Keras and TensorFlow private name `kt._compat` relies on
(checked on Keras 3.15.1, TensorFlow 2.21.0): each fails naming the private
and the installed versions when an upgrade moves it. And the rule that
keeps them there: no module of the package but `_compat.py` uses another
object's private attribute, nor one that its class inherits from Keras or
TensorFlow (`self._kernel`), bar the Keras hooks listed in `HOOKS`."""

import ast
import doctest
import functools
import gc
import importlib
import importlib.util
import inspect
import pathlib
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import _compat
from keras_transformer.training import multi_worker

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_transformer"
CHECKED = "checked on Keras 3.15.1 / TensorFlow 2.21.0"
VERSIONS = f"installed: Keras {keras.__version__}, TensorFlow {tf.__version__}"


def changed(private):
    return (
        f"Keras or TensorFlow changed {private} ({CHECKED}; {VERSIONS}): see kt._compat"
    )


def dense(mode=None, lora_rank=None):
    keras.utils.set_random_seed(0)
    layer = keras.layers.Dense(3)
    layer.build((None, 4))
    if mode:
        layer.quantize(mode)
    if lora_rank:
        layer.enable_lora(lora_rank)
        layer.lora_kernel_b.assign(np.full((lora_rank, 3), 0.25, "float32"))
    return layer


def test_layer_delattr_still_collects_per_variable():
    calls = []
    layer = dense(lora_rank=2)
    collect, gc.collect = gc.collect, lambda generation=2: calls.append(1) or 0
    try:
        del layer.lora_kernel_a
    finally:
        gc.collect = collect
    assert calls, changed("Layer.__delattr__'s gc.collect() (collect_once)")


@pytest.mark.parametrize("mode", [None, "int8"])
def test_kernel_variable(mode):
    layer = dense(mode, lora_rank=2)
    assert hasattr(layer, "_kernel"), changed("Dense._kernel")
    kernel = _compat.kernel_variable(layer)
    assert isinstance(kernel, keras.Variable), changed("Dense._kernel")
    assert kernel.shape == (4, 3) and kernel.dtype == (mode or "float32"), changed(
        "Dense._kernel's shape or dtype"
    )
    # Keras' public `kernel` adds the LoRA update; the variable does not.
    assert not np.array_equal(layer.kernel, kernel), changed("Dense.kernel")
    einsum = keras.layers.EinsumDense("ab,bc->ac", output_shape=3)
    einsum.build((None, 4))
    assert _compat.kernel_variable(einsum) is einsum.kernel, changed(
        "EinsumDense._kernel"
    )


def test_replace_kernel_variable():
    layer = dense("int8")
    old, count = _compat.kernel_variable(layer), len(layer.variables)
    with _compat.unlocked(layer):
        new = _compat.replace_kernel_variable(
            layer, shape=(3, 4), initializer="zeros", dtype="int8", trainable=False
        )
    assert _compat.kernel_variable(layer) is new, changed("Dense._kernel")
    ids = {id(variable) for variable in layer.variables}
    assert id(new) in ids and id(old) not in ids, changed("Layer.__delattr__")
    assert len(layer.variables) == count, changed("Layer.__delattr__")


def test_model_strategy():
    model = keras.Sequential([keras.layers.Dense(1)])
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope():
        scoped = keras.Sequential([keras.layers.Dense(1)])
        assert _compat.model_strategy(model) is None, changed(
            "TensorFlowTrainer._distribute_strategy"
        )
    assert _compat.model_strategy(scoped) is strategy, changed(
        "TensorFlowTrainer._distribute_strategy"
    )


def test_unlocked():
    layer = dense()
    tracker = getattr(layer, "_tracker", None)
    assert tracker is not None and tracker.locked, changed("Layer._tracker")
    with _compat.unlocked(layer):
        assert not layer._tracker.locked, changed("Layer._tracker.unlock()")
    assert layer._tracker.locked, changed("Layer._tracker.lock()")


def test_merged_lora_kernel():
    layer = dense(lora_rank=2)
    values, scale, zero = _compat.merged_lora_kernel(layer)
    assert scale is None and zero is None, changed("Dense._get_kernel_with_merged_lora")
    np.testing.assert_array_equal(values, layer.kernel)

    layer = dense("int8", lora_rank=2)
    scale = np.asarray(layer.kernel_scale)  # one per output column
    update = np.asarray(layer.lora_kernel_a) @ np.asarray(layer.lora_kernel_b)
    float_kernel = np.asarray(_compat.kernel_variable(layer)) / scale + update
    values, scale, zero = _compat.merged_lora_kernel(layer)
    assert values.dtype == "int8" and values.shape == (4, 3) and zero is None, changed(
        "Dense._get_kernel_with_merged_lora (int8)"
    )
    merged = np.asarray(values, "float32") / np.asarray(scale, "float32")
    step = np.abs(float_kernel).max(axis=0) / 127
    assert np.all(np.abs(merged - float_kernel) <= step), changed(
        "Dense._get_kernel_with_merged_lora's merge"
    )


def test_flatten_layers():
    inner = keras.Sequential([keras.layers.Dense(2)])
    outer = keras.Sequential([inner, keras.layers.Dense(1)])
    outer.build((None, 3))
    found = _compat.flatten_layers(outer)
    ids = [id(layer) for layer in found]
    assert found[0] is outer and len(set(ids)) == len(ids), changed(
        "Layer._flatten_layers"
    )
    nested = [outer, inner, inner.layers[0], outer.layers[1]]
    assert {id(layer) for layer in nested} <= set(ids), changed("Layer._flatten_layers")


def test_keras_mask():
    ids = np.array([[1, 2, 0]])
    x = keras.layers.Embedding(4, 2, mask_zero=True)(ids)
    assert _compat.keras_mask(x) is not None, changed("the tensor's _keras_mask")
    np.testing.assert_array_equal(_compat.keras_mask(x), ids != 0)
    assert _compat.keras_mask(tf.zeros(2)) is None


def test_tensorflow_trainer():
    from keras.src.backend.tensorflow import trainer

    build = getattr(trainer.TensorFlowTrainer, "_maybe_symbolic_build", None)
    assert build is not None, changed("TensorFlowTrainer._maybe_symbolic_build")
    assert "iterator" in inspect.signature(build).parameters, changed(
        "TensorFlowTrainer._maybe_symbolic_build's arguments"
    )
    assert callable(getattr(trainer, "reduce_per_replica", None)), changed(
        "keras.src.backend.tensorflow.trainer.reduce_per_replica"
    )
    # Both run against the stand-in strategy, and still have the bugs the
    # multi-worker workaround exists for (keras-team/keras#20585).
    assert multi_worker.fit_needs_workaround.__wrapped__(), changed(
        "the multi-worker fit bugs (fit_needs_workaround)"
    )


def test_strategy_in_multi_worker_mode():
    from tensorflow.python.distribute import collective_all_reduce_strategy as car

    extended = car.CollectiveAllReduceExtended
    assert callable(getattr(extended, "_in_multi_worker_mode", None)), changed(
        "CollectiveAllReduceExtended._in_multi_worker_mode"
    )
    strategy = tf.distribute.get_strategy()
    assert _compat.strategy_in_multi_worker_mode(strategy) is False


# -- No private names of other objects outside `_compat.py` ----------------

OWN = {"self", "cls"}
ALLOWED = {("os", "_exit")}  # the standard library's documented exit
# A named tuple's documented methods (underscored not to clash with fields).
NAMED_TUPLE = {"_replace", "_asdict", "_make", "_fields", "_field_defaults"}
PRIVATE_PACKAGES = ("keras.src", "tensorflow.python")


def private(name):
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not dunder and name not in NAMED_TUPLE


def sanctioned(module, name):
    """One of our private helper modules (`_validation`, `_compat`, ...),
    which `tests/test_layout.py` keeps to their rooms (STYLE 12)."""
    folder = PACKAGE.parent.joinpath(*module.split("."))
    return module.startswith("keras_transformer") and (
        (folder / f"{name}.py").exists() or (folder / name).is_dir()
    )


def is_own(node):
    """`self`, `cls`, or `super()` / `super(C, self)`."""
    if isinstance(node, ast.Name):
        return node.id in OWN
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
    )


def private_uses(tree):
    """The other objects' private names `tree` uses."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if not is_own(node.value) and (owner, node.attr) not in ALLOWED:
                yield node.attr
        elif isinstance(node, ast.Attribute) and node.attr in ("src", "python"):
            yield ast.unparse(node)  # keras.src..., tf.python...
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
            and not is_own(node.args[0])
        ):
            yield node.args[1].value
        elif isinstance(node, ast.ImportFrom | ast.Import):
            module = getattr(node, "module", None) or ""
            names = [alias.name for alias in node.names]
            for name in [module, *names] if module else names:
                if name.startswith(PRIVATE_PACKAGES):
                    yield name
            for name in names if module else ():
                if private(name) and not sanctioned(module, name):
                    yield name


def examples(tree):
    """The docstring examples of `tree`, parsed."""
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ):
            for example in doctest.DocTestParser().get_examples(
                ast.get_docstring(node) or ""
            ):
                yield ast.parse(example.source)


def package_private_uses(package=PACKAGE):
    found = set()
    for path in sorted(package.rglob("*.py")):
        if path.name == "_compat.py" and path.parent == package:
            continue
        tree = ast.parse(path.read_text())
        relative = str(path.relative_to(package))
        for part in [tree, *examples(tree)]:
            found |= {(relative, name) for name in private_uses(part)}
    return found


def test_private_uses_finds_each_kind(tmp_path):
    (tmp_path / "a.py").write_text(
        "import os\nfrom keras.src.backend import x\nfrom m import _y\n"
        "from keras_transformer import _validation\n"
        "def f(layer, self):\n"
        '    """>>> layer._b"""\n'
        "    os._exit(0); self._ok; super()._ok; super(C, self)._ok\n"
        '    getattr(self, "_ok"); getattr(layer, "__len__"); t._replace(a=1)\n'
        '    return layer._a, hasattr(layer, "_c"), keras.src.z\n'
    )
    assert package_private_uses(tmp_path) == {
        ("a.py", name)
        for name in ("keras.src.backend", "_y", "_a", "_b", "_c", "keras.src")
    }


def test_no_private_names_outside_compat():
    assert package_private_uses() == set(), (
        "Keras' and TensorFlow's private names go through "
        "keras_transformer/_compat.py (with a probe here); ours get a public "
        "name (docs/contributing.md)"
    )


# -- Nor the private names our classes inherit from Keras or TensorFlow -----

UPSTREAM = ("keras", "tensorflow")
# Keras' private methods our classes override for want of a public hook
# (`test_exceptions_are_current` fails when Keras drops one: ours would
# silently stop running). `_int8_call` is `Layer.quantized_call`'s int8
# branch: overriding that public method would skip its remat check too.
HOOKS = {
    "layers.quantization.Int8Matrix": {"_int8_call", "_get_kernel_with_merged_lora"},
    "training.fit.FitMixin": {"_maybe_symbolic_build"},
    "training.optimizers.AdamW": {"_clip_gradients", "_all_reduce_sum_gradients"},
    "training.resume.ModelCheckpoint": {"_save_model"},
}
# Not through `_compat` yet (#55): the callback extends Keras' by its
# private state; it is to become a callback of its own.
PENDING = {
    "training.resume.BackupAndRestore": {
        "_save_model",
        "_load_model",
        "_weights_path",
        "_training_metadata_path",
        "_prev_weights_path",
        "_prev_training_metadata_path",
        "_current_epoch",
        "_last_batch_seen",
    }
}
EXCEPTIONS = {
    key: HOOKS.get(key, set()) | PENDING.get(key, set()) for key in {*HOOKS, *PENDING}
}


@functools.cache
def functional():
    """Keras' `Functional`, which Keras makes a base of a model class once
    a model of it is built from tensors."""
    x = keras.Input((1,))
    return type(keras.Model(x, keras.layers.Identity()(x)))


@functools.cache
def upstream_privates(base):
    """The private names Keras or TensorFlow class `base` defines: its
    class attributes, and those its code sets or reads on `self` (the
    instance's: `Dense._kernel` is made in `build`, `Layer._tracker` in
    `__init__`)."""
    names = {name for name in vars(base) if private(name)}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(base)))
    except (OSError, TypeError):  # compiled: its class attributes only
        return frozenset(names)
    return frozenset(
        names
        | {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and private(node.attr)
        }
    )


def inherited_privates(classes):
    """`{class: {name: the Keras or TensorFlow class it comes from}}` of
    the private names each of `classes` inherits. A mixin inherits those
    of every class of `classes` it is mixed into (`Int8Matrix` those of
    `Dense` and `EinsumDense`)."""
    found = {cls: {} for cls in classes}
    for cls in classes:
        mro = list(cls.__mro__)
        if issubclass(cls, keras.Model):
            mro.append(functional())
        upstream = {}
        for base in reversed(mro):  # the nearest base names it
            if base.__module__.split(".")[0] in UPSTREAM:
                upstream.update(dict.fromkeys(upstream_privates(base), base))
        for ours in mro:
            if ours in found:
                found[ours].update(upstream)
    return found


def load(path, package):
    name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    name = name.removesuffix(".__init__")
    if package == PACKAGE:
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def class_nodes(node, owner):
    """`(ClassDef, class)` of each class under `node`, `owner` holding it
    (a class made inside a function is not reachable: skipped)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            cls = getattr(owner, child.name, None)
            if inspect.isclass(cls):
                yield child, cls
                yield from class_nodes(child, cls)
        elif not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from class_nodes(child, owner)


def class_uses(node, names):
    """`(line, use, name)` for each of `names` that class `node` defines in
    its body (shadowing or overriding it) or uses on `self`, `cls` or
    `super()` (nested classes apart)."""
    for child in node.body:
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            defined = [child.name]
        else:
            targets = getattr(child, "targets", [getattr(child, "target", None)])
            defined = [t.id for t in targets if isinstance(t, ast.Name)]
        for name in set(defined) & names:
            yield child.lineno, f"defines {name}", name
    todo = list(node.body)
    while todo:
        child = todo.pop()
        todo += [
            c for c in ast.iter_child_nodes(child) if not isinstance(c, ast.ClassDef)
        ]
        owner = name = None
        if isinstance(child, ast.Attribute):
            owner, name = child.value, child.attr
        elif (
            isinstance(child, ast.Call)
            and isinstance(child.func, ast.Name)
            and child.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(child.args) >= 2
            and isinstance(child.args[1], ast.Constant)
        ):
            owner, name = child.args[0], child.args[1].value
        if name in names and is_own(owner):
            yield child.lineno, f"{ast.unparse(owner)}.{name}", name


def inherited_private_uses(package=PACKAGE):
    """`(path, line, use, name, class key, upstream class)` for each private
    name of a Keras or TensorFlow base class that a class of `package`
    uses or redefines (`_compat.py` apart), sorted.

    A name is Keras' if a Keras or TensorFlow class our class inherits from
    (or a mixin is mixed into) defines or uses it. One our class assigns
    itself is still Keras' then: it shadows Keras' attribute, which Keras'
    own code reads and writes (a second `_prev_weights_path`, an overridden
    `_save_model`), so it depends on Keras' internals as much as a read.
    Every other name our classes use on `self` is theirs. A plain class
    naming its attributes like a Keras class's (`GGUFFile._value`) is not
    concerned: it inherits nothing.
    """
    found = []
    paths = sorted(package.rglob("*.py"))
    paths = [p for p in paths if not (p.name == "_compat.py" and p.parent == package)]
    nodes = [
        (path, node, cls)
        for path in paths
        for node, cls in class_nodes(ast.parse(path.read_text()), load(path, package))
    ]
    inherited = inherited_privates({cls for _, _, cls in nodes})
    for path, node, cls in nodes:
        key = f"{cls.__module__.removeprefix(package.name + '.')}.{cls.__qualname__}"
        names = inherited[cls]
        for line, use, name in class_uses(node, names.keys()):
            relative = str(path.relative_to(package))
            found.append((relative, line, use, name, key, names[name]))
    return sorted(found, key=lambda found: found[:3])


@functools.cache
def package_inherited_uses():
    return tuple(inherited_private_uses())


def test_inherited_private_uses_finds_each_kind(tmp_path):
    (tmp_path / "a.py").write_text(
        "import keras\n"
        "class Mixin:\n"
        "    def lock(self):\n"
        "        self._tracker.lock()\n"
        "        self._mine = getattr(self, '_kernel')\n"
        "class Layer(Mixin, keras.layers.Dense):\n"
        "    _trainable = True\n"
        "    def _int8_call(self, x):\n"
        "        return super()._int8_call(x), self._mine, self._flatten_layers()\n"
        "class Plain:\n"
        "    def __init__(self):\n"
        "        self._tracker = None\n"
    )
    found = [use[:3] + use[4:5] for use in inherited_private_uses(tmp_path)]
    assert found == [
        ("a.py", 4, "self._tracker", "a.Mixin"),
        ("a.py", 5, "self._kernel", "a.Mixin"),
        ("a.py", 7, "defines _trainable", "a.Layer"),
        ("a.py", 8, "defines _int8_call", "a.Layer"),
        ("a.py", 9, "self._flatten_layers", "a.Layer"),
        ("a.py", 9, "super()._int8_call", "a.Layer"),
    ]


def test_no_inherited_private_names_outside_compat():
    found = [
        f"{path}:{line}: {use} ({base.__module__}.{base.__qualname__}'s)"
        for path, line, use, name, key, base in package_inherited_uses()
        if name not in EXCEPTIONS.get(key, ())
    ]
    assert found == [], (
        "A private name our class inherits from Keras or TensorFlow goes "
        "through keras_transformer/_compat.py too (or, a private method "
        "overridden for want of a public hook, into HOOKS here):\n" + "\n".join(found)
    )


def test_exceptions_are_current():
    """Each of `HOOKS` and `PENDING` is still a Keras or TensorFlow private
    that the class uses or overrides."""
    used = {(key, name) for *_, name, key, _ in package_inherited_uses()}
    listed = {(key, name) for key, names in EXCEPTIONS.items() for name in names}
    assert listed - used == set(), (
        f"{sorted(listed - used)}: no longer used (remove it here), or no "
        f"longer Keras' ({CHECKED}; {VERSIONS}): an override that Keras no "
        "longer calls"
    )
