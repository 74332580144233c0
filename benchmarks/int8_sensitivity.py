"""How much the committed tiny checkpoints' outputs move under int8's
rounding, and under smaller weight noise, per checkpoint.

For each checkpoint of `tests/fixtures/hf` that `tests/models/test_quantize.py`
measures: the largest |output change| over the largest |float output| after
`quantize("int8")`, and after adding to every weight that `quantize` rounds
Gaussian noise of root mean square 1/4 and 1/16 of int8's rounding error in
that weight (what a 10-bit and a 12-bit rounding would add). The median over
`--seeds` noise draws is printed. An output that moves by more than 2% under
1/4 of int8's error cannot be held within 2% by any 8-bit rounding of these
weights: the checkpoint itself amplifies small weight changes.

    python benchmarks/int8_sensitivity.py [--seeds 5]
"""

import argparse
import os
import statistics
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    arguments = parser.parse_args()

    import numpy as np

    import keras_transformer as kt
    from tests.models.test_quantize import (
        HF,
        MEASURED,
        QUANTIZED,
        dequantize_into,
        example_inputs,
        outputs,
    )

    def share(got, expected):
        return max(
            np.abs(got[k] - expected[k]).max() / np.abs(expected[k]).max()
            for k in expected
        )

    print("checkpoint             int8    noise 1/4  noise 1/16  (of int8's error)")
    for name in sorted(MEASURED):
        model = kt.models.from_pretrained(os.path.join(HF, name))
        inputs = example_inputs(model)
        expected = outputs(model, inputs)
        layers = [la for la in model._flatten_layers() if isinstance(la, QUANTIZED)]
        floats = [np.asarray(la.get_weights()[0]) for la in layers]
        quantized = kt.models.from_pretrained(os.path.join(HF, name))
        quantized.quantize("int8")
        int8 = share(outputs(quantized, inputs), expected)
        # int8's rounding error per weight, as the float model's weights
        reference = kt.models.from_pretrained(os.path.join(HF, name))
        dequantize_into(quantized, reference)
        rounded = [
            np.asarray(la.get_weights()[0])
            for la in reference._flatten_layers()
            if isinstance(la, QUANTIZED)
        ]
        errors = [
            float(np.sqrt(((r - f) ** 2).mean()))
            for r, f in zip(rounded, floats, strict=True)
        ]
        line = f"{name:20s} {int8:6.2%}"
        for fraction in (4, 16):
            shares = []
            for seed in range(arguments.seeds):
                rng = np.random.default_rng(seed)
                for layer, weight, error in zip(layers, floats, errors, strict=True):
                    noise = rng.normal(size=weight.shape) * error / fraction
                    rest = layer.get_weights()[1:]
                    layer.set_weights([(weight + noise).astype(weight.dtype), *rest])
                shares.append(share(outputs(model, inputs), expected))
            line += f"   {statistics.median(shares):8.2%}"
        for layer, weight in zip(layers, floats, strict=True):
            layer.set_weights([weight, *layer.get_weights()[1:]])
        print(line, flush=True)


if __name__ == "__main__":
    main()
