import pytest

import keras_transformer as kt


def test_presets_override_arguments():
    model = kt.models.gpt2("gpt2_tiny", num_layers=1)
    assert (
        len([layer for layer in model.layers if "transformer_layer" in layer.name]) == 1
    )


@pytest.mark.parametrize(
    "name",
    [
        "bert_tiny",
        "gpt2_tiny",
        "transformer_tiny",
        pytest.param("bert_base", marks=pytest.mark.slow),
        pytest.param("gpt2_small", marks=pytest.mark.slow),
        pytest.param("gpt2_medium", marks=pytest.mark.slow),
        pytest.param("transformer_base", marks=pytest.mark.slow),
    ],
)
def test_preset_parameter_counts(name):
    family, _, expected = kt.models.PRESETS[name]
    model = getattr(kt.models, family)(name)
    assert model.count_params() == expected
    published = {"bert_base": 110e6, "gpt2_small": 124e6, "gpt2_medium": 355e6}
    if name in published:
        assert abs(expected - published[name]) / published[name] < 0.01
