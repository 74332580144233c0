"""Every family trains under mixed_bfloat16 and mixed_float16 like float32."""

import keras
import numpy as np
import pytest

from tests.helpers import to_numpy
from tests.scale import common

# Largest relative difference allowed between an epoch's mean loss under a
# mixed policy and under float32, from the same weights on the same batches.
# Measured on CPU over the three families: <= 0.074% for bfloat16 (gpt),
# <= 0.0048% for float16 (bert). Allowed: 0.2% and 0.02%, three and four
# times that.
LOSS_RTOL = {"mixed_bfloat16": 2e-3, "mixed_float16": 2e-4}


@pytest.mark.slow
@pytest.mark.parametrize("family", common.FAMILIES)
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"], indirect=True)
def test_mixed_precision_training_tracks_float32(family, policy):
    initial, float32_losses, _ = common.float32_run(family)
    model = common.compile_model(common.build(family))
    model.set_weights(initial)
    compute_dtype = policy.removeprefix("mixed_")
    # The policy reached every layer but the float32 logits bias of the
    # masked-LM head (logits stay float32); the weights stay float32.
    output_bias = getattr(model, "mlm_bias", None)
    layers = [layer for layer in model.layers if layer.weights]
    assert {layer.compute_dtype for layer in layers if layer is not output_bias} == {
        compute_dtype
    }
    if output_bias is not None:
        assert output_bias.compute_dtype == "float32"
    assert {v.dtype for v in model.weights} == {"float32"}
    # Keras wraps the optimizer in a LossScaleOptimizer for float16 only.
    scaled = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert scaled == (policy == "mixed_float16")

    losses = common.train(model, family)

    np.testing.assert_allclose(losses, float32_losses, rtol=LOSS_RTOL[policy])
    assert losses[-1] < losses[0] - 0.05, losses  # it learns (float32: 0.12-0.49)
    x, _ = common.data(family)  # rows without a single real token included
    logits = model(x)
    assert logits.dtype == "float32"
    assert np.all(np.isfinite(to_numpy(logits)))
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())


@pytest.mark.parametrize("family", common.FAMILIES)
@pytest.mark.parametrize("saved_under", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_files_reload_with_their_policy(family, saved_under, tmp_path):
    with common.dtype_policy(saved_under):
        model = common.build(family)
    x, _ = common.data(family)
    expected = to_numpy(model(x))
    model.save(tmp_path / "model.keras")
    # Loaded under float32 (the global default): the file's policy wins.
    restored = keras.saving.load_model(tmp_path / "model.keras")
    compute_dtype = saved_under.removeprefix("mixed_")
    output_bias = getattr(restored, "mlm_bias", None)
    layers = [layer for layer in restored.layers if layer.weights]
    assert {
        layer.dtype_policy.name for layer in layers if layer is not output_bias
    } == {saved_under}
    assert {layer.compute_dtype for layer in layers if layer is not output_bias} == {
        compute_dtype
    }
    assert {v.dtype for v in restored.weights} == {"float32"}
    np.testing.assert_array_equal(to_numpy(restored(x)), expected)
    assert keras.config.dtype_policy().name == "float32"  # left as it was
