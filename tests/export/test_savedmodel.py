"""Writing a SavedModel whole: a failed export leaves nothing behind, and an
existing path is only replaced with overwrite=True."""

import os

import pytest
import tensorflow as tf

import keras_transformer as kt

CORPUS = "abc"


@pytest.fixture(scope="module")
def model_and_tokenizer():
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary([CORPUS]))
    model = kt.models.gpt2(
        tokenizer.vocabulary_size(),
        num_layers=1,
        num_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
        max_sequence_length=8,
        dropout=0,
    )
    return model, tokenizer


def fake_save(marker, fail=False):
    """Stands in for tf.saved_model.save: writes one file, then maybe fails."""

    def save(module, export_dir, signatures=None, options=None):
        os.makedirs(export_dir)
        with open(os.path.join(export_dir, marker), "w") as f:
            f.write(marker)
        if fail:
            raise RuntimeError("disk full")

    return save


def export(model_and_tokenizer, path, **kwargs):
    model, tokenizer = model_and_tokenizer
    return kt.export.export_text_generator(model, tokenizer, path, **kwargs)


def test_a_failed_export_leaves_nothing(model_and_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(tf.saved_model, "save", fake_save("new", fail=True))
    with pytest.raises(RuntimeError, match="disk full"):
        export(model_and_tokenizer, tmp_path / "out" / "model")
    assert os.listdir(tmp_path / "out") == []
    # Replacing an export that fails keeps the old one as it was.
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "saved_model.pb").write_text("old")
    with pytest.raises(RuntimeError, match="disk full"):
        export(model_and_tokenizer, tmp_path / "old", overwrite=True)
    assert os.listdir(tmp_path / "old") == ["saved_model.pb"]
    assert sorted(os.listdir(tmp_path)) == ["old", "out"]


def test_existing_paths_need_overwrite(model_and_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(tf.saved_model, "save", fake_save("new"))
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "old").write_text("old")
    with pytest.raises(ValueError, match=f"overwrite=True.*path='{taken}'"):
        export(model_and_tokenizer, taken)
    assert os.listdir(taken) == ["old"]
    assert export(model_and_tokenizer, taken, overwrite=True) == str(taken)
    assert os.listdir(taken) == ["new"]
    (tmp_path / "empty").mkdir()  # an empty directory is free
    export(model_and_tokenizer, tmp_path / "empty")
    assert os.listdir(tmp_path / "empty") == ["new"]
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ValueError, match="path="):
        export(model_and_tokenizer, tmp_path / "file")
    export(model_and_tokenizer, tmp_path / "file", overwrite=True)
    assert os.listdir(tmp_path / "file") == ["new"]
    assert sorted(os.listdir(tmp_path)) == ["empty", "file", "taken"]
    with pytest.raises(ValueError, match="overwrite='yes'"):
        export(model_and_tokenizer, tmp_path / "x", overwrite="yes")
    with pytest.raises(ValueError, match="path=3"):
        export(model_and_tokenizer, 3)
