"""One `train` invocation: what every task's run shares.

`Run` holds the prepared run (settings resolved, data read and split,
nothing trained yet, so every mistake is found before any work) and the
machinery its recipe trains with: the tokenizer (built, or the
checkpoint's), the optimizer schedule, `model.fit` with Keras progress
bars, resumable from backups in the work folder, `history.csv` and
`loss.png`, and the files written at the end. The task's own steps are its
recipe's `train(run)`; the work folder is renamed to `--output` by the
command.
"""

import contextlib
import json
import os
import warnings

import keras

from keras_transformer import text, training
from keras_transformer.cli.history import HistoryLog, plot_history, read_history
from keras_transformer.cli.tokenizers import (
    build_tokenizer,
    load_tokenizer,
    save_tokenizer,
)


class Run:
    """One `train` invocation, prepared and checked; `train()` does the work.

    Args:
        recipe: the task's recipe (a `registry.TASKS` value).
        settings: the resolved settings (`settings.resolve`).
        data: `(train, held_out, description, notes)` (`data.load_data`).
        work: the work folder.
        kind: `"huggingface"`, `"ours"` (fine-tuning `--from`) or None.
        resume: whether to continue from the work folder's backup.
        verbose: `--verbose`.
        samples: how many samples or examples the results show.
        strategy: the `tf.distribute` strategy of `--distribute` (None:
            the default one); models are built and compiled in `scope()`.
        shared: worker 0's work folder, whose backups and files a resumed
            run reads (default `work`; another worker writes in its own
            temporary `work`).
    """

    def __init__(
        self,
        recipe,
        settings,
        data,
        work,
        kind,
        resume,
        verbose,
        samples,
        strategy=None,
        shared=None,
    ):
        self.recipe, self.settings, self.work = recipe, settings, work
        self.strategy, self.shared = strategy, shared or work
        self.train_data, self.held_out, self.source, self.notes = data
        self.kind, self.resume, self.verbose, self.samples = (
            kind,
            resume,
            verbose,
            samples,
        )

    def train(self):
        """`(results, history)` of the recipe's training, in the run's seed
        and precision."""
        keras.utils.set_random_seed(self.settings["seed"])
        keras.mixed_precision.set_global_policy(self.settings["precision"])
        try:
            return self.recipe.train(self)
        finally:
            keras.mixed_precision.set_global_policy("float32")

    def scope(self):
        """Where the recipe builds and compiles its model: the strategy's
        scope under `--distribute`."""
        if self.strategy is None:
            return contextlib.nullcontext()
        return self.strategy.scope()

    def jit_compile(self):
        """Whether the recipe compiles its steps with XLA: yes, unless a
        `--distribute` strategy runs on CPUs, where XLA has no collective
        operations ("Collectives are not yet implemented for CPU devices
        when compiling with XLA")."""
        if self.strategy is None:
            return True
        return any(
            "CPU" not in device.upper()
            for device in self.strategy.extended.worker_devices
        )

    def make_tokenizer(self, texts):
        """The run's tokenizer: a resumed run's, the checkpoint's, or one
        learned from `texts`; kept in the work folder."""
        path = os.path.join(self.work, "tokenizer.json")
        resumed = os.path.join(self.shared, "tokenizer.json")
        if self.resume and os.path.exists(resumed):
            return load_tokenizer(resumed)
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
                self.recipe,
            )
        save_tokenizer(tokenizer, path)
        return tokenizer

    def load_previous(self):
        """The model of the `train` folder this run fine-tunes."""
        return keras.saving.load_model(
            os.path.join(self.settings["from"], "model.keras")
        )

    def sizes(self):
        """The model factories' size arguments, from the settings."""
        s = self.settings
        return dict(
            num_layers=s["layers"],
            num_heads=s["heads"],
            hidden_dim=s["hidden"],
            intermediate_dim=s["intermediate"],
            dropout=s["dropout"],
        )

    def optimizer(self, steps):
        """AdamW with the recipe's weight decay and beta_2: linear warm-up
        over min(100, steps // 10) steps, cosine decay to a tenth."""
        peak = self.settings["learning_rate"]
        warmup = min(100, steps // 10)
        return training.AdamW(
            training.warmup_cosine_decay(peak, warmup, steps, peak / 10),
            weight_decay=self.recipe.weight_decay,
            beta_2=self.recipe.beta_2,
            global_clipnorm=1.0,
        )

    def fit(self, model, batches, validation, steps, every, start_step):
        """Trains `model` from `start_step` to `steps`, evaluating and
        backing up every `every` steps; returns the history's rows."""
        history = os.path.join(self.work, "history.csv")
        callbacks = [
            # Before the backup: an interval's row is on disk before the
            # backup that ends it (a resumed run drops rows past its backup).
            HistoryLog(history, every, start_step),
            *training.resumable_callbacks(os.path.join(self.shared, "run")),
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
            history, os.path.join(self.work, "loss.png"), f"train {self.recipe.name}"
        )
        if not plotted:
            self.notes.append("loss.png not drawn: matplotlib is not installed")
        return read_history(history)

    def initial_loss(self, model, x, y):
        """The loss on the first batch before any update (kept in the work
        folder, so a resumed run reports the original run's)."""
        path = os.path.join(self.work, "initial_loss.json")
        resumed = os.path.join(self.shared, "initial_loss.json")
        if self.resume and os.path.exists(resumed):
            with open(resumed) as f:
                return json.load(f)
        loss = evaluate_loss(model, x, y)
        with open(path, "w") as f:
            json.dump(loss, f)
        return loss

    def start_step(self, every):
        """The step a resumed run continues from (0 for a new one)."""
        return training.resume_epoch(os.path.join(self.shared, "run")) * every

    def announce(self, model, tokenizer, steps, every):
        """Prints the model's size, the tokenizer and the run's length."""
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

    def export_path(self):
        return os.path.join(self.work, "saved_model")

    def finish(self, model, tokenizer, results):
        """Writes model.keras, tokenizer.json and config.json."""
        model.save(os.path.join(self.work, "model.keras"))
        save_tokenizer(tokenizer, os.path.join(self.work, "tokenizer.json"))
        initial = os.path.join(self.work, "initial_loss.json")
        if os.path.exists(initial):  # not in another worker's resumed run
            os.remove(initial)
        config = {
            "task": self.recipe.name,
            "settings": self.settings,
            "results": results,
        }
        with open(os.path.join(self.work, "config.json"), "w") as f:
            json.dump(config, f, indent=2, default=str)


def evaluate_loss(model, x, y, batch_size=None):
    """The compiled loss of `model` on `(x, y)`, as a float (one batch when
    `batch_size` is None)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ran out of data.*")
        value = model.evaluate(
            x, y, batch_size=batch_size or len(y), verbose=0, return_dict=True
        )
    return float(value["loss"])
