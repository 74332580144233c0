import pytest

import keras_transformer as kt


def block_parameters(hidden, intermediate, attentions):
    """One block: `attentions` attention sub-blocks (Q, K, V, O projections
    with biases, a LayerNorm each), a feed-forward network and its LayerNorm."""
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden
    feedforward = hidden * intermediate + intermediate + intermediate * hidden
    return attentions * attention + feedforward + hidden + 2 * hidden


def expected_parameters(family, config):
    """The parameter count from the architecture, not from PRESETS."""
    v, e = config["vocabulary_size"], config["hidden_dim"]
    f, n, t = (
        config["intermediate_dim"],
        config["num_layers"],
        config["max_sequence_length"],
    )
    if family == "bert":
        embeddings = v * e + t * e + 2 * e + 2 * e  # tokens, positions, segments, LN
        return embeddings + n * block_parameters(e, f, 1) + e * e + e  # + pooler
    if family == "gpt2":
        return v * e + t * e + n * block_parameters(e, f, 1) + 2 * e  # + final LN
    # seq2seq: sinusoidal positions (no weights), one shared tied embedding
    return v * e + n * block_parameters(e, f, 1) + n * block_parameters(e, f, 2)


@pytest.mark.parametrize(
    "name",
    [
        "bert_tiny",
        "gpt2_tiny",
        "seq2seq_tiny",
        pytest.param("bert_base", marks=pytest.mark.slow),
        pytest.param("gpt2_small", marks=pytest.mark.slow),
        pytest.param("gpt2_medium", marks=pytest.mark.slow),
        pytest.param("seq2seq_base", marks=pytest.mark.slow),
    ],
)
def test_preset_parameter_counts(name):
    preset = kt.models.PRESETS[name]
    expected = expected_parameters(preset["family"], preset["config"])
    assert preset["parameters"] == expected
    model = getattr(kt.models, preset["family"])(name)
    assert model.count_params() == expected
    published = {"bert_base": 110e6, "gpt2_small": 124e6, "gpt2_medium": 355e6}
    if name in published:
        assert abs(expected - published[name]) / published[name] < 0.01


@pytest.mark.parametrize(
    "model_class, name, overrides",
    [
        (kt.models.GPT2, "gpt2_tiny", {"num_layers": 1}),
        (kt.models.GPT2, "gpt2_tiny", {"max_sequence_length": 64, "dropout": 0.0}),
        (kt.models.BERT, "bert_tiny", {"num_layers": 1, "max_sequence_length": 16}),
        (kt.models.Seq2Seq, "seq2seq_tiny", {"num_layers": 1, "dropout": 0.2}),
    ],
)
def test_from_preset_overrides_exactly_the_named_values(model_class, name, overrides):
    model = model_class.from_preset(name, **overrides)
    assert isinstance(model, model_class)
    expected = {**kt.models.PRESETS[name]["config"], **overrides}
    config = model.get_config()
    for key, value in expected.items():
        assert config[key] == value, key
    # A factory given a preset name behaves the same: its own defaults
    # (max_sequence_length=1024, dropout=0.1, ...) never overwrite the preset.
    factory = getattr(kt.models, kt.models.PRESETS[name]["family"])
    assert factory(name, **overrides).get_config() == config


def test_factory_defaults_never_overwrite_a_preset(monkeypatch):
    # A preset whose values differ from the factory's defaults
    # (max_sequence_length=1024, dropout=0.1): 0.1 overwrote them.
    config = {**kt.models.PRESETS["gpt2_tiny"]["config"], "max_sequence_length": 64}
    config["dropout"] = 0.0
    preset = {"family": "gpt2", "config": config, "parameters": None}
    monkeypatch.setitem(kt.models.PRESETS, "gpt2_short", preset)
    model = kt.models.gpt2("gpt2_short", num_layers=1)
    assert model.max_sequence_length == 64
    assert model.dropout == 0.0
    assert model.num_layers == 1


def test_unknown_presets_and_wrong_families_are_refused():
    with pytest.raises(ValueError, match="Unknown gpt2 preset 'bert_tiny'"):
        kt.models.GPT2.from_preset("bert_tiny")
    with pytest.raises(ValueError, match="gpt2_medium, gpt2_small, gpt2_tiny"):
        kt.models.gpt2("gpt3")
    assert kt.models.Seq2Seq.presets() == ["seq2seq_base", "seq2seq_tiny"]
