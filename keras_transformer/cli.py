"""The `keras-transformer` command (also `python -m keras_transformer`)."""

import argparse
import sys


def _demo(args):
    from keras_transformer import demo

    print(
        f"Training a 2-block Transformer encoder to reverse sequences of "
        f"{demo.SEQUENCE_LENGTH} tokens ({args.steps} steps, generated data)..."
    )
    results = demo.run(steps=args.steps, verbose=1 if args.verbose else 0)
    print(f"accuracy of a random guess:      {1 / (demo.VOCABULARY_SIZE - 1):.3f}")
    print(f"held-out token accuracy:         {results['token_accuracy']:.3f}")
    print(f"held-out whole-sequence accuracy: {results['sequence_accuracy']:.3f}")
    for source, predicted in results["examples"]:
        print(f"  {source} -> {predicted}")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Transformer layers and models for Keras 3.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="compose the layers and learn to reverse sequences (offline)"
    )
    demo.add_argument("--steps", type=int, default=300, help="training steps")
    demo.add_argument("--verbose", action="store_true", help="show a progress bar")
    demo.set_defaults(handler=_demo)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ValueError as error:
        print(f"keras-transformer: error: {error}", file=sys.stderr)
        return 2
