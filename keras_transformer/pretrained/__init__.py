"""Hugging Face checkpoint folders <-> our models, exactly.

`kt.models.from_pretrained(path)` reads a local folder (`config.json`, the
weights in `model.safetensors` or its sharded index) and returns our model
class with the weights in place; `kt.models.save_pretrained(model, path)`
writes one back. Both dispatch through `registry`: the config's
`model_type` picks the module that loads, the model's class the one that
saves (one module per family: `bert`, `gpt2`, `llama`, `gemma3`, `seq2seq`
for Marian and BART, `vit`). A `.gguf` file is read by `gguf`.
"""

from keras_transformer import _gguf
from keras_transformer import _validation as validation
from keras_transformer.pretrained import checkpoint, gguf, peft, registry  # noqa: F401 (peft registers the PEFT adapter format)


@validation.reads_once
def from_pretrained(path, dtype=None):
    """Loads a Hugging Face checkpoint folder as one of our models.

    Supported (from the families' records, `pretrained/registry.py`):

    {SUPPORTED}

    The class comes from the config's `architectures` (or, where that is
    null, its `model_type`'s usual one). BERT covers MiniLM and other
    BERT-shaped models. The ids of a `GPT2`, `Llama` or `Seq2Seq` are the
    checkpoint's plus one (id 0 is padding here), as the folder's
    `kt.text.tokenizer_from_pretrained` gives them. A `Seq2Seq` gets the
    checkpoint's generation settings (`generation_config.json`) in its
    `generation_config` and its decoder start token in
    `decoder_start_token_id`. A `ViT` takes images channels last,
    `(B, H, W, C)`, where transformers takes `pixel_values` `(B, C, H, W)`
    (`ViTModel`, without a classifier, is refused). Weights are read with
    `safetensors` (no torch or transformers needed); a config asking for
    something we do not compute is refused, naming the key, before any
    weight is built.

    A path ending in `.gguf` is a GGUF file (llama.cpp's; needs
    `pip install "keras-transformer[gguf]"`): `llama` and `qwen2` files
    give a `kt.models.Llama` computing what transformers computes of the
    file, its Q8_0 and Q4_0 projections kept as int8 with blocks of 32;
    `gpt2` files a float32 `kt.models.GPT2`, every tensor dequantized;
    `gemma3` files a `kt.models.Gemma3`, every tensor dequantized (see
    `kt.pretrained.gguf` and `kt.pretrained.gguf_gemma3`).

    Args:
        path: a local checkpoint folder, or a `.gguf` file.
        dtype: None (float32 weights, whatever the files hold), or for
            Llama, Mistral and Qwen2 folders `"float32"`, `"bfloat16"` or
            `"float16"`: the model built under that dtype policy, its
            weights in it (a bfloat16 checkpoint then takes half the memory
            of its float32 copy).

    Returns:
        Our model computing what the checkpoint computes.

    Raises:
        FileNotFoundError: `path` has no `config.json` or no weights, or
            no GGUF file is at a `.gguf` path.
        ValueError: an unsupported `model_type` or configuration, tensors
            missing or of the wrong shape, or a `dtype` the family does not
            load in.

    Examples:
        >>> import os, tempfile
        >>> import keras_transformer as kt
        >>> model = kt.models.bert(30, num_layers=1, num_heads=2, hidden_dim=8,
        ...                        intermediate_dim=16, max_sequence_length=8)
        >>> folder = kt.models.save_pretrained(model, tempfile.mkdtemp())
        >>> sorted(os.listdir(folder))
        ['config.json', 'model.safetensors']
        >>> type(kt.models.from_pretrained(folder)).__name__
        'BERT'
    """
    if _gguf.is_gguf(path):
        return gguf.load(path, dtype=dtype)
    path = checkpoint.check_folder(path)
    model_type = checkpoint.read_config(path).get("model_type")
    load = registry.loader(model_type, path)
    if dtype is None:
        return load(path)
    if not registry.loads_in_dtypes(model_type):
        raise ValueError(
            f"`dtype` is supported for {registry.dtype_model_types()} folders; "
            f"other families load in float32. Received: dtype={dtype!r} for "
            f"model_type={model_type!r}"
        )
    return load(path, dtype=dtype)


def save_pretrained(model, path, tokenizer=None):
    """Writes `model` (and its tokenizer) as a Hugging Face checkpoint folder.

    The folder loads with `kt.models.from_pretrained` and with Hugging Face
    `transformers` (`BertModel.from_pretrained(path)`,
    `GPT2LMHeadModel.from_pretrained(path)`,
    `MarianMTModel.from_pretrained(path)`,
    `BartForConditionalGeneration.from_pretrained(path)`,
    `ViTForImageClassification.from_pretrained(path)`). The ids of a
    `GPT2` or `Seq2Seq` go back to the checkpoint's (minus one): the
    padding row 0 is dropped. A `Seq2Seq` is written as Marian (sinusoidal
    positions) or BART (learned positions) when its options are one of
    theirs (what `from_pretrained` gives), with a `generation_config.json`
    of its `generation_config`.

    Args:
        model: a `kt.models.BERT`, `BERTMaskedLM`, `BERTClassifier`,
            `GPT2`, Marian- or BART-shaped `Seq2Seq`, or `ViT`.
        path: the folder to write (created if needed).
        tokenizer: optionally the model's tokenizer: a
            `kt.text.WordPieceTokenizer` for BERT (written as `vocab.txt`
            and `tokenizer_config.json`) or a `kt.text.BytePairTokenizer`
            for GPT-2 (`vocab.json`, `merges.txt`, `tokenizer_config.json`).
            For a `Seq2Seq`: a BART `kt.text.BytePairTokenizer`, or a Marian
            `(source, target)` pair of `kt.text.SentencePieceTokenizer`
            with a vocabulary (`source.spm`, `target.spm`, `vocab.json`).
            None for a `ViT`: its config has `num_labels`, no label names,
            and no image processor is written.

    Returns:
        The folder's absolute path.

    Raises:
        ValueError: for a model quantized with `quantize("int8")`, before
            anything is written: a checkpoint holds float weights, and
            dequantized int8 weights would pass for the original ones.
            Save the float model, or the quantized one as `.keras`.
    """
    mode = getattr(model, "quantized_mode", None)
    if mode is not None:
        raise ValueError(
            "`save_pretrained` writes float checkpoints; this model is "
            f"quantized. Received: model with quantized_mode={mode!r}"
        )
    return registry.saver(model)(model, path, tokenizer)


if from_pretrained.__doc__ is not None:  # None under `python -OO`
    from_pretrained.__doc__ = from_pretrained.__doc__.replace(
        "{SUPPORTED}", registry.supported_table(indent=4)
    )
