"""Preset sizes of the model families, with the parameter counts they build to.

Each preset is a dict: `family` (the model class's family: `"bert"`,
`"gpt2"`, `"seq2seq"`, `"vit"`), `config` (its constructor arguments) and
`parameters` (what `model.count_params()` gives for the backbone; tests
check it against the architecture's formula). Published counts: BERT-base
≈110M, GPT-2 small ≈124M, GPT-2 medium ≈355M, Transformer base ≈65M in the
paper (37k shared BPE vocabulary, output projection tied to the shared
embedding, as here; we count 63.1M: the paper's figure is rounded and its
vocabulary approximate). ViT-B/16 and ViT-L/16 at 224×224 with 1000
classes count 86,567,656 and 304,326,632 (the ViT paper's Table 1 lists
86M and 307M).
"""


def _sizes(vocabulary_size, num_layers, hidden_dim, num_heads, max_sequence_length):
    return dict(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers,
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        intermediate_dim=4 * hidden_dim,
        max_sequence_length=max_sequence_length,
    )


def _vit_sizes(image_size, patch_size, num_classes, num_layers, hidden_dim, num_heads):
    return dict(
        image_size=image_size,
        patch_size=patch_size,
        num_classes=num_classes,
        num_layers=num_layers,
        num_heads=num_heads,
        hidden_dim=hidden_dim,
        intermediate_dim=4 * hidden_dim,
    )


# The paper's embedding: fixed sinusoids plus √E-scaled tokens (the seq2seq
# class defaults to learned positions and unscaled tokens instead).
PAPER_EMBEDDING = {"position": "sinusoidal", "scale_embeddings": True}

PRESETS = {
    "bert_tiny": {
        "family": "bert",
        "config": _sizes(30522, 2, 128, 2, 512),
        "parameters": 4_385_920,
    },
    "bert_base": {
        "family": "bert",
        "config": _sizes(30522, 12, 768, 12, 512),
        "parameters": 109_482_240,
    },
    "gpt2_tiny": {
        "family": "gpt2",
        "config": _sizes(50257, 2, 128, 2, 1024),
        "parameters": 6_960_768,
    },
    "gpt2_small": {
        "family": "gpt2",
        "config": _sizes(50257, 12, 768, 12, 1024),
        "parameters": 124_439_808,
    },
    "gpt2_medium": {
        "family": "gpt2",
        "config": _sizes(50257, 24, 1024, 16, 1024),
        "parameters": 354_823_168,
    },
    "seq2seq_tiny": {
        "family": "seq2seq",
        "config": {**_sizes(8000, 2, 128, 4, 256), **PAPER_EMBEDDING},
        "parameters": 1_949_696,
    },
    "seq2seq_base": {
        "family": "seq2seq",
        "config": {**_sizes(37000, 6, 512, 8, 256), **PAPER_EMBEDDING},
        "parameters": 63_082_496,
    },
    # Images: ViT-B/16 and ViT-L/16 on 224×224 ImageNet-1k; a tiny one for tests.
    "vit_tiny": {
        "family": "vit",
        "config": _vit_sizes(8, 2, 10, 2, 32, 2),
        "parameters": 26_794,
    },
    "vit_base": {
        "family": "vit",
        "config": _vit_sizes(224, 16, 1000, 12, 768, 12),
        "parameters": 86_567_656,
    },
    "vit_large": {
        "family": "vit",
        "config": _vit_sizes(224, 16, 1000, 24, 1024, 16),
        "parameters": 304_326_632,
    },
}
