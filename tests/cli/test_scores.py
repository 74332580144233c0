"""The scores `keras-transformer train` and `evaluate` print (no TensorFlow work)."""

import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import sacrebleu

from keras_transformer.cli import scores

SCORES_FILE = pathlib.Path(scores.__file__)

# -- classification_report ---------------------------------------------------

# Three classes; "bird" has true examples but is never predicted.
CLASSES = ["cat", "dog", "bird"]
LABELS = [0, 0, 0, 1, 1, 2, 2]
PREDICTIONS = [0, 0, 1, 1, 1, 0, 0]
# By hand (rows true, columns predicted):
#            cat dog bird
#   cat     [  2,  1,  0]
#   dog     [  0,  2,  0]
#   bird    [  2,  0,  0]
# cat:  tp=2 fp=2 fn=1 -> P=2/4=1/2, R=2/3, F1=2tp/(2tp+fp+fn)=4/7
# dog:  tp=2 fp=1 fn=0 -> P=2/3,     R=1,   F1=4/5
# bird: tp=0 fp=0 fn=2 -> P=0/0 -> 0 (zero_division=0), R=0, F1=0
# macro-F1 = (4/7 + 4/5 + 0) / 3 = (20/35 + 28/35) / 3 = 16/35 = 0.457142857...
# accuracy = 4 correct / 7
# What scikit-learn gives: f1_score(LABELS, PREDICTIONS, labels=[0, 1, 2],
# average="macro", zero_division=0) = 16/35, accuracy_score = 4/7.


def test_classification_report_matches_the_hand_computed_scores():
    report = scores.classification_report(LABELS, PREDICTIONS, CLASSES)
    assert report["confusion_matrix"] == [[2, 1, 0], [0, 2, 0], [2, 0, 0]]
    assert report["accuracy"] == pytest.approx(4 / 7, abs=1e-12)
    assert report["macro_f1"] == pytest.approx(16 / 35, abs=1e-12)
    assert report["macro_f1"] == pytest.approx(0.457142857, abs=1e-9)
    expected = [
        ("cat", 1 / 2, 2 / 3, 4 / 7, 3),
        ("dog", 2 / 3, 1.0, 4 / 5, 2),
        ("bird", 0.0, 0.0, 0.0, 2),
    ]
    assert [c["name"] for c in report["per_class"]] == CLASSES
    for row, (name, precision, recall, f1, support) in zip(
        report["per_class"], expected, strict=True
    ):
        assert row == {
            "name": name,
            "precision": pytest.approx(precision, abs=1e-12),
            "recall": pytest.approx(recall, abs=1e-12),
            "f1": pytest.approx(f1, abs=1e-12),
            "support": support,
        }
        assert type(row["support"]) is int and type(row["f1"]) is float
    assert type(report["accuracy"]) is float and type(report["macro_f1"]) is float
    assert all(type(n) is int for row in report["confusion_matrix"] for n in row)


def test_names_and_numpy_arrays_give_the_same_report_as_indices():
    by_index = scores.classification_report(LABELS, PREDICTIONS, CLASSES)
    by_name = scores.classification_report(
        [CLASSES[i] for i in LABELS], [CLASSES[i] for i in PREDICTIONS], CLASSES
    )
    as_arrays = scores.classification_report(
        np.array(LABELS), np.array(PREDICTIONS, dtype=np.int32), tuple(CLASSES)
    )
    assert by_name == by_index == as_arrays


def test_a_class_never_seen_nor_predicted_counts_as_f1_zero_in_the_mean():
    # a: tp=1 fp=0 fn=1 -> F1=2/3; b: tp=2 fp=1 fn=0 -> F1=4/5; c: nothing -> 0.
    # Over all three classes (scikit-learn with labels=[0, 1, 2],
    # zero_division=0): (2/3 + 4/5 + 0) / 3 = 22/45.
    report = scores.classification_report([0, 1, 0, 1], [0, 1, 1, 1], ["a", "b", "c"])
    assert report["macro_f1"] == pytest.approx(22 / 45, abs=1e-12)
    assert report["per_class"][2] == {
        "name": "c",
        "precision": 0.0,
        "recall": 0.0,
        "f1": 0.0,
        "support": 0,
    }


def test_perfect_predictions_score_one():
    report = scores.classification_report(["b", "a", "b"], ["b", "a", "b"], ["a", "b"])
    assert report["accuracy"] == 1.0 and report["macro_f1"] == 1.0
    assert report["confusion_matrix"] == [[1, 0], [0, 2]]


@pytest.mark.parametrize(
    "labels, predictions, class_names, message",
    [
        ([0, 1], [0], ["a", "b"], r"len\(labels\)=2, len\(predictions\)=1"),
        ([], [], ["a", "b"], r"`labels` must not be empty. Received: labels=\[\]"),
        ([0, 2], [0, 1], ["a", "b"], r"labels\[1\]=2"),
        ([0, 1], [0, -1], ["a", "b"], r"predictions\[1\]=-1"),
        ([0, 1], ["a", "c"], ["a", "b"], r"predictions\[1\]='c'"),
        ([True, 0], [0, 0], ["a", "b"], r"labels\[0\]=True"),
        ([0.0, 1], [0, 1], ["a", "b"], r"labels\[0\]=0.0"),
        (
            "ab",
            [0, 1],
            ["a", "b"],
            r"`labels` must be a sequence. Received: labels='ab'",
        ),
        ([0], [0], [], r"class_names=\[\]"),
        ([0], [0], ["a", "a"], r"must not repeat a name. Received: class_names="),
        ([0], [0], [0, 1], r"`class_names` must be a list of strings"),
    ],
)
def test_bad_classification_input_raises_naming_the_argument(
    labels, predictions, class_names, message
):
    with pytest.raises(ValueError, match=message):
        scores.classification_report(labels, predictions, class_names)


# -- format_confusion_matrix ---------------------------------------------------


def test_confusion_matrix_table_has_headers_and_right_aligned_counts():
    report = scores.classification_report(LABELS, PREDICTIONS, CLASSES)
    table = scores.format_confusion_matrix(report["confusion_matrix"], CLASSES)
    assert table == (
        "true \\ predicted   cat   dog  bird\n"
        "cat                  2     1     0\n"
        "dog                  0     2     0\n"
        "bird                 2     0     0"
    )


def test_long_names_are_cut_and_big_counts_widen_the_columns():
    names = ["short", "a_very_long_class_name"]
    table = scores.format_confusion_matrix([[123456, 7], [0, 89]], names)
    lines = table.splitlines()
    assert lines[0].split() == ["true", "\\", "predicted", "short", "a_very_lo..."]
    assert "a_very_long" not in table
    assert lines[1].split() == ["short", "123456", "7"]
    assert lines[2].split() == ["a_very_lo...", "0", "89"]
    # Right-aligned: every line's cells end at the same columns.
    assert len({len(line) for line in lines}) == 1


def test_twenty_classes_number_the_columns_to_stay_readable():
    names = [f"class_number_{i}" for i in range(20)]
    matrix = np.arange(400).reshape(20, 20)
    lines = scores.format_confusion_matrix(matrix, names).splitlines()
    assert len(lines) == 21
    assert lines[0].split()[3:] == [str(i) for i in range(20)]
    assert lines[1].split() == ["0", "class_num...", *map(str, range(20))]
    assert lines[20].split()[:2] == ["19", "class_num..."]
    assert lines[20].endswith("399")
    assert max(len(line) for line in lines) <= 120
    assert len({len(line) for line in lines}) == 1


def test_a_normalized_matrix_prints_two_decimals():
    table = scores.format_confusion_matrix([[0.5, 0.5], [0.125, 0.875]], ["a", "b"])
    assert table.splitlines()[2].split() == ["b", "0.12", "0.88"]


@pytest.mark.parametrize(
    "matrix", [[[1, 2], [3, 4]], [[1, 2, 3]], [[1, 2, 3], [4, 5]], [["x"] * 3] * 3]
)
def test_a_matrix_of_the_wrong_shape_raises_naming_it(matrix):
    with pytest.raises(ValueError, match=r"`matrix` must be a 3x3 .*Received: matrix="):
        scores.format_confusion_matrix(matrix, ["a", "b", "c"])


# -- translation_scores --------------------------------------------------------

# 13a tokenization leaves lowercase words without punctuation as they are, so
# the n-grams are those of the space-separated words.
TSV = (
    "the cat sat on the mat\tthe cat sat on the red mat\n"
    "my dog likes long walks\tmy dog likes long walks\n"
    "it is raining today\tit was raining today\n"
)
# Clipped n-gram matches / hypothesis n-grams, per line then summed:
#   line 1 (hyp 6 words, ref 7): 1-grams 6/6 ("the" twice in both),
#          2-grams 4/5 ("the mat" misses), 3-grams 3/4, 4-grams 2/3
#   line 2 (identical, 5 words): 5/5, 4/4, 3/3, 2/2
#   line 3 (hyp 4, ref 4):       3/4 ("is" misses), 1/3 ("raining today"),
#          0/2, 0/1
#   corpus: p1 = 14/15, p2 = 9/12, p3 = 6/9, p4 = 4/6 -- every order has a
#   match, so the exponential smoothing changes nothing.
# Hypothesis length c = 15 < reference length r = 16:
#   brevity penalty BP = exp(1 - r/c) = exp(-1/15).
# BLEU = 100 * BP * (p1 p2 p3 p4) ** (1/4), and p1 p2 p3 p4 = 14/45:
#   = 100 * exp(-1/15) * (14/45) ** 0.25 = 69.867614...
HAND_BLEU = 100 * math.exp(-1 / 15) * (14 / 45) ** 0.25


def read_tsv(path):
    pairs = [line.split("\t") for line in path.read_text().splitlines()]
    return [h for h, _ in pairs], [r for _, r in pairs]


def test_bleu_of_a_tiny_file_is_the_hand_computed_value(tmp_path):
    path = tmp_path / "translations.tsv"
    path.write_text(TSV)
    hypotheses, references = read_tsv(path)
    result = scores.translation_scores(hypotheses, references)
    assert result["bleu"] == pytest.approx(HAND_BLEU, abs=1e-6)
    assert result["bleu"] == pytest.approx(69.867614, abs=1e-6)
    assert result["exact_match"] == pytest.approx(1 / 3)
    # chrF is sacrebleu's own, with its defaults.
    expected_chrf = sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert result["chrf"] == pytest.approx(expected_chrf, abs=1e-9)
    assert 0.0 < result["chrf"] < 100.0
    assert all(type(result[key]) is float for key in result)


def test_identical_text_scores_100():
    text = ["four hundred two", "the cat sat on the mat .", "seventy one thousand"]
    result = scores.translation_scores(text, list(text))
    assert result == {"bleu": 100.0, "chrf": 100.0, "exact_match": 1.0}


def test_exact_match_ignores_surrounding_whitespace_only():
    result = scores.translation_scores([" 402 ", "17", "9 9"], ["402", "17\n", "99"])
    assert result["exact_match"] == pytest.approx(2 / 3)


def test_without_sacrebleu_only_exact_match_is_given(monkeypatch):
    # A None entry in sys.modules makes `import sacrebleu` raise ImportError.
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    assert scores.sacrebleu_available() is False
    result = scores.translation_scores(["a b", "c"], ["a b", "d"])
    assert result == {"bleu": None, "chrf": None, "exact_match": 0.5}


def test_sacrebleu_is_available_here():
    assert scores.sacrebleu_available() is True


@pytest.mark.parametrize(
    "hypotheses, references, message",
    [
        (["a", "b"], ["a"], r"len\(hypotheses\)=2, len\(references\)=1"),
        ([], [], r"`hypotheses` must not be empty"),
        (["a"], [], r"`references` must not be empty"),
        ("a b", ["a b"], r"`hypotheses` must be a sequence. Received: hypotheses="),
        (["a", 3], ["a", "3"], r"`hypotheses` must hold strings.*hypotheses\[1\]=3"),
        (["a"], [None], r"references\[0\]=None"),
    ],
)
def test_bad_translation_input_raises_naming_the_argument(
    hypotheses, references, message
):
    with pytest.raises(ValueError, match=message):
        scores.translation_scores(hypotheses, references)


# -- perplexity ------------------------------------------------------------------


def test_perplexity_is_exp_of_the_loss():
    assert scores.perplexity(0.0) == 1.0
    assert scores.perplexity(math.log(50.0)) == pytest.approx(50.0, rel=1e-12)
    assert scores.perplexity(np.float32(2.0)) == pytest.approx(math.e**2, rel=1e-6)
    assert scores.perplexity(3) == pytest.approx(math.e**3)
    assert scores.perplexity(700.0) == math.exp(700.0)
    assert scores.perplexity(700.5) == math.inf
    assert scores.perplexity(1e300) == math.inf
    assert scores.perplexity(math.inf) == math.inf
    assert math.isnan(scores.perplexity(math.nan))


@pytest.mark.parametrize("loss", ["2.0", None, True, [1.0]])
def test_perplexity_of_a_non_number_raises_naming_loss(loss):
    with pytest.raises(ValueError, match=r"`loss` must be a real number.*loss="):
        scores.perplexity(loss)


# -- the module stays cheap to import -------------------------------------------


def test_the_module_imports_neither_tensorflow_keras_nor_sacrebleu():
    # Loaded from its file alone, so that the package's __init__ (which imports
    # the layers, hence TensorFlow) does not run.
    code = (
        "import importlib.util, sys\n"
        f"path = {str(SCORES_FILE)!r}\n"
        "spec = importlib.util.spec_from_file_location('scores', path)\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "module.classification_report([0, 1], [1, 1], ['a', 'b'])\n"
        "module.perplexity(1.0)\n"
        "heavy = ('tensorflow', 'keras', 'sacrebleu')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
