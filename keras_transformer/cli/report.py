"""What `train` and `evaluate` print and write: results and predictions."""

import os


def print_results(results):
    """One `key: value` line each (floats to 4 places; lists and multi-line
    text indented below their key; None left out)."""
    for key, value in results.items():
        if isinstance(value, list):
            print(f"{key}:")
            multiline = any("\n" in str(item) for item in value)
            for number, item in enumerate(value):
                if multiline and number:
                    print("  ---")
                print("  " + str(item).replace("\n", "\n  "))
        elif isinstance(value, str) and "\n" in value:
            print(f"{key}:")
            print("  " + value.replace("\n", "\n  "))
        elif isinstance(value, float):
            print(f"{key}: {value:.4f}")
        elif value is None:
            continue
        else:
            print(f"{key}: {value}")


def write_predictions(path, predictions):
    """One prediction a line into `path` (nothing when `path` is None)."""
    if path is None:
        return
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        for line in predictions:
            f.write(line.replace("\n", " ") + "\n")
    os.replace(temporary, path)
