"""What a task of `train` and `evaluate` is: the `Recipe` interface.

A recipe owns everything that differs between tasks: its defaults, what an
example is (`read_examples`, `builtin_data`, `split`), the settings only it
has (`refine`), its model, training, held-out measure and export
(`train(run)`), and how `evaluate` scores a trained folder. The command asks
its recipe (`registry.TASKS[name]`), never the task's name.
"""

from keras_transformer.cli.data import read_tsv_file, split_rows

# The longest sequence length measured from the data (BERT, seq2seq).
MAX_CONTEXT_FROM_DATA = 128


class Recipe:
    """Base class of the task recipes: TSV examples and shared defaults.

    Attributes:
        name: the task's name (its `registry.TASKS` key, `config.json`'s
            `task`).
        defaults: the settings of a run from scratch.
        data_unit: what one training example is, in the opening line.
        held_out_fraction: the part of `--data` held out without
            `--validation-data`.
        checkpoint_model_type: the Hugging Face `model_type` `--from` can
            fine-tune (None: none).
        preset_sets_context: whether `--preset` sets the context (the GPT
            window), or only the sizes.
        subword_vocabulary_size: subwords of a learned tokenizer without
            `--vocabulary-size`.
        sentencepiece_options: `kt.text.train_sentencepiece` arguments.
        weight_decay, beta_2: of the AdamW optimizer (`Run.optimizer`).
    """

    name = None
    defaults = {}
    data_unit = "examples"
    held_out_fraction = 0.1
    checkpoint_model_type = None
    preset_sets_context = False
    subword_vocabulary_size = 4000
    sentencepiece_options = {}
    weight_decay = 0.01
    beta_2 = 0.999
    supports_lora = False  # `train --lora` (with --from)

    def builtin_data(self):
        """`(examples, description)`: the corpus used without `--data`."""
        raise NotImplementedError

    def read_examples(self, path, flag, notes):
        """The examples in the file at `path` (the task's `--data` format);
        errors name `flag`, and skipped lines are added to `notes`."""
        return [self.example(fields) for fields in read_tsv_file(path, flag, notes)]

    def example(self, fields):
        """One example from the fields of a TSV line."""
        raise NotImplementedError

    def split(self, examples):
        """`(train, held_out)` of examples read without `--validation-data`."""
        return split_rows(examples, self.held_out_fraction)

    def refine(self, settings, kind, args):
        """Sets or checks the settings only this task has (in place);
        raises CommandError for a setting that does not fit the task."""

    def train(self, run):
        """`(results, history)`: trains, measures and exports in `run`'s
        work folder (`run`: a `run.Run`)."""
        raise NotImplementedError

    def evaluate(self, args, config, examples, notes):
        """The results of scoring the folder `args.model` (its `config`) on
        `examples`; notes to print after them are added to `notes`."""
        raise NotImplementedError
