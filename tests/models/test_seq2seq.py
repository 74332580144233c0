import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.models.decoding import Seq2SeqState
from tests.helpers import np_layer_norm, run_model_saving_test, to_numpy

VOCAB, START, END = 14, 1, 2


def tiny_seq2seq(**kwargs):
    args = dict(num_layers=2, num_heads=4, hidden_dim=64, intermediate_dim=128,
                max_sequence_length=12, dropout=0.0)  # fmt: skip
    args.update(kwargs)
    return kt.models.seq2seq(VOCAB, **args)


def reversal_data(num, length=6, seed=0):
    source = np.random.default_rng(seed).integers(3, VOCAB, (num, length))
    target = source[:, ::-1]
    decoder_in = np.concatenate([np.full((num, 1), START), target], axis=1)
    labels = np.concatenate([target, np.full((num, 1), END)], axis=1)
    features = {"encoder_token_ids": source, "decoder_token_ids": decoder_in}
    return {k: v.astype("int32") for k, v in features.items()}, labels.astype("int32")


@pytest.mark.slow
def test_seq2seq_learns_to_reverse_sequences():
    keras.utils.set_random_seed(0)
    model = tiny_seq2seq()
    model.compile(
        optimizer=keras.optimizers.Adam(kt.training.TransformerSchedule(64, 200)),
        loss=kt.training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.05),
        metrics=[kt.training.MaskedAccuracy()],
    )
    x, y = reversal_data(8192)
    model.fit(x, y, batch_size=64, epochs=6, verbose=0)
    test_x, test_y = reversal_data(512, seed=1)
    predictions = np.argmax(to_numpy(model.predict(test_x, verbose=0)), axis=-1)
    assert np.mean(predictions == test_y) >= 0.99


def test_padding_and_causality_at_model_level():
    model = tiny_seq2seq(dropout=0.1)
    x, _ = reversal_data(1)
    logits = to_numpy(model(x))
    padded = {
        "encoder_token_ids": np.concatenate([x["encoder_token_ids"], [[0, 0]]], 1),
        "decoder_token_ids": x["decoder_token_ids"],
    }
    np.testing.assert_allclose(to_numpy(model(padded)), logits, atol=1e-5)
    future = {**x, "decoder_token_ids": x["decoder_token_ids"].copy()}
    future["decoder_token_ids"][0, 4:] = 3
    np.testing.assert_allclose(to_numpy(model(future))[:, :4], logits[:, :4], atol=1e-5)


def hidden_and_logits(model, x):
    """The last decoder block's output `(B, T, E)` and the model's logits."""
    probe = keras.Model(model.input, [model.decoder_blocks[-1].output, model.output])
    return [to_numpy(t) for t in probe(x)]


@pytest.mark.parametrize(
    "target_vocabulary_size, tie_embeddings, tied",
    [
        (None, None, True),  # shared vocabulary: tied, as in the paper
        (9, None, False),  # own target vocabulary: untied by default
        (9, True, True),  # explicit overrides win
        (None, False, False),
    ],
)
def test_output_projection_default_and_round_trip(
    tmp_path, target_vocabulary_size, tie_embeddings, tied
):
    model = tiny_seq2seq(
        target_vocabulary_size=target_vocabulary_size, tie_embeddings=tie_embeddings
    )
    x, _ = reversal_data(2)
    x["decoder_token_ids"] = np.minimum(x["decoder_token_ids"], 8)
    hidden, logits = hidden_and_logits(model, x)
    assert logits.shape == (2, 7, target_vocabulary_size or VOCAB)
    table = to_numpy(model.decoder_embeddings.token_embedding.embeddings)
    through_embedding = hidden @ table.T  # (B, T, V): logits = h · Eᵀ
    # Padding (id 0) is no token: its logit is out of the softmax.
    np.testing.assert_array_equal(logits[..., 0], -1e9)
    logits, through_embedding = logits[..., 1:], through_embedding[..., 1:]
    if tied:
        np.testing.assert_allclose(logits, through_embedding, rtol=1e-4, atol=1e-4)
        assert model.output_dense is None
    else:
        kernel, bias = (to_numpy(w)[..., 1:] for w in model.output_dense.weights)
        np.testing.assert_allclose(logits, hidden @ kernel + bias, rtol=1e-4, atol=1e-4)
        assert not np.allclose(logits, through_embedding, atol=1e-2)
    shared = target_vocabulary_size is None
    # A shared vocabulary has one token table (with learned positions, each
    # side keeps its own position table).
    same = model.encoder_embeddings.token_embedding is (
        model.decoder_embeddings.token_embedding
    )
    assert same == shared
    restored = run_model_saving_test(model, x, tmp_path)
    assert (restored.output_dense is None) == tied


def test_bad_arguments():
    with pytest.raises(ValueError, match="Unknown seq2seq preset"):
        kt.models.seq2seq("transformer_huge")
    with pytest.raises(ValueError, match="vocabulary_size=1"):
        tiny_seq2seq(target_vocabulary_size=1)


def small(**kwargs):
    args = dict(num_layers=1, num_heads=2, hidden_dim=8, intermediate_dim=16,
                max_sequence_length=10, dropout=0.0)  # fmt: skip
    return kt.models.seq2seq(VOCAB, **{**args, **kwargs})


SOURCE = np.array([[4, 5, 6, 0], [7, 8, 9, 10]])
DECODER = np.array([[START, 5, 6], [START, 9, 8]])
INPUTS = {"encoder_token_ids": SOURCE, "decoder_token_ids": DECODER}


def test_pretrained_options_change_what_they_say(tmp_path):
    model = small(
        num_layers=2,
        num_decoder_layers=1,
        activation="gelu",
        layer_norm_epsilon=1e-5,
        position="learned",
        position_offset=2,
        scale_embeddings=False,
        embedding_layer_norm=True,
        logits_bias=True,
        decoder_start_token_id=START,
        generation_config={"end_token_id": END, "max_new_tokens": 4},
    )
    assert (len(model.encoder_blocks), len(model.decoder_blocks)) == (2, 1)
    block = model.decoder_blocks[0]
    assert block.activation is keras.activations.gelu
    assert block.feedforward_layer_norm.epsilon == 1e-5
    assert model.encoder_embeddings_layer_norm.epsilon == 1e-5
    # One token table, a position table each (offset rows included).
    embeddings = model.encoder_embeddings, model.decoder_embeddings
    assert embeddings[0].token_embedding is embeddings[1].token_embedding
    assert embeddings[0].position_embeddings is not embeddings[1].position_embeddings
    assert tuple(embeddings[1].position_embeddings.shape) == (10 + 2, 8)
    # The logits bias is added to every position's logits.
    before = to_numpy(model(INPUTS))
    bias = np.arange(VOCAB, dtype="float32")
    model.output_bias.bias.assign(bias)
    np.testing.assert_allclose(to_numpy(model(INPUTS)), before + bias, atol=1e-5)
    # Without decoder ids, generate starts each row from the start token.
    tokens = kt.generation.generate(
        model, {"encoder_token_ids": SOURCE}, **model.generation_config
    )
    assert tokens.shape == (2, 5) and (tokens[:, 0] == START).all()
    again = run_model_saving_test(model, INPUTS, tmp_path)
    assert again.generation_config == model.generation_config
    assert again.decoder_start_token_id == START
    shared = again.encoder_embeddings.token_embedding
    assert shared is again.decoder_embeddings.token_embedding


def test_embedding_layer_norm_normalizes_what_the_encoder_blocks_see():
    model = small(embedding_layer_norm=True)
    norm = model.encoder_embeddings_layer_norm
    rng = np.random.default_rng(0)
    gamma, beta = rng.normal(size=(2, norm.gamma.shape[0])).astype("float32")
    norm.set_weights([gamma, beta])
    # What the first encoder block receives, in the model's own graph.
    probe = keras.Model(model.input["encoder_token_ids"], model.encoder_blocks[0].input)
    raw = to_numpy(model.encoder_embeddings(SOURCE))
    expected = np_layer_norm(raw, gamma, beta, norm.epsilon)  # numpy, not Keras
    np.testing.assert_allclose(to_numpy(probe(SOURCE)), expected, atol=1e-5)


def test_bad_pretrained_options():
    with pytest.raises(ValueError, match="decoder_start_token_id=0"):
        small(decoder_start_token_id=0)
    with pytest.raises(ValueError, match="generation_config"):
        small(generation_config=[("end_token_id", 2)])
    with pytest.raises(ValueError, match="position_offset"):
        small(position="sinusoidal", position_offset=2)  # sinusoids: no offset
    with pytest.raises(ValueError, match="sinusoidal_layout"):
        small(sinusoidal_layout="shuffled")
    with pytest.raises(ValueError, match="num_decoder_layers"):
        small(num_decoder_layers=0)
    with pytest.raises(ValueError, match="'encoder_token_ids' alone"):
        kt.generation.generate(small(), {"encoder_token_ids": SOURCE}, 3)


def test_decoding_state_is_named_and_the_source_hooks_take_ids():
    model = small()
    source = np.asarray(model.pad_source(SOURCE, 32))  # capped at the model's 10
    assert source.dtype == np.int32
    np.testing.assert_array_equal(source, np.pad(SOURCE, [(0, 0), (0, 6)]))
    tokens = np.pad(DECODER, [(0, 0), (0, 7)]).astype("int32")  # (B, L=10)
    state = model.start_decoding(tokens, source, use_cache=True)
    assert isinstance(state, Seq2SeqState) and state.context == ()
    np.testing.assert_array_equal(state.context_mask, source != 0)
    varying, fixed = model.split_decoding_state(state)
    assert varying is state.caches and len(varying) == len(fixed.cross_caches) == 1
    # A cached step at index 3 reads position 2: the model's last logits.
    logits, state = model.next_logits(tokens, state, 3, use_cache=True)
    assert isinstance(state, Seq2SeqState)
    np.testing.assert_allclose(
        to_numpy(logits), to_numpy(model(INPUTS))[:, 2], atol=1e-5
    )
    uncached = model.start_decoding(tokens, source, use_cache=False)
    assert uncached.caches == uncached.cross_caches == ()
    with pytest.raises(ValueError, match=r"has length 11, beyond .* \(10\)"):
        kt.generation.generate(
            model, {**INPUTS, "encoder_token_ids": np.ones((2, 11), "int32")}, 2
        )
