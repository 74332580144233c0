"""The `keras-transformer` command.

- `main.py`: the parser and `main` (no TensorFlow until a command runs).
- `commands.py`: what each command does.
- `registry.py`: `TASKS`, each task's recipe by name: `recipe_gpt2.py`,
  `recipe_bert.py`, `recipe_seq2seq.py` (the interface: `recipe.py`).
- `run.py`: what every `train` run shares (tokenizer, optimizer schedule,
  `model.fit` with backups and resuming, the files written), with
  `settings.py` (defaults, presets, checkpoints and flags resolved),
  `data.py` (examples read and split), `batches.py` (token ids and the
  batches of each step), `tokenizers.py`, `history.py` (history.csv,
  loss.png).
- `serving.py`, `report.py`, `scores.py`: the exported model served, the
  results printed, the scores computed.
- `datasets.py`: the built-in corpora; `demo.py`: the offline layer demo.
"""

from keras_transformer.cli.main import main

__all__ = ["main"]
