import gzip
import hashlib
import os
import pathlib
import tarfile

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


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def serve(monkeypatch, url_name, path):
    """Points the download URL `files.<url_name>` at a local file (no network)."""
    monkeypatch.setattr(files, url_name, pathlib.Path(path).as_uri())


def cache_dir(tmp_path):
    # It must exist: keras.utils.get_file silently falls back to /tmp/.keras
    # for a cache_dir it cannot write to, a missing one included.
    cache = tmp_path / "cache"
    cache.mkdir()
    return cache


def test_tiny_shakespeare_download_is_verified(monkeypatch, tmp_path):
    serve(monkeypatch, "TINY_SHAKESPEARE_URL", write(tmp_path, "bad.txt", "Not it."))
    cache = cache_dir(tmp_path)
    with pytest.raises(ValueError, match=f"sha256.*{files.TINY_SHAKESPEARE_SHA256}"):
        kt.text.download_tiny_shakespeare(cache_dir=cache)
    # A file whose digest is the pinned one goes through.
    good = write(tmp_path, "good.txt", "First Citizen:\nBefore we proceed")
    serve(monkeypatch, "TINY_SHAKESPEARE_URL", good)
    monkeypatch.setattr(files, "TINY_SHAKESPEARE_SHA256", sha256(good))
    path = kt.text.download_tiny_shakespeare(cache_dir=cache)
    assert path.startswith(str(cache)) and sha256(path) == sha256(good)


def test_a_download_with_a_wrong_digest_leaves_nothing_behind(monkeypatch, tmp_path):
    serve(monkeypatch, "TINY_SHAKESPEARE_URL", write(tmp_path, "bad.txt", "Not it."))
    with pytest.raises(ValueError, match="sha256"):
        kt.text.download_tiny_shakespeare(cache_dir=cache_dir(tmp_path))
    assert os.listdir(tmp_path / "cache" / "datasets") == []


def test_a_missing_cache_dir_is_refused(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="cache_dir=.*nowhere"):
        kt.text.download_tiny_shakespeare(cache_dir=missing)
    assert not missing.exists()


def test_imdb_download_is_verified_before_it_is_extracted(monkeypatch, tmp_path):
    review = tmp_path / "aclImdb" / "train" / "pos" / "0_9.txt"
    review.parent.mkdir(parents=True)
    review.write_text("A fine film.")
    archive = tmp_path / "imdb.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "aclImdb", arcname="aclImdb")
    serve(monkeypatch, "IMDB_URL", archive)
    cache = cache_dir(tmp_path)
    with pytest.raises(ValueError, match=f"sha256.*{files.IMDB_SHA256}"):
        kt.text.download_imdb_reviews(cache_dir=cache)
    assert not any(
        name.endswith("_extracted") for name in os.listdir(cache / "datasets")
    )
    monkeypatch.setattr(files, "IMDB_SHA256", sha256(archive))
    path = kt.text.download_imdb_reviews(cache_dir=cache)
    assert path.startswith(str(cache)) and os.path.basename(path) == "aclImdb"
    with open(os.path.join(path, "train", "pos", "0_9.txt")) as f:
        assert f.read() == "A fine film."


PACKAGED = pathlib.Path(kt.__file__).parent / "cli" / "data" / "tinyshakespeare.txt.gz"


def test_the_pinned_digest_is_the_packaged_tiny_shakespeare():
    # The corpus shipped with the package is the pinned download, byte for byte.
    text = gzip.decompress(PACKAGED.read_bytes())
    assert hashlib.sha256(text).hexdigest() == files.TINY_SHAKESPEARE_SHA256
    assert files.TINY_SHAKESPEARE_URL.startswith("https://")
    assert files.IMDB_URL.startswith("https://")


def test_read_tsv_rows_skipped_lines_and_errors(tmp_path):
    path = write(tmp_path, "a.tsv", "a\tb\r\n\n  \nc\td\te\n" + "x" * 9 + "\tlong\n")
    assert kt.text.read_tsv(path) == (
        [(1, ["a", "b"]), (4, ["c", "d", "e"]), (5, ["x" * 9, "long"])],
        0,
    )
    # Over-long lines are left out and counted, never cut.
    assert kt.text.read_tsv(path, max_line_characters=13) == (
        [(1, ["a", "b"]), (4, ["c", "d", "e"])],
        1,
    )
    with pytest.raises(ValueError, match="line 1: expected 3 tab-separated"):
        kt.text.read_tsv(path, columns=3)
    with pytest.raises(FileNotFoundError, match="missing.tsv"):
        kt.text.read_tsv(tmp_path / "missing.tsv")
