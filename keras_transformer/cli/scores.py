"""The scores that `keras-transformer train` and `evaluate` print.

- `classification_report`: accuracy, macro-F1, per-class precision, recall
  and F1, and the confusion matrix, for the classification tasks.
- `format_confusion_matrix`: that matrix as a text table.
- `translation_scores`: corpus BLEU and chrF (through `sacrebleu`) and the
  exact-match rate, for the translation tasks.
- `perplexity`: the language models' perplexity from their mean loss.

Pure Python and numpy: the module imports neither TensorFlow nor Keras, and
`sacrebleu` only when `translation_scores` runs. `sacrebleu` is optional;
`pip install "keras-transformer[cli]"` installs it, and without it the BLEU
and chrF scores are None (see `sacrebleu_available`).
"""

import math
import numbers

import numpy as np

# Above this, exp() overflows a float64 (its largest value is about e**709.8).
_MAX_EXP_ARGUMENT = 700.0
# The longest class name that format_confusion_matrix prints in full.
_NAME_WIDTH = 12
_CORNER = "true \\ predicted"
# Wider than this with class names as column headers, the columns are numbered.
_MAX_TABLE_WIDTH = 100


def _check_class_names(class_names):
    if isinstance(class_names, str) or not hasattr(class_names, "__len__"):
        raise ValueError(
            "`class_names` must be a list of strings. "
            f"Received: class_names={class_names!r}"
        )
    names = list(class_names)
    if not names:
        raise ValueError(
            f"`class_names` must not be empty. Received: class_names={class_names!r}"
        )
    for name in names:
        if not isinstance(name, str):
            raise ValueError(
                "`class_names` must be a list of strings. "
                f"Received: class_names={class_names!r}"
            )
    if len(set(names)) != len(names):
        raise ValueError(
            "`class_names` must not repeat a name. "
            f"Received: class_names={class_names!r}"
        )
    return names


def _check_sequence(name, value):
    """`value` as a list; a ValueError naming `name` when it is not a
    non-empty sequence (a string is not one)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__len__"):
        raise ValueError(f"`{name}` must be a sequence. Received: {name}={value!r}")
    values = list(value)
    if not values:
        raise ValueError(f"`{name}` must not be empty. Received: {name}={value!r}")
    return values


def _check_same_length(first_name, first, second_name, second):
    if len(first) != len(second):
        raise ValueError(
            f"`{first_name}` and `{second_name}` must have the same length. "
            f"Received: len({first_name})={len(first)}, "
            f"len({second_name})={len(second)}"
        )


def _class_indices(name, values, class_names):
    """Each value as the index of its class: an int in [0, len(class_names))
    or one of the names."""
    index_of = {class_name: i for i, class_name in enumerate(class_names)}
    indices = []
    for position, value in enumerate(values):
        if isinstance(value, str) and value in index_of:
            indices.append(index_of[value])
            continue
        if (
            isinstance(value, numbers.Integral)
            and not isinstance(value, bool | np.bool_)
            and 0 <= value < len(class_names)
        ):
            indices.append(int(value))
            continue
        raise ValueError(
            f"`{name}` must hold class indices in [0, {len(class_names)}) or "
            f"names in {class_names}. Received: {name}[{position}]={value!r}"
        )
    return np.asarray(indices, dtype=np.int64)


def _divide(numerator, denominator):
    """numerator / denominator, 0.0 when the denominator is 0 (scikit-learn's
    `zero_division=0`)."""
    return float(numerator / denominator) if denominator else 0.0


def classification_report(labels, predictions, class_names):
    """Accuracy, macro-F1, per-class scores and the confusion matrix.

    The scores are scikit-learn's `accuracy_score`, `f1_score(average="macro",
    labels=<every class>, zero_division=0)`, `precision_recall_fscore_support`
    and `confusion_matrix`: a precision, recall or F1 whose denominator is 0
    counts as 0, and the macro-F1 is the unweighted mean over every class in
    `class_names`, those never predicted or never seen included.

    Args:
        labels: The true classes, a sequence of class indices (ints in
            `[0, len(class_names))`) or of names from `class_names`.
        predictions: The predicted classes, in the same form and order as
            `labels`.
        class_names: The class names, one per index, distinct.

    Returns:
        A dict: `accuracy` (float), `macro_f1` (float), `per_class` (a list,
        in `class_names` order, of dicts with `name`, `precision`, `recall`,
        `f1` and `support`, the number of true examples) and
        `confusion_matrix` (a list of lists of ints: row `i` counts the
        examples of class `i` by predicted class).

    Raises:
        ValueError: If an argument is empty, `labels` and `predictions` differ
            in length, or a value is not a class.

    Examples:
        >>> from keras_transformer.cli import scores
        >>> report = scores.classification_report(
        ...     ["pos", "pos", "neg", "neg"], [1, 0, 0, 0], ["neg", "pos"]
        ... )
        >>> report["accuracy"], round(report["macro_f1"], 4)
        (0.75, 0.7333)
        >>> report["confusion_matrix"]
        [[2, 0], [1, 1]]
        >>> report["per_class"][1]
        {'name': 'pos', 'precision': 1.0, 'recall': 0.5, 'f1': 0.666..., 'support': 2}
    """
    names = _check_class_names(class_names)
    label_values = _check_sequence("labels", labels)
    prediction_values = _check_sequence("predictions", predictions)
    _check_same_length("labels", label_values, "predictions", prediction_values)
    true = _class_indices("labels", label_values, names)
    predicted = _class_indices("predictions", prediction_values, names)

    matrix = np.zeros((len(names), len(names)), dtype=np.int64)
    np.add.at(matrix, (true, predicted), 1)
    true_positives = np.diag(matrix)
    support = matrix.sum(axis=1)
    predicted_counts = matrix.sum(axis=0)

    per_class = []
    for i, name in enumerate(names):
        tp = int(true_positives[i])
        false_positives = int(predicted_counts[i]) - tp
        false_negatives = int(support[i]) - tp
        per_class.append(
            {
                "name": name,
                "precision": _divide(tp, tp + false_positives),
                "recall": _divide(tp, tp + false_negatives),
                # 2PR / (P + R) written without P and R, as scikit-learn does.
                "f1": _divide(2 * tp, 2 * tp + false_positives + false_negatives),
                "support": int(support[i]),
            }
        )
    return {
        "accuracy": float(true_positives.sum() / len(true)),
        "macro_f1": float(np.mean([scores["f1"] for scores in per_class])),
        "per_class": per_class,
        "confusion_matrix": matrix.tolist(),
    }


def _short(name):
    if len(name) <= _NAME_WIDTH:
        return name
    return name[: _NAME_WIDTH - 3] + "..."


def _column_width(column_names, cells):
    return max(
        *(len(name) for name in column_names),
        *(len(cell) for row in cells for cell in row),
    )


def _table_width(row_names, column_names, cells):
    label_width = max(len(_CORNER), *(len(name) for name in row_names))
    return label_width + len(column_names) * (2 + _column_width(column_names, cells))


def format_confusion_matrix(matrix, class_names):
    """A confusion matrix as a text table: one row per true class, one column
    per predicted class, counts right-aligned.

    Class names longer than 12 characters are cut to 9 and `...`. When the
    names as column headers would make the table wider than 100 characters
    (many classes), the columns are headed by class number instead and each
    row's label is its number and name. Fractions (a normalized matrix) print
    with two decimals.

    Args:
        matrix: A square matrix (list of lists or array), rows the true
            classes and columns the predicted ones, in `class_names` order,
            such as `classification_report(...)["confusion_matrix"]`.
        class_names: The class names, one per row.

    Returns:
        The table as a string, lines separated by newlines, no trailing one.

    Raises:
        ValueError: If `matrix` is not a square matrix of numbers with one row
            per class name.

    Examples:
        >>> from keras_transformer.cli import scores
        >>> print(scores.format_confusion_matrix([[5, 1], [0, 12]], ["no", "yes"]))
        true \\ predicted   no  yes
        no                  5    1
        yes                 0   12
    """
    names = _check_class_names(class_names)
    try:
        values = np.asarray(matrix)
    except ValueError:
        values = None
    if (
        values is None
        or values.shape != (len(names), len(names))
        or not (
            np.issubdtype(values.dtype, np.integer)
            or np.issubdtype(values.dtype, np.floating)
        )
    ):
        raise ValueError(
            f"`matrix` must be a {len(names)}x{len(names)} matrix of numbers, "
            f"one row and column per class name. Received: matrix={matrix!r}"
        )
    if np.issubdtype(values.dtype, np.integer):
        cells = [[str(int(value)) for value in row] for row in values]
    else:
        cells = [[f"{float(value):.2f}" for value in row] for row in values]

    short_names = [_short(name) for name in names]
    column_names = short_names
    row_names = short_names
    if _table_width(short_names, short_names, cells) > _MAX_TABLE_WIDTH:
        # Too wide with names on top: number the classes instead.
        column_names = [str(i) for i in range(len(names))]
        row_names = [
            f"{i:>{len(column_names[-1])}} {n}" for i, n in enumerate(short_names)
        ]
    label_width = max(len(_CORNER), *(len(name) for name in row_names))
    column_width = _column_width(column_names, cells)
    lines = [
        _CORNER.ljust(label_width)
        + "".join("  " + name.rjust(column_width) for name in column_names)
    ]
    for name, row in zip(row_names, cells, strict=True):
        lines.append(
            name.ljust(label_width)
            + "".join("  " + cell.rjust(column_width) for cell in row)
        )
    return "\n".join(line.rstrip() for line in lines)


def sacrebleu_available():
    """Whether `sacrebleu` is installed, so that `translation_scores` gives
    BLEU and chrF; `pip install "keras-transformer[cli]"` installs it.

    Examples:
        >>> from keras_transformer.cli import scores
        >>> scores.sacrebleu_available() in (True, False)
        True
    """
    try:
        import sacrebleu  # noqa: F401
    except ImportError:
        return False
    return True


def _check_strings(name, value):
    values = _check_sequence(name, value)
    for position, text in enumerate(values):
        if not isinstance(text, str):
            raise ValueError(
                f"`{name}` must hold strings. Received: {name}[{position}]={text!r}"
            )
    return values


def translation_scores(hypotheses, references):
    """Corpus BLEU, chrF and the exact-match rate of translations.

    BLEU and chrF are `sacrebleu`'s `corpus_bleu` and `corpus_chrf` with their
    default settings (one reference per sentence, 13a tokenization, BLEU's
    exponential smoothing), on a 0-100 scale. Without `sacrebleu` installed
    (`pip install "keras-transformer[cli]"` installs it) both are None.

    Args:
        hypotheses: The model's translations, one string per sentence.
        references: The reference translations, in the same order.

    Returns:
        A dict: `bleu` (float or None), `chrf` (float or None) and
        `exact_match`, the fraction of hypotheses equal to their reference
        once leading and trailing whitespace is stripped.

    Raises:
        ValueError: If an argument is empty or not a sequence of strings, or
            the two differ in length.

    Examples:
        >>> from keras_transformer.cli import scores
        >>> result = scores.translation_scores(
        ...     ["four hundred two", "seven "], ["four hundred two", "eight"]
        ... )
        >>> sorted(result), result["exact_match"]
        (['bleu', 'chrf', 'exact_match'], 0.5)
    """
    hyps = _check_strings("hypotheses", hypotheses)
    refs = _check_strings("references", references)
    _check_same_length("hypotheses", hyps, "references", refs)
    exact_match = sum(h.strip() == r.strip() for h, r in zip(hyps, refs, strict=True))
    scores = {"bleu": None, "chrf": None, "exact_match": exact_match / len(hyps)}
    try:
        import sacrebleu
    except ImportError:
        return scores
    # Clipped: identical text can come out as 100.00000000000004.
    scores["bleu"] = min(float(sacrebleu.corpus_bleu(hyps, [refs]).score), 100.0)
    scores["chrf"] = min(float(sacrebleu.corpus_chrf(hyps, [refs]).score), 100.0)
    return scores


def perplexity(loss):
    """The perplexity `exp(loss)` of a mean cross-entropy loss in nats.

    Args:
        loss: The mean per-token loss, a real number (a numpy scalar too).

    Returns:
        `exp(loss)` as a float; `inf` when the loss is above 700, where the
        exponential would overflow, and `nan` for a `nan` loss.

    Raises:
        ValueError: If `loss` is not a real number.

    Examples:
        >>> from keras_transformer.cli import scores
        >>> scores.perplexity(0.0), round(scores.perplexity(2.0), 4)
        (1.0, 7.3891)
        >>> scores.perplexity(1000.0)
        inf
    """
    if isinstance(loss, bool | np.bool_) or not isinstance(loss, numbers.Real):
        raise ValueError(f"`loss` must be a real number. Received: loss={loss!r}")
    loss = float(loss)
    if math.isnan(loss):
        return math.nan
    if loss > _MAX_EXP_ARGUMENT:
        return math.inf
    return math.exp(loss)
