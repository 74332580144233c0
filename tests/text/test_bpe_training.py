"""build_bpe_vocabulary: merges checked by hand and against a naive trainer
(all pairs recounted each step), the trained BytePairTokenizer's round trip
and its segmentation of the training words, sizes, ids and bad input."""

import collections
import re

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.text import bpe_training

CHARACTERS = kt.text.bytes_to_unicode()
MIXED = [
    "Hello, world! The cat's hat isn't here.\n",
    "Привет, мир! Как дела?\n",
    "你好，世界。今天天气很好。\n",
    "مرحبا بالعالم\n",
    "Γειά σου κόσμε — καλημέρα\n",
    "नमस्ते दुनिया\n",
    "tabs\tand   spaces  \r\n 🙂🙂 emoji 123 4567\n\n",
]


def naive_bpe(counts, merge_count, reserved=()):
    """Textbook BPE: recount every pair, merge the most frequent (ties: the
    smallest pair) in every word left to right."""
    words = {tuple(CHARACTERS[b] for b in w): n for w, n in counts.items()}
    taken = {*CHARACTERS.values(), *reserved}
    merges = []
    while len(merges) < merge_count:
        pairs = collections.Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:], strict=False):
                pairs[pair] += n
        candidates = [(-n, p) for p, n in pairs.items() if p[0] + p[1] not in taken]
        if not candidates:
            break
        left, right = min(candidates)[1]
        merges.append(f"{left} {right}")
        taken.add(left + right)
        merged_words = {}
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i : i + 2] == (left, right):
                    out.append(left + right)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged_words[tuple(out)] = n
        words = merged_words
    return merges


def random_corpus(seed=0, texts=60):
    rng = np.random.RandomState(seed)
    syllables = ["ka", "to", "ri", "ne", "sho", "la", "mu", "ve", "é", "ü", "ñ"]
    lines = []
    for _ in range(texts):
        words = [
            "".join(rng.choice(syllables, rng.randint(1, 5)))
            for _ in range(rng.randint(3, 12))
        ]
        lines.append(" ".join(words) + rng.choice([".", "!", ",\n", " 42"]))
    return lines


def test_hand_checked_merges_in_order_until_nothing_is_left():
    # Words "aaab", "Ġaaab", "Ġab". Pairs: a a 4 ("aaa" is "aa a": left to
    # right), a b 3, Ġ a 2. Then a b 3 (aa a b -> aa ab), aa ab 2, and the
    # tie Ġ aaab / Ġ ab goes to the smaller pair.
    vocabulary, merges = kt.text.build_bpe_vocabulary(["aaab aaab ab"], 1000)
    assert merges == ["a a", "a b", "aa ab", "Ġ aaab", "Ġ ab"]
    assert len(vocabulary) == 256 + 5 + 1  # nothing left to merge: it stops
    assert [vocabulary[t] for t in ["aa", "ab", "aaab", "Ġaaab", "Ġab"]] == [
        256, 257, 258, 259, 260,
    ]  # fmt: skip
    assert vocabulary["<|endoftext|>"] == 261
    # Word counts weigh the pairs: "ba" twice outweighs "ab" once.
    # Ties compare token strings: "b" (U+0062) is before "Ġ" (U+0120).
    _, merges = kt.text.build_bpe_vocabulary(["ab ba ba"], 257, special_tokens=())
    assert merges == ["b a"]
    _, merges = kt.text.build_bpe_vocabulary(["ab ba ba"], 259, special_tokens=())
    assert merges == ["b a", "Ġ ba", "a b"]


def test_merges_equal_a_naive_trainers():
    for corpus, size in [(random_corpus(), 420), (MIXED * 3, 330)]:
        counts = bpe_training.count_bpe_words(corpus)
        _, merges = kt.text.build_bpe_vocabulary(corpus, size)
        assert merges == naive_bpe(counts, size - 257, {"<|endoftext|>"})
        assert len(merges) == size - 257


def test_round_trip_on_many_scripts_and_dataset_input():
    vocabulary, merges = kt.text.build_bpe_vocabulary(MIXED * 5, 320)
    tokenizer = kt.text.BytePairTokenizer(vocabulary, merges)
    texts = [
        *MIXED,
        "".join(MIXED),
        "unseen: Ελληνικά, 日本語のテキスト, עברית, ไทย 👍🏽\n\n\t end  ",
        "",
        "   \n",
    ]
    back = tokenizer.detokenize(tokenizer(texts)).numpy()
    assert [b.decode("utf-8") for b in back] == texts
    # Merges were learned: common text takes fewer tokens than bytes.
    assert len(tokenizer(MIXED[0])) < len(MIXED[0].encode()) * 2 / 3
    # A dataset of strings or of batches of strings trains the same.
    dataset = tf.data.Dataset.from_tensor_slices(MIXED * 5)
    for data in [dataset, dataset.batch(4)]:
        assert kt.text.build_bpe_vocabulary(data, 320) == (vocabulary, merges)


def test_size_is_met_exactly_ids_contiguous_special_tokens_last():
    specials = ("<|endoftext|>", "<|pad|>")
    vocabulary, merges = kt.text.build_bpe_vocabulary(
        random_corpus(), 400, special_tokens=specials
    )
    assert len(vocabulary) == 400 and len(merges) == 400 - 256 - 2
    assert sorted(vocabulary.values()) == list(range(400))
    tokens = sorted(vocabulary, key=vocabulary.get)
    assert tokens[:256] == list(CHARACTERS.values())
    assert tokens[-2:] == list(specials)
    # Merge of rank r makes the token of id 256 + r, each one new.
    assert tokens[256:-2] == [m.replace(" ", "") for m in merges]
    tokenizer = kt.text.BytePairTokenizer(vocabulary, merges)
    assert tokenizer.vocabulary_size() == 401  # plus [PAD]
    assert tokenizer.token_to_id("<|pad|>") == 399 + 1
    # Exactly 256 + specials: no merges.
    vocabulary, merges = kt.text.build_bpe_vocabulary(random_corpus(), 257)
    assert merges == [] and len(vocabulary) == 257


def test_tokenizer_segments_training_words_as_the_trainer_did():
    corpus = [*random_corpus(1), *MIXED * 2]
    counts = bpe_training.count_bpe_words(corpus)
    tokens, merges, segmentation = bpe_training._train(counts, 250)
    assert len(merges) == 250 and len(segmentation) == len(counts)
    vocabulary = {t: i for i, t in enumerate(tokens)}
    tokenizer = kt.text.BytePairTokenizer(vocabulary, [" ".join(m) for m in merges])
    words = sorted(segmentation)
    ids = tokenizer(words).to_list()
    for word, word_ids in zip(words, ids, strict=True):
        assert [tokenizer.id_to_token(i) for i in word_ids] == segmentation[word]
    # Some words really were merged into several multi-byte tokens.
    assert any(len(s) > 1 and min(map(len, s)) > 1 for s in segmentation.values())


def test_special_tokens_are_never_learned():
    vocabulary, merges = kt.text.build_bpe_vocabulary(
        ["ab ab ab xy"], 300, special_tokens=["ab"]
    )
    assert "a b" not in merges and vocabulary["ab"] == len(vocabulary) - 1
    tokenizer = kt.text.BytePairTokenizer(vocabulary, merges)
    assert tokenizer("ab").numpy().tolist() == [
        vocabulary["a"] + 1,
        vocabulary["b"] + 1,
    ]


@pytest.mark.parametrize("size", [256, 0, -5, "300", 300.0, True, None])
def test_bad_vocabulary_size(size):
    with pytest.raises(
        ValueError, match=rf"`vocabulary_size`.*at least 257.*{re.escape(repr(size))}"
    ):
        kt.text.build_bpe_vocabulary(["some text"], size)


def test_bad_input():
    with pytest.raises(ValueError, match="vocabulary_size=257"):
        kt.text.build_bpe_vocabulary(["a"], 257, special_tokens=["<a>", "<b>"])
    for empty in [[], [""], iter([]), tf.data.Dataset.from_tensor_slices([""])]:
        with pytest.raises(ValueError, match="`data` has no words"):
            kt.text.build_bpe_vocabulary(empty, 300)
    with pytest.raises(ValueError, match="not a single string"):
        kt.text.build_bpe_vocabulary("some text", 300)
    with pytest.raises(ValueError, match="only strings"):
        kt.text.build_bpe_vocabulary(["a", 5], 300)
    with pytest.raises(ValueError, match="`special_tokens` must be a list"):
        kt.text.build_bpe_vocabulary(["a"], 300, special_tokens="<|endoftext|>")
    with pytest.raises(ValueError, match="distinct"):
        kt.text.build_bpe_vocabulary(["a"], 300, special_tokens=["<s>", "<s>"])
    with pytest.raises(ValueError, match="'a', which is a byte token"):
        kt.text.build_bpe_vocabulary(["a"], 300, special_tokens=["a"])
    with pytest.raises(ValueError, match="`verbose`"):
        kt.text.build_bpe_vocabulary(["a"], 300, verbose=2)
