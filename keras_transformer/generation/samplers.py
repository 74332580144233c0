"""Samplers: how the next token is chosen from the model's logits.

Samplers never see the model. They drive a decode loop through
`next_fn(tokens, cache, index) -> (logits, cache)`, which returns the logits
`(B, V)` for position `index` given the tokens before it. Everything is
TensorFlow graph code (`tf.while_loop`, stateless random ops), so the loop
compiles with XLA and exports into a SavedModel.

Shape legend: B batch, L token buffer length, V vocabulary, K beams.
"""

import tensorflow as tf

from keras_transformer import _validation as validation


def _check_temperature(temperature):
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise ValueError(
            f"`temperature` must be a number > 0. Received: temperature={temperature!r}"
        )
    if temperature <= 0:
        raise ValueError(
            f"`temperature` must be > 0. Received: temperature={temperature!r}"
        )


class Sampler:
    """Base sampler: the shared decode loop around `next_token`.

    Args:
        temperature: logits are divided by it before choosing.
    """

    def __init__(self, temperature=1.0):
        _check_temperature(temperature)
        self.temperature = temperature

    def config(self):
        """Hashable description, used to reuse compiled decode loops."""
        return (type(self).__name__, tuple(sorted(vars(self).items())))

    def next_token(self, logits, seed):
        """Chooses `(B,)` int32 tokens from float32 `(B, V)` logits."""
        raise NotImplementedError

    def __call__(
        self, next_fn, tokens, cache, start, stop, prompt_mask, end_token_id, seed
    ):
        """Fills `tokens[:, start:stop]` one position at a time.

        Args:
            next_fn: `(tokens, cache, index) -> (logits (B, V), cache)`.
            tokens: int32 `(B, L)` buffer holding the prompts.
            cache: whatever `next_fn` threads through (a nested structure).
            start: first position to fill (the shortest prompt's length).
            stop: one past the last position to fill.
            prompt_mask: bool `(B, L)`, True where `tokens` is prompt (kept).
            end_token_id: int32 scalar; -1 for none. After it, rows get 0.
            seed: int32 `(2,)` seed of the stateless random ops.

        Returns:
            The filled `(B, L)` tokens.
        """
        batch = tf.shape(tokens)[0]
        done = tf.zeros((batch,), tf.bool)

        def cond(tokens, cache, index, done):
            return tf.logical_and(index < stop, tf.logical_not(tf.reduce_all(done)))

        def body(tokens, cache, index, done):
            logits, cache = next_fn(tokens, cache, index)
            step_seed = tf.stack([seed[0], seed[1] + index])
            logits = _never_padding(tf.cast(logits, tf.float32), tf.float32.min)
            chosen = self.next_token(logits / self.temperature, step_seed)
            in_prompt = prompt_mask[:, index]
            chosen = tf.where(in_prompt, tokens[:, index], chosen)
            chosen = tf.where(done, tf.zeros_like(chosen), chosen)
            done = tf.logical_or(
                done, tf.logical_and(tf.logical_not(in_prompt), chosen == end_token_id)
            )
            tokens = tf.tensor_scatter_nd_update(
                tokens,
                tf.stack([tf.range(batch), tf.fill([batch], index)], axis=1),
                chosen,
            )
            return tokens, cache, index + 1, done

        tokens, *_ = tf.while_loop(cond, body, (tokens, cache, start, done))
        return tokens


class GreedySampler(Sampler):
    """Always the most likely token (temperature does not matter)."""

    def next_token(self, logits, seed):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)


class TemperatureSampler(Sampler):
    """Samples from softmax(logits / temperature)."""

    def next_token(self, logits, seed):
        return tf.cast(tf.random.stateless_categorical(logits, 1, seed)[:, 0], tf.int32)


class TopKSampler(Sampler):
    """Samples among the `k` most likely tokens.

    Args:
        top_k: how many tokens to keep (>= 1).
        temperature: logits are divided by it first.
    """

    def __init__(self, top_k=5, temperature=1.0):
        super().__init__(temperature)
        validation.check_positive_int("top_k", top_k)
        self.top_k = top_k

    def next_token(self, logits, seed):
        values, indices = tf.math.top_k(logits, k=self.top_k)  # (B, top_k)
        choice = tf.random.stateless_categorical(values, 1, seed)  # (B, 1)
        return tf.gather(indices, choice, batch_dims=1)[:, 0]


class TopPSampler(Sampler):
    """Nucleus sampling: samples among the fewest tokens whose probabilities
    add up to at least `top_p`.

    Args:
        top_p: the probability mass to keep, in (0, 1].
        temperature: logits are divided by it first.
    """

    def __init__(self, top_p=0.9, temperature=1.0):
        super().__init__(temperature)
        if (
            isinstance(top_p, bool)
            or not isinstance(top_p, int | float)
            or not 0 < top_p <= 1
        ):
            raise ValueError(f"`top_p` must be in (0, 1]. Received: top_p={top_p!r}")
        self.top_p = top_p

    def next_token(self, logits, seed):
        order = tf.argsort(logits, axis=-1, direction="DESCENDING")
        sorted_logits = tf.gather(logits, order, batch_dims=1)
        probs = tf.nn.softmax(sorted_logits, axis=-1)
        # Keep a token if the mass before it is still below p (the first
        # token is always kept).
        before = tf.cumsum(probs, axis=-1, exclusive=True)
        sorted_logits = tf.where(before < self.top_p, sorted_logits, tf.float32.min)
        choice = tf.random.stateless_categorical(sorted_logits, 1, seed)
        return tf.gather(order, choice, batch_dims=1)[:, 0]


class BeamSampler(Sampler):
    """Beam search: keeps the `num_beams` most likely continuations.

    The buffer holds `num_beams` copies of each prompt (`generate` repeats
    the inputs). Finished beams keep their score and are padded with 0. The
    best beam is picked with the length penalty of Wu et al. (2016):
    `score / ((5 + length) / 6) ** length_penalty`.

    Args:
        num_beams: beams per input (>= 1; 1 is greedy search).
        length_penalty: alpha; 0 ranks by total log-probability.
        temperature: logits are divided by it first.
    """

    def __init__(self, num_beams=4, length_penalty=0.6, temperature=1.0):
        super().__init__(temperature)
        validation.check_positive_int("num_beams", num_beams)
        self.num_beams = num_beams
        self.length_penalty = length_penalty

    def __call__(
        self, next_fn, tokens, cache, start, stop, prompt_mask, end_token_id, seed
    ):
        k = self.num_beams
        rows = tf.shape(tokens)[0]  # B * K
        batch = rows // k
        never = -1e9
        scores = tf.reshape(
            tf.tile(tf.concat([[0.0], tf.fill([k - 1], never)], 0)[None], [batch, 1]),
            [-1],
        )
        done = tf.zeros((rows,), tf.bool)

        def cond(tokens, cache, index, scores, done):
            return tf.logical_and(index < stop, tf.logical_not(tf.reduce_all(done)))

        def body(tokens, cache, index, scores, done):
            logits, cache = next_fn(tokens, cache, index)
            log_probs = tf.nn.log_softmax(
                tf.cast(logits, tf.float32) / self.temperature
            )
            log_probs = _never_padding(log_probs, never)
            vocabulary = tf.shape(log_probs)[1]
            columns = tf.range(vocabulary)[None]
            in_prompt = prompt_mask[:, index]
            # A one-hot, not `columns == tokens[:, index : index + 1]`: XLA on
            # CPU miscompiles that comparison inside a while loop.
            forced = (1.0 - tf.one_hot(tokens[:, index], vocabulary)) * never
            padding_only = tf.where(columns == 0, 0.0, never)
            log_probs = tf.where(in_prompt[:, None], forced, log_probs)
            log_probs = tf.where(done[:, None], padding_only, log_probs)
            candidates = tf.reshape(
                scores[:, None] + log_probs, [batch, k * vocabulary]
            )
            top_scores, top = tf.math.top_k(candidates, k=k)  # (B, K)
            parent = tf.reshape(tf.range(batch)[:, None] * k + top // vocabulary, [-1])
            chosen = tf.reshape(top % vocabulary, [-1])
            tokens, cache, in_prompt, done = tf.nest.map_structure(
                _reorder(parent), (tokens, cache, in_prompt, done)
            )
            tokens = tf.tensor_scatter_nd_update(
                tokens,
                tf.stack([tf.range(rows), tf.fill([rows], index)], axis=1),
                chosen,
            )
            done = tf.logical_or(
                done, tf.logical_and(tf.logical_not(in_prompt), chosen == end_token_id)
            )
            top_scores = tf.reshape(top_scores, [-1])
            top_scores.set_shape(scores.shape)
            return tokens, cache, index + 1, top_scores, done

        tokens, _, _, scores, _ = tf.while_loop(
            cond, body, (tokens, cache, start, scores, done)
        )
        generated = tf.logical_and(tf.logical_not(prompt_mask), tokens != 0)
        lengths = tf.reduce_sum(tf.cast(generated, tf.float32), axis=1)
        penalty = tf.pow((5.0 + lengths) / 6.0, float(self.length_penalty))
        best = tf.argmax(
            tf.reshape(scores / penalty, [batch, k]), axis=1, output_type=tf.int32
        )
        return tf.gather(tokens, tf.range(batch) * k + best)


def _never_padding(logits, value):
    """Token 0 is padding: a live sequence never emits it."""
    is_padding = tf.range(tf.shape(logits)[-1]) == 0
    return tf.where(is_padding[None], value, logits)


def _reorder(parent):
    """Gathers rows by `parent` and keeps the static shape (for while_loop)."""

    def gather(x):
        gathered = tf.gather(x, parent)
        gathered.set_shape(x.shape)
        return gathered

    return gather


SAMPLERS = {
    "greedy": GreedySampler,
    "temperature": TemperatureSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "beam": BeamSampler,
}


def get_sampler(sampler, **sampler_args):
    """A sampler instance from a name (and its arguments) or an instance."""
    if isinstance(sampler, Sampler):
        return sampler
    if sampler not in SAMPLERS:
        raise ValueError(
            f"Unknown `sampler`: {sampler!r}. Valid samplers: {', '.join(SAMPLERS)}"
        )
    try:
        return SAMPLERS[sampler](**sampler_args)
    except TypeError as error:
        raise ValueError(
            f"Invalid arguments for sampler {sampler!r}: {sampler_args}. ({error})"
        ) from None
