"""`train gpt2`: a GPT-2 language model on plain text.

The text is tokenized line by line into one stream; each step's batch is
`batch_size` windows of `context + 1` tokens at seeded random starts; the
held-out measure is the loss per token (per character for the character
tokenizer) and its perplexity; the export and the samples are
`kt.tasks.TextGenerator`'s.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer import models, tasks, training
from keras_transformer.cli import datasets, scores
from keras_transformer.cli.batches import token_stream
from keras_transformer.cli.data import read_text_file, split_text
from keras_transformer.cli.errors import CommandError
from keras_transformer.cli.recipe import Recipe
from keras_transformer.cli.run import evaluate_loss
from keras_transformer.cli.settings import schedule
from keras_transformer.cli.tokenizers import end_token, load_tokenizer

# `train gpt2 --from PATH --lora RANK`: the adapted projections, and the
# adapter file written beside model.keras.
LORA_TARGETS = ("query", "value")
ADAPTER = "adapter.safetensors"


def load_generator(args):
    """The `TextGenerator` of a `train gpt2` folder (`args.model`), with
    `args.lora` applied and `args.quantize` done (`generate`, `export`)."""
    model = keras.saving.load_model(os.path.join(args.model, "model.keras"))
    tokenizer = load_tokenizer(os.path.join(args.model, "tokenizer.json"))
    try:
        validation.check_class("model", model, [models.GPT2])
    except ValueError:
        raise CommandError(
            f"--model {args.model} holds a {type(model).__name__}, not a gpt2 model"
        ) from None
    if args.lora:
        model.load_lora(args.lora)
        # Folded in: decoding then reads one kernel per projection, not the
        # kernel and the two LoRA matrices at every step.
        model.merge_lora()
    if args.quantize:
        model.quantize(args.quantize)
    return tasks.TextGenerator(model, tokenizer, end_token=end_token(tokenizer))


class GPT2Recipe(Recipe):
    """Defaults: nanoGPT's CPU shakespeare-char recipe (4 layers, 4 heads,
    128 hidden, context 64, no dropout) with a shorter cosine schedule and
    twice its learning rate, which the short default run needs;
    `--steps 2000` is nanoGPT's length."""

    name = "gpt2"
    defaults = dict(
        layers=4, heads=4, hidden=128, context=64, dropout=0.0, tokenizer="char",
        vocabulary_size=None, batch_size=12, learning_rate=2e-3, steps=1000,
    )  # fmt: skip
    data_unit = "characters"
    checkpoint_model_type = "gpt2"
    preset_sets_context = True
    # Exact round trips for language modelling (newlines included).
    sentencepiece_options = dict(
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
    )
    weight_decay = 0.1
    beta_2 = 0.99
    supports_lora = True

    def builtin_data(self):
        return datasets.tiny_shakespeare(), "Tiny Shakespeare (built in)"

    def read_examples(self, path, flag, notes):
        return read_text_file(path, flag)

    def split(self, examples):
        return split_text(examples)

    def refine(self, settings, kind, args):
        if kind is None and settings["tokenizer"] == "wordpiece":
            raise CommandError(
                "--tokenizer wordpiece does not fit gpt2: WordPiece drops "
                "whitespace and case information a language model must "
                "generate (use char, bpe or sentencepiece)"
            )

    def train(self, run):
        s = run.settings
        tokenizer = run.make_tokenizer(run.train_data.splitlines(keepends=True))
        train = token_stream(tokenizer, run.train_data)
        held_out = token_stream(tokenizer, run.held_out)
        with run.scope():
            if run.kind == "huggingface":
                model = models.from_pretrained(s["from"])
            elif run.kind == "ours":
                model = run.load_previous()
            else:
                model = models.gpt2(
                    tokenizer.vocabulary_size(),
                    max_sequence_length=s["context"],
                    **run.sizes(),
                )
            if s.get("lora"):
                model.enable_lora(s["lora"], targets=LORA_TARGETS)
        context = s["context"]
        if context > model.max_sequence_length:
            raise CommandError(
                f"--context {context} exceeds the model's maximum of "
                f"{model.max_sequence_length} tokens"
            )
        for name, stream in (("training", train), ("held-out", held_out)):
            if len(stream) < context + 2:
                raise CommandError(
                    f"the {name} text has {len(stream)} tokens, fewer than one "
                    f"window of --context {context} + 2: give more text or a "
                    "smaller --context"
                )
        steps, every = schedule(s, len(train) // context)
        starts = np.random.default_rng(s["seed"]).integers(
            0, len(train) - context - 1, size=(steps, s["batch_size"])
        )
        windows = starts[..., None] + np.arange(context + 1)
        start_step = run.start_step(every)
        stream = tf.constant(train)
        batches = (
            tf.data.Dataset.from_tensor_slices(windows[start_step:])
            .map(lambda w: tf.gather(stream, w))
            .map(lambda w: (w[:, :-1], w[:, 1:]))
            .prefetch(tf.data.AUTOTUNE)
        )
        count = (len(held_out) - 1) // context
        held_x = held_out[: count * context].reshape(count, context)
        held_y = held_out[1 : count * context + 1].reshape(count, context)
        probe = np.linspace(0, count - 1, min(count, 256)).astype(int)
        with run.scope():
            model.compile(
                optimizer=run.optimizer(steps),
                loss=training.MaskedSparseCategoricalCrossentropy(),
                jit_compile=run.jit_compile(),
            )
        first = tf.gather(stream, windows[0])
        initial = run.initial_loss(model, first[:, :-1], first[:, 1:])
        run.announce(model, tokenizer, steps, every)
        history = run.fit(
            model,
            batches,
            (held_x[probe], held_y[probe]),
            steps,
            every,
            start_step,
        )
        loss = evaluate_loss(model, held_x, held_y, batch_size=64)
        unit = "character" if s["tokenizer"] == "char" and run.kind is None else "token"
        if s.get("lora"):
            model.save_lora(os.path.join(run.work, ADAPTER))
        generator = tasks.TextGenerator(
            model, tokenizer, end_token=end_token(tokenizer)
        )
        generator.export(
            run.export_path(), max_new_tokens=min(200, model.max_sequence_length - 1)
        )
        results = {
            f"held-out loss (nats per {unit})": loss,
            "held-out perplexity": scores.perplexity(loss),
            "loss before training": initial,
            "uniform guess loss": float(np.log(tokenizer.vocabulary_size() - 1)),
            "steps": steps,
            "tokens seen": steps * s["batch_size"] * context,
        }
        results["samples"] = self.samples(run, generator)
        run.finish(model, tokenizer, results)
        return results, history

    def samples(self, run, generator):
        """`run.samples` continuations of held-out lines' first characters,
        prompt included (top-k 10 at temperature 0.8, up to the end token):
        `kt.tasks.TextGenerator.generate`."""
        if not run.samples:
            return []
        lines = [line for line in run.held_out.splitlines() if line.strip()]
        picks = np.linspace(0, len(lines) - 1, run.samples).astype(int)
        prompts = [lines[i][:16] for i in picks]
        limit = generator.model.max_sequence_length
        return generator.generate(
            prompts,
            max_new_tokens=max(1, min(100, limit - limit // 2)),
            sampler="top_k",
            top_k=10,
            temperature=0.8,
            seed=run.settings["seed"],
            return_full_text=True,
        )

    def evaluate(self, args, config, examples, notes):
        """Loss per token and perplexity on consecutive windows of the
        folder's context."""
        model = keras.saving.load_model(os.path.join(args.model, "model.keras"))
        tokenizer = load_tokenizer(os.path.join(args.model, "tokenizer.json"))
        stream = token_stream(tokenizer, examples)
        context = config.get("settings", {}).get("context") or model.max_sequence_length
        count = (len(stream) - 1) // context
        if count < 1:
            raise CommandError(
                f"--data {args.data}: {len(stream)} tokens, fewer than one "
                f"window of {context + 1}"
            )
        x = stream[: count * context].reshape(count, context)
        y = stream[1 : count * context + 1].reshape(count, context)
        model.compile(loss=training.MaskedSparseCategoricalCrossentropy())
        loss = evaluate_loss(model, x, y, batch_size=args.batch_size)
        return {
            "loss (nats per token)": loss,
            "perplexity": scores.perplexity(loss),
            "tokens": count * context,
        }
