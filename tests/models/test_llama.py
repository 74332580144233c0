import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.models.decoding import empty_caches
from tests.helpers import run_model_saving_test, to_numpy

VOCAB = 40
PROMPTS = np.array(
    [[5, 6, 7, 0, 0, 0, 0], [8, 9, 10, 11, 12, 13, 14], [15, 0, 0, 0, 0, 0, 0]]
)
VARIANTS = {
    "gqa": {},
    "mqa_qkv_bias_tied": {"num_key_value_heads": 1, "attention_bias": "qkv",
                          "tie_word_embeddings": True},
    "window_4": {"sliding_window": 4},
    "llama3_head_dim_8": {"head_dim": 8, "attention_bias": True, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
}  # fmt: skip


def spread(model, scale=0.3, seed=0):
    """Random weights large enough that greedy tokens have no near-ties;
    RMS scales stay 1."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if not weight.path.endswith("scale"):
            weight.assign(rng.normal(size=weight.shape).astype("float32") * scale)
    return model


def tiny_llama(seed=0, **kwargs):
    args = dict(num_layers=2, num_heads=4, num_key_value_heads=2, hidden_dim=16,
                intermediate_dim=32, max_sequence_length=48)  # fmt: skip
    args.update(kwargs)
    return spread(kt.models.llama(VOCAB, **args), seed=seed)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request):
    return request.param, tiny_llama(**VARIANTS[request.param])


def test_cached_generation_equals_uncached(variant):
    _, model = variant
    cached = kt.generation.generate(model, PROMPTS, max_new_tokens=10)
    uncached = kt.generation.generate(
        model, PROMPTS, max_new_tokens=10, use_cache=False
    )
    np.testing.assert_array_equal(cached, uncached)
    assert cached.shape == (3, 17)
    np.testing.assert_array_equal(cached[1, :7], PROMPTS[1])
    assert len(np.unique(cached[:, 7:])) > 3  # not a degenerate constant


def test_greedy_is_the_argmax_of_the_full_forward_pass(variant):
    _, model = variant
    out = kt.generation.generate(model, PROMPTS[1:2], max_new_tokens=4)
    tokens = PROMPTS[1:2]
    for _ in range(4):
        logits = to_numpy(model(tokens))[:, -1]
        tokens = np.concatenate([tokens, logits.argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(out, tokens)


def test_future_tokens_and_padding_never_change_earlier_logits(variant):
    _, model = variant
    ids = np.array([[3, 4, 5, 6, 7, 8]])
    logits = to_numpy(model(ids))
    changed = to_numpy(model(np.array([[3, 4, 5, 9, 10, 11]])))
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-5)
    padded = to_numpy(model(np.array([[3, 4, 5, 0, 0, 0]])))
    np.testing.assert_allclose(padded[:, :3], logits[:, :3], atol=1e-5)
    assert logits.dtype == "float32" and logits.shape == (1, 6, VOCAB)
    np.testing.assert_array_equal(logits[..., 0], -1e9)  # padding is no token


# Two variants cover what the cached chunk writes depend on (the window, the
# shared key/value head, biases and tied logits) at half the compile time.
@pytest.mark.parametrize("name", ["mqa_qkv_bias_tied", "window_4"])
def test_samplers_and_speculative_decoding_run_on_the_cache(name):
    model = tiny_llama(**VARIANTS[name])
    greedy = kt.generation.generate(model, PROMPTS, max_new_tokens=8)
    # Draft and prompt-lookup decoding write chunks through chunk_logits.
    draft = tiny_llama(seed=1, num_layers=1, **VARIANTS[name])
    for options in [{"draft_model": draft, "num_speculative_tokens": 3},
                    {"draft_model": model, "num_speculative_tokens": 2},
                    {"prompt_lookup_num_tokens": 3}]:  # fmt: skip
        np.testing.assert_array_equal(
            kt.generation.generate(model, PROMPTS, max_new_tokens=8, **options), greedy
        )
    for sampler, options in [("top_k", {"top_k": 5}), ("top_p", {"top_p": 0.9})]:
        runs = [
            kt.generation.generate(
                model,
                PROMPTS,
                8,
                sampler=sampler,
                seed=3,
                use_cache=use_cache,
                **options,
            )  # fmt: skip
            for use_cache in (True, False)
        ]
        np.testing.assert_array_equal(*runs)
    beams = [
        kt.generation.generate(
            model, PROMPTS, 6, sampler="beam", num_beams=3, use_cache=use_cache
        )  # fmt: skip
        for use_cache in (True, False)
    ]
    np.testing.assert_array_equal(*beams)
    assert beams[0].shape == (3, 13)


def test_sliding_window_cache_equals_full_pass_beyond_the_window():
    # A 12-token prompt, window 4: the cached logits of every position equal
    # the full pass's, and past the window they differ from a model that
    # sees the whole prefix.
    windowed = tiny_llama(sliding_window=4)
    full = tiny_llama()
    full.set_weights(windowed.get_weights())
    ids = np.arange(1, 13)[None] % (VOCAB - 1) + 1
    expected = to_numpy(windowed(ids))
    state = windowed.start_decoding(np.zeros((1, 12), "int32"), None, True)
    logits, state = windowed.chunk_logits(ids[:, :5], state, 0)
    steps = [to_numpy(logits)]
    for i in range(5, 12):
        logits, state = windowed.chunk_logits(ids[:, i : i + 1], state, i)
        steps.append(to_numpy(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), expected, atol=1e-4)
    unwindowed = to_numpy(full(ids))
    np.testing.assert_allclose(unwindowed[:, :4], expected[:, :4], atol=1e-5)
    assert np.abs(unwindowed[:, 4:] - expected[:, 4:]).max() > 1e-2


def test_cache_holds_only_the_key_value_heads():
    model = tiny_llama(num_heads=4, num_key_value_heads=1, head_dim=6)
    caches = empty_caches(model.blocks, np.zeros((3, 9), "int32"))
    assert [tuple(cache.shape) for cache in caches] == [(3, 2, 9, 1, 6)] * 2
    state = model.start_decoding(np.zeros((3, 9), "int32"), None, True)
    assert [tuple(cache.shape) for cache in state] == [(3, 2, 9, 1, 6)] * 2


@pytest.mark.parametrize("tie", [False, True])
def test_save_load_identical_logits_and_heads(tmp_path, tie):
    model = tiny_llama(tie_word_embeddings=tie, attention_bias="qkv", sliding_window=3)
    ids = np.array([[1, 2, 3, 4, 5, 0]])
    restored = run_model_saving_test(model, ids, tmp_path)
    assert restored.get_config() == model.get_config()
    # Embedding rows are the checkpoint's: our id i reads row i - 1.
    table = to_numpy(model.token_embedding.embeddings)
    assert table.shape == (VOCAB - 1, 16)
    probe = keras.Model(model.input, [model.final_norm.output, model.output])
    hidden, logits = (to_numpy(t) for t in probe(ids))
    head = table.T if tie else to_numpy(model.lm_head.kernel)
    assert (model.lm_head is None) == tie
    np.testing.assert_allclose(logits[..., 1:], hidden @ head, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"tie_word_embeddings": True},
        {"num_key_value_heads": 1, "attention_bias": "qkv"},
        {"num_key_value_heads": 4, "attention_bias": True, "head_dim": 6},
        {"num_key_value_heads": 2, "head_dim": 8, "tie_word_embeddings": True,
         "attention_bias": "qkv"},
    ],
)  # fmt: skip
def test_parameter_count_equals_count_params_of_built_models(config):
    args = dict(num_layers=2, num_heads=4, num_key_value_heads=2, hidden_dim=16,
                intermediate_dim=24)  # fmt: skip
    args.update(config)
    model = kt.models.Llama(VOCAB, **args)
    assert kt.models.Llama.parameter_count(VOCAB, **args) == model.count_params()


PUBLISHED = {  # transformers' counts for these checkpoints' configs
    "smollm2_135m": 134_515_008,
    "qwen2_5_0_5b": 494_032_768,
    "tinyllama_1_1b": 1_100_048_384,
    "llama3_2_1b": 1_235_814_400,
    "mistral_7b": 7_241_732_096,
}


def test_presets_count_the_published_parameters_without_weights():
    assert set(kt.models.Llama.presets()) == {*PUBLISHED, "llama_tiny"}
    for name, count in PUBLISHED.items():
        preset = kt.models.PRESETS[name]
        assert kt.models.Llama.parameter_count(**preset["config"]) == count, name
        assert preset["parameters"] == count
    tiny = kt.models.llama("llama_tiny")
    assert isinstance(tiny, kt.models.Llama)
    assert tiny.count_params() == kt.models.PRESETS["llama_tiny"]["parameters"]
    assert tiny.count_params() == kt.models.Llama.parameter_count(
        **kt.models.PRESETS["llama_tiny"]["config"]
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"vocabulary_size": 1}, "vocabulary_size=1"),
        ({"num_heads": 4, "num_key_value_heads": 3},
         "num_heads=4, num_key_value_heads=3"),
        ({"hidden_dim": 18}, "hidden_dim=18, num_heads=4"),
        ({"head_dim": 7}, "head_dim=7"),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "'dynamic'"),
        ({"sliding_window": -2}, "sliding_window=-2"),
        ({"attention_bias": "qk"}, "attention_bias='qk'"),
        ({"tie_word_embeddings": 1}, "tie_word_embeddings=1"),
        ({"layer_norm_epsilon": 0.0}, "layer_norm_epsilon=0.0"),
        ({"dropout": 1.0}, "dropout=1.0"),
        ({"num_layers": None}, "num_layers=None"),
    ],
)  # fmt: skip
def test_bad_arguments(kwargs, message):
    args = dict(vocabulary_size=VOCAB, num_layers=1, num_heads=4, num_key_value_heads=2,
                hidden_dim=16, intermediate_dim=32)  # fmt: skip
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        kt.models.llama(**args)


def test_unknown_preset_and_bad_generation_inputs():
    with pytest.raises(
        ValueError, match="Unknown llama preset 'llama_huge'.*mistral_7b"
    ):
        kt.models.llama("llama_huge")
    model = tiny_llama()
    with pytest.raises(ValueError, match="token id 40"):
        kt.generation.generate(model, np.array([[3, 40]]), max_new_tokens=2)
    with pytest.raises(ValueError, match="max_sequence_length"):
        kt.generation.generate(model, PROMPTS, max_new_tokens=48)
