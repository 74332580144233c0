"""Samplers: how the next token is chosen from the model's logits.

Samplers never see the model. They drive a decode loop through
`next_fn(tokens, cache, index) -> (logits, cache)`, which returns the logits
`(B, V)` for position `index` given the tokens before it. Everything is
TensorFlow graph code (`tf.while_loop`, stateless random ops), so the loop
compiles with XLA and exports into a SavedModel.

Every sampler also takes the options of `Sampler` (`min_new_tokens`,
`no_repeat_ngram_size`, `suppressed_token_ids`, `forced_first_token_id`,
`force_end_token`, `renormalize_logits`), applied to the scores of each step
the way Hugging Face `transformers` applies its logits processors.

Shape legend: B batch, L token buffer length, V vocabulary, K beams, R rows
of the buffer (B, or B * K for beam search).
"""

import numbers

import tensorflow as tf

from keras_transformer import _validation as validation

_INF = float("inf")


def _check_temperature(temperature):
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise ValueError(
            f"`temperature` must be a number > 0. Received: temperature={temperature!r}"
        )
    if temperature <= 0:
        raise ValueError(
            f"`temperature` must be > 0. Received: temperature={temperature!r}"
        )


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_count(name, value):
    """A non-negative int (0 turns the option off)."""
    if not _is_int(value) or value < 0:
        raise ValueError(
            f"`{name}` must be an integer >= 0. Received: {name}={value!r}"
        )
    return int(value)


def _check_token_id(name, value):
    if not _is_int(value) or value <= 0:
        raise ValueError(
            f"`{name}` must be a token id > 0 (0 is padding). "
            f"Received: {name}={value!r}"
        )
    return int(value)


def _check_token_ids(name, value):
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise ValueError(
            f"`{name}` must be a list of token ids > 0. Received: {name}={value!r}"
        )
    ids = list(value)
    if not all(_is_int(i) and i > 0 for i in ids):
        raise ValueError(
            f"`{name}` must hold token ids > 0 (0 is padding). "
            f"Received: {name}={value!r}"
        )
    return tuple(sorted({int(i) for i in ids}))


class Sampler:
    """Base sampler: the shared decode loop around `next_token`.

    The options change the scores of every step before the token is chosen,
    like the logits processors of Hugging Face `transformers` (in the same
    order: n-grams, suppressed ids, minimum length, forced first token,
    forced end token, renormalisation). Forbidden tokens get -inf; a forced
    token gets 0 and every other token -inf. Each row counts its own prompt
    (its True entries in `prompt_mask`).

    Args:
        temperature: logits are divided by it before choosing.
        min_new_tokens: the end token is forbidden while a row has fewer
            new tokens than this (HF `min_new_tokens`; HF's `min_length`
            counts the prompt: `min_length=m` with a one-token decoder start
            is `min_new_tokens=m - 1`).
        no_repeat_ngram_size: n > 0 forbids a token that would repeat an
            n-gram already in the row, prompt included (HF
            `no_repeat_ngram_size`).
        suppressed_token_ids: ids that are never generated (HF
            `suppress_tokens`, or `bad_words_ids` of single tokens).
        forced_first_token_id: the first new token of every row (HF
            `forced_bos_token_id` with a one-token decoder prompt).
        force_end_token: the end token is forced at the last position filled
            (`stop - 1`; HF `forced_eos_token_id` at `max_length - 1`).
            `generate` then needs an `end_token_id`.
        renormalize_logits: a log-softmax after the options (HF
            `renormalize_logits`; it changes beam search scores, not greedy or
            sampled choices).
    """

    def __init__(
        self,
        temperature=1.0,
        *,
        min_new_tokens=0,
        no_repeat_ngram_size=0,
        suppressed_token_ids=(),
        forced_first_token_id=None,
        force_end_token=False,
        renormalize_logits=False,
    ):
        _check_temperature(temperature)
        self.temperature = temperature
        self.min_new_tokens = _check_count("min_new_tokens", min_new_tokens)
        self.no_repeat_ngram_size = _check_count(
            "no_repeat_ngram_size", no_repeat_ngram_size
        )
        self.suppressed_token_ids = _check_token_ids(
            "suppressed_token_ids", suppressed_token_ids
        )
        self.forced_first_token_id = (
            None
            if forced_first_token_id is None
            else _check_token_id("forced_first_token_id", forced_first_token_id)
        )
        validation.check_bool("force_end_token", force_end_token)
        self.force_end_token = force_end_token
        validation.check_bool("renormalize_logits", renormalize_logits)
        self.renormalize_logits = renormalize_logits

    def config(self):
        """Hashable description, used to reuse compiled decode loops."""
        return (type(self).__name__, tuple(sorted(vars(self).items())))

    def token_ids(self):
        """`[(argument, id), ...]`: the ids the options name, for `generate`
        to check against the model's vocabulary."""
        ids = [("suppressed_token_ids", i) for i in self.suppressed_token_ids]
        if self.forced_first_token_id is not None:
            ids.append(("forced_first_token_id", self.forced_first_token_id))
        return ids

    def has_options(self):
        """Whether any option changes the scores (`process` is not a no-op)."""
        return bool(
            self.min_new_tokens
            or self.no_repeat_ngram_size
            or self.suppressed_token_ids
            or self.forced_first_token_id is not None
            or self.force_end_token
            or self.renormalize_logits
        )

    def next_token(self, logits, seed):
        """Chooses `(B,)` int32 tokens from float32 `(B, V)` logits."""
        raise NotImplementedError

    def distribution(self, logits):
        """The probabilities `(B, V)` that `next_token` draws from (one-hot
        for greedy), for speculative decoding's acceptance rule."""
        raise NotImplementedError(
            f"{type(self).__name__} has no per-token distribution."
        )

    def process(self, scores, tokens, index, prompt_lengths, stop, end_token_id):
        """Applies the options to the float32 `(R, V)` scores of position
        `index` (HF's logits processors); a no-op when all are off.

        Args:
            scores: logits (greedy, sampling) or log-probabilities (beams).
            tokens: int32 `(R, L)`, written before `index`.
            index: the position being chosen.
            prompt_lengths: int32 `(R,)`, each row's prompt length.
            stop: one past the last position to fill.
            end_token_id: int32 scalar, -1 for none.
        """
        if not self.has_options():
            return scores
        vocabulary = tf.shape(scores)[1]
        banned = []  # bool masks broadcasting to (R, V)
        if self.no_repeat_ngram_size:
            n = self.no_repeat_ngram_size
            banned.append(_repeated_ngrams(tokens, index, n, vocabulary))
        if self.suppressed_token_ids:
            ids = tf.constant(self.suppressed_token_ids, tf.int32)
            banned.append(tf.reduce_any(tf.one_hot(ids, vocabulary) > 0, 0)[None])
        if self.min_new_tokens:
            short = index - prompt_lengths < self.min_new_tokens  # (R,)
            # one_hot(-1) is all zeros: nothing to forbid without an end token.
            is_end = tf.one_hot(end_token_id, vocabulary) > 0
            banned.append(tf.logical_and(short[:, None], is_end[None]))
        for mask in banned:
            scores = tf.where(mask, -_INF, scores)
        if self.forced_first_token_id is not None:
            first = index == prompt_lengths
            scores = tf.where(
                first[:, None], _forced(self.forced_first_token_id, vocabulary), scores
            )
        if self.force_end_token:
            last = tf.logical_and(index == stop - 1, end_token_id >= 0)
            scores = tf.where(last, _forced(end_token_id, vocabulary), scores)
        if self.renormalize_logits:
            scores = tf.nn.log_softmax(scores, axis=-1)
        return scores

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
            end_token_id: int32 scalar; -1 for none. After it, rows get 0.
            seed: int32 `(2,)` seed of the stateless random ops.
            done: optional bool `(B,)`, rows that already ended (a loop that
                continues another one, as speculative decoding's tail does).

        Returns:
            The filled `(B, L)` tokens.
        """
        if done is None:
            done = tf.zeros((tf.shape(tokens)[0],), tf.bool)
        prompt_lengths = _prompt_lengths(prompt_mask)

        def cond(tokens, cache, index, done):
            return tf.logical_and(index < stop, tf.logical_not(tf.reduce_all(done)))

        def body(tokens, cache, index, done):
            logits, cache = next_fn(tokens, cache, index)
            step_seed = tf.stack([seed[0], seed[1] + index])
            logits = _never_padding(tf.cast(logits, tf.float32), tf.float32.min)
            logits = self.process(
                logits / self.temperature,
                tokens,
                index,
                prompt_lengths,
                stop,
                end_token_id,
            )
            chosen = self.next_token(logits, step_seed)
            in_prompt = prompt_mask[:, index]
            chosen = tf.where(in_prompt, tokens[:, index], chosen)
            chosen = tf.where(done, tf.zeros_like(chosen), chosen)
            done = tf.logical_or(
                done, tf.logical_and(tf.logical_not(in_prompt), chosen == end_token_id)
            )
            tokens = _write(tokens, index, chosen)
            return tokens, cache, index + 1, done

        tokens, *_ = tf.while_loop(cond, body, (tokens, cache, start, done))
        return tokens


class GreedySampler(Sampler):
    """Always the most likely token (temperature does not matter).

    Takes the arguments of `Sampler`, its options included.
    """

    def next_token(self, logits, seed):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    def distribution(self, logits):
        return tf.one_hot(self.next_token(logits, None), tf.shape(logits)[-1])


class TemperatureSampler(Sampler):
    """Samples from softmax(logits / temperature).

    Takes the arguments of `Sampler` (`temperature` and the options).
    """

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
        **options: the options of `Sampler`.
    """

    def __init__(self, top_p=0.9, temperature=1.0, **options):
        super().__init__(temperature, **options)
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
        order = tf.argsort(logits, axis=-1, direction="DESCENDING")
        sorted_logits = tf.gather(logits, order, batch_dims=1)
        probs = tf.nn.softmax(sorted_logits, axis=-1)
        # Keep a token if the mass before it is still below p (the first
        # token is always kept).
        before = tf.cumsum(probs, axis=-1, exclusive=True)
        return order, tf.where(before < self.top_p, sorted_logits, tf.float32.min)


BEAM_RULES = ("wu", "transformers")
EARLY_STOPPING = (False, True, "never")


class BeamSampler(Sampler):
    """Beam search: keeps the `num_beams` most likely continuations.

    The buffer holds `num_beams` copies of each prompt (`generate` repeats
    the inputs). Two sets of rules:

    - `rules="wu"` (the default): `num_beams` beams; a beam that emits the
      end token keeps its score and is padded with 0 while the others run on;
      the search ends when all beams have ended or at `stop`. The best beam
      is picked with the length penalty of Wu et al. (2016):
      `score / ((5 + length) / 6) ** length_penalty`, `length` counting the
      new tokens.
    - `rules="transformers"`: Hugging Face `transformers`' beam search
      (`generate(num_beams=...)`), token for token. Each step takes the
      `2 * num_beams` best continuations of the running beams; those of the
      first `num_beams` that end with the end token join a pool of up to
      `num_beams` finished hypotheses per input, scored
      `sum_logprobs / new_length ** length_penalty` (`new_length` counts the
      new tokens, the end token included); the best `num_beams` that do not
      end run on. An input stops as `early_stopping` says: True when its pool
      is full; False when the best running beam, scored at its current
      length, cannot beat the worst of a full pool; "never" as False, but
      with `length_penalty > 0` it scores the running beam at the longest
      length (`stop`), so it rarely stops before `stop`. At `stop` the best
      `num_beams` continuations join the pool. The result is the pool's best
      (0 after its end token). One beam is greedy search, as in HF.

    Log-probabilities are taken over the real tokens (id 0, padding, is
    never chosen). With `rules="transformers"` a row whose prompt is longer
    than the others' waits until its prompt ends, so each row of a batch
    matches HF run on that row alone with `max_length=stop`.

    Args:
        num_beams: beams per input (>= 1; 1 is greedy search).
        length_penalty: alpha; 0 ranks by total log-probability.
        temperature: logits are divided by it first (HF's beam search does
            not; keep 1.0 to match it).
        rules: `"wu"` or `"transformers"` (see above).
        early_stopping: True, False or "never" (`rules="transformers"` only).
        **options: the options of `Sampler`.
    """

    def __init__(
        self,
        num_beams=4,
        length_penalty=0.6,
        temperature=1.0,
        *,
        rules="wu",
        early_stopping=False,
        **options,
    ):
        super().__init__(temperature, **options)
        validation.check_positive_int("num_beams", num_beams)
        if isinstance(length_penalty, bool) or not isinstance(
            length_penalty, int | float
        ):
            raise ValueError(
                "`length_penalty` must be a number. "
                f"Received: length_penalty={length_penalty!r}"
            )
        validation.check_choice("rules", rules, BEAM_RULES)
        if not any(
            early_stopping is choice or early_stopping == choice == "never"
            for choice in EARLY_STOPPING
        ):
            raise ValueError(
                "`early_stopping` must be True, False or 'never'. "
                f"Received: early_stopping={early_stopping!r}"
            )
        if rules == "wu" and early_stopping is not False:
            raise ValueError(
                "`early_stopping` applies to rules='transformers' only. "
                f"Received: early_stopping={early_stopping!r} with rules='wu'"
            )
        self.num_beams = num_beams
        self.length_penalty = length_penalty
        self.rules = rules
        self.early_stopping = early_stopping

    def next_token(self, logits, seed):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    def __call__(
        self, next_fn, tokens, cache, start, stop, prompt_mask, end_token_id, seed
    ):
        if self.rules == "transformers":
            if self.num_beams == 1:  # HF decodes greedily with one beam
                return super().__call__(
                    next_fn, tokens, cache, start, stop, prompt_mask, end_token_id, seed
                )
            return self._transformers_search(
                next_fn, tokens, cache, start, stop, prompt_mask, end_token_id
            )
        return self._wu_search(
            next_fn, tokens, cache, start, stop, prompt_mask, end_token_id
        )

    def _wu_search(
        self, next_fn, tokens, cache, start, stop, prompt_mask, end_token_id
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
        prompt_lengths = _prompt_lengths(prompt_mask)

        def cond(tokens, cache, index, scores, done):
            return tf.logical_and(index < stop, tf.logical_not(tf.reduce_all(done)))

        def body(tokens, cache, index, scores, done):
            logits, cache = next_fn(tokens, cache, index)
            log_probs = tf.nn.log_softmax(
                tf.cast(logits, tf.float32) / self.temperature
            )
            log_probs = _never_padding(log_probs, never)
            if self.has_options():
                # Forbidden tokens at -1e9 as the rest of these rules.
                log_probs = tf.maximum(
                    self.process(
                        log_probs, tokens, index, prompt_lengths, stop, end_token_id
                    ),
                    never,
                )
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
            tokens = _write(tokens, index, chosen)
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

    def _transformers_search(
        self, next_fn, tokens, cache, start, stop, prompt_mask, end_token_id
    ):
        """HF's vectorised `_beam_search` (checked against transformers
        5.24), with its -1e9 masks, for `num_beams >= 2`."""
        k = self.num_beams
        rows = tf.shape(tokens)[0]  # B * K
        batch = rows // k
        never = -1e9
        prompt_lengths = _prompt_lengths(prompt_mask)  # (R,)
        input_lengths = prompt_lengths[::k]  # (B,)
        offsets = tf.range(batch)[:, None]
        # Running beams: the first of each input at 0, the copies at -1e9, so
        # that the first step expands one beam only.
        running = tf.tile(tf.constant([[0.0] + [never] * (k - 1)]), [batch, 1])
        pool = tokens  # (R, L): the finished hypotheses, K per input
        pool_scores = tf.fill([batch, k], never)
        pool_finished = tf.zeros([batch, k], tf.bool)
        improvable = tf.ones([batch], tf.bool)  # HF's early-stop heuristic
        top_beams = tf.range(2 * k) < k
        stop_when_full = self.early_stopping is True

        def penalised(scores, lengths):
            penalty = tf.pow(tf.cast(lengths, tf.float64), float(self.length_penalty))
            return scores / tf.cast(penalty, tf.float32)

        def input_done(pool_finished, improvable):
            full = tf.reduce_all(pool_finished, axis=1)
            return tf.logical_or(
                tf.logical_not(improvable), tf.logical_and(full, stop_when_full)
            )

        def cond(
            tokens, cache, index, running, pool, pool_scores, pool_finished, improvable
        ):
            return tf.logical_and(
                index < stop,
                tf.logical_not(tf.reduce_all(input_done(pool_finished, improvable))),
            )

        def body(
            tokens, cache, index, running, pool, pool_scores, pool_finished, improvable
        ):
            logits, cache = next_fn(tokens, cache, index)
            logits = _never_padding(
                tf.cast(logits, tf.float32) / self.temperature, -_INF
            )
            log_probs = self.process(
                tf.nn.log_softmax(logits),
                tokens,
                index,
                prompt_lengths,
                stop,
                end_token_id,
            )
            vocabulary = tf.shape(log_probs)[1]
            length = tf.shape(tokens)[1]
            candidates = running[:, :, None] + tf.reshape(
                log_probs, [batch, k, vocabulary]
            )
            # The best 2K of the K*V candidates, in two steps: each beam's best
            # 2K (a top-k over V, which XLA does without sorting V), then the
            # best 2K of those K*2K. The same candidates in the same order as
            # one top-k over K*V, ties included (lower beam, then lower id).
            beam_scores, beam_tokens = tf.math.top_k(candidates, k=2 * k)  # (B, K, 2K)
            top_scores, top = tf.math.top_k(
                tf.reshape(beam_scores, [batch, 2 * k * k]), k=2 * k
            )  # (B, 2K), best first
            chosen = tf.gather(
                tf.reshape(beam_tokens, [batch, 2 * k * k]), top, batch_dims=1
            )
            parent = tf.reshape(offsets * k + top // (2 * k), [-1])  # (B * 2K,)
            hits = tf.logical_or(chosen == end_token_id, index + 1 >= stop)
            extended = _write(
                tf.gather(tokens, parent), index, tf.reshape(chosen, [-1])
            )

            # The best K continuations that did not end run on.
            alive = top_scores + tf.cast(hits, tf.float32) * never
            new_running, keep = tf.math.top_k(alive, k=k)  # (B, K)
            keep = tf.reshape(offsets * 2 * k + keep, [-1])  # rows of `extended`
            new_tokens = tf.gather(extended, keep)
            new_parent = tf.gather(parent, keep)  # (R,)

            # Of the first K, those that ended join the pool if they beat it.
            just_finished = tf.logical_and(hits, top_beams[None])
            scores = penalised(top_scores, index + 1 - input_lengths[:, None])
            if stop_when_full:
                full = tf.reduce_all(pool_finished, axis=1, keepdims=True)
                scores += tf.cast(full, tf.float32) * never
            scores += tf.cast(tf.logical_not(improvable)[:, None], tf.float32) * never
            scores += tf.cast(tf.logical_not(just_finished), tf.float32) * never
            merged_scores = tf.concat([pool_scores, scores], axis=1)  # (B, 3K)
            new_pool_scores, best = tf.math.top_k(merged_scores, k=k)
            merged_finished = tf.concat([pool_finished, just_finished], axis=1)
            new_pool_finished = tf.gather(merged_finished, best, batch_dims=1)
            merged = tf.concat(
                [
                    tf.reshape(pool, [batch, k, length]),
                    tf.reshape(extended, [batch, 2 * k, length]),
                ],
                axis=1,
            )
            new_pool = tf.reshape(tf.gather(merged, best, batch_dims=1), [rows, length])

            # Can the best running beam still beat the worst finished one?
            if self.early_stopping == "never" and self.length_penalty > 0:
                hypothetical = stop - input_lengths
            else:
                hypothetical = index + 1 - input_lengths
            best_running = penalised(new_running[:, 0], hypothetical)
            worst = tf.where(
                new_pool_finished,
                tf.reduce_min(new_pool_scores, axis=1, keepdims=True),
                never,
            )
            new_improvable = tf.logical_and(
                improvable, tf.reduce_any(best_running[:, None] > worst, axis=1)
            )

            # An input still in its prompt keeps its state: its beams are
            # copies of the prompt (at 0 and -1e9), as when HF starts.
            active = index >= input_lengths  # (B,)
            active_rows = tf.repeat(active, k)

            def pick(new, old, mask):
                mask = tf.reshape(mask, [-1] + [1] * (len(old.shape) - 1))
                picked = tf.where(mask, new, old)
                picked.set_shape(old.shape)
                return picked

            tokens = pick(new_tokens, tokens, active_rows)
            cache = tf.nest.map_structure(
                _reorder(tf.where(active_rows, new_parent, tf.range(rows))), cache
            )
            return (
                tokens,
                cache,
                index + 1,
                pick(new_running, running, active),
                pick(new_pool, pool, active_rows),
                pick(new_pool_scores, pool_scores, active),
                pick(new_pool_finished, pool_finished, active),
                pick(new_improvable, improvable, active),
            )

        tokens, _, _, _, pool, _, pool_finished, _ = tf.while_loop(
            cond,
            body,
            (
                tokens,
                cache,
                start,
                running,
                pool,
                pool_scores,
                pool_finished,
                improvable,
            ),
        )
        first = tf.range(batch) * k
        # The pool's best; the first running beam only if nothing finished
        # (the loop did not run).
        return tf.where(
            pool_finished[:, :1], tf.gather(pool, first), tf.gather(tokens, first)
        )


def _prompt_lengths(prompt_mask):
    return tf.reduce_sum(tf.cast(prompt_mask, tf.int32), axis=1)


def _forced(token_id, vocabulary):
    """`(1, V)` scores that force `token_id`: 0 there, -inf elsewhere."""
    return tf.where(tf.one_hot(token_id, vocabulary)[None] > 0, 0.0, -_INF)


def _write(tokens, index, values):
    """`tokens` with column `index` set to `values` `(R,)`."""
    rows = tf.shape(tokens)[0]
    written = tf.tensor_scatter_nd_update(
        tokens, tf.stack([tf.range(rows), tf.fill([rows], index)], axis=1), values
    )
    written.set_shape(tokens.shape)
    return written


def _repeated_ngrams(tokens, index, n, vocabulary):
    """Bool `(R, V)`: the tokens that would complete an n-gram already in
    `tokens[:, :index]` (HF's NoRepeatNGramLogitsProcessor), fixed shapes.

    The window starting at `j` holds `tokens[:, j : j + n]`; it is complete
    when `j + n <= index`. If its first `n - 1` tokens equal the last `n - 1`
    before `index`, its last token is banned."""
    rows = tf.shape(tokens)[0]
    length = tf.shape(tokens)[1]
    starts = tf.range(length)
    matches = starts[None] <= index - n  # (1, L): complete windows
    for m in range(n - 1):
        window = tf.gather(tokens, tf.minimum(starts + m, length - 1), axis=1)
        before = tf.gather(tokens, tf.maximum(index - n + 1 + m, 0)[None], axis=1)
        matches = tf.logical_and(matches, tf.equal(window, before))
    last = tf.gather(tokens, tf.minimum(starts + n - 1, length - 1), axis=1)
    matches = tf.broadcast_to(matches, tf.shape(last))
    positions = tf.stack(
        [tf.broadcast_to(tf.range(rows)[:, None], tf.shape(last)), last], axis=-1
    )
    counts = tf.scatter_nd(
        tf.reshape(positions, [-1, 2]),
        tf.reshape(tf.cast(matches, tf.int32), [-1]),
        tf.stack([rows, vocabulary]),
    )
    return counts > 0


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
        if sampler_args:
            raise ValueError(
                f"Sampler arguments {sampler_args} were given with a Sampler "
                f"instance ({type(sampler).__name__}); set them on the instance."
            )
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
