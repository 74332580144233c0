import json
import os

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import run_model_saving_test, to_numpy

VOCAB = 40
HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
# 12-token prompts, longer than the window of 4: local layers forget.
PROMPTS = np.array(
    [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], [8, 9, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0]]
)
LAYERS = ["sliding_attention", "full_attention", "sliding_attention"]


def tiny_gemma3(seed=0, **kwargs):
    """Random weights large enough that greedy tokens have no near-ties;
    the zero-centred RMS scales random too."""
    args = dict(num_layers=3, num_heads=4, num_key_value_heads=2, hidden_dim=16,
                intermediate_dim=32, head_dim=8, max_sequence_length=48,
                sliding_window=4, layer_types=LAYERS, local_rope_theta=100.0,
                rope_theta=10000.0, query_pre_attn_scalar=12)  # fmt: skip
    args.update(kwargs)
    model = kt.models.gemma3(VOCAB, **args)
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.3)
    return model


@pytest.fixture(scope="module")
def model():
    return tiny_gemma3()


def test_cached_generation_equals_uncached_past_the_window(model):
    cached = kt.generation.generate(model, PROMPTS, max_new_tokens=10)
    uncached = kt.generation.generate(
        model, PROMPTS, max_new_tokens=10, use_cache=False
    )
    np.testing.assert_array_equal(cached, uncached)
    assert cached.shape == (2, 22)
    assert len(np.unique(cached[:, 12:])) > 3  # not a degenerate constant


def test_cached_chunks_equal_the_full_pass_and_the_window_matters(model):
    ids = PROMPTS[:1]
    expected = to_numpy(model(ids))
    state = model.start_decoding(np.zeros((1, 12), "int32"), None, True)
    logits, state = model.chunk_logits(ids[:, :5], state, 0)
    steps = [to_numpy(logits)]
    for i in range(5, 12):
        logits, state = model.chunk_logits(ids[:, i : i + 1], state, i)
        steps.append(to_numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), expected, atol=1e-4)
    # With a window as long as the prompt, positions past 4 differ.
    unwindowed = tiny_gemma3(sliding_window=12)
    unwindowed.set_weights(model.get_weights())
    other = to_numpy(unwindowed(ids))
    np.testing.assert_allclose(other[:, :4], expected[:, :4], atol=1e-5)
    assert np.abs(other[:, 4:] - expected[:, 4:]).max() > 1e-2


def test_future_tokens_and_padding_never_change_earlier_logits(model):
    ids = np.array([[3, 4, 5, 6, 7, 8]])
    logits = to_numpy(model(ids))
    changed = to_numpy(model(np.array([[3, 4, 5, 9, 10, 11]])))
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-5)
    padded = to_numpy(model(np.array([[3, 4, 5, 0, 0, 0]])))
    np.testing.assert_allclose(padded[:, :3], logits[:, :3], atol=1e-5)
    assert logits.dtype == "float32" and logits.shape == (1, 6, VOCAB)
    np.testing.assert_array_equal(logits[..., 0], -1e9)


def test_blocks_follow_the_layer_types(model):
    windows = [block.attention.sliding_window for block in model.blocks]
    thetas = [block.attention.rope_theta for block in model.blocks]
    assert windows == [4, None, 4] and thetas == [100.0, 10000.0, 100.0]
    assert [b.attention.scale for b in model.blocks] == [12**-0.5] * 3
    default = kt.models.gemma3(VOCAB, num_layers=7, num_heads=1, hidden_dim=8,
                               intermediate_dim=8, head_dim=4)  # fmt: skip
    globals_ = [b.attention.sliding_window is None for b in default.blocks]
    assert globals_ == [False] * 5 + [True, False]  # every sixth, as transformers


def test_save_load_identical_logits(model, tmp_path):
    restored = run_model_saving_test(model, PROMPTS, tmp_path)
    assert restored.get_config() == model.get_config()
    assert isinstance(restored, kt.models.Gemma3)


def test_parameter_count_equals_count_params_and_transformers():
    model = tiny_gemma3()
    config = {k: v for k, v in model.get_config().items() if k != "vocabulary_size"}
    assert kt.models.Gemma3.parameter_count(VOCAB, **config) == model.count_params()
    with open(os.path.join(HF, "gemma3_parameter_counts.json"), encoding="utf-8") as f:
        counts = json.load(f)  # transformers' counts, on the meta device
    assert set(kt.models.Gemma3.presets()) == set(counts)
    for name, count in counts.items():
        preset = kt.models.PRESETS[name]
        assert kt.models.Gemma3.parameter_count(**preset["config"]) == count, name
        assert preset["parameters"] == count


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"vocabulary_size": 1}, "vocabulary_size=1"),
        ({"num_heads": 4, "num_key_value_heads": 3},
         "num_heads=4, num_key_value_heads=3"),
        ({"head_dim": 7}, "head_dim must be even|head_dim=7"),
        ({"sliding_window": 0}, "sliding_window=0"),
        ({"layer_types": ["full_attention"]}, "layer_types="),
        ({"layer_types": ["global"] * 3}, "layer_types="),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, "'yarn'"),
        ({"query_pre_attn_scalar": 0}, "query_pre_attn_scalar=0"),
        ({"layer_norm_epsilon": 0.0}, "layer_norm_epsilon=0.0"),
        ({"dropout": 1.0}, "dropout=1.0"),
    ],
)  # fmt: skip
def test_bad_arguments(kwargs, message):
    args = dict(vocabulary_size=VOCAB, num_layers=3, num_heads=4, hidden_dim=16,
                intermediate_dim=32, head_dim=8)  # fmt: skip
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        kt.models.gemma3(**args)
