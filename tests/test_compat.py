"""Probes of each Keras and TensorFlow private name `kt._compat` relies on
(checked on Keras 3.15.1, TensorFlow 2.21.0): each fails naming the private
and the installed versions when an upgrade moves it. And the rule that
keeps them there: no module of the package but `_compat.py` uses another
object's private attribute."""

import ast
import doctest
import gc
import inspect
import pathlib

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
