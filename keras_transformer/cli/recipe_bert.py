"""`train bert`: a BERT classifier on labelled text (TSV: text<TAB>label,
the label in the last column).

Texts are packed as `[CLS] text [SEP]` to one length (the longest
tokenized text, or `--context`); the held-out measures are accuracy,
macro-F1 and the confusion matrix; the export is
`kt.tasks.TextClassifier.export`'s.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer import models, tasks, text
from keras_transformer.cli import datasets, scores
from keras_transformer.cli.batches import epoch_order, fitted_length, step_batches
from keras_transformer.cli.errors import CommandError
from keras_transformer.cli.recipe import MAX_CONTEXT_FROM_DATA, Recipe
from keras_transformer.cli.report import write_predictions
from keras_transformer.cli.serving import load_export
from keras_transformer.cli.settings import schedule


class BERTRecipe(Recipe):
    name = "bert"
    defaults = dict(
        layers=2, heads=4, hidden=64, context=None, dropout=0.1,
        tokenizer="wordpiece", vocabulary_size=None, batch_size=32,
        learning_rate=1e-3, steps=300,
    )  # fmt: skip
    held_out_fraction = 0.2
    checkpoint_model_type = "bert"
    subword_vocabulary_size = 2000

    def builtin_data(self):
        return datasets.sentiment_sentences(4000), "generated reviews (built in)"

    def example(self, fields):
        # The label is the last column; the text the others.
        return "\t".join(fields[:-1]), fields[-1].strip()

    def train(self, run):
        s = run.settings
        class_names = sorted({label for _, label in run.train_data})
        unknown = sorted({label for _, label in run.held_out} - set(class_names))
        if unknown:
            raise CommandError(
                f"held-out labels {unknown[:5]} never occur in the training data"
            )
        if len(class_names) < 2:
            raise CommandError(
                f"the training data has one label ({class_names[0]!r}): a "
                "classifier needs at least two"
            )
        index = {name: i for i, name in enumerate(class_names)}
        texts = [t for t, _ in run.train_data]
        tokenizer = run.make_tokenizer(texts)
        with run.scope():
            backbone, model = self.model(run, tokenizer, class_names)
        length = s["context"] or fitted_length(
            tokenizer,
            texts,
            2,
            min(MAX_CONTEXT_FROM_DATA, backbone.max_sequence_length),
        )
        if length > backbone.max_sequence_length:
            raise CommandError(
                f"--context {length} exceeds the model's maximum of "
                f"{backbone.max_sequence_length} tokens"
            )
        cls_id, sep_id = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))

        def encode(rows):
            ids = text.pack_segments(
                [tokenizer(tf.constant([t for t, _ in rows]))], length, cls_id, sep_id
            )
            labels = np.array([index[label] for _, label in rows], np.int32)
            return {k: np.asarray(v) for k, v in ids.items()}, labels

        train_x, train_y = encode(run.train_data)
        held_x, held_y = encode(run.held_out)
        steps, every = schedule(s, len(train_y))
        order = epoch_order(len(train_y), steps, s["batch_size"], s["seed"])
        start_step = run.start_step(every)
        keys = sorted(train_x)
        batches = step_batches(
            [train_x[k] for k in keys] + [train_y], order, start_step
        )
        batches = batches.map(lambda *a: (dict(zip(keys, a[:-1], strict=True)), a[-1]))
        with run.scope():
            model.compile(
                optimizer=run.optimizer(steps),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
                jit_compile=run.jit_compile(),
            )
        first = order[0]
        initial = run.initial_loss(
            model, {k: v[first] for k, v in train_x.items()}, train_y[first]
        )
        run.announce(model, tokenizer, steps, every)
        history = run.fit(model, batches, (held_x, held_y), steps, every, start_step)
        logits = model.predict(held_x, batch_size=64, verbose=0)
        report = scores.classification_report(
            held_y.tolist(), np.argmax(logits, -1).tolist(), class_names
        )
        tasks.TextClassifier(
            model, tokenizer, class_names=class_names, sequence_length=length
        ).export(run.export_path())
        results = {
            "held-out accuracy": report["accuracy"],
            "held-out macro-F1": report["macro_f1"],
            "majority-class accuracy": float(
                np.max(np.bincount(held_y, minlength=len(class_names))) / len(held_y)
            ),
            "loss before training": initial,
            "steps": steps,
            "sequence length": length,
            "confusion matrix": scores.format_confusion_matrix(
                report["confusion_matrix"], class_names
            ),
        }
        s["class_names"] = class_names
        run.finish(model, tokenizer, results)
        return results, history

    def model(self, run, tokenizer, class_names):
        """`(backbone, classifier)`: a fine-tuned folder's (its classifier
        when its classes are these), a checkpoint's backbone, or new."""
        s = run.settings
        if run.kind == "ours":
            previous = run.load_previous()
            backbone = previous.backbone
            old = validation.read_json(os.path.join(s["from"], "config.json"))
            if old.get("settings", {}).get("class_names") == class_names:
                return backbone, previous
        elif run.kind == "huggingface":
            loaded = models.from_pretrained(s["from"])
            backbone = getattr(loaded, "backbone", loaded)
        else:
            backbone = models.bert(
                tokenizer.vocabulary_size(),
                max_sequence_length=s["context"] or MAX_CONTEXT_FROM_DATA,
                **run.sizes(),
            )
        return backbone, models.bert_classifier(
            backbone, num_classes=len(class_names), dropout=s["dropout"]
        )

    def evaluate(self, args, config, examples, notes):
        """Accuracy, macro-F1 and the confusion matrix of the export."""
        class_names = config["settings"]["class_names"]
        unknown = sorted({label for _, label in examples} - set(class_names))
        if unknown:
            raise CommandError(
                f"--data {args.data}: labels {unknown[:5]} are not among the "
                f"model's classes {class_names}"
            )
        classify = load_export(args.model, "classify")
        predicted = []
        for i in range(0, len(examples), args.batch_size):
            batch = tf.constant([t for t, _ in examples[i : i + args.batch_size]])
            predicted.extend(
                label.decode() if isinstance(label, bytes) else class_names[int(label)]
                for label in classify(text=batch)["label"].numpy()
            )
        report = scores.classification_report(
            [label for _, label in examples], predicted, class_names
        )
        write_predictions(args.predictions, predicted)
        return {
            "examples": len(examples),
            "accuracy": report["accuracy"],
            "macro-F1": report["macro_f1"],
            "confusion matrix": scores.format_confusion_matrix(
                report["confusion_matrix"], class_names
            ),
        }
