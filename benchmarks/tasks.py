"""The tasks' cost over the token-id calls they wrap, and next to KerasHub.

Three measurements, each contender run in turn (interleaved, so drift hits
all) and reported as the median of `--repeats` runs after a compiling one:

1. `TextGenerator.generate` on strings against `kt.generation.generate` on
   the same token ids (a GPT with random weights: 4 layers, 256 hidden, 4
   heads, context 256, a character vocabulary; a 16-character prompt, 240
   new tokens, greedy, no end token), at batch 1 and batch 8. Goal: the
   strings cost at most 10% more.
2. Streaming (`generate(..., stream=True)`, batch 1): throughput against the
   non-streamed call (goal >= 0.9x) and the latency to the first piece.
3. `TextClassifier.predict` on 10,000 short generated sentences against
   KerasHub's `BertTextClassifier.predict` with the same WordPiece vocabulary
   and sizes (2 layers, 128 hidden, 2 heads, 512 feed-forward, sequence
   length 64, batch 32, random weights). Goal: >= 1.0x KerasHub's texts per
   second.

    python benchmarks/tasks.py          # needs `pip install -e ".[bench]"`
"""

import argparse
import statistics
import time

import keras

import keras_transformer as kt
from keras_transformer.cli import datasets

LAYERS, HIDDEN, HEADS, CONTEXT = 4, 256, 4, 256
BERT = dict(num_layers=2, hidden_dim=128, num_heads=2, intermediate_dim=512)
SEQUENCE_LENGTH, BATCH_SIZE = 64, 32


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def medians(contenders, repeats):
    """Compile-and-first-run seconds and the median seconds of each."""
    first = {name: timed(fn) for name, fn in contenders.items()}
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            times[name].append(timed(fn))
    return first, {name: statistics.median(t) for name, t in times.items()}


def generation(args):
    corpus = datasets.story_lines(2000)
    tokenizer = kt.text.CharTokenizer(kt.text.build_char_vocabulary(corpus))
    model = kt.models.gpt2(tokenizer.vocabulary_size(), num_layers=LAYERS,
                           num_heads=HEADS, hidden_dim=HIDDEN,
                           intermediate_dim=4 * HIDDEN,
                           max_sequence_length=CONTEXT, dropout=0.0)  # fmt: skip
    generator = kt.tasks.TextGenerator(model, tokenizer, end_token=None)
    print(
        f"\n## 1. TextGenerator.generate on strings vs kt.generation.generate "
        f"on ids\n\ngreedy, {LAYERS} layers, {HIDDEN} hidden, vocabulary "
        f"{tokenizer.vocabulary_size()}, 16-character prompt + {args.new} new "
        f"tokens, median of {args.repeats}\n"
    )
    print("| batch | contender | compile + first run s | median s | strings / ids |")
    print("|---|---|---|---|---|")
    for batch in args.batch:
        prompts = [corpus[i][:16].ljust(16, ".") for i in range(batch)]
        ids = tokenizer(prompts).to_tensor().numpy()  # (B, 16): one id a char
        contenders = {
            "ids: kt.generation.generate": lambda x=ids: kt.generation.generate(
                model, x, args.new
            ),
            "strings: TextGenerator.generate": lambda p=prompts: generator.generate(
                p, max_new_tokens=args.new
            ),
        }
        first, median = medians(contenders, args.repeats)
        base = median["ids: kt.generation.generate"]
        for name in contenders:
            print(
                f"| {batch} | {name} | {first[name]:.1f} | {median[name]:.3f} | "
                f"{median[name] / base:.3f} |"
            )
    streaming(args, generator, corpus[0][:16].ljust(16, "."))


def streaming(args, generator, prompt):
    print("\n## 2. Streaming, batch 1\n")

    def whole():
        return generator.generate(prompt, max_new_tokens=args.new)

    def streamed(chunk, first_piece):
        start = time.perf_counter()
        pieces = []
        for piece in generator.generate(
            prompt, max_new_tokens=args.new, stream=True, stream_chunk_size=chunk
        ):
            if not pieces:
                first_piece.append(time.perf_counter() - start)
            pieces.append(piece)
        return "".join(pieces)

    try:
        assert streamed(None, []) == whole(), "the pieces differ"
    except ValueError as error:  # a release without streaming
        print(f"not measured: {error}")
        return
    print("| stream_chunk_size | whole median s | stream median s | throughput vs "
          "whole | first piece ms |")  # fmt: skip
    print("|---|---|---|---|---|")
    for name in args.chunks:
        chunk = None if name == "default" else int(name)
        latencies = []
        contenders = {
            "whole": whole,
            "stream": lambda c=chunk, f=latencies: streamed(c, f),
        }
        _, median = medians(contenders, args.repeats)
        latency = statistics.median(latencies[1:])  # after the compiling run
        print(
            f"| {name} | {median['whole']:.3f} | {median['stream']:.3f} | "
            f"{median['whole'] / median['stream']:.3f}x | {latency * 1000:.0f} |"
        )


def classification(args):
    import keras_hub  # only this measurement needs it

    texts = [text for text, _ in datasets.sentiment_sentences(args.texts, seed=0)]
    vocabulary = kt.text.build_wordpiece_vocabulary(
        texts[:2000], vocabulary_size=2000, verbose=0
    )
    keras.utils.set_random_seed(0)
    backbone = kt.models.bert(len(vocabulary), max_sequence_length=SEQUENCE_LENGTH,
                              dropout=0.0, **BERT)  # fmt: skip
    ours = kt.tasks.TextClassifier(
        kt.models.bert_classifier(backbone, num_classes=2),
        kt.text.WordPieceTokenizer(vocabulary),
        class_names=["negative", "positive"],
        sequence_length=SEQUENCE_LENGTH,
    )
    hub = keras_hub.models
    theirs = hub.BertTextClassifier(
        hub.BertBackbone(
            len(vocabulary), max_sequence_length=SEQUENCE_LENGTH, dropout=0.0, **BERT
        ),  # fmt: skip
        num_classes=2,
        preprocessor=hub.BertTextClassifierPreprocessor(
            hub.BertTokenizer(vocabulary=vocabulary, lowercase=True),
            sequence_length=SEQUENCE_LENGTH,
        ),
    )
    contenders = {
        "ours: TextClassifier.predict": lambda: ours.predict(
            texts, batch_size=BATCH_SIZE
        ),
        "keras-hub: BertTextClassifier.predict": lambda: theirs.predict(
            texts, batch_size=BATCH_SIZE, verbose=0
        ),
    }
    print(
        f"\n## 3. Classifying {len(texts):,} short texts\n\nBERT {BERT}, "
        f"sequence length {SEQUENCE_LENGTH}, batch {BATCH_SIZE}, median of "
        f"{args.repeats}\n"
    )
    first, median = medians(contenders, args.repeats)
    print("| contender | compile + first run s | median s | texts/s | ours / it |")
    print("|---|---|---|---|---|")
    ours_rate = len(texts) / median["ours: TextClassifier.predict"]
    for name in contenders:
        rate = len(texts) / median[name]
        print(
            f"| {name} | {first[name]:.1f} | {median[name]:.2f} | {rate:,.0f} | "
            f"{ours_rate / rate:.2f}x |"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new", type=int, default=240)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--texts", type=int, default=10_000)
    parser.add_argument(
        "--chunks",
        nargs="+",
        default=["default", "16", "64", "128"],
        help="stream_chunk_size values; 'default' is the task's default (None)",
    )
    parser.add_argument("--parts", nargs="+", default=["generate", "classify"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.new, args.batch, args.texts, args.repeats = 8, [1], 64, 2
        args.chunks = ["default", "4"]
    keras.utils.set_random_seed(0)
    if "generate" in args.parts:
        generation(args)  # with the streaming measurement
    if "classify" in args.parts:
        classification(args)


if __name__ == "__main__":
    main()
