"""The benchmarks' floor: every matrix product of a piece of work found by shape and count, and timed alone."""

import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F

_spec = importlib.util.spec_from_file_location(
    "gemm_floor", Path(__file__).resolve().parents[1] / "benchmarks" / "gemm_floor.py"
)
gemm_floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gemm_floor)


def test_every_product_is_found_with_its_shape_and_count():
    x, weight, bias = torch.randn(6, 8), torch.randn(5, 8), torch.randn(5)
    left, right = torch.randn(3, 4, 7), torch.randn(3, 7, 2)

    def work():
        F.linear(x, weight, bias)  # x W^T + b: addmm
        F.linear(x, weight, bias)
        torch.bmm(left, right)
        x.t().mm(torch.randn(6, 9))  # a product of transposed operands, as a weight gradient is: (8, 6) @ (6, 9)
        torch.relu(x)  # not a product

    self_s, products, wall = gemm_floor.profile_products(work)
    assert products == {(0, 6, 8, 5, True): 2, (3, 4, 7, 2, False): 1, (0, 8, 6, 9, False): 1}
    assert "aten::relu" in self_s or "aten::clamp_min" in self_s
    assert wall > 0


def test_replay_runs_each_product_as_often_as_counted(monkeypatch):
    calls = []
    monkeypatch.setattr(gemm_floor.F, "linear", lambda x, w, b=None: calls.append((x.shape, w.shape, b is not None)))
    monkeypatch.setattr(gemm_floor.torch, "bmm", lambda a, b: calls.append((a.shape, b.shape)))
    seconds = gemm_floor.replay_products({(0, 6, 8, 5, True): 3, (2, 4, 7, 3, False): 2})
    assert seconds >= 0.0
    linear = [c for c in calls if len(c) == 3]
    bmm = [c for c in calls if len(c) == 2]
    assert linear == [(torch.Size([6, 8]), torch.Size([5, 8]), True)] * 4  # one warm-up call, then 3 timed
    assert bmm == [(torch.Size([2, 4, 7]), torch.Size([2, 7, 3]))] * 3
    assert gemm_floor.replay_products({}) == 0.0
