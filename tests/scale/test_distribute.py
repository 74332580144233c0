"""Data-parallel training with tf.distribute.MirroredStrategy on two logical CPU
devices (several machines: test_multi_worker.py)."""

import json

import numpy as np
import pytest

import keras_transformer as kt
from tests.scale.common import finish, start_script


@pytest.mark.slow
def test_mirrored_strategy_on_two_devices_trains_like_one_device():
    result = json.loads(finish(start_script("mirrored.py"), timeout=300))
    assert result["replicas"] == 2
    for family in ("gpt", "bert", "seq2seq", "clipped"):
        runs = result[family]
        np.testing.assert_allclose(runs["mirrored"], runs["single"], rtol=1e-5)
        assert runs["weight_difference"] < 1e-4, family
    # Clipping the global batch: every step was clipped (gradient norm over
    # 0.1), and Keras' clipping of each replica's share is far from it.
    norms = result["clipped"]["unclipped_norms"]
    assert len(norms) == 12 and min(norms) > 0.1, norms
    assert result["clipped_per_replica"]["weight_difference"] > 1e-2
    # SGD: every update is -lr * clip(g0 + g1) in numpy, both replicas' and
    # the sum's norms over 0.1; clipping each replica's share is not.
    sgd = result["sgd"]
    assert len(sgd["differences"]) == 4 and max(sgd["differences"]) < 1e-7, sgd
    assert min(min(pair) for pair in sgd["replica_norms"]) > 0.1, sgd
    assert min(sgd["sum_norms"]) > 0.1, sgd
    assert min(sgd["controls"]) > 1e-4, sgd
    assert result["uneven_batch_error"] == (
        "`global_batch_size` must be divisible by the number of replicas. "
        "Received: global_batch_size=7, num_replicas_in_sync=2"
    )
    assert result["uneven_fit_error"] == result["uneven_batch_error"]


class Replicas:
    def __init__(self, num_replicas_in_sync):
        self.num_replicas_in_sync = num_replicas_in_sync


def test_check_global_batch():
    assert kt.training.check_global_batch(64, Replicas(8)) == 8
    assert kt.training.check_global_batch(6, 3) == 2
    with pytest.raises(
        ValueError, match="global_batch_size=30, num_replicas_in_sync=4"
    ):
        kt.training.check_global_batch(30, Replicas(4))
    with pytest.raises(ValueError, match="global_batch_size=0"):
        kt.training.check_global_batch(0, 1)
    with pytest.raises(ValueError, match="strategy=None"):
        kt.training.check_global_batch(8, None)
