"""`train seq2seq`: an encoder-decoder translator on sentence pairs (TSV:
source<TAB>target).

Targets are framed as `[START] target [END]`; source and target lengths are
the longest tokenized texts (capped by `--context`); the held-out measures
are corpus BLEU, chrF and exact matches of the export's translations; the
export is `kt.tasks.Translator.export`'s.
"""

import os

import numpy as np

from keras_transformer import models, tasks, training
from keras_transformer.cli import datasets, scores
from keras_transformer.cli.batches import (
    epoch_order,
    fitted_length,
    pad_rows,
    step_batches,
    token_ids,
)
from keras_transformer.cli.errors import CommandError
from keras_transformer.cli.recipe import MAX_CONTEXT_FROM_DATA, Recipe
from keras_transformer.cli.report import write_predictions
from keras_transformer.cli.serving import load_export, translate_all
from keras_transformer.cli.settings import schedule

SACREBLEU_NOTE = 'BLEU and chrF need sacrebleu: pip install "keras-transformer[cli]"'


class Seq2SeqRecipe(Recipe):
    name = "seq2seq"
    defaults = dict(
        layers=2, heads=4, hidden=64, context=None, dropout=0.0, tokenizer=None,
        vocabulary_size=None, batch_size=64, learning_rate=2e-3, steps=600,
    )  # fmt: skip

    def builtin_data(self):
        pairs = datasets.number_pairs(9000, maximum=10_000)
        return pairs, "number words -> digits (built in)"

    def example(self, fields):
        return fields[0], fields[1]

    def refine(self, settings, kind, args):
        if settings["tokenizer"] is None:
            # Characters fit the built-in numbers; subwords a real corpus.
            settings["tokenizer"] = "char" if args.data is None else "sentencepiece"

    def train(self, run):
        s = run.settings
        sources = [a for a, _ in run.train_data]
        targets = [b for _, b in run.train_data]
        tokenizer = run.make_tokenizer(sources + targets)
        for token in ("[START]", "[END]"):
            if tokenizer.token_to_id(token) is None:
                raise CommandError(f"the tokenizer has no {token} token")
        start_id = tokenizer.token_to_id("[START]")
        end_id = tokenizer.token_to_id("[END]")
        with run.scope():
            if run.kind == "ours":
                model = run.load_previous()
                limit = model.max_sequence_length
            else:
                model, limit = None, s["context"] or MAX_CONTEXT_FROM_DATA
        source_length = fitted_length(tokenizer, sources, 0, limit)
        target_length = fitted_length(tokenizer, targets, 2, limit)
        with run.scope():
            if model is None:
                model = models.seq2seq(
                    tokenizer.vocabulary_size(),
                    max_sequence_length=max(source_length, target_length),
                    **run.sizes(),
                )

        def encode(rows):
            source = pad_rows(token_ids(tokenizer, [a for a, _ in rows]), source_length)
            target = [
                np.concatenate([[start_id], row, [end_id]])
                for row in token_ids(tokenizer, [b for _, b in rows])
            ]
            target = pad_rows(target, target_length)
            return source, target[:, :-1], target[:, 1:]

        train_source, train_in, train_out = encode(run.train_data)
        held = encode(run.held_out)
        steps, every = schedule(s, len(train_source))
        order = epoch_order(len(train_source), steps, s["batch_size"], s["seed"])
        start_step = run.start_step(every)
        batches = step_batches([train_source, train_in, train_out], order, start_step)
        batches = batches.map(
            lambda a, b, c: ({"encoder_token_ids": a, "decoder_token_ids": b}, c)
        )
        with run.scope():
            model.compile(
                # Adam (no weight decay); kt.training's clips the global
                # batch's gradient under --distribute, as on one device.
                optimizer=training.AdamW(
                    training.warmup_cosine_decay(
                        s["learning_rate"], steps // 10, steps, s["learning_rate"] / 10
                    ),
                    weight_decay=0.0,
                    beta_2=0.98,
                    global_clipnorm=1.0,
                ),
                loss=training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.05),
                metrics=[training.MaskedAccuracy()],
                jit_compile=run.jit_compile(),
            )
        first = order[0]
        initial = run.initial_loss(
            model,
            {
                "encoder_token_ids": train_source[first],
                "decoder_token_ids": train_in[first],
            },
            train_out[first],
        )
        run.announce(model, tokenizer, steps, every)
        validation = (
            {"encoder_token_ids": held[0], "decoder_token_ids": held[1]},
            held[2],
        )
        history = run.fit(model, batches, validation, steps, every, start_step)
        path = run.export_path()
        tasks.Translator(model, tokenizer).export(
            path, max_new_tokens=target_length - 1
        )
        test = run.held_out[:500]
        hypotheses = translate_all(path, [a for a, _ in test])
        translation = scores.translation_scores(hypotheses, [b for _, b in test])
        results = {
            "held-out BLEU": translation["bleu"],
            "held-out chrF": translation["chrf"],
            "held-out exact-match accuracy": translation["exact_match"],
            "loss before training": initial,
            "steps": steps,
            "examples": [
                f"{a} -> {h}" for (a, _), h in zip(test, hypotheses, strict=False)
            ][: run.samples],
        }
        if translation["bleu"] is None:
            run.notes.append(SACREBLEU_NOTE)
        run.finish(model, tokenizer, results)
        return results, history

    def evaluate(self, args, config, examples, notes):
        """Corpus BLEU, chrF and exact matches of the export's translations."""
        load_export(args.model, "translate")  # a clear error if it cannot
        hypotheses = translate_all(
            os.path.join(args.model, "saved_model"),
            [s for s, _ in examples],
            args.batch_size,
        )
        result = scores.translation_scores(hypotheses, [t for _, t in examples])
        write_predictions(args.predictions, hypotheses)
        if result["bleu"] is None:
            notes.append(SACREBLEU_NOTE)
        return {
            "sentences": len(examples),
            "BLEU": result["bleu"],
            "chrF": result["chrf"],
            "exact-match accuracy": result["exact_match"],
        }
