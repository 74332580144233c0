"""Translation throughput: an imported opus-mt-sized Marian, ours against
`transformers`' `generate`, on the CPU, in one run.

The script makes a random `MarianMTModel` of opus-mt's size (6+6 layers,
hidden 512, 8 heads, feed-forward 2048, vocabulary 58,101) with
tests/fixtures/make_seq2seq_fixtures.py in a temporary folder (not
committed), loads it with `kt.models.from_pretrained`, and decodes the same
100 random source sentences of 20-40 tokens in batches of 16 with both
libraries: greedy, then 4-beam search (`transformers`' rules), each to 40
new tokens with the end token suppressed, so both do the same work. It
checks that both give the same tokens, and prints sentences per second
(median of `--repeats` timed passes after a warm-up pass that includes our
XLA compiles) and the ratios.

    pip install torch==2.13.0 transformers sentencepiece
    python benchmarks/translate.py [--repeats 3] [--sentences 100]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))

NEW_TOKENS = 40
BATCH = 16


def sources(count, vocabulary, seed=0):
    """`count` rows of 20-40 random ids (the checkpoint's), `</s>` last."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        length = int(rng.integers(20, 41))
        rows.append([*rng.integers(2, vocabulary - 1, length - 1).tolist(), 0])
    return rows


def batches(rows):
    for start in range(0, len(rows), BATCH):
        chunk = rows[start : start + BATCH]
        width = max(len(r) for r in chunk)
        ids = np.zeros((len(chunk), width), "int64")
        mask = np.zeros((len(chunk), width), "int64")
        for i, row in enumerate(chunk):
            ids[i, : len(row)], mask[i, : len(row)] = row, 1
        yield ids, mask


def timed(run, repeats):
    run()  # warm-up: compiles, caches
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=100)
    args = parser.parse_args()

    import torch
    import transformers
    from make_seq2seq_fixtures import OPUS_MT, make_marian

    import keras_transformer as kt

    torch.set_num_threads(os.cpu_count())
    folder = tempfile.mkdtemp()
    theirs, _ = make_marian(folder, sizes=OPUS_MT, vocabulary_size=58101)
    ours = kt.models.from_pretrained(folder)
    pad = theirs.config.pad_token_id
    rows = sources(args.sentences, theirs.config.vocab_size)
    settings = dict(ours.generation_config)
    settings.update(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS - 1)
    results = {}
    for mode, beams in [("greedy", 1), ("4-beam", 4)]:
        mine = dict(settings)
        if beams == 1:
            for key in ("rules", "num_beams", "length_penalty", "early_stopping"):
                mine.pop(key, None)
            mine["sampler"] = "greedy"
        else:
            mine.update(sampler="beam", num_beams=beams)
        outputs = {}

        def run_ours(outputs=outputs, mine=mine):
            outputs["ours"] = [
                kt.generation.generate(
                    ours, {"encoder_token_ids": np.where(mask, ids + 1, 0)}, **mine
                )
                for ids, mask in batches(rows)
            ]

        def run_theirs(outputs=outputs, beams=beams):
            with torch.no_grad():
                outputs["theirs"] = [
                    theirs.generate(
                        input_ids=torch.tensor(ids),
                        attention_mask=torch.tensor(mask),
                        num_beams=beams,
                        do_sample=False,
                        max_new_tokens=NEW_TOKENS,
                        min_new_tokens=NEW_TOKENS - 1,
                        bad_words_ids=[[pad]],
                        renormalize_logits=True,
                    ).numpy()
                    for ids, mask in batches(rows)
                ]

        ours_time = timed(run_ours, args.repeats)
        theirs_time = timed(run_theirs, args.repeats)
        same = all(
            np.array_equal(np.where(a == 0, 0, a - 1)[:, : b.shape[1]], b)
            for a, b in zip(outputs["ours"], outputs["theirs"], strict=True)
        )
        results[mode] = (args.sentences / ours_time, args.sentences / theirs_time, same)
    print(
        f"transformers {transformers.__version__}, torch {torch.__version__}, "
        f"{args.sentences} sentences of 20-40 tokens, batch {BATCH}, "
        f"{NEW_TOKENS} new tokens, median of {args.repeats}"
    )
    print(
        f"{'decoding':<10}{'ours sent/s':>13}{'transformers':>14}{'ratio':>8}"
        "  same tokens"
    )
    for mode, (mine, other, same) in results.items():
        print(f"{mode:<10}{mine:>13.2f}{other:>14.2f}{mine / other:>7.2f}x  {same}")


if __name__ == "__main__":
    main()
