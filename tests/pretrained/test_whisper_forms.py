"""Whisper folders in the forms other than whisper_tiny_random's: the hub's
older tokenizer files and faster-whisper's tokenizer.json (no timestamp
tokens: the ids after `<|notimestamps|>` are the timestamps), the
English-only `.en` layout (GPT-2's vocabulary, 51,864 ids) and large-v3's
(`<|yue|>`, 51,866 ids, 128 mel bins), against transformers' ids, decodes
and generations of each folder as it reloads it (committed references made
by tests/fixtures/hf/make_whisper_fixtures.py, `make_forms`)."""

import gzip
import json
import os
import shutil

import pytest

import keras_transformer as kt

HF = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "hf")
FORMS = os.path.join(HF, "whisper_forms")
AUDIO = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures", "audio")
CLIPS = [os.path.join(AUDIO, f"speech_{i}.wav") for i in range(3)]
NAMES = ["hub_2022", "faster_whisper", "tiny_en", "large_v3"]
WITHOUT_TIMESTAMPS = ["hub_2022", "faster_whisper", "tiny_en"]
MODELS = ["tiny_en", "large_v3"]

with open(os.path.join(FORMS, "reference.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)


def assemble(name, path):
    """The folder of form `name` in `path`: its own files and the shared
    vocabulary (faster-whisper's tokenizer.json gets it as its model's
    `vocab` and `merges`)."""
    shutil.copytree(os.path.join(FORMS, name), path, dirs_exist_ok=True)
    os.remove(os.path.join(path, "shared.json"))
    with open(os.path.join(FORMS, name, "shared.json")) as f:
        kind = json.load(f)["vocabulary"]
    files = {}
    for file, source in REFERENCE["shared"][kind].items():
        opener = gzip.open if source.endswith(".gz") else open
        with opener(os.path.join(HF, source), "rt", encoding="utf-8") as f:
            files[file] = f.read()
    if name != "faster_whisper":
        for file, text in files.items():
            with open(os.path.join(path, file), "w", encoding="utf-8") as f:
                f.write(text)
        return path
    with open(os.path.join(path, "tokenizer.json"), encoding="utf-8") as f:
        data = json.load(f)
    data["model"]["vocab"] = json.loads(files["vocab.json"])
    data["model"]["merges"] = files["merges.txt"].splitlines()[1:]
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper_forms")
    return {name: assemble(name, str(root / name)) for name in NAMES}


def ours(ids):
    return [[i + 1 for i in row] for row in ids]


@pytest.mark.parametrize("name", NAMES)
def test_ids_and_special_ids_equal_transformers(folders, name):
    ref = REFERENCE[name]
    tokenizer = kt.text.tokenizer_from_pretrained(folders[name])
    assert isinstance(tokenizer, kt.text.WhisperTokenizer)
    texts = [case["text"] for case in ref["tokens"]]
    assert tokenizer(texts).to_list() == ours(c["ids"] for c in ref["tokens"])
    for token, id in ref["special_ids"].items():
        assert tokenizer.token_to_id(token) == id + 1, token


@pytest.mark.parametrize("name", NAMES)
def test_decodes_equal_transformers(folders, name):
    """With and without special tokens and timestamps; ids past
    `<|notimestamps|>` are written as timestamps (up to `<|30.00|>`)."""
    tokenizer = kt.text.tokenizer_from_pretrained(folders[name])
    for case in REFERENCE[name]["decoded"]:
        text = tokenizer.detokenize(
            ours([case["ids"]]),
            skip_special_tokens=case["skip_special_tokens"],
            decode_with_timestamps=case["decode_with_timestamps"],
        )
        assert text.numpy()[0].decode() == case["text"], case


@pytest.mark.parametrize("name", WITHOUT_TIMESTAMPS)
def test_the_ids_after_notimestamps_are_the_timestamps(folders, name):
    tokenizer = kt.text.tokenizer_from_pretrained(folders[name])
    stamp = REFERENCE[name]["special_ids"]["<|notimestamps|>"] + 1  # theirs
    assert tokenizer.timestamp_begin == stamp + 1
    assert tokenizer.vocabulary_size() == stamp + 1501 + 1  # + our padding
    assert tokenizer.token_to_id("<|30.00|>") == stamp + 1500 + 1
    # Text never gives them: transformers splits "<|0.00|>" in these files.
    assert tokenizer("<|0.00|>").numpy().max() < tokenizer.timestamp_begin
    segments = tokenizer.segments(ours([[stamp, 2425, 1002, stamp + 25]])[0])
    assert [(s["start"], s["end"]) for s in segments] == [(0.0, 0.5)]
    assert (
        segments[0]["text"] == tokenizer.detokenize([[2426, 1003]]).numpy()[0].decode()
    )
    # A .keras round trip keeps them.
    copy = kt.text.WhisperTokenizer.from_config(tokenizer.get_config())
    assert copy.get_vocabulary() == tokenizer.get_vocabulary()
    assert copy.timestamp_begin == tokenizer.timestamp_begin


def test_a_vocabulary_without_timestamps_must_end_at_notimestamps():
    vocabulary = {c: i for i, c in enumerate(kt.text.bytes_to_unicode().values())}
    for token in ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>"):
        vocabulary[token] = len(vocabulary)
    kt.text.WhisperTokenizer(vocabulary, [])  # ends at <|notimestamps|>: read
    vocabulary["<|extra|>"] = len(vocabulary)
    with pytest.raises(
        ValueError, match="notimestamps.*has id 258, the last id is 259"
    ):
        kt.text.WhisperTokenizer(vocabulary, [])


@pytest.mark.parametrize("name", MODELS)
def test_model_layouts_transcribe_as_transformers(folders, name):
    """The .en layout (no language or task in the prompt) and large-v3's
    (128 mel bins, the language detected among 100): transformers' greedy
    texts, and its first timestamped segment of each clip (transformers
    then decodes again from that segment's end, past the 30 s of audio;
    our windows stop at the audio's end)."""
    ref = REFERENCE[name]
    recognizer = kt.tasks.from_pretrained(folders[name])
    tokenizer = recognizer.tokenizer
    assert recognizer.model.vocabulary_size == tokenizer.vocabulary_size()
    assert recognizer.model.num_mel_bins == (128 if name == "large_v3" else 80)
    assert recognizer.transcribe(CLIPS, max_new_tokens=12) == ref["greedy"]["text"]
    results = recognizer.transcribe(CLIPS, max_new_tokens=12, return_timestamps=True)
    for result, segments in zip(
        results, ref["greedy_timestamps"]["segments"], strict=True
    ):
        first, theirs = result["chunks"][0], segments[0]
        assert first["timestamp"] == (theirs["start"], theirs["end"])
        text = tokenizer.detokenize(ours([theirs["tokens"]]), skip_special_tokens=True)
        assert first["text"] == text.numpy()[0].decode()
    if name == "large_v3":
        frames = [recognizer.log_mel(clip) for clip in CLIPS]
        detected = [int(recognizer.detect_language(f)[0]) - 1 for f in frames]
        assert detected == ref["detect_language"]["ids"]
