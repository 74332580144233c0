"""Beam search (`BeamSampler`) and its default rules, "wu".

`rules="transformers"` (Hugging Face's beam search, token for token) is in
`kt.generation.beam_transformers`; both run in one XLA-compiled
`tf.while_loop` over `num_beams` rows per prompt.

Shape legend: B batch, K beams, R = B * K rows of the buffer, L buffer
length, V vocabulary.
"""

import copy

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation import beam_transformers, loop
from keras_transformer.generation.samplers import Sampler

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
        num_return_sequences: how many of the best hypotheses to return per
            input, best first (at most `num_beams`): `generate` then gives
            `num_return_sequences` rows per prompt, as Hugging Face does.
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
        num_return_sequences=1,
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
        self.num_return_sequences = self.returning(
            num_return_sequences
        ).num_return_sequences
        self.length_penalty = length_penalty
        self.rules = rules
        self.early_stopping = early_stopping

    @property
    def num_rows(self):
        """Buffer rows per prompt: one per beam (`generate` repeats them)."""
        return self.num_beams

    def returning(self, num_return_sequences):
        """A copy of this search that returns its `num_return_sequences`
        best hypotheses per input."""
        result = copy.copy(self)
        validation.check_positive_int("num_return_sequences", num_return_sequences)
        if num_return_sequences > self.num_beams:
            raise ValueError(
                "`num_return_sequences` must be at most `num_beams`. Received: "
                f"num_return_sequences={num_return_sequences!r} with "
                f"num_beams={self.num_beams!r}"
            )
        result.num_return_sequences = num_return_sequences
        return result

    def next_token(self, logits, seed):
        return tf.argmax(logits, axis=-1, output_type=tf.int32)

    def __call__(
        self, next_fn, tokens, cache, start, stop, prompt_mask, end_token_id, seed
    ):
        if self.rules == "transformers" and self.num_beams == 1:
            # HF decodes greedily with one beam.
            return super().__call__(
                next_fn, tokens, cache, start, stop, prompt_mask, end_token_id, seed
            )
        done = tf.zeros((tf.shape(tokens)[0],), tf.bool)
        state = loop.DecodeState(tokens, cache, start, done)
        spec = loop.DecodeSpec(stop, prompt_mask, end_token_id)
        if self.rules == "transformers":
            return beam_transformers.search(self, next_fn, state, spec)
        return self._wu_search(next_fn, state, spec)

    def _wu_search(self, next_fn, state, spec):
        """Wu et al.'s beam search from `state` for the request `spec`."""
        tokens, cache, start, done = state
        stop, prompt_mask, end_token_id, _ = spec
        k = self.num_beams
        rows = tf.shape(tokens)[0]  # B * K
        batch = rows // k
        never = -1e9
        scores = tf.reshape(
            tf.tile(tf.concat([[0.0], tf.fill([k - 1], never)], 0)[None], [batch, 1]),
            [-1],
        )
        prompt_lengths = loop.prompt_lengths(prompt_mask)

        def cond(tokens, cache, index, scores, done):
            return tf.logical_and(index < stop, tf.logical_not(tf.reduce_all(done)))

        def body(tokens, cache, index, scores, done):
            logits, cache = next_fn(tokens, cache, index)
            log_probs = tf.nn.log_softmax(
                tf.cast(logits, tf.float32) / self.temperature
            )
            log_probs = loop.never_padding(log_probs, never)
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
                loop.reorder(parent), (tokens, cache, in_prompt, done)
            )
            tokens = loop.write(tokens, index, chosen)
            done = tf.logical_or(
                done,
                tf.logical_and(
                    tf.logical_not(in_prompt), loop.is_end(chosen, end_token_id)
                ),
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
        _, best = tf.math.top_k(
            tf.reshape(scores / penalty, [batch, k]), k=self.num_return_sequences
        )  # (B, n), best first
        return tf.gather(tokens, tf.reshape(tf.range(batch)[:, None] * k + best, [-1]))
