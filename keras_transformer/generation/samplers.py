"""Samplers: how the next token is chosen from the model's logits.

This module holds `Sampler` (the one-token decode loop, which runs the
logits processors of `kt.generation.processors`), the greedy, temperature,
top-k and top-p samplers, and `RequestSampler`, whose temperature is a graph tensor
(the exporters' per request choice). Beam search is in `kt.generation.beam`,
the name registry (`SAMPLERS`, `get_sampler`) in `kt.generation.registry`.

Samplers never see the model: they drive a decode loop through
`next_fn(tokens, cache, index) -> (logits (B, V), cache)`, in TensorFlow
graph code (`tf.while_loop`, stateless random ops) that compiles with XLA
and exports into a SavedModel. Decode loops ask a sampler what they need
(`num_rows`, `supports_speculation`, `is_greedy`), never its type.

Shape legend: B batch, L token buffer length, V vocabulary, R rows of the
buffer (B, or B * K for beam search with K beams).
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation import loop, processors
from keras_transformer.generation.options import check_temperature


class Sampler:
    """Base sampler: the shared decode loop around `next_token`.

    A sampler chooses the token; the rules that change the scores first are
    logits processors (`kt.generation.processors`, like the logits
    processors of Hugging Face `transformers`), run in order on the float32
    scores of every step. The keyword options below are the generic
    processors by name, placed in Hugging Face's order around
    `logits_processors`: repetition penalty, n-grams, suppressed ids (at the
    first new position too), minimum length, then `logits_processors` (a
    family's rules, as Whisper's timestamps), the forced first token, the
    forced end token, renormalisation. Each row counts its own prompt (its
    True entries in `prompt_mask`).

    What decode loops ask (subclasses override it): `num_rows`, buffer rows
    per prompt; `supports_speculation`, whether `distribution` is
    implemented; `is_greedy`, whether the choice is the argmax;
    `uses_shared_loop`, whether it runs in pieces (streaming).

    Args:
        temperature: logits are divided by it before choosing.
        logits_processors: a list of `kt.generation.LogitsProcessor`s run
            after the options' own (see above).
        min_new_tokens: the end token is forbidden while a row has fewer
            new tokens than this (`processors.MinNewTokens`; HF's
            `min_length` counts the prompt: `min_length=m` with a one-token
            decoder start is `min_new_tokens=m - 1`).
        no_repeat_ngram_size: n > 0 forbids a token that would repeat an
            n-gram already in the row, prompt included
            (`processors.NoRepeatNGram`).
        suppressed_token_ids: ids that are never generated (HF
            `suppress_tokens`, or `bad_words_ids` of single tokens).
        begin_suppressed_token_ids: ids that are not generated as a row's
            first new token (HF `begin_suppress_tokens`).
        forced_first_token_id: the first new token of every row (HF
            `forced_bos_token_id` with a one-token decoder prompt).
        force_end_token: the end token is forced at the last position filled
            (`stop - 1`; HF `forced_eos_token_id` at `max_length - 1`).
            `generate` then needs an `end_token_id`.
        renormalize_logits: a log-softmax after the options (HF
            `renormalize_logits`; it changes beam search scores, not greedy or
            sampled choices).
        repetition_penalty: a number > 0, or None (off): the score of every
            id already in the row, prompt included, is divided by it where
            positive and multiplied by it where negative (HF
            `repetition_penalty`; > 1 discourages repeats).
    """

    num_rows = 1
    supports_speculation = False
    is_greedy = False

    def __init__(
        self,
        temperature=1.0,
        *,
        logits_processors=(),
        min_new_tokens=0,
        no_repeat_ngram_size=0,
        suppressed_token_ids=(),
        begin_suppressed_token_ids=(),
        forced_first_token_id=None,
        force_end_token=False,
        renormalize_logits=False,
        repetition_penalty=None,
    ):
        self.temperature = check_temperature(temperature)
        self.logits_processors = processors.from_options(
            min_new_tokens=min_new_tokens,
            no_repeat_ngram_size=no_repeat_ngram_size,
            suppressed_token_ids=suppressed_token_ids,
            begin_suppressed_token_ids=begin_suppressed_token_ids,
            forced_first_token_id=forced_first_token_id,
            force_end_token=force_end_token,
            renormalize_logits=renormalize_logits,
            repetition_penalty=repetition_penalty,
            logits_processors=logits_processors,
        )

    def config(self):
        """Hashable description, used to reuse compiled decode loops."""
        settings = {
            key: value
            for key, value in vars(self).items()
            if not key.startswith("_") and key != "logits_processors"
        }
        return (
            type(self).__name__,
            tuple(sorted(settings.items())),
            tuple(p.config() for p in self.logits_processors),
        )

    def token_ids(self):
        """`[(argument, id), ...]`: the ids the processors name, for
        `generate` to check against the model's vocabulary."""
        return [pair for p in self.logits_processors for pair in p.token_ids()]

    @property
    def needs_end_token(self):
        """Whether a processor needs an `end_token_id` (the forced end)."""
        return any(p.needs_end_token for p in self.logits_processors)

    def has_options(self):
        """Whether any processor changes the scores (`process` is not a
        no-op)."""
        return bool(self.logits_processors)

    def next_token(self, logits, seed):
        """Chooses `(B,)` int32 tokens from float32 `(B, V)` logits."""
        raise NotImplementedError

    def distribution(self, logits):
        """The probabilities `(B, V)` that `next_token` draws from (one-hot
        for greedy), for speculative decoding's acceptance rule."""
        raise NotImplementedError(
            f"{type(self).__name__} has no per-token distribution."
        )

    def scores(self, logits, tokens, index, prompt_lengths, stop, end_token_id):
        """What `next_token` and `distribution` take for position `index`:
        the model's `(R, V)` logits in float32, padding excluded, the
        processors applied, then divided by the temperature (Hugging
        Face's order: processors, then the temperature; a rule that weighs
        probabilities, as Whisper's timestamps, sees the model's own).
        Arguments as `process`'s."""
        logits = loop.never_padding(tf.cast(logits, tf.float32), tf.float32.min)
        scores = self.process(logits, tokens, index, prompt_lengths, stop, end_token_id)
        return scores / self.temperature

    def process(self, scores, tokens, index, prompt_lengths, stop, end_token_id):
        """Runs the processors on the float32 `(R, V)` scores of position
        `index`; a no-op without any.

        Args:
            scores: logits (greedy, sampling) or log-probabilities (beams).
            tokens: int32 `(R, L)`, written before `index`.
            index: the position being chosen.
            prompt_lengths: int32 `(R,)`, each row's prompt length.
            stop: one past the last position to fill.
            end_token_id: int32 scalar or vector (several end ids), -1
                for none.
        """
        step = processors.Step(tokens, index, prompt_lengths, stop, end_token_id)
        return processors.apply(self.logits_processors, scores, step)

    def __call__(
        self,
        next_fn,
        tokens,
        cache,
        start,
        stop,
        prompt_mask,
        end_token_id,
        seed,
        done=None,
    ):
        """Fills `tokens[:, start:stop]` one position at a time.

        Args:
            next_fn: `(tokens, cache, index) -> (logits (B, V), cache)`.
            tokens: int32 `(B, L)` buffer holding the prompts.
            cache: whatever `next_fn` threads through (a nested structure).
            start: first position to fill (the shortest prompt's length).
            stop: one past the last position to fill.
            prompt_mask: bool `(B, L)`, True where `tokens` is prompt (kept).
            end_token_id: int32 scalar, or vector of several end ids; -1 for
                none. After one of them, rows get 0.
            seed: int32 `(2,)` seed of the stateless random ops.
            done: optional bool `(B,)`, rows that already ended (a loop that
                continues another one, as speculative decoding's tail does).

        Returns:
            The filled `(B, L)` tokens.
        """
        if done is None:
            done = tf.zeros((tf.shape(tokens)[0],), tf.bool)
        state = loop.DecodeState(tokens, cache, start, done)
        spec = loop.DecodeSpec(stop, prompt_mask, end_token_id, seed)
        return self.run(next_fn, state, spec).tokens

    @property
    def uses_shared_loop(self):
        """Whether the sampler decodes with this loop (`run`), which runs in
        pieces (streaming); a subclass with its own loop (beam search) does
        not."""
        return type(self).__call__ is Sampler.__call__

    def run(self, next_fn, state, spec, until=None):
        """The loop of `__call__` from `state` (a `loop.DecodeState`) for
        the request `spec` (a `loop.DecodeSpec`), state in and out, so that
        it can run in pieces (streaming): it fills positions up to
        `min(until, spec.stop) - 1`, or fewer once every row is `done`.
        Each position draws with its own seed (`seed[1] + index`): a loop
        run in pieces makes the same tokens as one run.

        Returns:
            The `loop.DecodeState` after the last position filled, to
            continue from.
        """
        stop, prompt_mask, end_token_id, seed = spec
        prompt_lengths = loop.prompt_lengths(prompt_mask)
        last = tf.reduce_max(stop)  # `stop` may be `(R,)`: each row's own
        until = last if until is None else tf.minimum(until, last)

        def cond(tokens, cache, index, done):
            return tf.logical_and(index < until, tf.logical_not(tf.reduce_all(done)))

        def body(tokens, cache, index, done):
            logits, cache = next_fn(tokens, cache, index)
            step_seed = tf.stack([seed[0], seed[1] + index])
            scores = self.scores(
                logits, tokens, index, prompt_lengths, stop, end_token_id
            )
            chosen = self.next_token(scores, step_seed)
            in_prompt = prompt_mask[:, index]
            chosen = tf.where(in_prompt, tokens[:, index], chosen)
            # Rows past their own stop (a `(R,)` stop) end there.
            done = tf.logical_or(done, index >= stop)
            chosen = tf.where(done, tf.zeros_like(chosen), chosen)
            ended = loop.is_end(chosen, end_token_id)
            done = tf.logical_or(done, tf.logical_and(tf.logical_not(in_prompt), ended))
            tokens = loop.write(tokens, index, chosen)
            return tokens, cache, index + 1, done

        return loop.DecodeState(*tf.while_loop(cond, body, tuple(state)))


class GreedySampler(Sampler):
    """Always the most likely token (temperature does not matter).

    Takes the arguments of `Sampler`, its options included.
    """

    supports_speculation = True
    is_greedy = True

    def next_token(self, logits, seed):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    def distribution(self, logits):
        return tf.one_hot(self.next_token(logits, None), tf.shape(logits)[-1])


class TemperatureSampler(Sampler):
    """Samples from softmax(logits / temperature).

    Takes the arguments of `Sampler` (`temperature` and the options).
    """

    supports_speculation = True

    def next_token(self, logits, seed):
        return tf.cast(tf.random.stateless_categorical(logits, 1, seed)[:, 0], tf.int32)

    def distribution(self, logits):
        return tf.nn.softmax(logits, axis=-1)


class TopKSampler(Sampler):
    """Samples among the `k` most likely tokens.

    Args:
        top_k: how many tokens to keep (>= 1).
        temperature: logits are divided by it first.
        **options: the options of `Sampler`.
    """

    supports_speculation = True

    def __init__(self, top_k=5, temperature=1.0, **options):
        super().__init__(temperature, **options)
        validation.check_positive_int("top_k", top_k)
        self.top_k = top_k

    def next_token(self, logits, seed):
        values, indices = tf.math.top_k(logits, k=self.top_k)  # (B, top_k)
        choice = tf.random.stateless_categorical(values, 1, seed)  # (B, 1)
        return tf.gather(indices, choice, batch_dims=1)[:, 0]

    def distribution(self, logits):
        values, indices = tf.math.top_k(logits, k=self.top_k)
        kept = tf.one_hot(indices, tf.shape(logits)[-1])  # (B, top_k, V)
        return tf.einsum("bk,bkv->bv", tf.nn.softmax(values, axis=-1), kept)


class TopPSampler(Sampler):
    """Nucleus sampling: samples among the fewest tokens whose probabilities
    add up to at least `top_p`.

    Args:
        top_p: the probability mass to keep, in (0, 1].
        temperature: logits are divided by it first.
        top_k: None, or first keep only the `top_k` most likely tokens
            (Hugging Face's order when a generation config sets both:
            temperature, then top-k, then top-p). 0 is None.
        **options: the options of `Sampler`.
    """

    supports_speculation = True

    def __init__(self, top_p=0.9, temperature=1.0, top_k=None, **options):
        super().__init__(temperature, **options)
        validation.check_positive_int("top_k", top_k or None, allow_none=True)
        self.top_k = top_k or None
        if (
            isinstance(top_p, bool)
            or not isinstance(top_p, int | float)
            or not 0 < top_p <= 1
        ):
            raise ValueError(f"`top_p` must be in (0, 1]. Received: top_p={top_p!r}")
        self.top_p = top_p

    def next_token(self, logits, seed):
        order, sorted_logits = self._nucleus(logits)
        choice = tf.random.stateless_categorical(sorted_logits, 1, seed)
        return tf.gather(order, choice, batch_dims=1)[:, 0]

    def distribution(self, logits):
        order, sorted_logits = self._nucleus(logits)
        probs = tf.nn.softmax(sorted_logits, axis=-1)
        return tf.gather(probs, tf.argsort(order, axis=-1), batch_dims=1)

    def _nucleus(self, logits):
        """The token order and the sorted logits, outside the nucleus at the
        float32 floor."""
        if self.top_k is not None:  # below the k-th largest: out
            k = tf.minimum(self.top_k, tf.shape(logits)[-1])
            kth = tf.math.top_k(logits, k=k).values[:, -1:]  # (B, 1)
            logits = tf.where(logits < kth, tf.float32.min, logits)
        order = tf.argsort(logits, axis=-1, direction="DESCENDING")
        sorted_logits = tf.gather(logits, order, batch_dims=1)
        probs = tf.nn.softmax(sorted_logits, axis=-1)
        # Keep a token if the mass before it is still below p (the first
        # token is always kept).
        before = tf.cumsum(probs, axis=-1, exclusive=True)
        return order, tf.where(before < self.top_p, sorted_logits, tf.float32.min)


class RequestSampler(Sampler):
    """Greedy when `temperature` (a float32 scalar tensor: a served request's)
    is <= 0, else a sample from softmax(logits / temperature), in one traced
    loop. It takes no options."""

    supports_speculation = True

    def __init__(self, temperature):
        super().__init__()
        self.request_temperature = temperature
        self._greedy = GreedySampler()
        self._sampler = TemperatureSampler()

    def next_token(self, logits, seed):
        temperature = self.request_temperature

        def sample():
            # A huge temperature must not lift padding (id 0) off its floor.
            scaled = loop.never_padding(logits / temperature, tf.float32.min)
            return self._sampler.next_token(scaled, seed)

        return tf.cond(
            temperature > 0, sample, lambda: self._greedy.next_token(logits, seed)
        )

    def distribution(self, logits):
        temperature = self.request_temperature
        # Guarded so a temperature <= 0 never divides (the branch is unused).
        safe = tf.where(temperature > 0, temperature, 1.0)
        scaled = loop.never_padding(logits / safe, tf.float32.min)
        return tf.where(
            temperature > 0,
            self._sampler.distribution(scaled),
            self._greedy.distribution(logits),
        )
