"""A request's handle (`Reply`) and its slot's bookkeeping (`Row`)."""

import threading
import time

import numpy as np

from keras_transformer import _validation as validation
from keras_transformer.tasks import inputs, text_stream


class Reply:
    """A request of `kt.serving.Engine`: what it has generated so far, and
    how it ended.

    The engine's thread writes it; any thread may read it, `wait` for its
    end, take its new text (`take_text`) or `cancel` it.

    Attributes:
        token_ids: the generated ids so far (without an end id).
        text: their text so far, cut before a stop string.
        finish_reason: None while running; then `"stop"` (an end id or a
            stop string), `"length"` (`max_new_tokens`), `"cancelled"` or
            `"error"` (`error` holds the exception).
        time_to_first_token: seconds from `submit` to the first id.

    Example:
        >>> import keras_transformer as kt
        >>> generator = kt.tasks.TextGenerator.from_pretrained(
        ...     "tests/fixtures/hf/gpt2_tiny")
        >>> engine = kt.serving.Engine(generator, slots=1, context_length=32)
        >>> reply = engine.submit([5, 6], max_new_tokens=4, temperature=0,
        ...                       stop=["zzz"], end_token_ids=())
        >>> reply.done
        False
        >>> engine.run_until_idle()
        >>> reply.wait(timeout=1) == reply.text, reply.finish_reason
        (True, 'length')
        >>> reply.take_text() == reply.text  # every piece not taken yet
        True
    """

    def __init__(self, id, prompt_ids, max_new_tokens, stop, ends, settings, notify):
        self.id = id
        self.prompt_ids = prompt_ids
        self.max_new_tokens = max_new_tokens
        self.stop = stop
        self.end_token_ids = ends
        self.settings = settings
        self.token_ids = []
        self.text = ""
        self.finish_reason = None
        self.error = None
        self.cancelled = False
        self.created = time.monotonic()
        self.started = None
        self.time_to_first_token = None
        self._notify = notify
        self._taken = 0
        self.stable_length = 0
        self._done = threading.Event()

    @property
    def done(self):
        return self._done.is_set()

    def cancel(self):
        """Asks the engine to end this request; its slot frees on the next
        step (its `finish_reason` becomes `"cancelled"`)."""
        self.cancelled = True

    def wait(self, timeout=None):
        """Waits for the end; returns the text. Raises the request's error,
        or TimeoutError."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"The request did not end within {timeout} s.")
        if self.error is not None:
            raise self.error
        return self.text

    def take_text(self):
        """The text that is final and not taken before ("" if none): every
        piece taken joins to `text`."""
        end = len(self.text) if self.done else self.stable_length
        piece = self.text[self._taken : end]
        self._taken = max(self._taken, end)
        return piece

    def finish(self, reason, error=None):
        if self.finish_reason is None:
            self.finish_reason = reason
            self.error = error
            self._done.set()
            self.notify()

    def fail(self, error):
        self.finish("error", error)

    def notify(self):
        if self._notify is not None:
            self._notify(self)


class Row:
    """A slot's request: its ids so far and how far its prompt is read."""

    def __init__(self, reply, slot):
        self.reply = reply
        self.slot = slot
        self.read_up_to = 0
        self.tokens = list(reply.prompt_ids)

    @property
    def read(self):
        """Whether the prompt is in the cache (decoding may start)."""
        return self.read_up_to >= len(self.reply.prompt_ids)

    @property
    def last_token(self):
        """The id the next step reads: the last prompt id first (the step
        gives its next-token logits, as `generate`'s first step does)."""
        return self.tokens[-1]

    @property
    def position(self):
        return len(self.tokens) - 1

    @property
    def ids_for_text(self):
        """The generated ids whose text to compute, or None once the row
        ended on an end id (its text is final)."""
        return None if self.reply.finish_reason else np.asarray(self.reply.token_ids)

    def append(self, token):
        """Takes the step's id: an end id ends the row."""
        reply = self.reply
        if reply.time_to_first_token is None:
            reply.time_to_first_token = time.monotonic() - reply.created
        if token in reply.end_token_ids:
            reply.finish("stop")
            return
        self.tokens.append(token)
        reply.token_ids.append(token)

    def update(self, text):
        """Takes the row's text after the new id; returns whether the row
        ended (a stop string, or `max_new_tokens`)."""
        reply = self.reply
        cut = inputs.cut_at_stop(text, reply.stop)
        reply.text = cut
        if cut != text:
            reply.finish("stop")
            return True
        if len(reply.token_ids) >= reply.max_new_tokens:
            reply.finish("length")
            return True
        reply.stable_length = len(text_stream.stable(cut, reply.stop, False))
        return False

    def notify(self):
        if not self.reply.done:
            self.reply.notify()


def check_settings(temperature, top_p, top_k, seed):
    """A request's sampling settings, checked (ValueError naming one)."""

    def number(value):
        return isinstance(value, int | float) and not isinstance(value, bool)

    if not number(temperature) or temperature < 0:
        raise ValueError(
            "`temperature` must be a number >= 0. "
            f"Received: temperature={temperature!r}"
        )
    if not number(top_p) or not 0 < top_p <= 1:
        raise ValueError(
            f"`top_p` must be a number in (0, 1]. Received: top_p={top_p!r}"
        )
    if not validation.is_int(top_k) or top_k < 0:
        raise ValueError(f"`top_k` must be an integer >= 0. Received: top_k={top_k!r}")
    if seed is not None and not validation.is_int(seed):
        raise ValueError(f"`seed` must be an integer or None. Received: seed={seed!r}")
    return {
        "temperature": float(temperature),
        "top_p": float(top_p),
        "top_k": int(top_k),
        "seed": None if seed is None else int(seed) % 2**31,
    }


def settings_arrays(settings):
    """The step's per-row tensors from each slot's settings (None: idle)."""
    idle = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0, "position": 0}
    settings = [idle if s is None else s for s in settings]
    return (
        np.array([s["temperature"] for s in settings], "float32"),
        np.array([s["top_k"] for s in settings], "int32"),
        np.array([s["top_p"] for s in settings], "float32"),
        np.array([[s["seed"], s["position"]] for s in settings], "int32"),
    )
