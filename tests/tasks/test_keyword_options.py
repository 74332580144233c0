"""Public task methods and exporters take their inputs by position and
every option by keyword; options that were positional still work there for
one release, with a `DeprecationWarning` (`keras_transformer._keywords`)."""

import inspect
import warnings

import pytest

import keras_transformer as kt
from keras_transformer._keywords import positional_deprecated, renamed

# Each callable and the names it takes by position.
INPUTS = [
    (kt.tasks.TextGenerator.generate, ["self", "prompts"]),
    (kt.tasks.TextGenerator.chat, ["self", "messages"]),
    (kt.tasks.TextGenerator.fit, ["self", "x", "y"]),
    (kt.tasks.Text2Text.generate, ["self", "texts"]),
    (kt.tasks.Translator.translate, ["self", "texts"]),
    (kt.tasks.Summarizer.summarize, ["self", "texts"]),
    (kt.tasks.TextClassifier.fit, ["self", "texts", "labels"]),
    (kt.tasks.Translator.fit, ["self", "pairs"]),
    (kt.tasks.SpeechRecognizer.transcribe, ["self", "audio"]),
    (kt.export.export_translator, ["model", "source_tokenizer", "target_tokenizer",
                                   "path"]),
    (kt.export.export_summarizer, ["model", "tokenizer", "path"]),
    (kt.export.export_classifier, ["model", "tokenizer", "path"]),
    (kt.export.export_text_generator, ["model", "tokenizer", "path"]),
    (kt.export.export_encoder, ["model", "tokenizer", "path"]),
    (kt.export.export_fill_mask, ["model", "tokenizer", "path"]),
]  # fmt: skip


@pytest.mark.parametrize(
    "function, inputs", INPUTS, ids=lambda v: getattr(v, "__qualname__", "")
)
def test_options_are_keyword_only(function, inputs):
    parameters = inspect.signature(function).parameters.values()
    positional = [p.name for p in parameters if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == inputs
    options = [p for p in parameters if p.name not in inputs]
    assert options and all(
        p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in options
    ), options


@positional_deprecated("times", "separator")
def repeat(text, *, times=2, separator=""):
    return separator.join([text] * times)


def test_options_once_positional_still_work_with_a_deprecation_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert repeat("ab", times=3, separator="-") == "ab-ab-ab"
        assert not caught
        assert repeat("ab", 3, "-") == "ab-ab-ab"
        assert repeat("ab", 3, separator="+") == "ab+ab+ab"
    assert [w.category for w in caught] == [DeprecationWarning] * 2
    message = str(caught[0].message)
    assert "`times`, `separator` by position is deprecated" in message
    assert "`times=...`" in message
    assert caught[0].filename == __file__  # the caller's line


def test_too_many_or_doubled_options_are_refused():
    with pytest.raises(TypeError, match="at most 3 positional arguments. Received: 4"):
        repeat("ab", 3, "-", "extra")
    with pytest.raises(TypeError, match="'times' both by position and by keyword"):
        repeat("ab", 3, times=4)
    with pytest.raises(
        ValueError, match="keyword-only options of .*Received: \\('x',\\)"
    ):
        positional_deprecated("x")(lambda text, x=1: text)


@renamed(count="times")
def repeat_renamed(text, *, times=2):
    return text * times


def test_renamed_options_still_work_for_one_release_with_a_deprecation_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert repeat_renamed("ab", count=3) == "ababab"
        assert repeat_renamed("ab", times=3) == "ababab"
    assert [w.category for w in caught] == [DeprecationWarning]
    assert (
        str(caught[0].message)
        == "`count` is deprecated; use `times`. Received: count=3"
    )
    assert caught[0].filename == __file__
    with pytest.raises(TypeError, match="both `count` \\(deprecated\\) and `times`"):
        repeat_renamed("ab", count=3, times=4)
    with pytest.raises(ValueError, match="old names to"):
        renamed(times="count")(repeat_renamed.__wrapped__)


def test_the_speech_exporter_takes_transcribe_s_task_and_its_old_name():
    """`task` names transcribe-or-translate in `transcribe` and in its
    exporter (once `transcription_task`, still accepted with a warning)."""
    for function in (kt.tasks.SpeechRecognizer.transcribe,
                     kt.export.export_speech_recognizer):  # fmt: skip
        task = inspect.signature(function).parameters["task"]
        assert task.kind == task.KEYWORD_ONLY
    export = kt.export.export_speech_recognizer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="Received: model=None"):
            export(None, None, "unused", transcription_task="translate")
    assert [w.category for w in caught] == [DeprecationWarning]
    with pytest.raises(TypeError, match="both `transcription_task`"):
        export(None, None, "unused", transcription_task="translate", task="translate")
