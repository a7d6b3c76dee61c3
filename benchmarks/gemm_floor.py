r"""The floor under a measured piece of work: its matrix products, timed again on their own.

No implementation of the same model can skip its matrix products (the projections, the FFN, the output layer and
their gradients), so their time alone bounds how fast any implementation can be. ``profile_products`` runs a
function under ``torch.profiler`` with shapes recorded and returns the self time of each operator and every
product it computed, by shape and count; ``replay_products`` times those products again, one after another,
outside the work. Used by ``bench_decode.py`` (beam search) and ``bench_train_step.py --floor`` (a training step).

The replay is optimistic, so the floor is a lower bound: each product runs on warm inputs that stay in the cache,
and its output buffer is reused, while inside the work the weights stream from memory and outputs are fresh.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F

# The matrix products as the profiler names them; the attention kernel (its own small products) apart.
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
ATTENTION_OPS = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math"}

Product = tuple[int, int, int, int, bool]  # (batch, rows, inner, columns, bias); batch 0: a plain 2-D product


def profile_products(work: Callable[[], object]) -> tuple[dict[str, float], dict[Product, int], float]:
    """Run ``work`` once under the profiler: (self seconds per operator, products -> calls, wall seconds)."""
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        work()
    wall = time.perf_counter() - start
    self_s: dict[str, float] = {}
    products: dict[Product, int] = {}
    for event in prof.key_averages(group_by_input_shape=True):
        self_s[event.key] = self_s.get(event.key, 0.0) + event.self_cpu_time_total / 1e6
        if event.key in GEMM_OPS:
            shapes = [shape for shape in event.input_shapes if shape]
            bias = event.key in ("aten::addmm", "aten::baddbmm")
            left, right = shapes[1:3] if bias else shapes[:2]  # addmm(bias, x, w): the product's operands follow
            batch = left[0] if len(left) == 3 else 0
            (m, k), n = left[-2:], right[-1]
            key = (batch, m, k, n, bias)
            products[key] = products.get(key, 0) + event.count
    return self_s, products, wall


def replay_products(products: dict[Product, int]) -> float:
    """Seconds the given products take on their own: a 2-D one as ``F.linear`` computes it (``x W^T + b``), a
    batched one as ``torch.bmm``; every call in a row on the same warm inputs."""
    total = 0.0
    with torch.no_grad():
        for (batch, m, k, n, bias), calls in products.items():
            if batch:
                a, b = torch.randn(batch, m, k), torch.randn(batch, k, n)
                run = lambda: torch.bmm(a, b)
            else:
                x, weight, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n) if bias else None
                run = lambda: F.linear(x, weight, b)
            run()  # warm
            start = time.perf_counter()
            for _ in range(calls):
                run()
            total += time.perf_counter() - start
    return total
