"""The model classes: what the factories return, `.keras` files of 0.1, and
code that asks a model what it is by its class, never by layer names."""

import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from tests.fixtures.make_v0_1_models import SIZES, inputs
from tests.helpers import run_export_test, run_model_saving_test, to_numpy

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")


def tiny(family, **overrides):
    factory = getattr(kt.models, family)
    return factory(20, **SIZES, max_sequence_length=8, dropout=0.0, **overrides)


@pytest.mark.parametrize(
    "build, cls",
    [
        (lambda: tiny("gpt2"), kt.models.GPT2),
        (lambda: tiny("seq2seq"), kt.models.Seq2Seq),
        (lambda: tiny("bert"), kt.models.BERT),
        (lambda: kt.models.bert_masked_lm(tiny("bert")), kt.models.BERTMaskedLM),
        (lambda: kt.models.bert_classifier(tiny("bert"), 3), kt.models.BERTClassifier),
        (
            lambda: kt.models.bert_feature_extractor(tiny("bert")),
            kt.models.BERTFeatureExtractor,
        ),
        (lambda: kt.models.gpt2("gpt2_tiny", num_layers=1), kt.models.GPT2),
    ],
)
def test_factories_return_the_registered_classes(build, cls):
    model = build()
    assert type(model) is cls and isinstance(model, keras.Model)
    assert (
        keras.saving.get_registered_object(f"keras_transformer>{cls.__name__}") is cls
    )


def test_vocabulary_size_may_be_given_by_keyword():
    model = kt.models.bert(vocabulary_size=20, **SIZES, max_sequence_length=8)
    assert model.vocabulary_size == 20
    assert kt.models.gpt2(vocabulary_size="gpt2_tiny", num_layers=1).num_layers == 1


def test_arguments_after_vocabulary_size_are_keyword_only():
    with pytest.raises(TypeError):
        kt.models.gpt2(20, 1, 2, 8, 16)
    with pytest.raises(TypeError):
        kt.models.GPT2(20, 1, 2, 8, 16)


@pytest.mark.parametrize("name", ["gpt2", "seq2seq", "bert_classifier"])
def test_safe_mode_round_trip_keeps_class_and_outputs(name, tmp_path):
    model = {
        "gpt2": lambda: tiny("gpt2"),
        "seq2seq": lambda: tiny("seq2seq", target_vocabulary_size=12),
        "bert_classifier": lambda: kt.models.bert_classifier(tiny("bert"), 3),
    }[name]()
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path, safe_mode=True)
    assert type(restored) is type(model)
    assert restored.get_config() == model.get_config()
    keras.tree.map_structure(
        np.testing.assert_array_equal,
        keras.tree.map_structure(to_numpy, restored(inputs()[name])),
        keras.tree.map_structure(to_numpy, model(inputs()[name])),
    )


@pytest.mark.parametrize(
    "name, cls, config",
    [
        ("gpt2", kt.models.GPT2, {}),
        (
            "seq2seq",
            kt.models.Seq2Seq,
            # 0.1's seq2seq had the paper's embedding, since the default.
            {
                "target_vocabulary_size": 12,
                "tie_embeddings": True,
                "position": "sinusoidal",
                "scale_embeddings": True,
            },
        ),
        ("bert_classifier", None, {}),
    ],
)
def test_files_saved_by_0_1_load_with_identical_outputs(name, cls, config):
    expected = np.load(os.path.join(FIXTURES, "v0_1_outputs.npz"))[name]
    old = keras.saving.load_model(os.path.join(FIXTURES, f"v0_1_{name}.keras"))
    tokens = slice(None) if cls is None else slice(1, None)  # LMs: real tokens
    # Equal up to float32 rounding: since 0.1 the attention projections run
    # as one matrix product instead of per-projection einsums, which sums in
    # another order (differences ~2e-8 here). The language models' padding
    # logit (id 0) is -1e9 since then: it is out of the softmax.
    np.testing.assert_allclose(
        to_numpy(old(inputs()[name]))[..., tokens],
        expected[..., tokens],
        rtol=1e-5,
        atol=1e-6,
    )
    # Their weights move into the new classes in the same order (the
    # CHANGELOG's upgrade recipe), and generate/export work on the result.
    if cls is None:
        new = kt.models.BERTClassifier(tiny("bert"), 3)
    else:
        new = cls(20, **SIZES, max_sequence_length=8, dropout=0.0, **config)
    new.set_weights(old.get_weights())
    np.testing.assert_allclose(
        to_numpy(new(inputs()[name]))[..., tokens],
        expected[..., tokens],
        rtol=1e-5,
        atol=1e-6,
    )


def test_generation_and_export_ignore_layer_names(tmp_path):
    model = tiny("gpt2")
    expected = kt.generation.generate(model, np.array([[5, 6]]), 3)
    for i, layer in enumerate(model.layers):
        layer.name = f"renamed_{i}"  # nothing outside models/ may care
    assert kt.generation.generate(model, np.array([[5, 6]]), 3).tolist() == (
        expected.tolist()
    )
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(["abcdef"]))
    path = kt.export.export_text_generator(
        model, tokenizer, tmp_path / "g", end_token=None
    )
    request = {
        "prompts": ["abc"],
        "max_new_tokens": np.int32(3),
        "temperature": np.float32(0.0),
    }
    _, [served] = run_export_test(path, [("generate", request)], tmp_path)
    prompt = np.array(tokenizer(["abc"]).to_list())
    expected = kt.generation.generate(model, prompt, 3)  # the renamed model
    np.testing.assert_array_equal(served["token_ids"][:, :6], expected)
    assert not served["token_ids"][:, 6:].any()
    assert served["text"].tolist() == tokenizer.detokenize(expected).numpy().tolist()


def test_bert_heads_share_the_backbone_layers_and_round_trip(tmp_path):
    backbone = tiny("bert")
    head = kt.models.bert_masked_lm(backbone)
    assert head.backbone is backbone
    # + transform Dense, LayerNorm, and the bias per token (vocabulary 20)
    assert head.count_params() == backbone.count_params() + (8 * 8 + 8) + 2 * 8 + 20
    batch = {**inputs()["bert_classifier"], "mask_positions": np.array([[1], [0]])}
    restored = run_model_saving_test(head, batch, tmp_path)
    assert type(restored) is kt.models.BERTMaskedLM
    with pytest.raises(ValueError, match="backbone="):
        kt.models.BERTClassifier(tiny("gpt2"), 2)


def test_gpt2_activation_and_layer_norm_epsilon_are_constructor_arguments(tmp_path):
    from tests.helpers import np_gelu_tanh

    x = np.linspace(-4, 4, 17).astype("float32")
    np.testing.assert_allclose(
        to_numpy(kt.layers.gelu_approximate(x)), np_gelu_tanh(x), atol=1e-6
    )
    sizes = dict(num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16)
    model = kt.models.GPT2(
        20, **sizes, max_sequence_length=8, activation="gelu_approximate",
        layer_norm_epsilon=1e-3,
    )  # fmt: skip
    assert model.blocks[0].activation is kt.layers.gelu_approximate
    assert model.final_layer_norm.epsilon == 1e-3
    ids = np.array([[3, 4, 5]])
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert (loaded.activation, loaded.layer_norm_epsilon) == ("gelu_approximate", 1e-3)
    np.testing.assert_array_equal(to_numpy(loaded(ids)), to_numpy(model(ids)))
    exact = kt.models.GPT2(20, **sizes, max_sequence_length=8)
    exact.set_weights(model.get_weights())
    assert not np.allclose(to_numpy(exact(ids)), to_numpy(model(ids)), atol=1e-6)
    with pytest.raises(ValueError, match="activation.*Received: activation='relu'"):
        kt.models.GPT2(20, **sizes, activation="relu")
