"""In-graph pre-tokenizers of byte-level BPE: GPT-2's word split, the
regex splits of Qwen2 and Llama-3 `tokenizer.json` files, Unicode
normalization, and the splitting of text on added (special) tokens.

Shape legend: B batch, P pieces of a text, N pieces in all.
"""

import tensorflow as tf

from keras_transformer.text._lazy import tf_text

# Unicode's White_Space characters: what `\s` matches in the regex engine of
# the reference tokenizers (RE2's `\s` is ASCII only).
SPACE = (
    r"\t\n\x0b\x0c\r\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}"
    r"\x{2029}\x{202f}\x{205f}\x{3000}"
)
# The regexes of `tokenizer.json` Split pre-tokenizers we compute, exactly as
# the files spell them, by name.
PATTERNS = {
    "qwen2": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
    "llama3": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}
# The whitespace characters other than line breaks.
_BLANK = SPACE.replace(r"\n", "").replace(r"\r", "")
NORMALIZERS = ("NFC", "NFKC", "NFD", "NFKD")
SPACES = rf"[{SPACE}]+"
# GPT-2's pattern without its whitespace alternatives `\s+(?!\S)|\s+`: RE2 has
# no look-ahead, so runs of whitespace are split off first (see `pretokenize`).
_WORD = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"
    rf"| ?[^{SPACE}\p{{L}}\p{{N}}]+"
)
# The same pattern for ASCII text, which RE2 runs about twice as fast: on
# ASCII, `\p{L}` is `[A-Za-z]`, `\p{N}` is `[0-9]` and White_Space is
# `[\t\n\v\f\r ]`.
_ASCII_WORD = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+"
    r"| ?[^\t\n\x0b\x0c\r A-Za-z0-9]+"
)
# A byte that valid UTF-8 never holds: marks where the text is cut.
_CUT = "\xff"


# tensorflow-text's regex_split ends a text at its first NUL byte. A text
# with one is split with U+FDD0 in its place (a noncharacter, which Unicode
# reserves for a program's internal use), which every pattern here puts in
# the class a NUL is in (not a space, letter or number), and its words get
# their NULs back. (A text holding both a NUL and U+FDD0 gets NULs for both.)
_NUL, _STAND_IN = r"\x00", r"\x{fdd0}"


def regex_split(strings, pattern):
    """`(N,)` strings cut into `(N, None)` pieces: the matches of `pattern`
    and the text between them (`tf_text.regex_split` keeping every match),
    text after a NUL byte included."""
    nul = tf.strings.regex_full_match(strings, rf"(?s).*{_NUL}.*")  # (N,)
    safe = tf.where(nul, tf.strings.regex_replace(strings, _NUL, "\ufdd0"), strings)
    pieces = tf_text.regex_split(safe, pattern, pattern)
    back = tf.gather(nul, pieces.value_rowids())
    flat = pieces.flat_values
    restored = tf.strings.regex_replace(flat, _STAND_IN, "\x00")
    return pieces.with_flat_values(tf.where(back, restored, flat))


def _re2(pattern):
    """`pattern` without its look-ahead alternative (`\\s+(?!\\S)|\\s+`
    becomes `\\s+`: `split_words` cuts the text where the look-ahead would
    end a match) and with Unicode `\\s`, for RE2."""
    pattern = pattern.replace(r"\s+(?!\S)|\s+", r"\s+")
    pattern = pattern.replace(r"[^\s", f"[^{SPACE}").replace(r"\s", f"[{SPACE}]")
    return pattern


_SPLITS = {name: _re2(pattern) for name, pattern in PATTERNS.items()}


def split_words(strings, pattern):
    """The words of `(N,)` strings under the `PATTERNS[pattern]` regex,
    `(N, None)`, as the `tokenizers` Split pre-tokenizer (`Isolated`) cuts
    them.

    RE2 has no look-ahead. In these patterns `\\s+(?!\\S)` only matters
    before a non-space character, where it leaves the run's last
    character to the next word; a whitespace character other than a line
    break that precedes a non-space character always starts a word under
    the full pattern, so the text is cut there first, and each cut piece is
    split by the pattern without its look-ahead alternative.
    """
    marked = tf.strings.regex_replace(
        strings, f"([{_BLANK}])([^{SPACE}])", _CUT + r"\1\2"
    )
    pieces = tf.strings.split(marked, sep=_CUT)  # (N, None)
    split = _SPLITS[pattern]
    words = regex_split(pieces.flat_values, split)
    return pieces.with_flat_values(words).merge_dims(1, 2)


def normalize(strings, form):
    """`(N,)` strings in Unicode normalization `form` (None: unchanged)."""
    if form is None:
        return strings
    return tf_text.normalize_utf8(strings, form)


def split_added(strings, tokens):
    """`(B,)` strings cut around the added `tokens`, as Hugging Face
    tokenizers match them before anything else (at each place the longest
    token that starts there).

    Returns:
        `(pieces, special)`: the pieces `(B, None)` strings, in order
        (empty pieces left out), and `(N,)` booleans, True where a piece
        is one of `tokens`.
    """
    if not tokens:
        pieces = tf.RaggedTensor.from_tensor(strings[:, None])
        pieces = tf.ragged.boolean_mask(pieces, pieces != "")
        return pieces, tf.zeros_like(pieces.flat_values, tf.bool)
    pattern = "|".join(_literal(t) for t in sorted(tokens, key=len, reverse=True))
    pieces = regex_split(strings, pattern)
    special = tf.strings.regex_full_match(pieces.flat_values, pattern)
    return pieces, special


def _literal(text):
    """An RE2 pattern matching exactly `text`."""
    return "".join(
        c if c.isalnum() or ord(c) > 127 else f"\\x{{{ord(c):x}}}" for c in text
    )


def pretokenize(strings):
    """GPT-2's pre-tokenization: `(B,)` strings to `(B, None)` words.

    GPT-2's pattern ends in `\\s+(?!\\S)|\\s+`: a run of whitespace before
    a word leaves its last character to that word (a space joins it as
    `" word"`; any other whitespace character becomes a word of its own).
    RE2 has no look-ahead, so the runs are split off first and their last
    character moved here.
    """
    pieces = regex_split(strings, SPACES)  # (B, None)
    flat, text = pieces.flat_values, pieces.value_rowids()
    spaces = tf.strings.regex_full_match(flat, SPACES)
    followed = tf.concat([text[1:] == text[:-1], [False]], 0)[: tf.size(text)]
    split = spaces & followed  # whitespace that precedes a word
    size = tf.strings.length(flat, unit="UTF8_CHAR")
    head = tf.strings.substr(flat, tf.zeros_like(size), size - 1, unit="UTF8_CHAR")
    last = tf.strings.substr(flat, size - 1, tf.ones_like(size), unit="UTF8_CHAR")
    joins = split & (last == " ")
    prefix = tf.where(previous(joins), " ", "")
    first = tf.where(split, head, tf.strings.join([prefix, flat]))
    second = tf.where(split & ~joins, last, "")
    values = tf.reshape(tf.stack([first, second], 1), [-1])
    rows = tf.repeat(text, 2)
    keep = values != ""
    pieces = tf.RaggedTensor.from_value_rowids(
        values[keep], rows[keep], nrows=pieces.nrows()
    )
    words = _split_words(pieces.flat_values)
    return pieces.with_flat_values(words).merge_dims(1, 2)


def _split_words(pieces):
    """`_WORD` splits of `(N,)` pieces, `(N, None)`: ASCII pieces by the
    faster `_ASCII_WORD`, the others by `_WORD`, back in their order."""
    ascii = tf.strings.regex_full_match(pieces, r"[\x00-\x7f]*")
    positions = tf.range(tf.size(pieces))
    fast, slow = positions[ascii], positions[~ascii]
    words = tf.concat(
        [
            regex_split(tf.gather(pieces, fast), _ASCII_WORD),
            regex_split(tf.gather(pieces, slow), _WORD),
        ],
        axis=0,
    )
    order = tf.math.invert_permutation(tf.concat([fast, slow], 0))
    return tf.gather(words, order)


def previous(flags):
    """Each element's predecessor's flag (False for the first)."""
    return tf.concat([[False], flags], 0)[: tf.size(flags)]
