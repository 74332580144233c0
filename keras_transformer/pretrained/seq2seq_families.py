"""The Hugging Face encoder-decoder families that `kt.models.Seq2Seq`
reads and writes, each a `Layout` record: what `pretrained/seq2seq.py`
needs to know of its checkpoint layout, as data. A new family with the same tensor names
(`model.shared`, `model.encoder.layers.N.self_attn.q_proj` ...) is one more
record here, added to `FAMILIES`.
"""

import dataclasses

from keras_transformer.text import hf_writers

ACTIVATIONS = {
    "swish": "silu",
    "silu": "silu",
    "gelu": "gelu",
    "relu": "relu",
}
# Where `model_max_length` goes in a family's `tokenizer_config.json`.
MAX_LENGTH = object()


@dataclasses.dataclass(frozen=True)
class Layout:
    """What one Hugging Face encoder-decoder family fixes, as data.

    Attributes:
        model_type: the config's `model_type`.
        name: the family's name in messages.
        architecture: the one `architectures` entry we read and write.
        required: config key -> the values we compute exactly (the first is
            the default of a missing key).
        same_as: config key -> the key it must equal, because
            `kt.models.Seq2Seq` shares the two (a missing key defaults to
            the other, as the family's config class does).
        options: the `Seq2Seq` options of the family's layout, set on
            loading and checked on saving.
        token_ids: `decoder start id -> {config key: id}`: the special ids
            written into `config.json` and `generation_config.json`.
        eos_token_id: the end token written when the model has none.
        config: fixed entries of the `config.json` written.
        generation_in_config: generation keys also written to `config.json`.
        buffers: suffixes of tensors that carry no weights of their own.
        tokenizer_check: `(tokenizer, name) -> ids it emits`, or a ValueError.
        tokenizer_save: `(tokenizer, path, tokenizer config)`, writing files.
        tokenizer_config: the `tokenizer_config.json` written (`MAX_LENGTH`
            marks the model's length), then `optional_tokens`: key -> token,
            written when the tokenizer has that token.
    """

    model_type: str
    name: str
    architecture: str
    required: dict
    same_as: dict
    options: dict
    token_ids: object
    eos_token_id: int
    config: dict
    generation_in_config: tuple
    buffers: tuple
    tokenizer_check: object
    tokenizer_save: object
    tokenizer_config: dict
    optional_tokens: dict = dataclasses.field(default_factory=dict)


MARIAN = Layout(
    model_type="marian",
    name="Marian",
    architecture="MarianMTModel",
    required={
        "share_encoder_decoder_embeddings": (True,),
        "tie_word_embeddings": (True,),
        "activation_function": tuple(ACTIVATIONS),
    },
    # A separate target vocabulary is not supported.
    same_as={"decoder_vocab_size": "vocab_size"},
    options=dict(
        position="sinusoidal",
        sinusoidal_layout="concatenated",
        position_offset=0,
        embedding_layer_norm=False,
    ),
    token_ids=lambda start: {"pad_token_id": start},  # the pad starts decoding
    eos_token_id=0,
    config={"share_encoder_decoder_embeddings": True},
    generation_in_config=(),
    # The sinusoids, a buffer computed from the sizes.
    buffers=("embed_positions.weight",),
    tokenizer_check=hf_writers.check_sentencepiece_pair,
    tokenizer_save=hf_writers.save_sentencepiece_pair,
    tokenizer_config={
        "tokenizer_class": "MarianTokenizer",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": MAX_LENGTH,
        "separate_vocabs": False,
    },
)
BART = Layout(
    model_type="bart",
    name="BART",
    architecture="BartForConditionalGeneration",
    required={
        "tie_word_embeddings": (True,),
        "activation_function": tuple(ACTIVATIONS),
    },
    same_as={},
    options=dict(position="learned", position_offset=2, embedding_layer_norm=True),
    token_ids=lambda start: {"pad_token_id": 1, "bos_token_id": 0},
    eos_token_id=2,
    config={},
    generation_in_config=("forced_bos_token_id",),
    buffers=(),
    tokenizer_check=hf_writers.check_byte_pair,
    tokenizer_save=hf_writers.save_byte_pair,
    tokenizer_config={
        "tokenizer_class": "BartTokenizer",
        "add_prefix_space": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_max_length": MAX_LENGTH,
    },
    optional_tokens={
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
    },
)
FAMILIES = {family.model_type: family for family in (MARIAN, BART)}
