import hashlib
import os

import keras
import pytest

import keras_transformer as kt
from keras_transformer.text import files


def write(tmp_path, name, data):
    path = os.path.join(tmp_path, name)
    with open(path, "wb") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def values(dataset):
    return [
        tuple(v.decode() if isinstance(v, bytes) else int(v) for v in element)
        if isinstance(element, tuple)
        else element.decode()
        for element in dataset.as_numpy_iterator()
    ]


def test_load_text_streams_non_empty_lines(tmp_path):
    path = write(tmp_path, "a.txt", "First line\r\n\n   \nSecond, 東京\nlast")
    assert values(kt.text.load_text(path)) == ["First line", "Second, 東京", "last"]
    assert len(values(kt.text.load_text(path, skip_empty=False))) == 5


def test_load_text_pairs_reads_the_anki_format(tmp_path):
    path = write(
        tmp_path,
        "spa.txt",
        b"Go.\tVe.\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272\n"
        b"\nHi.\tHola.\r\nBad \xff byte.\tMal.\n",  # an invalid UTF-8 byte
    )
    assert values(kt.text.load_text_pairs(path)) == [
        ("Go.", "Ve."),
        ("Hi.", "Hola."),
        ("Bad \ufffd byte.", "Mal."),
    ]


def test_load_labeled_text(tmp_path):
    path = write(tmp_path, "l.tsv", "good movie\tpos\nbad movie\tneg\nok\tpos\n")
    dataset, class_names = kt.text.load_labeled_text(path)
    assert class_names == ["neg", "pos"]
    assert values(dataset) == [("good movie", 1), ("bad movie", 0), ("ok", 1)]
    dataset, _ = kt.text.load_labeled_text(path, class_names=["pos", "neg"])
    assert [label for _, label in values(dataset)] == [0, 1, 0]


def test_errors_name_the_file_and_line(tmp_path):
    path = write(tmp_path, "broken.tsv", "a\tb\n\nno tab here\n")
    with pytest.raises(
        ValueError, match=r"broken.tsv, line 3: expected 2 .*'no tab here'"
    ):
        kt.text.load_text_pairs(path)
    labeled = write(tmp_path, "labels.tsv", "a\tpos\nb\tmaybe\n")
    with pytest.raises(ValueError, match=r"labels.tsv, line 2: label 'maybe'"):
        kt.text.load_labeled_text(labeled, class_names=["neg", "pos"])
    for load in (kt.text.load_text, kt.text.load_text_pairs, kt.text.load_labeled_text):
        with pytest.raises(FileNotFoundError, match="missing.txt"):
            load(os.path.join(tmp_path, "missing.txt"))


def test_downloads_are_checksummed(monkeypatch, tmp_path):
    calls = []

    def fake_get_file(fname, origin, **kwargs):  # no network in tests
        calls.append((fname, origin, kwargs))
        return os.path.join(tmp_path, fname)

    monkeypatch.setattr(keras.utils, "get_file", fake_get_file)
    assert kt.text.download_tiny_shakespeare().endswith("tinyshakespeare.txt")
    assert kt.text.download_imdb_reviews().endswith(os.path.join("aclImdb"))
    (_, shakespeare_url, shakespeare), (_, imdb_url, imdb) = calls
    assert shakespeare["file_hash"] == files.TINY_SHAKESPEARE_SHA256
    assert imdb["file_hash"] == files.IMDB_SHA256 and imdb["extract"]
    assert shakespeare_url.startswith("https://") and imdb_url.startswith("https://")
    # The shared copy of Tiny Shakespeare, where present, is the same file.
    shared = os.path.join(
        os.path.dirname(__file__), "../../../shared/data/tinyshakespeare.txt"
    )
    if os.path.exists(shared):
        with open(shared, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        assert digest == files.TINY_SHAKESPEARE_SHA256
