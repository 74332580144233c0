"""Do our GPT-2 and BERT defaults learn from scratch as KerasHub's do?

The check issue #28 asked for after the ViT and seq2seq initializer fixes:
each of our models next to KerasHub's backbone of the same architecture and
size, trained with the same recipe, data order and seed. Random weights as
each library draws them (ours and KerasHub's both N(0, 0.02²)-style for these
two families, differing in details such as truncation).

- `gpt`: character-level language model on the packaged Tiny Shakespeare,
  2 layers, 4 heads, 128 hidden, 512 feed-forward, context 64, no dropout,
  Adam 1e-3, batch 32, 600 steps; held-out loss (nats per character) over 40
  batches of the last tenth. KerasHub: `GPT2Backbone` with logits through
  its transposed token embedding (as `GPT2CausalLM`).
- `bert`: sentence classification from scratch on the generated sentiment
  sentences of `keras_transformer.cli.datasets` (4,000 train, 1,000 test),
  a 2,000-piece WordPiece vocabulary, 2 layers, 2 heads, 128 hidden, 512
  feed-forward, sequence length 32, dropout 0.1, Adam 1e-3, batch 32, 2
  epochs; held-out accuracy and loss. KerasHub:
  `BertBackbone` under `BertTextClassifier(preprocessor=None)`; both read
  the same packed `{"token_ids", "segment_ids", "padding_mask"}`.

    python benchmarks/gpt_bert_init.py --seeds 0 1 2
"""

import argparse
import json
import time

import keras
import numpy as np
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.cli import datasets

GPT = dict(num_layers=2, num_heads=4, hidden_dim=128, intermediate_dim=512)
BERT = dict(num_layers=2, num_heads=2, hidden_dim=128, intermediate_dim=512)
CONTEXT, BATCH, STEPS, EVAL_BATCHES = 64, 32, 600, 40
SEQUENCE_LENGTH, TRAIN, TEST, EPOCHS = 32, 4000, 1000, 2


def gpt_data(seed):
    text = datasets.tiny_shakespeare()
    split = len(text) * 9 // 10
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary([text]))
    ids = tokenizer([text]).flat_values.numpy()

    def windows(part, count, rng):
        starts = rng.integers(0, len(part) - CONTEXT - 1, count)
        chunks = np.stack([part[s : s + CONTEXT + 1] for s in starts])
        return chunks[:, :-1], chunks[:, 1:]

    rng = np.random.default_rng(seed)
    train = windows(ids[:split], STEPS * BATCH, rng)
    test = windows(ids[split:], EVAL_BATCHES * BATCH, np.random.default_rng(99))
    return tokenizer.vocabulary_size(), train, test


def gpt_models(vocabulary_size):
    import keras_hub

    ours = kt.models.gpt2(vocabulary_size, max_sequence_length=CONTEXT,
                          dropout=0.0, **GPT)  # fmt: skip
    backbone = keras_hub.models.GPT2Backbone(
        vocabulary_size, max_sequence_length=CONTEXT, dropout=0.0, **GPT
    )
    token_ids = keras.Input((None,), dtype="int32")
    hidden = backbone(
        {"token_ids": token_ids, "padding_mask": keras.ops.ones_like(token_ids)}
    )
    logits = backbone.token_embedding(hidden, reverse=True)
    return {"ours": ours, "keras_hub": keras.Model(token_ids, logits)}


def bert_data(seed):
    rows = datasets.sentiment_sentences(TRAIN + TEST, seed=1000 + seed)
    texts = [text for text, _ in rows]
    names = sorted({label for _, label in rows})
    labels = np.array([names.index(label) for _, label in rows], "int32")
    vocabulary = kt.text.build_wordpiece_vocabulary(
        texts[:TRAIN], vocabulary_size=2000, verbose=0
    )
    tokenizer = kt.text.WordPieceTokenizer(vocabulary)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    packed = kt.text.pack_segments(
        [tokenizer(tf.constant(texts))], SEQUENCE_LENGTH, cls, sep
    )
    features = {name: value.numpy() for name, value in packed.items()}
    part = {"train": slice(0, TRAIN), "test": slice(TRAIN, None)}
    return (
        len(vocabulary),
        len(names),
        {
            key: ({k: v[s] for k, v in features.items()}, labels[s])
            for key, s in part.items()
        },
    )


def bert_models(vocabulary_size, num_classes):
    import keras_hub

    ours = kt.models.bert_classifier(
        kt.models.bert(
            vocabulary_size, max_sequence_length=SEQUENCE_LENGTH, **BERT
        ),  # fmt: skip
        num_classes=num_classes,
    )
    theirs = keras_hub.models.BertTextClassifier(
        keras_hub.models.BertBackbone(
            vocabulary_size, max_sequence_length=SEQUENCE_LENGTH, **BERT
        ),
        num_classes=num_classes,
        preprocessor=None,
    )
    return {"ours": ours, "keras_hub": theirs}


def run_gpt(name, seed):
    vocabulary_size, (x, y), (test_x, test_y) = gpt_data(seed)
    keras.utils.set_random_seed(seed)
    model = gpt_models(vocabulary_size)[name]
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    start = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    seconds = time.perf_counter() - start
    loss = model.evaluate(test_x, test_y, batch_size=BATCH, verbose=0)
    return {"family": "gpt", "model": name, "seed": seed,
            "parameters": model.count_params(), "held_out_loss": round(loss, 4),
            "seconds": round(seconds, 1)}  # fmt: skip


def run_bert(name, seed):
    vocabulary_size, num_classes, data = bert_data(seed)
    keras.utils.set_random_seed(seed)
    model = bert_models(vocabulary_size, num_classes)[name]
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    x, y = data["train"]
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=0)
    seconds = time.perf_counter() - start
    loss, accuracy = model.evaluate(*data["test"], batch_size=BATCH, verbose=0)
    return {"family": "bert", "model": name, "seed": seed,
            "parameters": model.count_params(), "held_out_loss": round(loss, 4),
            "accuracy": round(accuracy, 4), "seconds": round(seconds, 1)}  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--families", nargs="+", default=["gpt", "bert"])
    parser.add_argument("--results", help="JSON-lines file the runs append to")
    args = parser.parse_args()
    runs = {"gpt": run_gpt, "bert": run_bert}
    for family in args.families:
        for seed in args.seeds:
            for name in ("ours", "keras_hub"):
                row = runs[family](name, seed)
                print(json.dumps(row), flush=True)
                if args.results:
                    with open(args.results, "a") as file:
                        file.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
