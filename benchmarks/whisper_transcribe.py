"""Whisper transcription: ours and transformers' pipeline side by side, on the CPU.

A whisper-tiny-sized model (d_model 384, 4 + 4 layers, 6 heads, ffn 1536,
vocabulary 51865, 80 mel bins, 1500 source and 448 target positions; random
weights, float32) transcribes 30 s of speech at batch 1, audio samples in,
text out, the log-mel features included in both timings. In one run:

- transformers: a `WhisperForConditionalGeneration` of that shape with its own
  random initialization (`torch.manual_seed`), saved by `save_pretrained` to a
  temporary folder, with the real Whisper tokenizer files, `normalizer.json`,
  `generation_config.json` and `preprocessor_config.json` copied from
  tests/fixtures/hf/whisper_tiny_random (not its config.json or weights);
  transcribed by `pipeline("automatic-speech-recognition", device="cpu")`
  with `generate_kwargs={"language": "en", "task": "transcribe",
  "max_new_tokens": N, "num_beams": 1}` (its `WhisperFeatureExtractor` and
  greedy `generate`: without `num_beams=1` the pipeline searches 5 beams, its
  default where generation_config.json sets none, as whisper-tiny's does not);
  PyTorch at its default number of threads (one per core);
- ours: `kt.tasks.SpeechRecognizer.from_pretrained` of that folder (the same
  weights, tokenizer and generation settings), `transcribe(samples,
  language="en", max_new_tokens=N)` (log-mel in the graph, the XLA-compiled
  KV-cache loop).

The audio: the espeak clips tests/fixtures/audio/speech_0..2.wav (16 kHz mono
16-bit, int16 / 32768 as float32) tiled to exactly 480000 samples (30 s, one
Whisper window). A random model may not emit `<|endoftext|>`, so both decode
at most `--max-new-tokens` tokens (64 by default). The first call (ours:
tracing and XLA compiles) is timed apart, then the two run in turn `--runs`
times and the medians are reported, with transformers' time / ours. The texts
are compared. Run it on an otherwise idle machine: with another process on
the cores, PyTorch's OpenMP threads slow down by up to 10x (seen on 2 cores),
far more than ours, and the ratio means nothing.

    pip install -e ".[bench]" && pip install torch==2.13.0 transformers
    python benchmarks/whisper_transcribe.py [--max-new-tokens 64] [--runs 5]
        [--num-beams 1]  # 5: both search 5 beams, the pipeline's default
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time
import wave

import numpy as np

import keras_transformer as kt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "hf", "whisper_tiny_random")
CLIPS = [
    os.path.join(ROOT, "tests", "fixtures", "audio", f"speech_{i}.wav")
    for i in range(3)
]
COPIED = [
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
    "normalizer.json",
    "generation_config.json",
    "preprocessor_config.json",
]
RATE = 16000
SAMPLES = 30 * RATE


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def read_wav(path):
    """A 16 kHz mono 16-bit clip as float32 in [-1, 1): int16 / 32768."""
    with wave.open(path, "rb") as f:
        if (f.getnchannels(), f.getsampwidth(), f.getframerate()) != (1, 2, RATE):
            raise ValueError(f"{path}: {f.getparams()}, not mono 16-bit {RATE} Hz")
        data = f.readframes(f.getnframes())
    return np.frombuffer(data, "<i2").astype(np.float32) / np.float32(32768.0)


def speech():
    """30 s of speech: the clips, tiled, cut to exactly SAMPLES samples."""
    clips = np.concatenate([read_wav(path) for path in CLIPS])
    return np.tile(clips, -(-SAMPLES // len(clips)))[:SAMPLES]


def their_config():
    """transformers' `WhisperConfig` of whisper-tiny's shape."""
    import transformers

    return transformers.WhisperConfig(
        vocab_size=51865,
        num_mel_bins=80,
        d_model=384,
        encoder_layers=4,
        decoder_layers=4,
        encoder_attention_heads=6,
        decoder_attention_heads=6,
        encoder_ffn_dim=1536,
        decoder_ffn_dim=1536,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=50258,
        bos_token_id=50257,
        eos_token_id=50257,
        pad_token_id=50257,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--num-beams", type=int, default=1, help="5: the pipeline's default search"
    )
    args = parser.parse_args()

    import torch
    import transformers

    samples = speech()
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(their_config()).eval()
    parameters = model.num_parameters()
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        del model
        for name in COPIED:
            shutil.copyfile(os.path.join(FIXTURE, name), os.path.join(folder, name))
        recognizer = kt.tasks.SpeechRecognizer.from_pretrained(folder)
        pipe = transformers.pipeline(
            "automatic-speech-recognition", model=folder, device="cpu"
        )
    print(
        f"whisper-tiny shape: {recognizer.model.count_params():,} parameters "
        f"(transformers {parameters:,}), random weights, float32, "
        f"{'greedy' if args.num_beams == 1 else f'{args.num_beams} beams'}, "
        f"{len(samples) / RATE:.0f} s of audio at batch 1, features included, "
        f"at most {args.max_new_tokens} new tokens, median of {args.runs} runs "
        f"after a first (compiling) one, {os.cpu_count()} CPU cores, torch "
        f"threads {torch.get_num_threads()} (default), transformers "
        f"{transformers.__version__}, torch {torch.__version__}"
    )
    outputs = {}

    def run_ours():
        outputs["ours"] = recognizer.transcribe(
            samples,
            language="en",
            max_new_tokens=args.max_new_tokens,
            num_beams=args.num_beams,
        )

    def run_theirs():
        outputs["transformers"] = pipe(
            {"raw": samples.copy(), "sampling_rate": RATE},
            generate_kwargs={
                "language": "en",
                "task": "transcribe",
                "max_new_tokens": args.max_new_tokens,
                "num_beams": args.num_beams,  # the pipeline's own default: 5
            },
        )["text"]

    contenders = {"ours": run_ours, "transformers": run_theirs}
    first = {k: timed(fn) for k, fn in contenders.items()}
    times = {k: [] for k in contenders}
    for _ in range(args.runs):
        for k, fn in contenders.items():
            times[k].append(timed(fn))
    median = {k: statistics.median(t) for k, t in times.items()}
    print("\n| contender | first call s | median s | transformers / it |")
    print("|---|---|---|---|")
    for k in contenders:
        print(
            f"| {k} | {first[k]:.2f} | {median[k]:.3f} | "
            f"{median['transformers'] / median[k]:.2f}x |"
        )
    ours, theirs = outputs["ours"], outputs["transformers"]
    print(f"\nours: {median['ours']:.3f} s (first call {first['ours']:.2f} s)")
    print(f"transformers: {median['transformers']:.3f} s")
    print(f"ours is {median['transformers'] / median['ours']:.2f}x transformers")
    print(f"texts equal: {ours == theirs}")
    if ours != theirs:
        print(f"  ours         {ours!r}\n  transformers {theirs!r}")


if __name__ == "__main__":
    main()
