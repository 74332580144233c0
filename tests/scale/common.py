"""What the scale tests share: tiny versions of the three families,
padding-heavy fixed-shape data, the float32 run the mixed-precision and XLA
runs are compared with, a train-step trace counter, starting the scripts of
`scripts/` in fresh processes, and running a multi-worker cluster of them on
127.0.0.1.

Each family is `(build, data)`: `build()` returns an uncompiled model with
dropout 0, `data(num, seed)` returns `(features, labels)` with labels 0 at
padding. Batches have one fixed shape, so a train step compiles once.
"""

import contextlib
import functools
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import keras
import numpy as np

import keras_transformer as kt

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = pathlib.Path(__file__).parent / "scripts"
BATCH, STEPS, EPOCHS = 8, 4, 3  # 4 batches of 8 per epoch, 3 epochs
VOCAB, LENGTH = 16, 12


def _padding_heavy_lengths(num, rng, length):
    """Real lengths in [0, length]: most rows short, one row in four empty.

    The lengths repeat every half batch, so when a batch is split over two
    replicas both halves hold as many real tokens; only then is the mean of
    the replicas' token-mean losses the token mean of the whole batch.
    """
    half = rng.integers(2, length // 2 + 1, BATCH // 2)
    half[0], half[1] = 0, length
    return np.resize(half, num)


def _right_pad(ids, lengths):
    return np.where(np.arange(ids.shape[1]) < lengths[:, None], ids, 0)


def gpt():
    return kt.models.gpt2(VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
                          intermediate_dim=32, max_sequence_length=LENGTH,
                          dropout=0.0)  # fmt: skip


def gpt_data(num, seed=0):
    """Windows of the cycle 1, 2, ..., 15, 1, ... right-padded with 0."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, VOCAB - 1, num)
    ids = (start[:, None] + np.arange(LENGTH + 1)) % (VOCAB - 1) + 1
    ids = _right_pad(ids, _padding_heavy_lengths(num, rng, LENGTH + 1))
    return ids[:, :-1].astype("int32"), ids[:, 1:].astype("int32")


def bert():
    backbone = kt.models.bert(VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
                              intermediate_dim=32, max_sequence_length=LENGTH,
                              dropout=0.0)  # fmt: skip
    return kt.models.bert_masked_lm(backbone)


def bert_data(num, seed=0, masked=3, mask_id=1):
    """Count-up sequences; a masked token is its left neighbour + 1."""
    rng = np.random.default_rng(seed)
    start = rng.integers(2, VOCAB - LENGTH, num)
    ids = start[:, None] + np.arange(LENGTH)
    lengths = _padding_heavy_lengths(num, rng, LENGTH)
    ids = _right_pad(ids, lengths)
    positions = np.zeros((num, masked), "int32")
    labels = np.zeros((num, masked), "int32")  # 0: no prediction (padding)
    for row, length in enumerate(lengths):
        count = min(masked, max(length - 1, 0))
        picked = np.sort(rng.choice(np.arange(1, length), count, replace=False))
        positions[row, :count] = picked
        labels[row, :count] = ids[row, picked]
        ids[row, picked] = mask_id
    features = {
        "token_ids": ids.astype("int32"),
        "segment_ids": np.zeros_like(ids, "int32"),
        "padding_mask": ids != 0,
        "mask_positions": positions,
    }
    return features, labels


def seq2seq():
    return kt.models.seq2seq(VOCAB, num_layers=1, num_heads=2, hidden_dim=16,
                             intermediate_dim=32, max_sequence_length=LENGTH,
                             dropout=0.0)  # fmt: skip


def seq2seq_data(num, seed=0, start_id=1, end_id=2):
    """Reverse the real tokens of a right-padded source."""
    rng = np.random.default_rng(seed)
    source = rng.integers(3, VOCAB, (num, LENGTH - 1))
    lengths = _padding_heavy_lengths(num, rng, LENGTH - 1)
    source = _right_pad(source, lengths)
    target = np.zeros_like(source)
    for row, length in enumerate(lengths):
        target[row, :length] = source[row, :length][::-1]
    labels = np.concatenate([target, np.zeros((num, 1), target.dtype)], axis=1)
    labels[np.arange(num), lengths] = end_id
    decoder = np.concatenate([np.full((num, 1), start_id), labels[:, :-1]], axis=1)
    decoder = np.where(decoder == end_id, 0, decoder)
    features = {"encoder_token_ids": source, "decoder_token_ids": decoder}
    return {k: v.astype("int32") for k, v in features.items()}, labels.astype("int32")


FAMILIES = {"gpt": (gpt, gpt_data), "bert": (bert, bert_data),
            "seq2seq": (seq2seq, seq2seq_data)}  # fmt: skip


def build(family, seed=0):
    """The family's tiny model, initialized from `seed`."""
    keras.utils.set_random_seed(seed)
    return FAMILIES[family][0]()


def compile_model(model, jit_compile=False, learning_rate=5e-3):
    model.compile(
        optimizer=kt.training.AdamW(learning_rate, weight_decay=0.01),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(),
        jit_compile=jit_compile,
    )
    return model


def data(family, seed=0):
    return FAMILIES[family][1](BATCH * STEPS, seed)


def train(model, family, epochs=EPOCHS, int_masks=False):
    """Fits `EPOCHS` epochs of the same fixed batches, in order.

    With `int_masks`, a boolean `padding_mask` input is fed as int32.
    Returns the loss of every epoch.
    """
    x, y = data(family)
    if int_masks and "padding_mask" in x:
        x = {**x, "padding_mask": x["padding_mask"].astype("int32")}
    history = model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
    return history.history["loss"]


@contextlib.contextmanager
def dtype_policy(name):
    """Sets the global dtype policy inside the block, then restores it."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@functools.cache
def float32_run(family):
    """`(initial weights, epoch losses, final weights)` of the float32 run."""
    with dtype_policy("float32"):
        model = compile_model(build(family))
        initial = model.get_weights()
        losses = train(model, family)
        return initial, losses, model.get_weights()


def count_traces(model):
    """Counts the traces of `model`'s train step (one per XLA compilation).

    Keras traces `train_step` inside its `tf.function`; Python runs it once
    per trace and never again, so counting calls counts traces.
    """
    counter = {"traces": 0}
    train_step = model.train_step

    def counted(data):
        counter["traces"] += 1
        return train_step(data)

    model.train_step = counted
    return counter


def start_script(name, *args, env=None):
    """Starts `tests/scale/scripts/<name>` in a fresh Python: TensorFlow
    configures its devices (and a strategy its cluster) once per process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           **(env or {})}  # fmt: skip
    return subprocess.Popen(
        [sys.executable, str(SCRIPTS / name), *map(str, args)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process, timeout, returncode=0):
    """Waits for `process` (killed after `timeout` seconds), checks its exit
    code and returns its standard output."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
        raise AssertionError(
            f"timed out after {timeout} s:\n{stderr[-3000:]}"
        ) from None
    assert process.returncode == returncode, stderr[-3000:]
    return stdout


# What a worker prints when its port was taken between `free_port()` and its
# gRPC server's start (TensorFlow's server cannot share a reserved socket).
PORT_CLASH = "Could not start gRPC server"


class _PortClash(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cluster(start_worker, count, timeout, returncodes=None, tries=3):
    """Runs a cluster of `count` workers on 127.0.0.1 and returns each one's
    `(stdout, stderr)`.

    `start_worker(tf_config, index)` starts worker `index` with its
    TF_CONFIG (JSON text) and returns its `subprocess.Popen` (pipes for both
    outputs). `returncodes[index]` is the exit code worker `index` must end
    with (default 0); None: any, and the worker is killed once the others
    have ended (it waits for a dead peer). As soon as a worker ends with
    another code, or after `timeout` seconds, every worker is killed and the
    test fails. A worker whose port was taken (the race of `free_port`)
    restarts the whole cluster on new ports, `tries` times at most.
    """
    returncodes = returncodes or [0] * count
    for _ in range(tries):
        workers = [f"127.0.0.1:{free_port()}" for _ in range(count)]
        processes = []
        for index in range(count):
            config = {"cluster": {"worker": workers},
                      "task": {"type": "worker", "index": index}}  # fmt: skip
            processes.append(start_worker(json.dumps(config), index))
        try:
            return _finish_cluster(processes, timeout, returncodes)
        except _PortClash:
            continue
    raise AssertionError(f"{tries} clusters lost a port to another process")


def _finish_cluster(processes, timeout, returncodes):
    outputs = [None] * len(processes)

    def communicate(index):
        outputs[index] = processes[index].communicate()

    threads = [threading.Thread(target=communicate, args=(i,)) for i in
               range(len(processes))]  # fmt: skip
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    failed = None
    try:
        awaited = [i for i, code in enumerate(returncodes) if code is not None]
        while any(threads[i].is_alive() for i in awaited):
            ended = [i for i in awaited if not threads[i].is_alive()]
            failed = next((i for i in ended if processes[i].returncode !=
                           returncodes[i]), None)  # fmt: skip
            if failed is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        for thread in threads:
            thread.join()
    if any(PORT_CLASH in stderr for _, stderr in outputs):
        raise _PortClash
    for index, (process, code) in enumerate(zip(processes, returncodes, strict=True)):
        if code is not None and process.returncode != code:
            raise AssertionError(
                f"worker {index} ended with {process.returncode}, not {code}"
                f"{' (timed out)' if failed is None else ''}:\n"
                f"{outputs[index][1][-3000:]}"
            )
    return outputs
