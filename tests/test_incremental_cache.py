"""What the faster search rests on: the key/value history reordered in one copy, the newest-position embedding and
the row-wise NaN rule each compute exactly what the straightforward code computes."""

import torch
import torch.nn.functional as F

from b2t_lib import EOS, PAD, seed_everything
from b2t_lib.attention import KeyValueCache, reorder_cache
from b2t_lib.embedding import TokenInput, build_token_embedding
from b2t_lib.generate import _next_log_probs


def test_the_history_equals_concatenation_through_reorders_and_rows_leaving():
    generator = torch.Generator().manual_seed(0)
    history, keys, values = KeyValueCache(), None, None
    rows = 6
    for step in range(9):
        k, v = (torch.randn(rows, 3, 1, 4, generator=generator) for _ in range(2))  # (batch, heads, new, d_head)
        keys = k if keys is None else torch.cat([keys, k], dim=2)
        values = v if values is None else torch.cat([values, v], dim=2)
        seen_k, seen_v = history.append(k, v)
        assert torch.equal(seen_k, keys) and torch.equal(seen_v, values)
        if step == 3:
            continue  # no reorder: the next step is concatenated
        order = torch.randperm(rows, generator=generator)
        if step == 5:
            rows -= 2  # two rows leave (a sentence is done)
            order = order[:rows]
        history.reorder(order)
        keys, values = keys[order], values[order]
    assert history.length == 9


def test_several_positions_at_once_and_the_dict_reorder():
    history = KeyValueCache()
    k = torch.arange(2 * 5 * 3, dtype=torch.float).view(2, 1, 5, 3)  # (batch 2, heads 1, 5 positions, d_head 3)
    seen, _ = history.append(k, -k)
    assert torch.equal(seen, k)
    cache = {"self": {"history": history}, "cross": {"k": torch.tensor([[1.0], [2.0]])}}
    reorder_cache(cache, torch.tensor([1, 1]))
    assert torch.equal(history.append(k[:, :, :1], k[:, :, :1])[0][:, :, :5], k[[1, 1]])
    assert cache["cross"]["k"].tolist() == [[2.0], [2.0]]


def test_the_newest_position_alone_is_embedded_as_in_the_whole_sequence():
    seed_everything(0)
    embed = build_token_embedding(30, 8, PAD)
    token_input = TokenInput(8, PAD, keep_first=True).eval()
    tokens = torch.tensor([[EOS, 5, 6, 7], [PAD, EOS, 9, 4], [EOS, 5, PAD, PAD]])  # left and right padding
    full, mask = token_input(tokens, embed)
    last, last_mask = token_input(tokens, embed, last_only=True)
    assert last.shape == (3, 1, 8) and torch.equal(last_mask, mask)
    assert torch.equal(last, full[:, -1:])


class FixedLogits:
    """A decoder whose next-token logits are given: what the search's rule 3 does to them."""

    def __init__(self, logits):
        self.logits = logits
        self.cfg = type("cfg", (), dict(eos_idx=EOS, pad_idx=PAD, unk_idx=3))

    def decoder(self, *args):
        return self.logits[:, None, :]


def test_a_row_with_nan_becomes_minus_infinity_and_the_other_rows_are_untouched():
    logits = torch.randn(4, 10, generator=torch.Generator().manual_seed(1))
    logits[1, 4] = float("nan")
    logits[2, 7] = float("inf")  # its log-softmax is NaN too
    logits[3, :] = float("-inf")
    model = FixedLogits(logits)
    log_probs = _next_log_probs(model, None, None, None, None, step=2, max_len=9, min_len=1, unk_penalty=0.0)
    expected = F.log_softmax(logits, dim=-1)
    expected = expected.masked_fill(torch.isnan(expected), float("-inf"))
    expected[:, PAD] = float("-inf")
    assert torch.equal(log_probs, expected)
    assert not torch.isnan(log_probs).any() and bool(torch.isinf(log_probs[1:]).all())
