"""Preset sizes of the three families, with the parameter counts they build to.

`parameters` is what `model.count_params()` gives for the backbone factory's
model (tests check it). Published counts: BERT-base ≈110M, GPT-2 small
≈124M, GPT-2 medium ≈355M, Transformer base ≈65M in the paper (37k shared
BPE vocabulary, output projection tied to the shared embedding, as here; we
count 63.1M: the paper's figure is rounded and its vocabulary approximate).
"""

PRESETS = {
    # name: (factory, arguments, parameters)
    "bert_tiny": (
        "bert",
        dict(
            vocabulary_size=30522,
            num_layers=2,
            num_heads=2,
            hidden_dim=128,
            intermediate_dim=512,
            max_sequence_length=512,
        ),
        4_385_920,
    ),
    "bert_base": (
        "bert",
        dict(
            vocabulary_size=30522,
            num_layers=12,
            num_heads=12,
            hidden_dim=768,
            intermediate_dim=3072,
            max_sequence_length=512,
        ),
        109_482_240,
    ),
    "gpt2_tiny": (
        "gpt2",
        dict(
            vocabulary_size=50257,
            num_layers=2,
            num_heads=2,
            hidden_dim=128,
            intermediate_dim=512,
            max_sequence_length=1024,
        ),
        6_960_768,
    ),
    "gpt2_small": (
        "gpt2",
        dict(
            vocabulary_size=50257,
            num_layers=12,
            num_heads=12,
            hidden_dim=768,
            intermediate_dim=3072,
            max_sequence_length=1024,
        ),
        124_439_808,
    ),
    "gpt2_medium": (
        "gpt2",
        dict(
            vocabulary_size=50257,
            num_layers=24,
            num_heads=16,
            hidden_dim=1024,
            intermediate_dim=4096,
            max_sequence_length=1024,
        ),
        354_823_168,
    ),
    "transformer_tiny": (
        "seq2seq",
        dict(
            vocabulary_size=8000,
            num_layers=2,
            num_heads=4,
            hidden_dim=128,
            intermediate_dim=512,
            max_sequence_length=256,
        ),
        1_949_696,
    ),
    "transformer_base": (
        "seq2seq",
        dict(
            vocabulary_size=37000,
            num_layers=6,
            num_heads=8,
            hidden_dim=512,
            intermediate_dim=2048,
            max_sequence_length=256,
        ),
        63_082_496,
    ),
}


def preset_arguments(family, name, overrides):
    """The factory arguments of preset `name`, updated with `overrides`."""
    known = sorted(key for key, value in PRESETS.items() if value[0] == family)
    if name not in known:
        raise ValueError(
            f"Unknown {family} preset {name!r}. Known presets: {', '.join(known)}"
        )
    arguments = dict(PRESETS[name][1])
    arguments.update(
        {key: value for key, value in overrides.items() if value is not None}
    )
    return arguments
