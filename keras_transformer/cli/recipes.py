"""End-to-end training recipes behind `keras-transformer train`.

Each recipe takes data, trains a small model with `model.fit` (Keras progress
bars), measures what it learned on held-out data, and writes the `.keras`
model, the tokenizer and a string-serving SavedModel into a folder.
"""

import json
import os
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import export, generation, models, text, training


def _save_common(directory, model, tokenizer, config):
    model.save(os.path.join(directory, "model.keras"))
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(keras.saving.serialize_keras_object(tokenizer), f)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def _split(items, held_out):
    count = max(1, int(len(items) * held_out))
    return items[count:], items[:count]


def train_gpt2(lines, directory, steps=600, context=64, batch_size=32, verbose=1):
    """A character-level GPT-2 on `lines` (a list of strings)."""
    train_lines, test_lines = _split(lines, 0.1)
    held_out = sum(len(line) + 1 for line in test_lines)  # + [END] each
    if held_out < context + 1:
        raise ValueError(
            f"The held-out tenth of the data has {held_out} characters, fewer "
            f"than one window of context + 1 = {context + 1}: give more text."
        )
    vocabulary = text.build_char_vocabulary(train_lines)
    tokenizer = text.CharTokenizer(vocabulary)
    model = models.gpt2(
        len(vocabulary),
        num_layers=2,
        num_heads=4,
        hidden_dim=96,
        intermediate_dim=384,
        max_sequence_length=context,
    )
    model.compile(
        optimizer=training.AdamW(
            training.warmup_cosine_decay(2e-3, steps // 10, steps, 2e-4),
            weight_decay=0.1,
            global_clipnorm=1.0,
        ),
        loss=training.MaskedSparseCategoricalCrossentropy(),
    )
    data = text.causal_lm_dataset(
        tf.data.Dataset.from_tensor_slices(train_lines), tokenizer, context, batch_size
    )
    model.fit(
        data.repeat(), steps_per_epoch=steps, epochs=1, shuffle=False, verbose=verbose
    )
    test = text.causal_lm_dataset(
        tf.data.Dataset.from_tensor_slices(test_lines), tokenizer, context, batch_size
    )
    with warnings.catch_warnings():
        # Keras warns at the end of any dataset whose length tf.data cannot
        # tell (windows cut from a token stream); here the end is expected.
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        loss = float(model.evaluate(test, verbose=0))
    export.export_text_generator(
        model, tokenizer, os.path.join(directory, "saved_model"), max_new_tokens=48
    )
    prompts = [line.split(" ")[0] + " " for line in test_lines[:3]]
    prompt_ids = tokenizer(prompts).to_tensor().numpy()
    samples = generation.generate(
        model,
        prompt_ids,
        40,
        sampler="top_k",
        top_k=5,
        end_token_id=tokenizer.token_to_id("[END]"),
        seed=0,
    )
    _save_common(directory, model, tokenizer, {"task": "gpt2", "held_out_loss": loss})
    return {
        "held-out loss (nats per character)": loss,
        "uniform guess loss": float(np.log(len(vocabulary) - 1)),
        "samples": [
            tokenizer.detokenize(row[None]).numpy()[0].decode().split("[END]")[0]
            for row in samples
        ],
    }


def train_classifier(
    pairs, directory, steps=300, sequence_length=32, batch_size=32, verbose=1
):
    """A BERT-style classifier (from scratch) on `(text, label)` string pairs."""
    train_pairs, test_pairs = _split(pairs, 0.2)
    class_names = sorted({label for _, label in pairs})
    index = {name: i for i, name in enumerate(class_names)}
    vocabulary = text.build_wordpiece_vocabulary(
        [t for t, _ in train_pairs], vocabulary_size=2000, verbose=0
    )
    tokenizer = text.WordPieceTokenizer(vocabulary)

    def dataset(items):
        texts = tf.constant([t for t, _ in items])
        labels = tf.constant([index[label] for _, label in items], tf.int32)
        return text.classification_dataset(
            tf.data.Dataset.from_tensor_slices((texts, labels)),
            tokenizer,
            sequence_length,
            batch_size,
        )

    backbone = models.bert(
        len(vocabulary),
        num_layers=2,
        num_heads=4,
        hidden_dim=64,
        intermediate_dim=256,
        max_sequence_length=sequence_length,
    )
    model = models.bert_classifier(backbone, num_classes=len(class_names))
    model.compile(
        optimizer=training.AdamW(
            training.warmup_cosine_decay(1e-3, steps // 10, steps, 1e-5),
            weight_decay=0.01,
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(
        dataset(train_pairs).shuffle(64).repeat(),
        steps_per_epoch=steps,
        verbose=verbose,
    )
    _, accuracy = model.evaluate(dataset(test_pairs), verbose=0)
    export.export_classifier(
        model,
        tokenizer,
        os.path.join(directory, "saved_model"),
        class_names=class_names,
        sequence_length=sequence_length,
    )
    _save_common(
        directory,
        model,
        tokenizer,
        {"task": "bert", "class_names": class_names, "held_out_accuracy": accuracy},
    )
    return {
        "held-out accuracy": float(accuracy),
        "majority-class accuracy": max(
            np.mean([label == name for _, label in test_pairs]) for name in class_names
        ),
    }


def _length(texts, extra, maximum):
    """The longest text in characters plus `extra`, rounded up to 8, capped."""
    longest = max(len(t) for t in texts) + extra
    return min(maximum, -(-longest // 8) * 8)


def train_translator(
    pairs, directory, steps=600, max_sequence_length=128, batch_size=64, verbose=1
):
    """A character-level encoder-decoder on `(source, target)` string pairs.

    The source and target lengths are the longest training texts (in
    characters, rounded up to a multiple of 8), at most `max_sequence_length`:
    a short target side (digits, say) keeps the decoder cheap.
    """
    train_pairs, test_pairs = _split(pairs, 0.1)
    vocabulary = text.build_char_vocabulary([s + t for s, t in train_pairs])
    tokenizer = text.CharTokenizer(vocabulary)
    source_length = _length([s for s, _ in train_pairs], 0, max_sequence_length)
    target_length = _length([t for _, t in train_pairs], 1, max_sequence_length)
    model = models.seq2seq(
        len(vocabulary),
        num_layers=2,
        num_heads=4,
        hidden_dim=64,
        intermediate_dim=256,
        max_sequence_length=max(source_length, target_length),
        dropout=0.0,
    )
    model.compile(
        # Warm-up + cosine decay: at this size the paper's schedule peaks too
        # high for a short run (its peak is tied to the warm-up length).
        optimizer=keras.optimizers.Adam(
            training.warmup_cosine_decay(2e-3, steps // 10, steps, 2e-4),
            beta_2=0.98,
        ),
        loss=training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.05),
        metrics=[training.MaskedAccuracy()],
    )
    sources = tf.constant([s for s, _ in train_pairs])
    targets = tf.constant([t for _, t in train_pairs])
    data = text.translation_dataset(
        tf.data.Dataset.from_tensor_slices((sources, targets)),
        tokenizer,
        source_length,
        batch_size,
        target_sequence_length=target_length,
    )
    model.fit(
        data.shuffle(256).repeat(),
        steps_per_epoch=steps,
        shuffle=False,
        verbose=verbose,
    )
    path = os.path.join(directory, "saved_model")
    export.export_translator(
        model, tokenizer, tokenizer, path, max_new_tokens=target_length - 1
    )
    translate = tf.saved_model.load(path).signatures["translate"]
    test = test_pairs[:256]
    outputs = translate(sentences=tf.constant([s for s, _ in test]))["translation"]
    predictions = [p.decode() for p in outputs.numpy()]
    _save_common(directory, model, tokenizer, {"task": "seq2seq"})
    return {
        "held-out exact-match accuracy": float(
            np.mean([p == t for p, (_, t) in zip(predictions, test, strict=True)])
        ),
        "examples": [
            f"{s} -> {p}" for (s, _), p in zip(test[:3], predictions, strict=False)
        ],
    }
