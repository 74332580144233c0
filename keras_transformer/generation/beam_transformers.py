"""Beam search under the rules of Hugging Face `transformers`.

`BeamSampler(rules="transformers")` calls `search`: HF's `_beam_search`
as fixed-shape graph code, with a pool of finished hypotheses per input and
its early-stopping heuristics, so each row matches HF run on that row alone.

Shape legend: B batch, K beams, R = B * K rows of the buffer, L buffer
length, V vocabulary.
"""

import tensorflow as tf

from keras_transformer.generation import loop


def search(sampler, next_fn, state, spec):
    """`sampler`'s beam search under HF's vectorised `_beam_search` (checked
    against transformers 5.24), with its -1e9 masks, for `num_beams >= 2`.

    Takes `next_fn` as `Sampler.__call__` does, the starting
    `loop.DecodeState` and the request's `loop.DecodeSpec` (its seed is
    unused: nothing is drawn), and returns the `(B * n, L)` `n =
    sampler.num_return_sequences` best hypotheses of each input, best
    first."""
    tokens, cache, start, _ = state
    stop, prompt_mask, end_token_id, _ = spec
    k = sampler.num_beams
    rows = tf.shape(tokens)[0]  # B * K
    batch = rows // k
    never = -1e9
    prompt_lengths = loop.prompt_lengths(prompt_mask)  # (R,)
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
    stop_when_full = sampler.early_stopping is True

    def penalised(scores, lengths):
        penalty = tf.pow(tf.cast(lengths, tf.float64), float(sampler.length_penalty))
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
        logits = loop.never_padding(
            tf.cast(logits, tf.float32) / sampler.temperature, -loop.INF
        )
        log_probs = sampler.process(
            tf.nn.log_softmax(logits),
            tokens,
            index,
            prompt_lengths,
            stop,
            end_token_id,
        )
        vocabulary = tf.shape(log_probs)[1]
        length = tf.shape(tokens)[1]
        candidates = running[:, :, None] + tf.reshape(log_probs, [batch, k, vocabulary])
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
        hits = tf.logical_or(loop.is_end(chosen, end_token_id), index + 1 >= stop)
        extended = loop.write(
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
        if sampler.early_stopping == "never" and sampler.length_penalty > 0:
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
            loop.reorder(tf.where(active_rows, new_parent, tf.range(rows))), cache
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
    n = sampler.num_return_sequences
    best = tf.reshape(tf.range(batch)[:, None] * k + tf.range(n)[None], [-1])
    # The pool (kept sorted, best first); the running beams only where
    # nothing finished (the loop did not run).
    finished = tf.reshape(pool_finished[:, :n], [-1, 1])
    return tf.where(finished, tf.gather(pool, best), tf.gather(tokens, best))
