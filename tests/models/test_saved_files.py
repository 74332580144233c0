"""`.keras` files saved by earlier releases load with identical outputs.

`release_*.keras` were saved by the last release (commit 31c94e2; see
tests/fixtures/make_release_models.py), before the package layout moved
(`LogitsBias` from models/seq2seq.py to layers/heads.py, models/common.py to
base.py): registered names, sublayer names and weights must all still match.
"""

import os

import keras
import numpy as np
import pytest

from tests.fixtures.make_release_models import inputs
from tests.helpers import to_numpy

FIXTURES = os.path.join(os.path.dirname(__file__), os.pardir, "fixtures")


@pytest.mark.parametrize(
    "name", ["gpt2", "bert_classifier", "bert_masked_lm", "seq2seq", "vit"]
)
def test_files_saved_by_the_last_release_load_with_identical_outputs(name):
    expected = np.load(os.path.join(FIXTURES, "release_outputs.npz"))[name]
    model = keras.saving.load_model(os.path.join(FIXTURES, f"release_{name}.keras"))
    actual = to_numpy(model(inputs()[name]))
    if name in ("gpt2", "seq2seq"):
        # Since then the padding id's logit is -1e9 (out of the softmax); the
        # logits of every real token are those the release saved with.
        np.testing.assert_array_equal(actual[..., 0], -1e9)
        actual, expected = actual[..., 1:], expected[..., 1:]
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-6)


FAMILY_FILES = os.path.join(FIXTURES, "family_files")


@pytest.mark.parametrize(
    "name",
    [
        "gpt2", "llama", "mistral", "qwen2", "llama_int8", "bert_classifier",
        "bart", "seq2seq", "vit",
    ],
)  # fmt: skip
def test_files_saved_before_the_families_were_recomposed_give_the_same_outputs(name):
    # One file per family configuration, saved by commit c313be3 (before
    # issue #44 recomposed attention, blocks and the decoding protocol; see
    # tests/fixtures/make_family_files.py). The padding id's -1e9 logit is a
    # constant: equal bit for bit. The rest is the same float32 computation,
    # but another CPU's kernels (AVX2 or AVX-512, oneDNN or Eigen) add in
    # another order: equal within 16 float32 units in the last place of the
    # largest output (|outputs| <= 1.33, so 2.4e-6 at most: 8x the 2 units,
    # 2.4e-7, an AVX2 EPYC moved them by; 10x a layer norm's epsilon moves
    # them by 2.8e-5 to 2.2e-4).
    from tests.fixtures.make_family_files import inputs as family_inputs

    expected = np.load(os.path.join(FAMILY_FILES, "outputs.npz"))[name]
    model = keras.saving.load_model(os.path.join(FAMILY_FILES, f"{name}.keras"))
    actual = to_numpy(model(family_inputs()[name]))
    if expected.ndim == 3:  # token logits: the padding id's first
        np.testing.assert_array_equal(actual[..., 0], expected[..., 0])
        actual, expected = actual[..., 1:], expected[..., 1:]
    ulp = np.spacing(np.abs(expected).max())
    np.testing.assert_allclose(actual, expected, rtol=0, atol=16 * ulp)
