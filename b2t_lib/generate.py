r"""Greedy and beam search on the decoder's incremental key/value cache.

Beam search follows fairseq: at each step every live beam proposes its best continuations, a
hypothesis that ends in EOS is finished with the length-normalized score

.. math::
    \mathrm{score}(y) = \frac{\sum_t \log p(y_t \mid y_{<t}, x)}{|y|^{\,\mathrm{lenpen}}}

(``|y|`` counts EOS), and a sentence is done once it holds ``beam_size`` finished hypotheses. The
maximum output length is ``max_len_a * src_len + max_len_b``; EOS is forced there.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import reorder_cache


def _max_lengths(src_padding_mask: torch.Tensor, max_len_a: float, max_len_b: int, limit: int) -> torch.Tensor:
    src_lengths = (~src_padding_mask).sum(dim=1)  # (batch,)
    return (src_lengths.float() * max_len_a + max_len_b).long().clamp(1, limit)


def _step_log_probs(model, tokens, memory, memory_padding_mask, cache) -> torch.Tensor:
    logits = model.decoder(tokens, memory, memory_padding_mask, cache)[:, -1]  # (rows, vocab)
    log_probs = F.log_softmax(logits.float(), dim=-1)
    log_probs[:, model.cfg.pad_idx] = float("-inf")  # never generate padding or BOS
    log_probs[:, model.cfg.bos_idx] = float("-inf")
    return log_probs


@torch.no_grad()
def greedy_search(model, src_tokens: torch.Tensor, max_len_a: float = 0.0, max_len_b: int = 200) -> list[torch.Tensor]:
    """Most probable token at every step. Returns one 1-D LongTensor per sentence, without EOS."""
    model.eval()
    eos, pad = model.cfg.eos_idx, model.cfg.pad_idx
    memory, memory_padding_mask = model.encoder(src_tokens)  # (batch, src_time, d_model)
    batch = src_tokens.shape[0]
    max_lengths = _max_lengths(memory_padding_mask, max_len_a, max_len_b, model.cfg.max_positions - 1)
    tokens = torch.full((batch, 1), eos, dtype=torch.long, device=src_tokens.device)  # decoder starts with EOS
    finished = torch.zeros(batch, dtype=torch.bool, device=src_tokens.device)
    cache: dict = {}
    for step in range(int(max_lengths.max())):
        log_probs = _step_log_probs(model, tokens, memory, memory_padding_mask, cache)
        next_tokens = log_probs.argmax(dim=-1)  # (batch,)
        next_tokens = torch.where(step + 1 >= max_lengths, torch.full_like(next_tokens, eos), next_tokens)
        next_tokens = torch.where(finished, torch.full_like(next_tokens, pad), next_tokens)
        tokens = torch.cat([tokens, next_tokens[:, None]], dim=1)
        finished |= next_tokens.eq(eos)
        if bool(finished.all()):
            break
    return [_strip(row[1:], eos, pad) for row in tokens]


def _strip(row: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    """Cut at the first EOS and drop padding."""
    end = (row == eos).nonzero()
    row = row[: int(end[0])] if len(end) else row
    return row[row != pad]


@torch.no_grad()
def beam_search(model, src_tokens: torch.Tensor, beam_size: int = 4, len_penalty: float = 1.0,
                max_len_a: float = 0.0, max_len_b: int = 200) -> list[torch.Tensor]:
    """fairseq-style beam search. Returns the best hypothesis per sentence (1-D LongTensor, no EOS)."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    model.eval()
    eos = model.cfg.eos_idx
    device = src_tokens.device
    batch, beam = src_tokens.shape[0], beam_size
    memory, memory_padding_mask = model.encoder(src_tokens)
    max_lengths = _max_lengths(memory_padding_mask, max_len_a, max_len_b, model.cfg.max_positions - 1)
    # Every sentence gets `beam` rows: (batch * beam, ...), sentence-major.
    expand = torch.arange(batch, device=device).repeat_interleave(beam)
    memory, memory_padding_mask = memory[expand], memory_padding_mask[expand]
    max_lengths = max_lengths[expand].view(batch, beam)[:, 0]

    tokens = torch.full((batch * beam, 1), eos, dtype=torch.long, device=device)
    scores = torch.zeros(batch, beam, device=device)
    scores[:, 1:] = float("-inf")  # at the first step only one beam is alive
    finished: list[list[tuple[float, torch.Tensor]]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    cache: dict = {}
    beam_offsets = (torch.arange(batch, device=device) * beam)[:, None]  # (batch, 1)

    for step in range(int(max_lengths.max())):
        log_probs = _step_log_probs(model, tokens, memory, memory_padding_mask, cache)  # (batch*beam, vocab)
        vocab = log_probs.shape[-1]
        at_limit = (step + 1 >= max_lengths)[:, None, None]  # force EOS at the length limit
        eos_only = torch.full_like(log_probs, float("-inf")).view(batch, beam, vocab)
        eos_only[:, :, eos] = log_probs.view(batch, beam, vocab)[:, :, eos]
        log_probs = torch.where(at_limit, eos_only, log_probs.view(batch, beam, vocab))
        candidates = (scores[:, :, None] + log_probs).view(batch, beam * vocab)
        cand_scores, cand_index = candidates.topk(2 * beam, dim=1)  # (batch, 2*beam)
        cand_beam, cand_token = cand_index // vocab, cand_index % vocab

        # Finish the hypotheses that end in EOS (among the top `beam` candidates, as fairseq does).
        is_eos = cand_token.eq(eos) & torch.isfinite(cand_scores)
        for b, k in is_eos[:, :beam].nonzero().tolist():
            if done[b] or len(finished[b]) >= beam:
                continue
            row = int(beam_offsets[b, 0] + cand_beam[b, k])
            hypothesis = tokens[row, 1:]
            length = hypothesis.numel() + 1  # + EOS
            finished[b].append((float(cand_scores[b, k]) / length**len_penalty, hypothesis.clone()))
        done |= torch.tensor([len(f) >= beam for f in finished], device=device)
        if bool(done.all()):
            break

        # Keep the best `beam` candidates that do not end in EOS.
        keep_scores = cand_scores.masked_fill(is_eos | ~torch.isfinite(cand_scores), float("-inf"))
        keep_scores, keep = keep_scores.topk(beam, dim=1)  # (batch, beam)
        source_rows = (beam_offsets + cand_beam.gather(1, keep)).view(-1)
        next_tokens = cand_token.gather(1, keep).view(-1, 1)
        scores = keep_scores
        tokens = torch.cat([tokens[source_rows], next_tokens], dim=1)
        # The self-attention history follows its beam; the cross-attention keys are the same for every
        # beam of a sentence and never need reordering.
        for layer_cache in cache.values():
            reorder_cache(layer_cache.get("self", {}), source_rows)

    results = []
    for b in range(batch):
        if not finished[b]:  # cannot happen with a forced EOS, but never return nothing
            finished[b].append((float(scores[b, 0]), tokens[b * beam, 1:]))
        results.append(max(finished[b], key=lambda item: item[0])[1])
    return results
