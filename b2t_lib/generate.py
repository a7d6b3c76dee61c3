r"""Greedy and beam search, decoding exactly as fairseq's ``SequenceGenerator`` does.

The paper's numbers come from ``generate.py`` of fairseq 0.9 (the official B2T code is a fork of it),
so these rules follow fairseq 0.9's ``sequence_generator.py`` and ``search.BeamSearch``; where later
fairseq differs, the note says so. With ``y`` a hypothesis of :math:`|y|` tokens, the model scores
the hypothesis *and* its EOS:

.. math::
    \mathrm{score}(y) = \frac{\sum_{t=1}^{|y|+1} \log p(y_t \mid y_{<t}, x)}{(|y| + 1)^{\,\mathrm{lenpen}}},
    \qquad y_{|y|+1} = \mathrm{EOS}

Rules, each implemented (and commented) in the line that applies it:

1. **Length limit.** ``max_len = min(int(max_len_a * src_len + max_len_b), max_positions - 1)`` with
   ``src_len = src_tokens.size(1)``: the *padded width* of the batch, the source EOS and padding
   included, so one limit holds for the whole batch. A hypothesis has at most ``max_len`` tokens
   and then EOS: at step ``max_len`` (0-based) every token but EOS is forbidden.
2. **Minimum length.** At steps ``< min_len`` EOS is forbidden (fairseq's default ``min_len=1``: no
   empty hypothesis). ``min_len > max_len`` is refused.
3. **Blocked symbols.** Only ``<pad>`` is never generated; ``<s>`` may be. ``unk_penalty`` is
   subtracted from ``<unk>``'s log-probability (default 0). A NaN log-probability counts as
   :math:`-\infty`. Log-probabilities are a float32 ``log_softmax`` of the logits.
4. **Candidates.** At step 0 only the first beam proposes (all beams are the same empty prefix);
   later every beam's cumulative score is added to its log-probabilities and the best
   ``min(2 * beam, beam * vocab - 1)`` of all ``beam * vocab`` continuations are taken with
   ``torch.topk`` (so ties between candidates break as fairseq's ``topk`` breaks them).
5. **Finalization.** A candidate ending in EOS (with a finite score) is finished only if it is among
   the first ``beam`` candidates; finished ones are added best first, and a sentence collects at
   most ``beam`` of them. Its score is normalized by :math:`(\text{step} + 1)^{\mathrm{lenpen}}`
   (tokens + EOS), in float32 as fairseq does.
6. **Done.** A sentence is done when it holds ``beam`` finished hypotheses, or at step ``max_len``;
   it then leaves the batch. Nothing else stops it early: no bound on the scores still reachable.
7. **Next beams.** The ``beam`` best candidates that do not end in EOS continue, in candidate order.
   When fewer than ``beam`` such candidates exist, EOS candidates fill the beam and fairseq marks
   their slots *ignored* (its ``blacklist``): at the next step no EOS candidate of that rank is
   finished. This happens only at step 0 with ``min_len=0`` and ``beam = vocab_size - 1`` (the
   largest beam); the EOS-filled beam then continues after its EOS, as in fairseq.
8. **Result.** A sentence's finished hypotheses sorted by score, best first. Equal scores keep the
   order in which they were finished (fairseq 0.9 sorts stably; later fairseq uses
   ``torch.sort(descending=True)``, whose order of ties is unspecified).

``greedy_search`` is what fairseq does with ``--beam 1``: the same rules, one candidate per step.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .attention import moved_rows, reorder_cache, reserve_cache
from .special_tokens import UNK

NEG_INF = float("-inf")


class Hypothesis(NamedTuple):
    """One finished hypothesis: its tokens (1-D LongTensor, EOS not included) and its score."""

    tokens: torch.Tensor
    score: float


def max_output_length(src_tokens: torch.Tensor, max_len_a: float, max_len_b: int, max_positions: int) -> int:
    """Rule 1: ``min(int(a * src_len + b), max_positions - 1)``, ``src_len`` = the batch's padded width.

    fairseq takes ``src_len = src_tokens.size(1)`` (padding and the source EOS count; for speech, the
    padded number of frames) and keeps one position free for EOS.
    """
    src_len = src_tokens.shape[1]
    return min(int(max_len_a * src_len + max_len_b), max_positions - 1)


def _special_ids(model) -> tuple[int, int, int]:
    cfg = model.cfg
    return cfg.eos_idx, cfg.pad_idx, getattr(cfg, "unk_idx", UNK)


def _next_log_probs(
    model, tokens, memory, memory_padding_mask, cache, step: int, max_len: int, min_len: int, unk_penalty: float
) -> torch.Tensor:
    """Log-probabilities of the next token, (rows, vocab), with rules 1-3 applied."""
    eos, pad, unk = _special_ids(model)
    logits = model.decoder(tokens, memory, memory_padding_mask, cache)[:, -1].float()  # (rows, vocab)
    # Rule 3: float32 log-softmax. A module computes its output afresh in every call, so the log-probabilities are
    # written over it (a second (rows, vocab) block per step costs more in memory traffic than the softmax itself);
    # the output of any other decoder (a stand-in that may return a tensor it keeps) is left as it is.
    in_place = isinstance(model, nn.Module) and logits.is_contiguous()
    log_probs = torch.log_softmax(logits, dim=-1, out=logits if in_place else None)
    # Rule 3: NaN counts as -inf. Log-probabilities are finite or -inf, so a row's sum is NaN exactly when the row
    # holds a NaN: one read of the (rows, vocab) block finds them, and only such rows are rewritten.
    nan_rows = torch.isnan(log_probs.sum(dim=1))  # (rows,)
    if bool(nan_rows.any()):
        log_probs[nan_rows] = log_probs[nan_rows].nan_to_num(nan=NEG_INF, posinf=float("inf"), neginf=NEG_INF)
    log_probs[:, pad] = NEG_INF  # rule 3: never generate padding (BOS stays allowed)
    log_probs[:, unk] -= unk_penalty  # rule 3: unknown-word penalty
    if step >= max_len:  # rule 1: after max_len tokens only EOS may follow
        eos_column = log_probs[:, eos].clone()
        log_probs.fill_(NEG_INF)
        log_probs[:, eos] = eos_column
    if step < min_len:  # rule 2: no EOS before min_len tokens
        log_probs[:, eos] = NEG_INF
    return log_probs


def _check_lengths(min_len: int, max_len: int) -> None:
    if min_len > max_len:
        raise ValueError(
            f"min_len={min_len} is larger than the length limit max_len={max_len} "
            f"(max_len_a * src_len + max_len_b, capped by max_positions - 1); lower min_len "
            f"or raise max_len_b"
        )


@torch.no_grad()
def greedy_search(
    model,
    src_tokens: torch.Tensor,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 1,
    unk_penalty: float = 0.0,
) -> list[torch.Tensor]:
    """The most probable token at every step (fairseq ``--beam 1``). Returns one 1-D LongTensor per
    sentence, without EOS. Length limit, minimum length and blocked symbols as in the module docstring."""
    model.eval()
    eos, pad, _ = _special_ids(model)
    max_len = max_output_length(src_tokens, max_len_a, max_len_b, model.cfg.max_positions)
    _check_lengths(min_len, max_len)
    memory, memory_padding_mask = model.encoder(src_tokens)  # (batch, src_time, d_model)
    batch, device = src_tokens.shape[0], src_tokens.device
    tokens = torch.full((batch, 1), eos, dtype=torch.long, device=device)  # the decoder starts with EOS
    scores = torch.zeros(batch, device=device)  # cumulative log-probabilities, float32
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    cache: dict = {}
    for step in range(max_len + 1):  # max_len tokens, then one step for EOS
        log_probs = _next_log_probs(
            model, tokens, memory, memory_padding_mask, cache, step, max_len, min_len, unk_penalty
        )
        if step > 0:
            log_probs = log_probs + scores[:, None]  # rule 4, with one beam: cumulative scores
        # rule 4: fairseq's beam search with beam 1 takes the first of its topk(2) candidates
        top_scores, top_tokens = log_probs.topk(min(2, log_probs.shape[1] - 1), dim=1)
        next_tokens = top_tokens[:, 0].masked_fill(finished, pad)  # (batch,)
        scores = top_scores[:, 0]
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)
        finished |= next_tokens.eq(eos)  # rule 6: a sentence ends with its first EOS
        if bool(finished.all()):
            break
        if step == 0:
            reserve_cache(cache, max_len + 1)  # the self-attention histories never grow (never copied)
    return [_strip(row[1:], eos, pad) for row in tokens]


def _strip(row: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    """Cut at the first EOS and drop padding."""
    end = (row == eos).nonzero()
    row = row[: int(end[0])] if len(end) else row
    return row[row != pad]


@torch.no_grad()
def beam_search_hypotheses(
    model,
    src_tokens: torch.Tensor,
    beam_size: int = 4,
    len_penalty: float = 1.0,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 1,
    unk_penalty: float = 0.0,
) -> list[list[Hypothesis]]:
    """fairseq's beam search. Returns, per sentence, its finished hypotheses, best first (rule 8).

    Args:
        src_tokens: (batch, src_time) source batch as the encoder takes it (or speech features).
        beam_size: beam width; at most ``vocab_size - 1`` (fairseq's cap: padding is never chosen).
        len_penalty: the exponent ``lenpen`` of the length normalization.
        max_len_a, max_len_b: the length limit of rule 1 (fairseq's defaults: 0 and 200).
        min_len: rule 2 (fairseq's default 1).
        unk_penalty: rule 3 (fairseq's default 0).
    """
    model.eval()
    eos, _, _ = _special_ids(model)
    vocab = model.cfg.vocab_size
    beam = min(beam_size, vocab - 1)  # fairseq: at most vocab - 1 beams, padding is never selected
    if beam < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    max_len = max_output_length(src_tokens, max_len_a, max_len_b, model.cfg.max_positions)
    _check_lengths(min_len, max_len)
    device = src_tokens.device
    batch = src_tokens.shape[0]
    memory, memory_padding_mask = model.encoder(src_tokens)  # (batch, src_time, d_model), (batch, src_time)
    cache: dict = {}
    # The cross-attention keys and values are the same for every beam of a sentence. A decoder of this library
    # computes them ahead of the first step, once per sentence, and the beams of a sentence attend to that one copy
    # together; it reads nothing else of `memory`, which stays one row per sentence, as does its mask. Its first
    # step, where every beam is the same empty prefix (rule 4), runs one row per sentence. Any other decoder (a
    # stand-in) gets `beam` rows per sentence of everything, from the first step on.
    shared_memory = hasattr(model.decoder, "cache_encoder_keys")
    if shared_memory:
        model.decoder.cache_encoder_keys(memory, cache)
    else:
        rows = torch.arange(batch, device=device).repeat_interleave(beam)  # `beam` rows per sentence
        memory, memory_padding_mask = memory[rows], memory_padding_mask[rows]  # (live * beam, src_time, ...)
    width = 1 if shared_memory else beam  # the decoder's rows per sentence at this step

    live = list(range(batch))  # original index of every sentence still in the batch
    tokens = torch.full((batch * width, 1), eos, dtype=torch.long, device=device)  # (live * width, step + 1)
    scores = torch.zeros(batch, beam, device=device)  # cumulative log-probabilities, float32
    ignored = torch.zeros(batch, beam, dtype=torch.bool, device=device)  # rule 7: fairseq's blacklist
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    cand_size = 2 * beam

    for step in range(max_len + 1):  # max_len tokens, then one step for EOS
        n_live = len(live)
        log_probs = _next_log_probs(
            model, tokens, memory, memory_padding_mask, cache, step, max_len, min_len, unk_penalty
        ).view(n_live, width, vocab)
        if step == 0:
            flat = log_probs[:, 0, :]  # rule 4: every beam is the same empty prefix, only the first proposes
        else:
            flat = log_probs.add_(scores[:, :, None]).view(n_live, beam * vocab)  # rule 4: cumulative scores
        n_cand = min(cand_size, flat.shape[1] - 1)  # rule 4: 2 * beam candidates (-1: padding never chosen)
        cand_scores, cand_index = flat.topk(n_cand, dim=1)  # (live, n_cand), best first
        cand_beams, cand_tokens = cand_index // vocab, cand_index % vocab

        # Rule 5: finish EOS candidates among the first `beam` ones (finite scores, not ignored).
        ends = cand_tokens.eq(eos) & cand_scores.ne(NEG_INF)  # (live, n_cand)
        ends[:, :beam] &= ~ignored
        finishing = ends[:, :beam].nonzero()  # (m, 2): (sentence, rank), sentence by sentence, best first
        done: list[int] = []
        if len(finishing):
            sentence, rank = finishing[:, 0], finishing[:, 1]
            source_rows = sentence * width + cand_beams[sentence, rank]
            # rule 5: length normalization by (tokens + EOS) ** lenpen, in float32
            final_scores = cand_scores[sentence, rank] / (step + 1) ** len_penalty
            prefixes = tokens[source_rows, 1:]  # (m, step): the hypotheses without their EOS
            seen: list[int] = []
            for i, (s, score) in enumerate(zip(sentence.tolist(), final_scores.tolist())):
                hypotheses = finished[live[s]]
                if len(hypotheses) < beam:  # rule 5: at most `beam` finished hypotheses per sentence
                    hypotheses.append(Hypothesis(prefixes[i].clone(), score))
                if s not in seen:
                    seen.append(s)
            # rule 6: done with `beam` finished hypotheses, or at the length limit
            done = [s for s in seen if len(finished[live[s]]) == beam or step == max_len]
        if len(done) == n_live or step == max_len:
            break

        # Rule 6: finished sentences leave the batch.
        old_sentence = torch.arange(n_live, device=device)
        if done:
            keep = torch.tensor(_keep_in_place(n_live, done), device=device)
            live = [live[s] for s in keep.tolist()]
            old_sentence = keep
            cand_scores, cand_beams, cand_tokens = cand_scores[keep], cand_beams[keep], cand_tokens[keep]
            ends, ignored = ends[keep], ignored[keep]

        # Rule 7: the first `beam` candidates that neither end in EOS nor sit on an ignored slot.
        ends[:, :beam] |= ignored
        order_key = ends.long() * cand_size + torch.arange(n_cand, device=device)  # EOS ones sort last
        chosen_keys, chosen = order_key.topk(beam, dim=1, largest=False)  # (live, beam), candidate order
        ignored = chosen_keys >= cand_size  # EOS candidates that had to fill the beam
        source_rows = (old_sentence[:, None] * width + cand_beams.gather(1, chosen)).view(-1)  # (live * beam,)
        tokens = torch.cat([tokens[source_rows], cand_tokens.gather(1, chosen).view(-1, 1)], dim=1)
        scores = cand_scores.gather(1, chosen)
        # The self-attention history follows its beam (in place: only the rows that continue another beam, or
        # take a done sentence's place, are copied; after a first step of one row per sentence, every row is new).
        # The cross-attention keys hold one copy per sentence (a stand-in's cache holds one per beam until the first
        # step ends, and then keeps the first beam's), which moves only when sentences leave the batch.
        moved = moved_rows(source_rows)
        for layer_cache in cache.values():
            for name, part in layer_cache.items():
                if name != "cross":
                    reorder_cache(part, source_rows, moved)
                elif step == 0 and not shared_memory:
                    reorder_cache(part, old_sentence * beam)  # (live, ...): the first beam's copy
                elif done:
                    reorder_cache(part, old_sentence)
        if step == 0:
            reserve_cache(cache, max_len + 1)  # the self-attention histories never grow (never copied)
        if done:
            memory_rows = old_sentence if shared_memory else source_rows
            memory, memory_padding_mask = memory[memory_rows], memory_padding_mask[memory_rows]
        width = beam

    # Rule 8: best first; sorted() is stable, so equal scores keep the order they were finished in.
    return [sorted(hypotheses, key=lambda h: h.score, reverse=True) for hypotheses in finished]


def _keep_in_place(n_live: int, done: list[int]) -> list[int]:
    """The sentences that stay in the batch, in their new order: each keeps its place, and the place of a done
    one goes to the last of those that stay, so the caches copy the fewest rows (the order of the sentences
    changes nothing in their search: each is searched on its own rows)."""
    n_stay = n_live - len(done)
    movers = [s for s in range(n_stay, n_live) if s not in done]  # stay, but beyond the new end
    return [movers.pop() if s in done else s for s in range(n_stay)]


@torch.no_grad()
def beam_search(
    model,
    src_tokens: torch.Tensor,
    beam_size: int = 4,
    len_penalty: float = 1.0,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    min_len: int = 1,
    unk_penalty: float = 0.0,
) -> list[torch.Tensor]:
    """fairseq's beam search; the best hypothesis per sentence (1-D LongTensor, no EOS).

    See :func:`beam_search_hypotheses` for the arguments and the module docstring for the rules.
    A sentence that finished no hypothesis (only possible when every continuation has probability
    zero) gets an empty tensor.
    """
    results = beam_search_hypotheses(
        model, src_tokens, beam_size, len_penalty, max_len_a, max_len_b, min_len, unk_penalty
    )
    empty = torch.zeros(0, dtype=torch.long, device=src_tokens.device)
    return [hypotheses[0].tokens if hypotheses else empty for hypotheses in results]


@torch.no_grad()
def lm_greedy_continuation(model, prefix: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """A language model's greedy continuation: ``max_new_tokens`` times the most probable next token.

    ``prefix`` (batch, prefix_len) holds unpadded token ids (start it with EOS, the line end before a
    text, as training blocks do); returns (batch, max_new_tokens). EOS is an ordinary token here (a
    line end) and does not stop generation; ``<pad>`` is never generated. Each step runs the newest
    position only, through the incremental cache (the prefix too is fed one token at a time).
    """
    if prefix.dim() != 2 or prefix.shape[1] < 1:
        raise ValueError(f"prefix must be (batch, prefix_len >= 1) token ids, got shape {tuple(prefix.shape)}")
    model.eval()
    pad = model.cfg.pad_idx
    cache: dict = {}
    tokens = prefix[:, :1]
    for t in range(1, prefix.shape[1]):  # fill the cache with the prefix
        model(tokens, cache=cache)
        tokens = prefix[:, : t + 1]
    generated = []
    for _ in range(max_new_tokens):
        log_probs = model(tokens, cache=cache)[:, -1].float()  # (batch, vocab); log-probs or logits
        log_probs[:, pad] = NEG_INF
        next_tokens = log_probs.argmax(dim=-1)  # (batch,)
        generated.append(next_tokens)
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)
    return torch.stack(generated, dim=1) if generated else prefix.new_zeros(prefix.shape[0], 0)
