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
86M and 307M). The `"llama"` family's presets are the configurations of
SmolLM2-135M, Qwen2.5-0.5B, TinyLlama-1.1B, Llama-3.2-1B and Mistral-7B-v0.1
(their vocabularies + 1, our padding id 0), counting what transformers counts
for them: `kt.models.Llama.parameter_count` computes each from its config
without making the weights.
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


def _llama_sizes(
    vocabulary_size,
    num_layers,
    num_heads,
    num_key_value_heads,
    hidden_dim,
    intermediate_dim,
    max_sequence_length,
    **options,
):
    return dict(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_key_value_heads=num_key_value_heads,
        hidden_dim=hidden_dim,
        intermediate_dim=intermediate_dim,
        max_sequence_length=max_sequence_length,
        **options,
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
    # Llama, Mistral and Qwen2 checkpoints' sizes; a tiny one for tests.
    "llama_tiny": {
        "family": "llama",
        "config": _llama_sizes(513, 2, 4, 2, 64, 128, 256),
        "parameters": 139_584,
    },
    "smollm2_135m": {
        "family": "llama",
        "config": _llama_sizes(
            49153,
            30,
            9,
            3,
            576,
            1536,
            8192,
            rope_theta=100000.0,
            tie_word_embeddings=True,
            layer_norm_epsilon=1e-5,
        ),  # fmt: skip
        "parameters": 134_515_008,
    },
    "qwen2_5_0_5b": {
        "family": "llama",
        "config": _llama_sizes(
            151937,
            24,
            14,
            2,
            896,
            4864,
            32768,
            rope_theta=1000000.0,
            attention_bias="qkv",
            tie_word_embeddings=True,
            layer_norm_epsilon=1e-6,
        ),  # fmt: skip
        "parameters": 494_032_768,
    },
    "tinyllama_1_1b": {
        "family": "llama",
        "config": _llama_sizes(
            32001, 22, 32, 4, 2048, 5632, 2048, layer_norm_epsilon=1e-5
        ),
        "parameters": 1_100_048_384,
    },
    "llama3_2_1b": {
        "family": "llama",
        "config": _llama_sizes(
            128257,
            16,
            32,
            8,
            2048,
            8192,
            131072,
            head_dim=64,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            tie_word_embeddings=True,
            layer_norm_epsilon=1e-5,
        ),  # fmt: skip
        "parameters": 1_235_814_400,
    },
    "mistral_7b": {
        "family": "llama",
        "config": _llama_sizes(
            32001,
            32,
            32,
            8,
            4096,
            14336,
            32768,
            sliding_window=4096,
            layer_norm_epsilon=1e-5,
        ),  # fmt: skip
        "parameters": 7_241_732_096,
    },
    # Gemma 3 (text): the configurations of gemma-3-270m and gemma-3-1b
    # (262,144 ids + our padding id 0), counting what transformers counts.
    "gemma3_270m": {
        "family": "gemma3",
        "config": _llama_sizes(262145, 18, 4, 1, 640, 2048, 32768),
        "parameters": 268_098_176,
    },
    "gemma3_1b": {
        "family": "gemma3",
        "config": _llama_sizes(262145, 26, 4, 1, 1152, 6912, 32768),
        "parameters": 999_885_952,
    },
    # T5 (v1.0: ReLU, tied) and FLAN-T5 (gated GELU, untied): 32,128 ids
    # + our padding id 0; counts as transformers counts the checkpoints.
    "t5_tiny": {
        "family": "t5",
        "config": dict(
            vocabulary_size=513,
            num_layers=2,
            num_heads=4,
            hidden_dim=64,
            intermediate_dim=128,
            max_sequence_length=256,
        ),  # fmt: skip
        "parameters": 197_632,
    },
    "t5_small": {
        "family": "t5",
        "config": dict(
            vocabulary_size=32129,
            num_layers=6,
            num_heads=8,
            hidden_dim=512,
            intermediate_dim=2048,
            key_dim=64,
        ),  # fmt: skip
        "parameters": 60_506_624,
    },
    "t5_base": {
        "family": "t5",
        "config": dict(
            vocabulary_size=32129,
            num_layers=12,
            num_heads=12,
            hidden_dim=768,
            intermediate_dim=3072,
            key_dim=64,
        ),  # fmt: skip
        "parameters": 222_903_552,
    },
    "flan_t5_small": {
        "family": "t5",
        "config": dict(
            vocabulary_size=32129,
            num_layers=8,
            num_heads=6,
            hidden_dim=512,
            intermediate_dim=1024,
            key_dim=64,
            feedforward="gated-gelu",
            tie_embeddings=False,
        ),  # fmt: skip
        "parameters": 76_961_152,
    },
    "flan_t5_base": {
        "family": "t5",
        "config": dict(
            vocabulary_size=32129,
            num_layers=12,
            num_heads=12,
            hidden_dim=768,
            intermediate_dim=2048,
            key_dim=64,
            feedforward="gated-gelu",
            tie_embeddings=False,
        ),  # fmt: skip
        "parameters": 247_577_856,
    },
    # Whisper: the checkpoints' configurations (vocabulary 51,865 + our
    # padding id), counting what transformers counts for them.
    "whisper_tiny": {
        "family": "whisper",
        "config": dict(
            vocabulary_size=51866,
            num_layers=4,
            num_heads=6,
            hidden_dim=384,
            intermediate_dim=1536,
            decoder_start_token_id=50259,
        ),  # fmt: skip
        "parameters": 37_760_640,
    },
    "whisper_base": {
        "family": "whisper",
        "config": dict(
            vocabulary_size=51866,
            num_layers=6,
            num_heads=8,
            hidden_dim=512,
            intermediate_dim=2048,
            decoder_start_token_id=50259,
        ),  # fmt: skip
        "parameters": 72_593_920,
    },
}
