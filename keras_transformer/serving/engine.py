"""Continuous batching: one KV cache whose rows ("slots") each hold a
request at its own position, one compiled step for all of them.

A request waits in a bounded queue until a slot frees; its prompt is then
read into the slot in pieces of `PREFILL_CHUNK` tokens, one piece between
two decode steps, so the replies already running keep flowing. A finished
or cancelled request frees its slot at once. Each row carries its own
temperature, top-k, top-p and seed (`kt.generation.RowSampler`): a row's
tokens never depend on the other rows.

Shape legend: R slots, L the context (positions per slot), C a prefill
piece, V vocabulary.
"""

import contextlib
import itertools
import queue
import threading
import time

import numpy as np
import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.models.decoding import PREFILL_CHUNK, empty_caches
from keras_transformer.serving import metrics, steps
from keras_transformer.serving.rows import Reply, Row, check_settings, settings_arrays
from keras_transformer.tasks import TextGenerator, text_stream


class QueueFull(Exception):
    """Every slot is taken and the queue holds `max_queue` requests (the
    HTTP app answers 503 with `Retry-After`).

    Example:
        >>> import keras_transformer as kt
        >>> generator = kt.tasks.TextGenerator.from_pretrained(
        ...     "tests/fixtures/hf/gpt2_tiny")
        >>> engine = kt.serving.Engine(generator, slots=1, context_length=32,
        ...                            max_queue=1)
        >>> waiting = engine.submit([5, 6], max_new_tokens=2)
        >>> try:
        ...     engine.submit([5, 6], max_new_tokens=2)
        ... except kt.serving.QueueFull as error:
        ...     print(str(error).split(".")[0])
        1 requests already wait for a slot
    """


class Engine:
    """Serves many requests at once over a `kt.tasks.TextGenerator`'s
    decoder-only model (GPT-2, Llama, Mistral, Qwen2, Gemma 3).

    A greedy request (temperature 0) decodes the tokens `chat` or
    `generate` gives for it alone; a sampled one with a seed, the same
    tokens whatever else runs beside it.

    Args:
        generator: a `kt.tasks.TextGenerator`.
        slots: R, the requests decoded at once.
        context_length: L, the positions of each slot (prompt and reply);
            None: the model's `max_sequence_length`, at most 2048. A
            multiple of 32.
        max_queue: the requests that may wait for a slot; one more is
            refused with `QueueFull`.

    Example:
        >>> import keras_transformer as kt
        >>> generator = kt.tasks.TextGenerator.from_pretrained(
        ...     "tests/fixtures/hf/gpt2_tiny")
        >>> engine = kt.serving.Engine(generator, slots=2, context_length=32)
        >>> reply = engine.submit([5, 6, 7], max_new_tokens=3, temperature=0,
        ...                       end_token_ids=())
        >>> engine.run_until_idle()
        >>> reply.finish_reason, len(reply.token_ids)
        ('length', 3)
    """

    def __init__(self, generator, *, slots=8, context_length=None, max_queue=64):
        validation.check_class("generator", generator, (TextGenerator,))
        model = generator.model
        validation.check_positive_int("slots", slots)
        validation.check_positive_int("max_queue", max_queue)
        if context_length is None:
            context_length = min(model.max_sequence_length, 2048)
            context_length -= context_length % PREFILL_CHUNK
        validation.check_positive_int("context_length", context_length)
        if context_length % PREFILL_CHUNK or context_length > model.max_sequence_length:
            raise ValueError(
                f"`context_length` must be a multiple of {PREFILL_CHUNK} and at "
                f"most the model's max_sequence_length "
                f"({model.max_sequence_length}). "
                f"Received: context_length={context_length}"
            )
        self.generator = generator
        self.model = model
        self.slots = slots
        self.context_length = context_length
        self.max_queue = max_queue
        self._rows = [None] * slots
        self._waiting = queue.Queue(max_queue)
        self._wake = threading.Condition()
        self._thread = None
        self._closed = False
        self._paused = False
        self._seeds = np.random.default_rng()
        self._ids = itertools.count()
        self.counters = {
            "requests": 0, "prompt_tokens": 0, "tokens": 0, "steps": 0,
            "first_token_seconds": 0.0, "first_tokens": 0,
        }  # fmt: skip
        self.finished = {}  # finish_reason -> requests
        empty = np.zeros((slots, context_length), "int32")
        self._caches = [
            tf.Variable(cache, trainable=False)
            for cache in empty_caches(model.blocks, empty)
        ]
        # A lone request (the lowest slot) decodes at batch 1; otherwise
        # every slot: two sizes keep the compiles at start-up few.
        self._row_counts = sorted({1, slots})
        self._step_fns = {
            (rows, sampled): steps.step_function(model, self._caches, rows, sampled)
            for rows in self._row_counts
            for sampled in (0, 1)
        }
        self._prefill_fn = steps.prefill_function(model, self._caches)

    # --- requests -----------------------------------------------------------

    def submit(
        self, prompt_ids, *, max_new_tokens, temperature=1.0, top_p=1.0,
        top_k=0, seed=None, stop=(), end_token_ids=None, notify=None,
    ):  # fmt: skip
        """Queues a request; returns its `Reply` at once.

        Args:
            prompt_ids: the prompt's ids, at least one.
            max_new_tokens: the most ids to generate; the prompt and these
                must fit `context_length`.
            temperature: 0 (or less) is greedy; else the logits' divisor.
            top_p: the nucleus' mass, in (0, 1].
            top_k: the most likely ids to draw from (0: all).
            seed: an int: the same seed gives the same tokens; None: a
                fresh one.
            stop: strings that end the reply (not included).
            end_token_ids: ids that end the reply; None: the generator's
                chat end ids.
            notify: called with the `Reply` from the engine's thread
                whenever it has news (new text, or its end).

        Raises:
            ValueError: an argument is out of range (nothing is queued).
            QueueFull: `max_queue` requests already wait.
        """
        ids = np.asarray(prompt_ids, "int64").reshape(-1)
        vocabulary = self.model.vocabulary_size
        if ids.size == 0 or ids.min() < 1 or ids.max() >= vocabulary:
            raise ValueError(
                f"`prompt_ids` must be at least one id in [1, {vocabulary}). "
                f"Received: prompt_ids of {ids.size} ids"
            )
        max_new_tokens = validation.check_max_new_tokens(max_new_tokens)
        if max_new_tokens < 1:
            raise ValueError(
                "`max_new_tokens` must be at least 1. "
                f"Received: max_new_tokens={max_new_tokens}"
            )
        if ids.size + max_new_tokens > self.context_length:
            raise ValueError(
                f"The prompt ({ids.size} tokens) and `max_new_tokens` must fit "
                f"the context of {self.context_length} tokens. "
                f"Received: max_new_tokens={max_new_tokens}"
            )
        settings = check_settings(temperature, top_p, top_k, seed)
        if settings["seed"] is None:
            settings["seed"] = int(self._seeds.integers(0, 2**31 - 1))
        if end_token_ids is None:
            end_token_ids = self.generator.chat_end_ids()
        reply = Reply(
            next(self._ids), ids.astype("int32"), max_new_tokens,
            tuple(stop), tuple(end_token_ids), settings, notify,
        )  # fmt: skip
        try:
            self._waiting.put_nowait(reply)
        except queue.Full:
            raise QueueFull(
                f"{self.max_queue} requests already wait for a slot. "
                f"Received: a request of {ids.size} prompt tokens"
            ) from None
        self.counters["requests"] += 1
        with self._wake:
            self._wake.notify()
        return reply

    @property
    def queued(self):
        """The requests waiting for a slot."""
        return self._waiting.qsize()

    @property
    def busy_slots(self):
        """The slots holding a request."""
        return sum(row is not None for row in self._rows)

    # --- the loop -----------------------------------------------------------

    def step(self):
        """One turn of the loop: frees cancelled slots, admits waiting
        requests, reads one prompt piece, then decodes one token for every
        row past its prompt. Returns whether any work is left."""
        self._free_cancelled()
        self._admit()
        reading = [r for r in self._rows if r is not None and not r.read]
        if reading:
            self._read_piece(min(reading, key=lambda r: r.reply.id))
        decoding = [r for r in self._rows if r is not None and r.read]
        if decoding:
            self._decode(decoding)
        return any(r is not None for r in self._rows) or not self._waiting.empty()

    def run_until_idle(self, timeout=600.0):
        """Runs `step` until no request is left (in the calling thread)."""
        deadline = time.monotonic() + timeout
        while self.step():
            if time.monotonic() > deadline:
                raise TimeoutError(f"The engine was still busy after {timeout} s.")

    def start(self):
        """Runs the loop in a background thread until `close`."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="kt-serving-engine", daemon=True
            )
            self._thread.start()
        return self

    def close(self):
        """Stops the loop thread; requests still running end as "cancelled"."""
        self._closed = True
        with self._wake:
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=60)
        for row in self._rows:
            if row is not None:
                row.reply.finish("cancelled")
        while not self._waiting.empty():
            self._waiting.get_nowait().finish("cancelled")

    def warm_up(self):
        """Compiles the step (greedy and sampled) and the prefill once, so
        the first requests wait for no compile."""
        rows = np.zeros([self.slots], "int32")
        positions = np.full([self.slots], self.context_length, "int32")  # no write
        idle = settings_arrays([None] * self.slots)
        # Several functions of one Python function, meant: not retracing.
        logger = tf.get_logger()
        level = logger.level
        logger.setLevel("ERROR")
        try:
            for key in self._step_fns:
                self._run_step(key, rows, positions, idle)
        finally:
            logger.setLevel(level)
        piece = np.zeros([1, PREFILL_CHUNK], "int32")
        # Slot 0's first piece: written again before any row reads it.
        self._prefill_fn(piece, np.int32(0), np.int32(0))
        one = [np.ones([1], "int32")]
        text_stream.texts(self.generator.tokenizer, one, one)  # its detokenizer

    @contextlib.contextmanager
    def paused(self):
        """While inside, the loop admits requests into free slots but reads
        and decodes nothing (tests fill the slots and the queue with it)."""
        self._paused = True
        try:
            yield self
        finally:
            self._paused = False
            with self._wake:
                self._wake.notify()

    def _loop(self):
        while not self._closed:
            if self._paused:
                self._admit()
                time.sleep(0.01)
                continue
            try:
                busy = self.step()
            except Exception as error:  # noqa: BLE001 (each request is told)
                for row in self._rows:
                    if row is not None:
                        row.reply.fail(error)
                self._rows = [None] * self.slots
                busy = False
            if not busy:
                with self._wake:
                    if self._waiting.empty() and not self._closed:
                        self._wake.wait(timeout=0.5)

    def _free_cancelled(self):
        for row in list(self._rows):
            if row is not None and row.reply.cancelled:
                row.reply.finish("cancelled")
                self._release(row)

    def _release(self, row):
        self._rows[row.slot] = None
        reason = row.reply.finish_reason
        self.finished[reason] = self.finished.get(reason, 0) + 1

    def metrics_text(self, responses=None):
        """The engine's counters in Prometheus' text format (`GET
        /metrics`); `responses` maps HTTP statuses to their counts."""
        return metrics.text(self, responses or {})

    def _admit(self):
        for slot in range(self.slots):
            if self._rows[slot] is None and not self._waiting.empty():
                reply = self._waiting.get_nowait()
                if reply.cancelled:
                    reply.finish("cancelled")
                    continue
                reply.started = time.monotonic()
                self._rows[slot] = Row(reply, slot)
                self.counters["prompt_tokens"] += len(reply.prompt_ids)

    def _read_piece(self, row):
        """One `PREFILL_CHUNK` of `row`'s prompt into its slot's cache."""
        start = row.read_up_to
        piece = np.zeros([1, PREFILL_CHUNK], "int32")
        part = row.reply.prompt_ids[start : start + PREFILL_CHUNK]
        piece[0, : len(part)] = part
        self._prefill_fn(piece, np.int32(start), np.int32(row.slot))
        row.read_up_to = start + PREFILL_CHUNK

    def _decode(self, rows):
        tokens = np.zeros([self.slots], "int32")
        # A row not decoding writes nowhere: its position is past the cache.
        positions = np.full([self.slots], self.context_length, "int32")
        settings = [None] * self.slots
        for row in rows:
            tokens[row.slot] = row.last_token
            positions[row.slot] = row.position
            settings[row.slot] = row.reply.settings | {"position": row.position}
        sampled = int(any(s is not None and s["temperature"] > 0 for s in settings))
        highest = max(row.slot for row in rows) + 1
        count = min(n for n in self._row_counts if n >= highest)
        chosen = self._run_step(
            (count, sampled), tokens, positions, settings_arrays(settings)
        )
        self.counters["steps"] += 1
        self.counters["tokens"] += len(rows)
        for row in self._advance(rows, chosen):
            self._release(row)

    def _advance(self, rows, chosen):
        """Appends each row's chosen token, updates its text and tells its
        reply; returns the rows that finished."""
        for row in rows:
            first = row.reply.time_to_first_token is None
            row.append(int(chosen[row.slot]))
            if first:
                self.counters["first_tokens"] += 1
                self.counters["first_token_seconds"] += row.reply.time_to_first_token
        live = [row for row in rows if row.ids_for_text is not None]
        finished = [row for row in rows if row.ids_for_text is None]
        try:
            texts = self._texts(live)
        except Exception:  # noqa: BLE001 (find the row whose text fails)
            texts = [self._text_alone(row) for row in live]
        for row, text in zip(live, texts, strict=True):
            if isinstance(text, Exception):  # this request fails alone
                row.reply.fail(text)
                finished.append(row)
            elif row.update(text):
                finished.append(row)
        for row in rows:
            row.notify()
        return finished

    def _text_alone(self, row):
        try:
            return self._texts([row])[0]
        except Exception as error:  # noqa: BLE001 (the row's own fault)
            return error

    def _texts(self, rows):
        if not rows:
            return []
        return text_stream.texts(
            self.generator.tokenizer,
            [row.ids_for_text for row in rows],
            [row.reply.prompt_ids for row in rows],
        )

    def _run_step(self, key, tokens, positions, settings):
        """The step of `key` (rows, sampled) on the first rows' inputs;
        each slot's chosen id (the slots past the rows: 0)."""
        rows = key[0]
        inputs = [np.asarray(a)[:rows] for a in (tokens, positions, *settings)]
        chosen = self._step_fns[key](*inputs).numpy()
        return np.pad(chosen, [0, self.slots - rows])
