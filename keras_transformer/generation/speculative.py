"""Several tokens per step: speculative and prompt-lookup decoding.

Plain decoding runs the model once per new token. Here a cheap proposer
guesses the next K tokens and the model scores all of them in one cached
forward pass over K + 1 positions; the tokens it agrees with are kept, plus
one of its own. Two proposers:

- a draft model (Leviathan et al. 2023; Chen et al. 2023): a smaller
  `CausalLM` over the same vocabulary decodes K tokens with its own KV cache;
- prompt lookup (Saxena 2023): the K tokens that followed the most recent
  earlier occurrence of the last n tokens (n from `max_ngram_size` down to
  1), no model at all.

Acceptance is the rejection rule of Leviathan et al.: a proposed token d,
drawn with probability q(d), is kept with probability min(1, p(d) / q(d)),
p being the target's distribution at that position (temperature, the
sampler's filtering and options applied); at the first rejection the token
is drawn from norm(max(0, p - q)), and when all K are kept a (K+1)-th comes
from p. The output is distributed as plain sampling from the target. Greedy
decoding is the case where p (and the draft's q) are one-hot on the argmax:
a proposal is kept if and only if it is the target's argmax, so the output
is plain greedy decoding's, token for token. Prompt lookup proposes with a
one-hot q.

A batch advances together, by one more than the fewest proposals any live
row kept: a row that kept more keeps only that many this step, and its
tokens are still exactly the target's. Nothing has to be rolled back: the
caches have fixed shapes, a step writes positions `p - 1 .. p + K - 1`, and
the causal mask never lets a query read a position after its own, so
entries past the kept tokens are overwritten before anything reads them.
When fewer than K + 1 positions are left in the buffer, the sampler's own
one-token loop finishes the sequence.

Shape legend: B batch, L buffer length, K proposed tokens per step, V
vocabulary.
"""

import tensorflow as tf

from keras_transformer import _validation as validation
from keras_transformer.generation import loop
from keras_transformer.models.decoding import CausalLM


def speculative_decode_function(
    model, sampler, num_tokens, *, draft_model=None, max_ngram_size=3
):
    """The speculative decode loop of `model`, as traceable graph code.

    Args:
        model: the target `kt.models.CausalLM` (such as `GPT2`).
        sampler: a `kt.generation.Sampler` with a `distribution` (every one
            but beam search).
        num_tokens: K, the tokens proposed per step.
        draft_model: a `CausalLM` over the same vocabulary that proposes;
            None proposes by prompt lookup.
        max_ngram_size: prompt lookup's longest n-gram to match.

    Returns:
        A function `(tokens (B, L), source, start, stop, end_token_id, seed)
        -> (tokens (B, L), stats)` like `decode_function`'s, `stats` being
        int32 `(2,)`: the speculative steps run (target passes over K + 1
        positions) and the proposed tokens kept in them, counted once per
        step for the whole batch.
    """
    k = num_tokens
    greedy = sampler.is_greedy
    vocabulary = model.output_vocabulary_size
    limits = [model.max_sequence_length]
    if draft_model is not None:
        limits.append(draft_model.max_sequence_length)

    def decode(tokens, source, start, stop, end_token_id, seed):
        length = tokens.shape[1]  # static: the buffer's
        limit = min([length, *limits])
        batch = tf.shape(tokens)[0]
        prompt_mask = tokens != 0
        prompt_lengths = loop.prompt_lengths(prompt_mask)
        target = model.start_decoding(tokens, source, True)
        draft = () if draft_model is None else _start_draft(draft_model, tokens)

        def sample(probs, seed):
            if greedy:  # one-hot: its argmax, without drawing
                return tf.argmax(probs, axis=-1, output_type=tf.int32)
            return draw(probs, seed)

        def distribution(logits, written, index):
            """The sampler's probabilities for position `index`, given the
            tokens `written` before it; one-hot on prompt positions."""
            scores = sampler.scores(
                logits, written, index, prompt_lengths, stop, end_token_id
            )
            probs = sampler.distribution(scores)
            forced = tf.one_hot(written[:, index], vocabulary)
            return tf.where(prompt_mask[:, index][:, None], forced, probs)

        def propose_with_draft(tokens, draft, index, seeds):
            # The draft's cache holds positions < index - 1: feed index - 2
            # and index - 1 (the first step's tokens were not fed when all
            # K were kept), or 0 and 1 when index is 1 (position 1 is then
            # overwritten by the first proposal before it is read).
            first = tf.maximum(index - 2, 0)
            chunk = tf.slice(tokens, [0, first], [-1, 2])
            logits, draft = draft_model.chunk_logits(chunk, draft, first)
            logits = tf.gather(logits, index - 1 - first, axis=1)  # (B, V)
            proposed, probs = [], []
            for j in range(k):
                q = distribution(logits, tokens, index + j)
                token = sample(q, seeds(j))
                tokens = loop.write(tokens, index + j, token)
                proposed.append(token)
                probs.append(q)
                if j < k - 1:
                    logits, draft = draft_model.chunk_logits(
                        token[:, None], draft, index + j
                    )
                    logits = logits[:, 0]
            return tf.stack(proposed, 1), tf.stack(probs, 1), tokens, draft

        def propose_by_lookup(tokens, index):
            proposed = lookup(tokens, index, k, max_ngram_size)
            columns = index + tf.range(k)
            in_prompt = tf.gather(prompt_mask, columns, axis=1)
            proposed = tf.where(in_prompt, tf.gather(tokens, columns, axis=1), proposed)
            written = loop.write_columns(tokens, index, proposed)
            return proposed, tf.one_hot(proposed, vocabulary), written

        def cond(tokens, target, draft, index, done, stats):
            return tf.logical_and(
                tf.logical_and(index < stop, index + k < limit),
                tf.logical_not(tf.reduce_all(done)),
            )

        def body(tokens, target, draft, index, done, stats):
            step_seed = tf.stack([seed[0], seed[1] + index])

            def seeds(tag):
                return tf.random.experimental.stateless_fold_in(step_seed, tag)

            if draft_model is None:
                proposed, q, written = propose_by_lookup(tokens, index)
            else:
                proposed, q, written, draft = propose_with_draft(
                    tokens, draft, index, seeds
                )
            # The target scores the last kept token and the K proposals in
            # one pass: logits for positions index .. index + K.
            chunk = tf.concat([tf.gather(tokens, [index - 1], axis=1), proposed], 1)
            logits, target = model.chunk_logits(chunk, target, index - 1)
            p = tf.stack(
                [distribution(logits[:, j], written, index + j) for j in range(k + 1)],
                axis=1,
            )  # (B, K + 1, V)

            uniform = tf.random.stateless_uniform([batch, k], seeds(k))
            kept = accepted(p, q, proposed, uniform)
            kept = tf.where(done, k, kept)
            m = tf.reduce_min(kept)  # every row keeps m proposals

            # Position index + m: the next proposal where a row kept it,
            # else a draw from the residual (from p after K).
            own = sample(residual(p, q, tf.fill([batch], m)), seeds(k + 1))
            next_proposal = tf.gather(proposed, tf.minimum(m, k - 1), axis=1)
            last = tf.where(kept > m, next_proposal, own)

            offsets = tf.range(k + 1)
            window = tf.concat([proposed, tf.zeros_like(proposed[:, :1])], 1)
            window = tf.where(offsets[None] == m, last[:, None], window)
            columns = index + offsets
            new = offsets[None] <= m  # (1, K + 1)
            in_prompt = tf.gather(prompt_mask, columns, axis=1)
            is_end = new & loop.is_end(window, end_token_id) & tf.logical_not(in_prompt)
            # After a row's end token (or once it is done) it gets zeros.
            ended = tf.math.cumsum(tf.cast(is_end, tf.int32), 1, exclusive=True) > 0
            window = tf.where(ended | done[:, None], 0, window)
            write = new & (columns < stop)[None]
            current = tf.gather(tokens, columns, axis=1)
            tokens = loop.write_columns(tokens, index, tf.where(write, window, current))
            done = done | tf.reduce_any(is_end & write, axis=1)
            done.set_shape(tokens.shape[:1])  # the loop keeps a static batch
            # Proposals past `stop` are not kept: they were never written.
            stats = stats + tf.stack([1, tf.minimum(m, stop - 1 - index)])
            return tokens, target, draft, index + m + 1, done, stats

        done = tf.zeros_like(prompt_lengths, tf.bool)  # (B,), static when B is
        stats = tf.zeros([2], tf.int32)
        tokens, target, _, index, done, stats = tf.while_loop(
            cond, body, (tokens, target, draft, start, done, stats)
        )

        def next_fn(tokens, state, index):
            return model.next_logits(tokens, state, index, True)

        tokens = sampler(
            next_fn,
            tokens,
            target,
            index,
            stop,
            prompt_mask,
            end_token_id,
            seed,
            done=done,
        )
        return tokens, stats

    return decode


def _start_draft(draft_model, tokens):
    """The draft's prefilled caches, over as much of the buffer as it fits."""
    limit = min(tokens.shape[1], draft_model.max_sequence_length)
    return draft_model.start_decoding(tokens[:, :limit], None, True)


def lookup(tokens, index, k, max_ngram_size):
    """Prompt lookup's proposals: for each row, the `k` tokens after the most
    recent earlier occurrence of its last n tokens (the largest n that
    occurs, from `max_ngram_size` down to 1); zeros where nothing matches.

    An occurrence starting at `j` counts when its continuation starts at
    `j + n <= index - 1`, a written token, so it is not the suffix itself.
    The continuation is read from the buffer as it is (it may run past
    `index - 1`, into what the row holds there).

    Args:
        tokens: int32 `(B, L)`, written before `index`.
        index: int32 scalar, the first position to propose for.
        k: how many tokens to propose.
        max_ngram_size: the longest n tried.

    Returns:
        int32 `(B, k)`: the proposals for positions `index .. index + k - 1`.
    """
    length = tokens.shape[1]
    starts = tf.range(length)
    found = tf.zeros([tf.shape(tokens)[0]], tf.bool)
    follow = tf.zeros([tf.shape(tokens)[0]], tf.int32)  # continuation start
    for n in range(max_ngram_size, 0, -1):
        matches = (starts + n <= index - 1)[None] & (index >= n)  # (1, L)
        for t in range(n):
            window = tf.gather(tokens, tf.minimum(starts + t, length - 1), axis=1)
            suffix = tf.gather(tokens, tf.maximum(index - n + t, 0)[None], axis=1)
            matches = matches & tf.equal(window, suffix)  # (B, L)
        latest = tf.reduce_max(tf.where(matches, starts[None], -1), axis=1)
        use = tf.logical_not(found) & (latest >= 0)
        follow = tf.where(use, latest + n, follow)
        found = found | use
    columns = tf.minimum(follow[:, None] + tf.range(k)[None], length - 1)
    proposed = tf.gather(tokens, columns, batch_dims=1)
    return tf.where(found[:, None], proposed, 0)


def accepted(p, q, proposed, uniform):
    """Leviathan et al.'s rule: how many leading proposals each row keeps.

    Proposal `d` at position j is kept when `uniform[:, j] * q(d) < p(d)`,
    that is with probability min(1, p(d) / q(d)); a row keeps its proposals
    up to its first refusal.

    Args:
        p: float `(B, K + 1, V)`, the target's distributions at the K
            proposed positions and the one after them.
        q: float `(B, K, V)`, the distributions the proposals were drawn from.
        proposed: int32 `(B, K)`.
        uniform: float `(B, K)`, uniform draws in [0, 1).

    Returns:
        int32 `(B,)`, from 0 to K.
    """
    k = proposed.shape[1]
    chosen = tf.one_hot(proposed, tf.shape(q)[-1], dtype=q.dtype)  # (B, K, V)
    p_d = tf.reduce_sum(p[:, :k] * chosen, -1)
    q_d = tf.reduce_sum(q * chosen, -1)
    kept = tf.cast(uniform * q_d < p_d, tf.int32)
    return tf.reduce_sum(tf.math.cumprod(kept, axis=1), axis=1)


def residual(p, q, m):
    """The distribution a row draws position `m` from after keeping `m`
    proposals: norm(max(0, p_m - q_m)) after a refusal (m < K), p_K when all
    K were kept. Kept proposals and this draw together are distributed as
    p (Leviathan et al., Theorem 1).

    Args:
        p: float `(B, K + 1, V)`; q: float `(B, K, V)`, as for `accepted`.
        m: int32 `(B,)`, the proposals each row kept.

    Returns:
        float `(B, V)`, unnormalized (as `draw` takes it).
    """
    k = q.shape[1]
    p_m = tf.gather(p, m, axis=1, batch_dims=1)  # (B, V)
    q_m = tf.gather(q, tf.minimum(m, k - 1), axis=1, batch_dims=1)
    left = tf.where((m < k)[:, None], tf.maximum(p_m - q_m, 0.0), p_m)
    total = tf.reduce_sum(left, -1, keepdims=True)
    return tf.where(total > 0, left, p_m)  # rounding only


def draw(probs, seed):
    """One id per row drawn from `probs` `(B, V)` (an argmax when one-hot)."""
    logits = tf.where(probs > 0, tf.math.log(probs), -float("inf"))
    return tf.cast(tf.random.stateless_categorical(logits, 1, seed)[:, 0], tf.int32)


def check_speculation(
    model,
    sampler,
    use_cache,
    draft_model,
    num_tokens,
    lookup_tokens,
    max_ngram_size,
):
    """The checked speculative settings as `compiled_speculative_fn`
    keyword arguments, or None for plain decoding."""
    if draft_model is None and lookup_tokens is None:
        if num_tokens is not None:
            raise ValueError(
                "`num_speculative_tokens` needs a `draft_model`. "
                f"Received: num_speculative_tokens={num_tokens!r}, draft_model=None"
            )
        return None
    if draft_model is not None and lookup_tokens is not None:
        raise ValueError(
            "Give either a `draft_model` or `prompt_lookup_num_tokens`, not both. "
            f"Received: prompt_lookup_num_tokens={lookup_tokens!r} with a draft_model"
        )
    name = "draft_model" if draft_model is not None else "prompt_lookup_num_tokens"
    if not isinstance(model, CausalLM):
        raise ValueError(
            f"`{name}` works with decoder-only models (kt.models.CausalLM). "
            f"Received: model={validation.describe(model)}"
        )
    if not sampler.supports_speculation:
        raise ValueError(
            f"`{name}` works with the greedy, temperature, top_k and top_p "
            f"samplers, not beam search. Received: sampler={type(sampler).__name__}"
        )
    if not use_cache:
        raise ValueError(
            f"`{name}` decodes with the KV cache. Received: use_cache=False"
        )
    if draft_model is None:
        validation.check_positive_int("prompt_lookup_num_tokens", lookup_tokens)
        validation.check_positive_int("prompt_lookup_max_ngram_size", max_ngram_size)
        return {"num_tokens": lookup_tokens, "max_ngram_size": max_ngram_size}
    if not isinstance(draft_model, CausalLM):
        raise ValueError(
            "`draft_model` must be a kt.models.CausalLM (such as kt.models.GPT2). "
            f"Received: draft_model={validation.describe(draft_model)}"
        )
    if draft_model.output_vocabulary_size != model.output_vocabulary_size:
        raise ValueError(
            "`draft_model` must share the model's vocabulary: its "
            f"vocabulary_size is {draft_model.output_vocabulary_size}, the "
            f"model's {model.output_vocabulary_size}. "
            f"Received: draft_model={validation.describe(draft_model)}"
        )
    num_tokens = 4 if num_tokens is None else num_tokens
    validation.check_positive_int("num_speculative_tokens", num_tokens)
    return {"num_tokens": num_tokens, "draft_model": draft_model}
