"""A SentencePiece model built from a SentencePiece-BPE `tokenizer.json`.

Fine-tunes of Llama-2, Mistral and TinyLlama often ship only the
`tokenizer.json` that `tokenizers` converted from the `tokenizer.model`: a
BPE model with `byte_fallback`, its merges, and the text pipeline around it.
`kt.text.LlamaTokenizer` runs a SentencePiece model, so this module writes
one back from that file.

SentencePiece BPE merges, at each step, the adjacent pair whose joined piece
has the highest score; `tokenizers` merges the listed pair of lowest rank.
They agree when each piece's score is minus the rank of its first merge and
the merges list every split of a piece into two pieces of the vocabulary,
which is how the converter writes them (all splits, in score order). A file
whose merges leave a split out is refused, naming it, rather than tokenized
differently.
"""

from keras_transformer.text.sentencepiece_model import (
    BYTE,
    BYTE_PIECE,
    CONTROL,
    NORMAL,
    UNKNOWN,
    bpe_model,
)


def proto_from_tokenizer_json(data, file):
    """The serialized SentencePiece model of a BPE `tokenizer.json` with
    byte fallback (`data`, read from `file`), its added tokens as control
    pieces. A ValueError names what it cannot be made from."""
    model = data["model"]
    vocabulary = dict(model.get("vocab") or {})
    added = {t["content"]: t for t in data.get("added_tokens") or []}
    for token in added.values():
        vocabulary.setdefault(token["content"], token["id"])
    tokens = sorted(vocabulary, key=vocabulary.get)
    if [vocabulary[t] for t in tokens] != list(range(len(tokens))):
        raise ValueError(
            f"{file!r}: the vocabulary's ids must be 0..N-1, each once. Received: "
            f"{len(tokens)} tokens with ids {vocabulary[tokens[0]]!r} to "
            f"{vocabulary[tokens[-1]]!r}"
        )
    unknown = model.get("unk_token")
    if unknown not in vocabulary:
        raise ValueError(
            f"{file!r}: a SentencePiece-BPE model needs its `unk_token` in the "
            f"vocabulary. Received: unk_token={unknown!r}"
        )
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ValueError(
                f"{file!r}: BPE models with `{key}` are not supported. "
                f"Received: {key}={model.get(key)!r}"
            )
    kinds = {}
    for token in tokens:
        if token == unknown:
            kinds[token] = UNKNOWN
        elif token in added:
            kinds[token] = CONTROL
        elif BYTE_PIECE.fullmatch(token):
            kinds[token] = BYTE
        else:
            kinds[token] = NORMAL
    normal = {t for t, kind in kinds.items() if kind == NORMAL}
    scores = _scores(model.get("merges") or [], normal, file)
    pieces = [(t, scores.get(t, 0.0), kinds[t]) for t in tokens]
    # No dummy prefix: LlamaTokenizer puts it, by the file's Metaspace.
    return bpe_model(pieces, vocabulary[unknown], add_dummy_prefix=False)


def _scores(merges, normal, file):
    """Each merged piece's score: minus the rank of its first merge. A
    ValueError where a piece of the vocabulary (`normal`: its pieces of
    text) has a split into two of them that the merges lack (SentencePiece
    would merge it, `tokenizers` not)."""
    first = {}
    listed = set()
    for rank, merge in enumerate(merges):
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        listed.add((left, right))
        first.setdefault(left + right, rank)
    for piece in normal:
        for cut in range(1, len(piece)):
            split = (piece[:cut], piece[cut:])
            if split not in listed and all(p in normal for p in split):
                raise ValueError(
                    f"{file!r}: the merges lack {' '.join(split)!r}, a split of "
                    f"{piece!r} into two tokens, which SentencePiece would merge: "
                    "only merges converted from a SentencePiece model (every "
                    "split listed) are supported. Received: "
                    f"{len(merges)} merge(s) without {' '.join(split)!r}"
                )
    return {piece: -float(rank + 1) for piece, rank in first.items()}
