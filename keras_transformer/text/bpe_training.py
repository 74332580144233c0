"""Learning GPT-2-style byte-level BPE merges from a corpus.

Words are split by the tokenizer's own in-graph pre-tokenization
(`bpe.pretokenize`), so training and tokenizing see the same words. Merging is
incremental: pair counts, an index from each pair to the words holding it
and a max-heap whose stale entries are skipped (or re-pushed) when popped,
so a merge only touches the words that hold its pair.
"""

import collections
import heapq
import logging

import tensorflow as tf

from keras_transformer.text import bpe, checks
from keras_transformer.text.vocabulary import count_batches

_BYTES = 256


def build_bpe_vocabulary(
    data,
    vocabulary_size,
    *,
    special_tokens=("<|endoftext|>",),
    verbose="auto",
):
    """Learns a byte-level BPE vocabulary and merges for `BytePairTokenizer`.

    Text is split into words exactly as `kt.text.BytePairTokenizer` splits it
    (GPT-2's pattern), each distinct word is counted, and its UTF-8 bytes
    start as one token each. Then the most frequent adjacent pair of tokens
    (counted over all words, weighted by word counts; ties go to the
    smallest `(left, right)` pair of token strings) is merged in every word,
    left to right and non-overlapping as the tokenizer merges, until the
    vocabulary has `vocabulary_size` tokens or no pair is left. A pair whose
    merged token already exists (it can be spelled by another pair) or is a
    special token is never merged: each merge adds one new token, and the
    tokenizer gives the training words the segmentation learned here.

    Args:
        data: a `tf.data.Dataset` of strings (or of rank-1 batches of
            strings), or any iterable of strings, e.g. a list or an open file.
        vocabulary_size: the vocabulary size wanted, the 256 byte tokens and
            the special tokens included; at least `256 + len(special_tokens)`.
        special_tokens: tokens given the last ids, in order (GPT-2's
            `"<|endoftext|>"` by default). No merge makes one, so text that
            spells a special token is split like any other text.
        verbose: `"auto"` shows a `keras.utils.Progbar` while counting words
            of corpora longer than 10,000 texts; True always; False never.

    Returns:
        `(vocabulary, merges)`: a dict token -> id (the 256 byte tokens in
        `bytes_to_unicode()` order are ids 0..255, then the merged tokens in
        merge order, then the special tokens) and a list of `"left right"`
        strings in rank order: the contents of a GPT-2 `vocab.json` and
        `merges.txt`. The vocabulary is smaller than `vocabulary_size` only
        when the corpus runs out of pairs to merge.

    Raises:
        ValueError: `vocabulary_size` is not an integer of at least
            `256 + len(special_tokens)`, `special_tokens` are not distinct
            non-empty strings, or `data` has no words.

    Examples:
        >>> import keras_transformer as kt
        >>> corpus = ["the cat sat on the mat", "the cat ate the rat"] * 5
        >>> vocabulary, merges = kt.text.build_bpe_vocabulary(corpus, 262)
        >>> merges  # "Ġ" is the space: " cat" is a word
        ['a t', 'h e', 't he', 'c at', 'Ġ cat']
        >>> len(vocabulary), vocabulary["Ġcat"], vocabulary["<|endoftext|>"]
        (262, 260, 261)
        >>> tokenizer = kt.text.BytePairTokenizer(vocabulary, merges)
        >>> tokenizer.detokenize(tokenizer("the cats")).numpy().decode()
        'the cats'
    """
    special_tokens = _check_special_tokens(special_tokens)
    smallest = _BYTES + len(special_tokens)
    if (
        isinstance(vocabulary_size, bool)
        or not isinstance(vocabulary_size, int)
        or vocabulary_size < smallest
    ):
        raise ValueError(
            f"`vocabulary_size` must be an integer of at least {smallest}: the "
            f"{_BYTES} byte tokens and {len(special_tokens)} special token(s). "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    if verbose not in ("auto", True, False):
        raise ValueError(
            f'`verbose` must be "auto", True or False. Received: verbose={verbose!r}'
        )
    counts = count_bpe_words(data, verbose)
    if not counts:
        raise ValueError(
            f"`data` has no words: the corpus is empty. Received: data={data!r:.80}"
        )
    logging.info("Learning BPE merges from %d distinct words", len(counts))
    tokens, merges, _ = _train(counts, vocabulary_size - smallest, set(special_tokens))
    if len(tokens) + len(special_tokens) < vocabulary_size:
        logging.warning(
            "The corpus has only %d merges to learn: the vocabulary has %d "
            "tokens, not vocabulary_size=%d.",
            len(merges),
            len(tokens) + len(special_tokens),
            vocabulary_size,
        )
    vocabulary = {token: i for i, token in enumerate([*tokens, *special_tokens])}
    return vocabulary, [f"{left} {right}" for left, right in merges]


def _check_special_tokens(special_tokens):
    if isinstance(special_tokens, str | bytes) or not hasattr(
        special_tokens, "__iter__"
    ):
        raise ValueError(
            "`special_tokens` must be a list of strings. "
            f"Received: special_tokens={special_tokens!r}"
        )
    special_tokens = list(special_tokens)
    if not all(isinstance(t, str) and t for t in special_tokens):
        raise ValueError(
            "`special_tokens` must be non-empty strings. "
            f"Received: special_tokens={checks.preview(special_tokens)}"
        )
    if len(set(special_tokens)) != len(special_tokens):
        raise ValueError(
            "`special_tokens` must be distinct. "
            f"Received: special_tokens={checks.preview(special_tokens)}"
        )
    byte_tokens = set(bpe.bytes_to_unicode().values())
    for token in special_tokens:
        if token in byte_tokens:
            raise ValueError(
                f"`special_tokens` has {token!r}, which is a byte token. "
                f"Received: special_tokens={checks.preview(special_tokens)}"
            )
    return special_tokens


@tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
def _distinct_words(texts):
    """`(B,)` texts to their distinct words (UTF-8) and how often each occurs."""
    words, _, counts = tf.unique_with_counts(bpe.pretokenize(texts).flat_values)
    return words, counts


def count_bpe_words(data, verbose="auto"):
    """Counts the words of `data` as `BytePairTokenizer` splits them.

    Returns:
        A `collections.Counter` of words, as UTF-8 `bytes`.
    """

    def count(texts):
        words, numbers = _distinct_words(tf.constant(texts, tf.string))
        return zip(words.numpy(), numbers.numpy().tolist(), strict=True)

    return count_batches(data, count, verbose)


def _train(counts, merge_count, reserved=()):
    """At most `merge_count` BPE merges of the words `counts` (UTF-8 bytes ->
    count), never making a token in `reserved`.

    Returns:
        `(tokens, merges, words)`: the token strings (id order; the 256 byte
        tokens first), the merges as `(left, right)` string pairs in rank
        order, and each word's final segmentation as a list of token strings
        (a dict keyed by the word's text).
    """
    tokens = list(bpe.bytes_to_unicode().values())  # id = byte value
    taken = set(tokens) | set(reserved)
    words = [list(word) for word in counts]
    weights = list(counts.values())
    pair_counts = collections.defaultdict(int)
    holders = collections.defaultdict(set)  # pair -> words that (may) hold it
    for index, (word, weight) in enumerate(zip(words, weights, strict=True)):
        for pair in zip(word, word[1:], strict=False):
            pair_counts[pair] += weight
            holders[pair].add(index)
    # Max-heap on count, then the smallest (left, right) token strings.
    heap = [(-n, tokens[a], tokens[b], a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < merge_count and heap:
        negative, left, right, a, b = heapq.heappop(heap)
        count = pair_counts.get((a, b), 0)
        if count <= 0:
            continue
        if count != -negative:  # stale: the count fell since this was pushed
            heapq.heappush(heap, (-count, left, right, a, b))
            continue
        if left + right in taken:
            continue  # would add no new token
        new = len(tokens)
        tokens.append(left + right)
        taken.add(left + right)
        merges.append((left, right))
        grown = set()  # pairs whose count rose: they need a fresh heap entry
        for index in holders.pop((a, b)):
            added = _merge_word(words, index, a, b, new, weights[index], pair_counts)
            for pair in added:
                holders[pair].add(index)
            grown.update(added)
        pair_counts.pop((a, b))  # every occurrence is merged: its count is 0
        for x, y in grown:
            heapq.heappush(heap, (-pair_counts[(x, y)], tokens[x], tokens[y], x, y))
    segmentation = {
        word.decode("utf-8"): [tokens[i] for i in merged]
        for word, merged in zip(counts, words, strict=True)
    }
    return tokens, merges, segmentation


def _merge_word(words, index, a, b, new, weight, pair_counts):
    """Merges the pair `(a, b)` into `new` in `words[index]`, left to right
    and non-overlapping, and updates `pair_counts` by the pairs that changed.

    Returns:
        The pairs the merge made (their counts rose).
    """
    word = words[index]
    merged, old_at, new_at = [], [], []
    i, size = 0, len(word)
    while i < size:
        if i + 1 < size and word[i] == a and word[i + 1] == b:
            old_at.append(i)
            new_at.append(len(merged))
            merged.append(new)
            i += 2
        else:
            merged.append(word[i])
            i += 1
    if not old_at:
        return []  # the index was stale: an earlier merge took the pair
    # Pair k is tokens k, k + 1: only pairs next to a merge changed.
    gone = {k for i in old_at for k in (i - 1, i, i + 1) if 0 <= k < size - 1}
    made = {k for j in new_at for k in (j - 1, j) if 0 <= k < len(merged) - 1}
    for k in gone:
        pair = (word[k], word[k + 1])
        pair_counts[pair] -= weight
        if pair_counts[pair] == 0 and pair != (a, b):
            del pair_counts[pair]
    added = []
    for k in made:
        pair = (merged[k], merged[k + 1])
        pair_counts[pair] += weight
        added.append(pair)
    words[index] = merged
    return added
