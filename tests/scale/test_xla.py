"""Every family trains under XLA like without it, compiling its step once."""

import numpy as np
import pytest

from tests.scale import common


@pytest.mark.slow
@pytest.mark.parametrize("family", common.FAMILIES)
def test_xla_matches_and_compiles_the_train_step_once(family):
    initial, float32_losses, float32_weights = common.float32_run(family)
    model = common.compile_model(common.build(family), jit_compile=True)
    model.set_weights(initial)
    # Built here, the optimizer's variables exist before the first step;
    # otherwise Keras creates them inside it and TensorFlow traces twice.
    model.optimizer.build(model.trainable_variables)
    counter = common.count_traces(model)

    losses = common.train(model, family)  # 3 epochs of same-shape batches

    assert counter["traces"] == 1
    np.testing.assert_allclose(losses, float32_losses, rtol=1e-5)
    for xla, plain in zip(model.get_weights(), float32_weights, strict=True):
        np.testing.assert_allclose(xla, plain, atol=1e-4)
