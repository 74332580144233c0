"""Hugging Face ViT checkpoints (`model_type: vit`,
`ViTForImageClassification`) <-> `kt.models.ViT`.

Our ViT computes what Hugging Face's computes (a patch convolution, a class
token and learned positions, pre-LN blocks with exact GELU, a final
LayerNorm, a linear classifier on the class token), so loading is a renaming
and re-shaping of tensors:

- the patch projection is a `Conv2d` with weight `(E, C, P, P)`; the Keras
  `Conv2D` kernel is `(P, P, C, E)`. Images stay channels last here,
  `(B, H, W, C)`, where transformers takes `pixel_values` `(B, C, H, W)`;
- the class token `(1, 1, E)` and positions `(1, N + 1, E)` lose their
  leading ones;
- `nn.Linear` weights are `(out, in)`, Keras kernels `(in, out)`; attention
  projections are split into heads: query/key/value kernels `(E, H, D)`
  with biases `(H, D)`, the output kernel `(H, D, E)`.

`ViTModel` (no classifier, a tanh pooler) and `ViTForMaskedImageModeling`
are refused: `kt.models.ViT` is the classifier.

Shape legend: E hidden size, C channels, P patch size, N patches, H heads,
D head size.
"""

from keras_transformer.models.initializers import placeholder_weights
from keras_transformer.models.vit import ViT
from keras_transformer.pretrained import checkpoint, keys
from keras_transformer.pretrained.family import Family

ARCHITECTURES = ("ViTForImageClassification",)
# Hugging Face config values we compute exactly: key -> the allowed values.
# Without query/key/value biases (`qkv_bias: false`) ours stay zeros.
SUPPORTED = {"hidden_act": ("gelu",), "qkv_bias": (True, False)}
# ViTForMaskedImageModeling's mask token: classification never reads it.
IGNORED = ("embeddings.mask_token",)


def load(path):
    """Our `ViT` of a ViT folder, weights in place."""
    config = checkpoint.read_config(path)
    return build(config, checkpoint.read_weights(path))


def save(model, path, tokenizer=None):
    """Writes a `ViT` as a Hugging Face folder. A ViT has no tokenizer; its
    config has `num_labels`, no label names, and no image processor is
    written."""
    if tokenizer is not None:
        raise ValueError(
            "A ViT has no tokenizer: `tokenizer` must be None. "
            f"Received: tokenizer={tokenizer!r}"
        )
    return checkpoint.write_folder(path, *export(model))


def _side(config, key, default):
    """A square's side from `image_size` / `patch_size`: an int, or a list
    of two equal ints."""
    value = config.get(key, default)
    if isinstance(value, list | tuple) and len(value) == 2 and value[0] == value[1]:
        return value[0]
    if isinstance(value, list | tuple):
        raise ValueError(
            f"This ViT checkpoint's `{key}` is not supported (supported: one "
            f"int, or two equal ones: squares). Received: {key}={value!r}"
        )
    return value


def config_to_arguments(config):
    """`ViT` constructor arguments from a Hugging Face `config.json`."""
    checkpoint.check_architecture(config, "ViT", ARCHITECTURES)
    checkpoint.check_supported(config, "ViT", SUPPORTED)
    labels = config.get("id2label") or {}
    return dict(
        image_size=_side(config, "image_size", 224),
        patch_size=_side(config, "patch_size", 16),
        num_classes=len(labels) or config.get("num_labels", 2),
        num_channels=config.get("num_channels", 3),
        num_layers=config.get("num_hidden_layers", 12),
        num_heads=config.get("num_attention_heads", 12),
        hidden_dim=config.get("hidden_size", 768),
        intermediate_dim=config.get("intermediate_size", 3072),
        dropout=config.get("hidden_dropout_prob", 0.0),
        layer_norm_epsilon=config.get("layer_norm_eps", 1e-12),
    )


def arguments_to_config(model):
    """The Hugging Face `config.json` of a `ViT`."""
    return {
        "architectures": ["ViTForImageClassification"],
        "model_type": "vit",
        "image_size": model.image_size,
        "patch_size": model.patch_size,
        "num_channels": model.num_channels,
        "num_labels": model.num_classes,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_heads,
        "hidden_size": model.hidden_dim,
        "intermediate_size": model.intermediate_dim,
        "hidden_act": "gelu",
        "hidden_dropout_prob": model.dropout,
        "attention_probs_dropout_prob": model.dropout,
        "layer_norm_eps": model.layer_norm_epsilon,
        "qkv_bias": True,
        "initializer_range": 0.02,
    }


SAME = checkpoint.SAME
LINEAR = (lambda w: w.T, lambda w: w.T)
CONV = (  # (E, C, P, P) <-> (P, P, C, E)
    lambda w: w.transpose(2, 3, 1, 0),
    lambda w: w.transpose(3, 2, 0, 1),
)
UNBATCH = (lambda w: w[0], lambda w: w[None])  # (1, ...) <-> (...)
CLASS_TOKEN = (lambda w: w.reshape(-1), lambda w: w.reshape(1, 1, -1))


def _dense(prefix, layer, converter=LINEAR, bias=SAME, use_bias=True):
    pairs = [(f"{prefix}.weight", layer.kernel, converter)]
    if use_bias:
        pairs.append((f"{prefix}.bias", layer.bias, bias))
    return pairs


def _pairs(model, qkv_bias=True):
    """`(Hugging Face name, our variable, (to ours, to theirs))` for every
    tensor of a `ViT`, as `ViTForImageClassification` names them."""
    heads, size = model.num_heads, model.hidden_dim // model.num_heads
    split, split_bias, merge = checkpoint.head_converters(heads, size)
    norm = checkpoint.norm_pairs
    embedding = model.patch_embedding
    pairs = [
        ("vit.embeddings.cls_token", embedding.class_embedding, CLASS_TOKEN),
        ("vit.embeddings.position_embeddings", embedding.position_embeddings, UNBATCH),
        *_dense(
            "vit.embeddings.patch_embeddings.projection", embedding.projection, CONV
        ),
    ]
    for i, block in enumerate(model.blocks):
        prefix = f"vit.encoder.layer.{i}"
        attention = block.self_attention_layer
        pairs += norm(f"{prefix}.layernorm_before", block.self_attention_layer_norm)
        for name, layer in [
            ("query", attention.query_dense),
            ("key", attention.key_dense),
            ("value", attention.value_dense),
        ]:
            pairs += _dense(
                f"{prefix}.attention.attention.{name}",
                layer,
                split,
                split_bias,
                use_bias=qkv_bias,
            )
        pairs += _dense(
            f"{prefix}.attention.output.dense", attention.output_dense, merge
        )
        pairs += norm(f"{prefix}.layernorm_after", block.feedforward_layer_norm)
        pairs += _dense(
            f"{prefix}.intermediate.dense", block.feedforward_intermediate_dense
        )
        pairs += _dense(f"{prefix}.output.dense", block.feedforward_output_dense)
    pairs += norm("vit.layernorm", model.final_layer_norm)
    pairs += _dense("classifier", model.classifier)
    return pairs


def _key(weights, name):
    return keys.find_key(weights, name, kind="ViTForImageClassification ")


def build(config, weights):
    """Our `ViT` of a checkpoint, weights in place. Images are channels
    last, `(B, H, W, C)`."""
    arguments = config_to_arguments(config)  # checks, before any weight
    projection = weights.get("vit.embeddings.patch_embeddings.projection.weight")
    if projection is not None and projection.shape[1:2] != (arguments["num_channels"],):
        raise ValueError(
            "This ViT checkpoint's patch projection takes "
            f"{projection.shape[1]} channels, not its config.json's. "
            f"Received: num_channels={arguments['num_channels']!r}"
        )
    with placeholder_weights():  # every weight is assigned below
        model = ViT(**arguments)
    qkv_bias = config.get("qkv_bias", True)
    checkpoint.assign(_pairs(model, qkv_bias), weights, _key, IGNORED)
    return model


def export(model):
    """`(config, tensors)` of a `ViT` in Hugging Face's names and layouts."""
    return arguments_to_config(model), checkpoint.tensors(_pairs(model))


FAMILY = Family(
    name="ViT",
    model_types=("vit",),
    classes=(ViT,),
    architectures={"ViTForImageClassification": (ViT, "ImageClassifier")},
    load=load,
    save=save,
    default_architectures={"vit": "ViTForImageClassification"},
)
