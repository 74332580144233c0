"""Learning a WordPiece vocabulary from a corpus with tensorflow-text's tools."""

import collections
import logging

import keras
import tensorflow as tf

from keras_transformer.text import checks

# Corpora longer than this many texts get a progress bar with verbose="auto".
LONG_CORPUS = 10_000


def build_wordpiece_vocabulary(
    data,
    vocabulary_size,
    reserved_tokens=checks.RESERVED_TOKENS,
    lowercase=True,
    verbose="auto",
    **learn_options,
):
    """Learns a WordPiece vocabulary for `kt.text.WordPieceTokenizer`.

    Words are split and normalised exactly as the tokenizer does (BERT's
    rules), counted, and handed to tensorflow-text's WordPiece learner
    (`bert_vocab_from_dataset`'s algorithm), which keeps every character
    seen, as a word start and as `##` continuation, plus the most frequent
    pieces that fit.

    Args:
        data: a `tf.data.Dataset` of strings (or of rank-1 batches of
            strings), or any iterable of strings, e.g. a list or an open file.
        vocabulary_size: the largest vocabulary to return, reserved tokens
            included. The learner aims within 5% under it; a corpus whose
            characters alone need more is cut to this size (its rarest pieces
            then become `[UNK]`).
        reserved_tokens: tokens placed first, in order. Must start with
            `"[PAD]", "[UNK]"`. The default also reserves `[CLS]`, `[SEP]`,
            `[MASK]`, `[START]` and `[END]` (ids 2-6).
        lowercase: BERT "uncased" normalisation; use the same value for the
            tokenizer.
        verbose: `"auto"` shows a `keras.utils.Progbar` while counting words
            of corpora longer than 10,000 texts; True always; False never.
        **learn_options: passed to tensorflow-text's
            `wordpiece_tokenizer_learner_lib.learn` (`upper_thresh`,
            `lower_thresh`, `num_iterations`, `max_unique_chars`, ...).

    Returns:
        A list of tokens: token `i` has id `i`.

    Examples:
        >>> import keras_transformer as kt
        >>> corpus = ["the cat sat on the mat", "the dog sat on the log"] * 20
        >>> vocab = kt.text.build_wordpiece_vocabulary(corpus, 60)
        >>> vocab[:7]
        ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '[START]', '[END]']
        >>> kt.text.WordPieceTokenizer(vocab).tokenize("The cat").shape
        TensorShape([2])
    """
    reserved_tokens = checks.check_reserved_tokens(reserved_tokens, vocabulary_size)
    if verbose not in ("auto", True, False):
        raise ValueError(
            f'`verbose` must be "auto", True or False. Received: verbose={verbose!r}'
        )
    counts = count_words(data, lowercase, verbose)
    if not counts:
        raise ValueError(
            f"`data` has no words: the corpus is empty. Received: data={data!r:.80}"
        )
    logging.info("Learning a WordPiece vocabulary from %d distinct words", len(counts))
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib

    vocabulary = wordpiece_tokenizer_learner_lib.learn(
        counts, vocabulary_size, reserved_tokens, **learn_options
    )
    return vocabulary[:vocabulary_size]


def count_words(data, lowercase=True, verbose="auto"):
    """Counts the words of `data` as `WordPieceTokenizer` splits them.

    Returns:
        A `collections.Counter` of words (Python strings).
    """
    from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

    splitter = BasicTokenizer(lower_case=lowercase)
    split = tf.function(
        lambda texts: splitter.tokenize(checks.replace_invalid_utf8(texts)).flat_values
    )

    def count(texts):
        return collections.Counter(split(tf.constant(texts, tf.string)).numpy()).items()

    counts = count_batches(data, count, verbose)
    return collections.Counter({w.decode("utf-8"): n for w, n in counts.items()})


def count_batches(data, count, verbose="auto"):
    """Adds up `count(texts)` over the batches of `data`, with a progress bar.

    The word-counting loop of the vocabulary builders (WordPiece, BPE).

    Args:
        data: a `tf.data.Dataset` of strings or an iterable of strings.
        count: a function of a list of texts returning `(word, number)`
            pairs, such as a `collections.Counter`'s `.items()`.
        verbose: `True` shows a `keras.utils.Progbar`; `"auto"` shows one
            once more than `LONG_CORPUS` texts have been read.

    Returns:
        A `collections.Counter` of words.
    """
    total = checks.corpus_size(data)
    show = verbose is True or (
        verbose == "auto" and total is not None and total > LONG_CORPUS
    )
    progress = keras.utils.Progbar(total, unit_name="text") if show else None
    counts = collections.Counter()
    seen = 0
    for texts in checks.text_batches(data):
        for word, number in count(texts):
            counts[word] += number
        seen += len(texts)
        if progress is None and verbose == "auto" and seen > LONG_CORPUS:
            progress = keras.utils.Progbar(total, unit_name="text")
        if progress is not None:
            progress.update(seen)
    return counts
