"""The timing loop `text.py` and `bpe.py` share: two tokenizers, the same
batches, interleaved passes, medians after warm-up."""

import statistics
import time

import numpy as np
import tensorflow as tf


def timed_pass(function, batches):
    start = time.perf_counter()
    for batch in batches:
        function(batch)
    return time.perf_counter() - start


def race(functions, lines, batch_size, passes, warmup):
    """Times `functions` ({"ours": f, "keras-hub": g}, each strings -> ragged
    ids) over `lines` in batches, pass after pass in turn so machine drift
    hits them equally. Returns `(share of lines with identical ids, {name:
    lines per second, the median of the timed passes})`."""
    batches = [
        tf.constant(lines[i : i + batch_size]) for i in range(0, len(lines), batch_size)
    ]
    ours, theirs = functions.values()
    same = np.mean(
        [
            a == b
            for batch in batches
            for a, b in zip(ours(batch).to_list(), theirs(batch).to_list(), strict=True)
        ]
    )
    times = {name: [] for name in functions}
    for step in range(warmup + passes):
        for name, function in functions.items():
            seconds = timed_pass(function, batches)
            if step >= warmup:
                times[name].append(seconds)
    speed = {name: len(lines) / statistics.median(s) for name, s in times.items()}
    return same, speed
