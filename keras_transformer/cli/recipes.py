"""The training recipes behind `keras-transformer train`.

`prepare` turns the parsed command line into a `Run`: the data split into
training and held-out parts, every setting resolved (the task's defaults,
then the checkpoint's, then the flags), and nothing trained yet, so every
mistake is found before any work. `Run.train` then builds or loads the
tokenizer and the model, trains with `model.fit` (Keras progress bars;
resumable from backups in the work folder), measures the held-out data with
the metric people report for the task, and writes everything into the work
folder, which the command renames to `--output`.

Batches are a function of the step number alone (a seeded permutation of
the examples per epoch; seeded random windows of the token stream for GPT),
so a resumed run sees exactly the batches an uninterrupted one would.
"""

import csv
import hashlib
import json
import math
import os
import time
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer import export, generation, models, text, training
from keras_transformer.cli import datasets, scores

CHECKPOINT_SETTINGS = ("layers", "heads", "hidden", "intermediate", "preset")
TOKENIZER_SETTINGS = ("tokenizer", "vocabulary_size")

# Per task: the defaults of a run from scratch. GPT is nanoGPT's CPU
# shakespeare-char recipe (4 layers, 4 heads, 128 hidden, context 64, no
# dropout) with a shorter cosine schedule and twice its learning rate, which
# the short default run needs; `--steps 2000` is nanoGPT's length.
DEFAULTS = {
    "gpt2": dict(
        layers=4, heads=4, hidden=128, context=64, dropout=0.0, tokenizer="char",
        vocabulary_size=None, batch_size=12, learning_rate=2e-3, steps=1000,
    ),
    "bert": dict(
        layers=2, heads=4, hidden=64, context=None, dropout=0.1,
        tokenizer="wordpiece", vocabulary_size=None, batch_size=32,
        learning_rate=1e-3, steps=300,
    ),
    "seq2seq": dict(
        layers=2, heads=4, hidden=64, context=None, dropout=0.0, tokenizer=None,
        vocabulary_size=None, batch_size=64, learning_rate=2e-3, steps=600,
    ),
}  # fmt: skip
# Fine-tuning a checkpoint: the usual small learning rate and a few epochs.
FINE_TUNE = {"learning_rate": 5e-5, "epochs": 3.0}
MAX_CONTEXT_FROM_DATA = 128


class CommandError(Exception):
    """An error shown to the user as one line (exit status 2)."""


# ---------------------------------------------------------------- data


def load_data(task, path, validation_path):
    """`(train, held_out, description, notes)` for the task.

    gpt2: two strings (the held-out part is the last tenth, as nanoGPT
    splits); bert: lists of `(text, label)`; seq2seq: lists of
    `(source, target)`.
    """
    notes = []
    if path is None:
        if validation_path is not None:
            raise CommandError("--validation-data needs --data")
        if task == "gpt2":
            corpus = datasets.tiny_shakespeare()
            return (*_split_text(corpus), "Tiny Shakespeare (built in)", notes)
        if task == "bert":
            rows = datasets.sentiment_sentences(4000)
            return (*_split(rows, 0.2), "generated reviews (built in)", notes)
        rows = datasets.number_pairs(9000, maximum=10_000)
        return (*_split(rows, 0.1), "number words -> digits (built in)", notes)
    train = read_examples(task, path, "--data", notes)
    if validation_path is None:
        if task == "gpt2":
            train, held_out = _split_text(train)
        else:
            train, held_out = _split(train, 0.2 if task == "bert" else 0.1)
    else:
        held_out = read_examples(task, validation_path, "--validation-data", notes)
    return train, held_out, path, notes


def read_examples(task, path, flag, notes):
    """The examples in the file at `path`, in the form `load_data` gives for
    `task`; errors name `flag`, and skipped lines are added to `notes`."""
    if not os.path.isfile(path):
        raise CommandError(f"{flag} {path}: file not found")
    if task == "gpt2":
        corpus = datasets.read_text(path)
        if not corpus.strip():
            raise CommandError(f"{flag} {path}: no text in the file")
        return corpus
    rows, skipped = datasets.read_tsv(path)
    if skipped:
        notes.append(
            f"{path}: skipped {skipped} line(s) over "
            f"{datasets.MAX_LINE_CHARACTERS:,} characters"
        )
    if not rows:
        raise CommandError(f"{flag} {path}: no text in the file")
    if task == "bert":  # the label is the last column; the text the others
        return [("\t".join(f[:-1]), f[-1].strip()) for _, f in rows]
    return [(f[0], f[1]) for _, f in rows]


def _split_text(corpus):
    cut = int(len(corpus) * 0.9)
    newline = corpus.find("\n", cut)  # at a line end, if there is one near
    if 0 <= newline < cut + 1000:
        cut = newline + 1
    return corpus[:cut], corpus[cut:]


def _split(rows, held_out):
    count = max(1, int(len(rows) * held_out))
    if len(rows) < 2:
        raise CommandError(
            f"the data has {len(rows)} example: at least 2 are needed "
            "(one to train on, one held out)"
        )
    return rows[count:], rows[:count]


def file_digest(path):
    if path is None:
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------- checkpoints


def checkpoint_kind(path, task):
    """`"huggingface"` or `"ours"`, or a CommandError saying what is wrong."""
    if not os.path.isdir(path):
        raise CommandError(f"--from {path}: not a folder")
    try:
        config_path = os.path.join(path, "config.json")
        config = validation.read_json(config_path, missing_ok=True) or {}
    except ValueError as error:
        raise CommandError(f"--from {path}: {error}") from None
    if os.path.isfile(os.path.join(path, "model.keras")) and "task" in config:
        if config["task"] != task:
            raise CommandError(
                f"--from {path}: a `{config['task']}` model, not `{task}`"
            )
        return "ours"
    model_type = config.get("model_type")
    if model_type is None:
        raise CommandError(
            f"--from {path}: not a checkpoint (expected a Hugging Face "
            "config.json with model_type, or a folder written by `train`)"
        )
    wanted = {"gpt2": "gpt2", "bert": "bert"}.get(task)
    if model_type != wanted:
        raise CommandError(
            f"--from {path}: model_type {model_type!r} cannot train `{task}` "
            f"(supported: {'bert for bert, gpt2 for gpt2'})"
        )
    return "huggingface"


# ---------------------------------------------------------------- settings


def resolve(task, args, kind):
    """Every setting of the run, from the task's defaults, `--preset`, a
    checkpoint and the flags, in that order. Raises CommandError for flags
    that contradict each other."""
    settings = dict(DEFAULTS[task])
    given = {
        key: getattr(args, key)
        for key in (
            "layers", "heads", "hidden", "intermediate", "context", "dropout",
            "tokenizer", "vocabulary_size", "batch_size", "learning_rate",
            "steps", "epochs", "eval_every", "preset",
        )
        if getattr(args, key) is not None
    }  # fmt: skip
    if kind is not None:
        for key in CHECKPOINT_SETTINGS + TOKENIZER_SETTINGS:
            if key in given:
                flag = "--" + key.replace("_", "-")
                raise CommandError(
                    f"{flag} cannot be used with --from: the checkpoint fixes "
                    "the model's size and its tokenizer"
                )
        settings.update(FINE_TUNE)
        settings["steps"] = None
    if "preset" in given:
        preset = models.presets.PRESETS[given["preset"]]
        if preset["family"] != task:
            raise CommandError(
                f"--preset {given['preset']} is a {preset['family']} preset, not {task}"
            )
        config = preset["config"]
        settings.update(
            layers=config["num_layers"],
            heads=config["num_heads"],
            hidden=config["hidden_dim"],
            intermediate=config["intermediate_dim"],
        )
        if task == "gpt2" or "context" in given:
            settings["context"] = min(config["max_sequence_length"], 1024)
    if "epochs" in given:
        settings["steps"] = None
    if "steps" in given:
        settings["epochs"] = None
    settings.update(given)
    settings.setdefault("epochs", None)
    settings.setdefault("intermediate", None)
    if settings["intermediate"] is None and kind is None:
        settings["intermediate"] = 4 * settings["hidden"]
    if kind is None and settings["hidden"] % settings["heads"]:
        raise CommandError(
            f"--hidden {settings['hidden']} must be divisible by --heads "
            f"{settings['heads']}"
        )
    if task == "seq2seq" and settings["tokenizer"] is None:
        settings["tokenizer"] = "char" if args.data is None else "sentencepiece"
    if kind is None and task == "gpt2" and settings["tokenizer"] == "wordpiece":
        raise CommandError(
            "--tokenizer wordpiece does not fit gpt2: WordPiece drops "
            "whitespace and case information a language model must "
            "generate (use char, bpe or sentencepiece)"
        )
    settings["precision"] = args.precision
    settings["seed"] = args.seed
    settings["from"] = os.path.abspath(args.from_path) if args.from_path else None
    settings["task"] = task
    return settings


def schedule(settings, examples):
    """`(steps, eval_every)`: the run's length from --steps or --epochs
    (`examples`: training examples, or GPT windows, per epoch), and the
    evaluation/backup interval, a divisor of the steps."""
    if settings["steps"] is None:
        epochs = settings["epochs"] or 1.0
        steps = max(1, math.ceil(epochs * examples / settings["batch_size"]))
    else:
        steps = settings["steps"]
    every = settings.get("eval_every")
    if every is None:
        target = max(1, min(500, steps // 10))
        every = max(d for d in range(1, target + 1) if steps % d == 0)
    elif steps % every:
        raise CommandError(f"--eval-every {every} must divide the run's {steps} steps")
    return steps, every


# ---------------------------------------------------------------- tokenizers


SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]", "[START]", "[END]")


def build_tokenizer(kind, texts, vocabulary_size, task):
    """A new tokenizer of `kind` learned from `texts` (a list of strings).

    `vocabulary_size` None: every character for `char`, 2,000 subwords for
    bert and 4,000 otherwise."""
    if kind == "char":
        return text.CharTokenizer(text.build_char_vocabulary(texts, vocabulary_size))
    if vocabulary_size is None:
        vocabulary_size = 2000 if task == "bert" else 4000
    if kind == "wordpiece":
        vocabulary = text.build_wordpiece_vocabulary(
            texts, vocabulary_size=vocabulary_size, verbose=0
        )
        return text.WordPieceTokenizer(vocabulary)
    if kind == "bpe":
        vocabulary, merges = text.build_bpe_vocabulary(
            texts, vocabulary_size, special_tokens=SPECIAL_TOKENS, verbose=0
        )
        return text.BytePairTokenizer(vocabulary, merges)
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        raise CommandError(
            "--tokenizer sentencepiece needs the sentencepiece package: "
            'pip install "keras-transformer[cli]" (or choose --tokenizer '
            "char, wordpiece or bpe)"
        ) from None
    proto = text.train_sentencepiece(
        texts,
        vocabulary_size,
        **(
            # Exact round trips for language modelling (newlines included).
            dict(
                normalization_rule_name="identity",
                remove_extra_whitespaces=False,
                add_dummy_prefix=False,
            )
            if task == "gpt2"
            else {}
        ),
    )
    return text.SentencePieceTokenizer(proto)


def end_token(tokenizer):
    for token in ("[END]", "<|endoftext|>"):
        if token in tokenizer.get_vocabulary():
            return token
    return None


def save_tokenizer(tokenizer, path):
    with open(path, "w") as f:
        json.dump(keras.saving.serialize_keras_object(tokenizer), f)


def load_tokenizer(path):
    with open(path) as f:
        return keras.saving.deserialize_keras_object(json.load(f))


# ---------------------------------------------------------------- batches


def epoch_order(count, steps, batch_size, seed):
    """The example indices of every step, `(steps, batch_size)`: epoch e is
    the permutation `default_rng([seed, e])` of `range(count)`."""
    needed = steps * batch_size
    epochs = -(-needed // count)
    order = np.concatenate(
        [np.random.default_rng([seed, e]).permutation(count) for e in range(epochs)]
    )
    return order[:needed].reshape(steps, batch_size)


def _batches(arrays, order, start):
    """A dataset of `tuple(array[order[s]] for array in arrays)`, s >= start."""
    arrays = tuple(tf.constant(a) for a in arrays)
    dataset = tf.data.Dataset.from_tensor_slices(order[start:])
    return dataset.map(lambda i: tuple(tf.gather(a, i) for a in arrays)).prefetch(
        tf.data.AUTOTUNE
    )


def _pad(rows, length):
    out = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        row = row[:length]
        out[i, : len(row)] = row
    return out


def _ids(tokenizer, texts, batch=4096):
    """Ragged token ids of `texts` as a list of numpy arrays."""
    result = []
    for i in range(0, len(texts), batch):
        ids = tokenizer(tf.constant(texts[i : i + batch]))
        result.extend(row for row in ids.numpy())
    return result


def token_stream(tokenizer, corpus):
    """The corpus as one int32 token stream (tokenized in lines, newlines
    kept, so any tokenizer sees text of a bounded length)."""
    lines = corpus.splitlines(keepends=True) or [corpus]
    return np.concatenate([np.asarray(r, np.int32) for r in _ids(tokenizer, lines)])


# ---------------------------------------------------------------- callbacks


class HistoryLog(keras.callbacks.Callback):
    """Writes one row per evaluation interval to `history.csv`: step,
    training loss (the interval's mean), held-out loss, learning rate and
    seconds since the start. A resumed run keeps the rows up to its backup."""

    FIELDS = ["step", "loss", "val_loss", "learning_rate", "seconds"]

    def __init__(self, path, every, initial_step):
        super().__init__()
        self.path, self.every, self.initial_step = path, every, initial_step
        self.start = time.time()

    def on_train_begin(self, logs=None):
        rows = read_history(self.path)
        kept = [r for r in rows if int(r["step"]) <= self.initial_step]
        self.offset = float(kept[-1]["seconds"]) if kept else 0.0
        self._write(kept, "w")

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        row = {
            "step": (epoch + 1) * self.every,
            "loss": logs.get("loss"),
            "val_loss": logs.get("val_loss"),
            "learning_rate": float(
                keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)
            ),
            "seconds": round(self.offset + time.time() - self.start, 1),
        }
        self._write([row], "a")

    def _write(self, rows, mode):
        new = mode == "w" or not os.path.exists(self.path)
        with open(self.path, mode, newline="") as f:
            writer = csv.DictWriter(f, self.FIELDS)
            if new:
                writer.writeheader()
            writer.writerows(rows)


def read_history(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_history(history_path, png_path, title):
    """loss.png from history.csv; False where matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return False
    rows = read_history(history_path)
    steps = [int(r["step"]) for r in rows]
    figure, axes = pyplot.subplots(figsize=(6, 4))
    for key, label in (("loss", "training"), ("val_loss", "held-out")):
        values = [float(r[key]) if r[key] not in ("", None) else None for r in rows]
        if any(v is not None for v in values):
            axes.plot(steps, [np.nan if v is None else v for v in values], label=label)
    axes.set_xlabel("step")
    axes.set_ylabel("loss (nats per token)")
    axes.set_title(title)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png_path, dpi=100)
    pyplot.close(figure)
    return True


# ---------------------------------------------------------------- the run


class Run:
    """One `train` invocation, prepared and checked; `train()` does the work."""

    def __init__(self, task, settings, data, work, kind, resume, verbose, samples):
        self.task, self.settings, self.work = task, settings, work
        self.train_data, self.held_out, self.source, self.notes = data
        self.kind, self.resume, self.verbose, self.samples = (
            kind,
            resume,
            verbose,
            samples,
        )

    def train(self):
        keras.utils.set_random_seed(self.settings["seed"])
        keras.mixed_precision.set_global_policy(self.settings["precision"])
        try:
            return getattr(self, "_train_" + self.task)()
        finally:
            keras.mixed_precision.set_global_policy("float32")

    # -- shared pieces

    def _tokenizer(self, texts):
        path = os.path.join(self.work, "tokenizer.json")
        if self.resume and os.path.exists(path):
            return load_tokenizer(path)
        if self.kind == "huggingface":
            tokenizer = text.tokenizer_from_pretrained(self.settings["from"])
        elif self.kind == "ours":
            tokenizer = load_tokenizer(
                os.path.join(self.settings["from"], "tokenizer.json")
            )
        else:
            tokenizer = build_tokenizer(
                self.settings["tokenizer"],
                texts,
                self.settings["vocabulary_size"],
                self.task,
            )
        save_tokenizer(tokenizer, path)
        return tokenizer

    def _sizes(self):
        s = self.settings
        return dict(
            num_layers=s["layers"],
            num_heads=s["heads"],
            hidden_dim=s["hidden"],
            intermediate_dim=s["intermediate"],
            dropout=s["dropout"],
        )

    def _optimizer(self, steps):
        peak = self.settings["learning_rate"]
        warmup = min(100, steps // 10)
        return training.AdamW(
            training.warmup_cosine_decay(peak, warmup, steps, peak / 10),
            weight_decay=0.1 if self.task == "gpt2" else 0.01,
            beta_2=0.99 if self.task == "gpt2" else 0.999,
            global_clipnorm=1.0,
        )

    def _fit(self, model, batches, validation, steps, every, start_step):
        history = os.path.join(self.work, "history.csv")
        callbacks = [
            # Before the backup: an interval's row is on disk before the
            # backup that ends it (a resumed run drops rows past its backup).
            HistoryLog(history, every, start_step),
            *training.resumable_callbacks(os.path.join(self.work, "run")),
        ]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*shuffle=True.*")
            model.fit(
                batches,
                epochs=steps // every,
                steps_per_epoch=every,
                validation_data=validation,
                callbacks=callbacks,
                verbose=1,
            )
        plotted = plot_history(
            history, os.path.join(self.work, "loss.png"), f"train {self.task}"
        )
        if not plotted:
            self.notes.append("loss.png not drawn: matplotlib is not installed")
        return read_history(history)

    def _initial(self, model, x, y):
        """The loss on the first batch before any update (kept in the work
        folder, so a resumed run reports the original run's)."""
        path = os.path.join(self.work, "initial_loss.json")
        if self.resume and os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        loss = evaluate_loss(model, x, y)
        with open(path, "w") as f:
            json.dump(loss, f)
        return loss

    def _start_step(self, every):
        return training.resume_epoch(os.path.join(self.work, "run")) * every

    def _finish(self, model, tokenizer, results):
        model.save(os.path.join(self.work, "model.keras"))
        save_tokenizer(tokenizer, os.path.join(self.work, "tokenizer.json"))
        os.remove(os.path.join(self.work, "initial_loss.json"))
        config = {"task": self.task, "settings": self.settings, "results": results}
        with open(os.path.join(self.work, "config.json"), "w") as f:
            json.dump(config, f, indent=2, default=str)

    # -- gpt2

    def _train_gpt2(self):
        s = self.settings
        tokenizer = self._tokenizer(self.train_data.splitlines(keepends=True))
        train = token_stream(tokenizer, self.train_data)
        held_out = token_stream(tokenizer, self.held_out)
        if self.kind == "huggingface":
            model = models.from_pretrained(s["from"])
        elif self.kind == "ours":
            model = keras.saving.load_model(os.path.join(s["from"], "model.keras"))
        else:
            model = models.gpt2(
                tokenizer.vocabulary_size(),
                max_sequence_length=s["context"],
                **self._sizes(),
            )
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
        start_step = self._start_step(every)
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
        model.compile(
            optimizer=self._optimizer(steps),
            loss=training.MaskedSparseCategoricalCrossentropy(),
            jit_compile=True,
        )
        first = tf.gather(stream, windows[0])
        initial = self._initial(model, first[:, :-1], first[:, 1:])
        self._announce(model, tokenizer, steps, every, initial)
        history = self._fit(
            model,
            batches,
            (held_x[probe], held_y[probe]),
            steps,
            every,
            start_step,
        )
        loss = evaluate_loss(model, held_x, held_y, batch_size=64)
        unit = (
            "character" if s["tokenizer"] == "char" and self.kind is None else "token"
        )
        end = end_token(tokenizer)
        export.export_text_generator(
            model,
            tokenizer,
            os.path.join(self.work, "saved_model"),
            max_new_tokens=min(200, model.max_sequence_length - 1),
            end_token=end,
        )
        results = {
            f"held-out loss (nats per {unit})": loss,
            "held-out perplexity": scores.perplexity(loss),
            "loss before training": initial,
            "uniform guess loss": float(np.log(tokenizer.vocabulary_size() - 1)),
            "steps": steps,
            "tokens seen": steps * s["batch_size"] * context,
        }
        results["samples"] = self._samples(model, tokenizer, end)
        self._finish(model, tokenizer, results)
        return results, history

    def _samples(self, model, tokenizer, end):
        if not self.samples:
            return []
        lines = [line for line in self.held_out.splitlines() if line.strip()]
        picks = np.linspace(0, len(lines) - 1, self.samples).astype(int)
        prompts = [lines[i][:16] for i in picks]
        ids = tokenizer(tf.constant(prompts))
        ids = ids.to_tensor().numpy() if hasattr(ids, "to_tensor") else ids.numpy()
        ids = ids[:, : max(1, model.max_sequence_length // 2)]
        room = model.max_sequence_length - ids.shape[1]
        end_id = tokenizer.token_to_id(end) if end else None
        tokens = generation.generate(
            model,
            ids,
            max(1, min(100, room)),
            sampler="top_k",
            top_k=10,
            temperature=0.8,
            end_token_id=end_id,
            seed=self.settings["seed"],
        )
        tokens = np.asarray(tokens)
        if end_id is not None:  # cut each row at its end token
            for row in tokens:
                hits = np.flatnonzero(row == end_id)
                if hits.size:
                    row[hits[0] :] = 0
        return [
            t.decode("utf-8", "replace") for t in tokenizer.detokenize(tokens).numpy()
        ]

    # -- bert

    def _train_bert(self):
        s = self.settings
        class_names = sorted({label for _, label in self.train_data})
        unknown = sorted({label for _, label in self.held_out} - set(class_names))
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
        texts = [t for t, _ in self.train_data]
        tokenizer = self._tokenizer(texts)
        backbone, model = self._bert_model(tokenizer, class_names)
        length = s["context"] or _fitted_length(
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

        train_x, train_y = encode(self.train_data)
        held_x, held_y = encode(self.held_out)
        steps, every = schedule(s, len(train_y))
        order = epoch_order(len(train_y), steps, s["batch_size"], s["seed"])
        start_step = self._start_step(every)
        keys = sorted(train_x)
        batches = _batches([train_x[k] for k in keys] + [train_y], order, start_step)
        batches = batches.map(lambda *a: (dict(zip(keys, a[:-1], strict=True)), a[-1]))
        model.compile(
            optimizer=self._optimizer(steps),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=True,
        )
        first = order[0]
        initial = self._initial(
            model, {k: v[first] for k, v in train_x.items()}, train_y[first]
        )
        self._announce(model, tokenizer, steps, every, initial)
        history = self._fit(model, batches, (held_x, held_y), steps, every, start_step)
        logits = model.predict(held_x, batch_size=64, verbose=0)
        report = scores.classification_report(
            held_y.tolist(), np.argmax(logits, -1).tolist(), class_names
        )
        export.export_classifier(
            model,
            tokenizer,
            os.path.join(self.work, "saved_model"),
            class_names=class_names,
            sequence_length=length,
        )
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
        self.settings["class_names"] = class_names
        self._finish(model, tokenizer, results)
        return results, history

    def _bert_model(self, tokenizer, class_names):
        s = self.settings
        if self.kind == "ours":
            previous = keras.saving.load_model(os.path.join(s["from"], "model.keras"))
            backbone = previous.backbone
            old = validation.read_json(os.path.join(s["from"], "config.json"))
            if old.get("settings", {}).get("class_names") == class_names:
                return backbone, previous
        elif self.kind == "huggingface":
            loaded = models.from_pretrained(s["from"])
            backbone = getattr(loaded, "backbone", loaded)
        else:
            backbone = models.bert(
                tokenizer.vocabulary_size(),
                max_sequence_length=s["context"] or MAX_CONTEXT_FROM_DATA,
                **self._sizes(),
            )
        return backbone, models.bert_classifier(
            backbone, num_classes=len(class_names), dropout=s["dropout"]
        )

    # -- seq2seq

    def _train_seq2seq(self):
        s = self.settings
        sources = [a for a, _ in self.train_data]
        targets = [b for _, b in self.train_data]
        tokenizer = self._tokenizer(sources + targets)
        for token in ("[START]", "[END]"):
            if tokenizer.token_to_id(token) is None:
                raise CommandError(f"the tokenizer has no {token} token")
        start_id = tokenizer.token_to_id("[START]")
        end_id = tokenizer.token_to_id("[END]")
        if self.kind == "ours":
            model = keras.saving.load_model(os.path.join(s["from"], "model.keras"))
            limit = model.max_sequence_length
        else:
            model, limit = None, s["context"] or MAX_CONTEXT_FROM_DATA
        source_length = _fitted_length(tokenizer, sources, 0, limit)
        target_length = _fitted_length(tokenizer, targets, 2, limit)
        if model is None:
            model = models.seq2seq(
                tokenizer.vocabulary_size(),
                max_sequence_length=max(source_length, target_length),
                **self._sizes(),
            )

        def encode(rows):
            source = _pad(_ids(tokenizer, [a for a, _ in rows]), source_length)
            target = [
                np.concatenate([[start_id], row, [end_id]])
                for row in _ids(tokenizer, [b for _, b in rows])
            ]
            target = _pad(target, target_length)
            return source, target[:, :-1], target[:, 1:]

        train_source, train_in, train_out = encode(self.train_data)
        held = encode(self.held_out)
        steps, every = schedule(s, len(train_source))
        order = epoch_order(len(train_source), steps, s["batch_size"], s["seed"])
        start_step = self._start_step(every)
        batches = _batches([train_source, train_in, train_out], order, start_step)
        batches = batches.map(
            lambda a, b, c: ({"encoder_token_ids": a, "decoder_token_ids": b}, c)
        )
        model.compile(
            optimizer=keras.optimizers.Adam(
                training.warmup_cosine_decay(
                    s["learning_rate"], steps // 10, steps, s["learning_rate"] / 10
                ),
                beta_2=0.98,
                global_clipnorm=1.0,
            ),
            loss=training.MaskedSparseCategoricalCrossentropy(label_smoothing=0.05),
            metrics=[training.MaskedAccuracy()],
            jit_compile=True,
        )
        first = order[0]
        initial = self._initial(
            model,
            {
                "encoder_token_ids": train_source[first],
                "decoder_token_ids": train_in[first],
            },
            train_out[first],
        )
        self._announce(model, tokenizer, steps, every, initial)
        validation = (
            {"encoder_token_ids": held[0], "decoder_token_ids": held[1]},
            held[2],
        )
        history = self._fit(model, batches, validation, steps, every, start_step)
        path = os.path.join(self.work, "saved_model")
        export.export_translator(
            model, tokenizer, tokenizer, path, max_new_tokens=target_length - 1
        )
        test = self.held_out[:500]
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
            ][: self.samples],
        }
        if translation["bleu"] is None:
            self.notes.append(
                'BLEU and chrF need sacrebleu: pip install "keras-transformer[cli]"'
            )
        self._finish(model, tokenizer, results)
        return results, history

    def _announce(self, model, tokenizer, steps, every, initial):
        s = self.settings
        # What the layers compute in (a mixed policy keeps weights float32).
        compute = next(layer.compute_dtype for layer in model.layers if layer.weights)
        print(
            f"Model: {model.count_params():,} parameters; tokenizer: "
            f"{type(tokenizer).__name__} ({tokenizer.vocabulary_size():,} ids); "
            f"{steps:,} steps of {s['batch_size']}, held-out loss every "
            f"{every} steps; precision {s['precision']} (compute dtype: "
            f"{compute}).",
            flush=True,
        )


def evaluate_loss(model, x, y, batch_size=None):
    """The compiled loss of `model` on `(x, y)`, as a float (one batch when
    `batch_size` is None)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ran out of data.*")
        value = model.evaluate(
            x, y, batch_size=batch_size or len(y), verbose=0, return_dict=True
        )
    return float(value["loss"])


def _fitted_length(tokenizer, texts, extra, limit):
    """The longest tokenized text plus `extra`, rounded up to 8, capped."""
    longest = max((len(r) for r in _ids(tokenizer, texts)), default=0) + extra
    return max(8, min(limit, -(-longest // 8) * 8))


def translate_all(path, sentences, batch_size=64):
    """Translations of `sentences` by the SavedModel at `path`."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    translate = tf.saved_model.load(path).signatures["translate"]
    out = []
    for i in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[i : i + batch_size])
        out.extend(
            t.decode("utf-8", "replace")
            for t in translate(sentences=batch)["translation"].numpy()
        )
    return out
