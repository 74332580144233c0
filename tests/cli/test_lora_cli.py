"""LoRA flags where they do not apply (the LoRA run itself,
`train gpt2 --from DIR --lora RANK` with `generate` / `export --lora FILE
--quantize int8`, shares test_gpt_run.py's training run)."""

import pytest

import keras_transformer_cli as front
from tests.cli.test_train import write_lines


def test_lora_flags_are_refused_where_they_do_not_apply(tmp_path, capsys):
    data = write_lines(tmp_path / "lines.txt")
    for argv, expected in [
        (["train", "gpt2", "--lora", "2"], "needs `train gpt2 --from PATH`"),
        (["train", "bert", "--lora", "2"], "received task bert"),
    ]:
        code = front.main([*argv, "--data", str(data), "--output", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and expected in err, err
        assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        front.main(["generate", "--model", "m", "--quantize", "int4", "x"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err
