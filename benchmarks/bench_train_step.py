r"""Training-step speed of b2t_lib's Transformer against ``torch.nn.Transformer`` of the same size.

Both models get the same work per step: shared token embeddings scaled by $\sqrt d$ plus sinusoidal
positions, a 6L-6L Transformer-base (d 512, 8 heads, FFN 2048, dropout 0.1 on residual branches,
attention probabilities and FFN activations), the tied output projection, label-smoothed cross
entropy, backward, gradient clipping and a (fused) Adam step, as in ``b2t_lib.train``. The ratio printed is
``b2t_lib step time / nn.Transformer step time`` (below 1.0: b2t_lib is faster).

CPU: fp32, a small batch. CUDA (when present): bf16 autocast, a larger batch, and the model FLOPs
utilization (MFU) against the GPU's dense bf16 peak::

    python benchmarks/bench_train_step.py                     # every registered variant, CPU
    python benchmarks/bench_train_step.py --variants b2t post_ln --steps 5
    python benchmarks/bench_train_step.py --device cuda --batch 128 --length 64 --peak-tflops 989
    python benchmarks/bench_train_step.py --profile b2t       # where the time of one variant goes
    python benchmarks/bench_train_step.py --profile torch     # ... and of nn.Transformer
    python benchmarks/bench_train_step.py --variants b2t --compile   # also torch.compile'd (the trainer's --compile)
    python benchmarks/bench_train_step.py --variants b2t --floor     # the lowest ratio any implementation could reach

``--compile`` adds, for each variant, a row of the same model wrapped in ``torch.compile`` (as the trainer's
``--compile`` wraps it), timed against the same reference; its first steps (the compilation) are left out.

``--floor`` splits each step into what no implementation of the same model can avoid and the rest: its matrix
products, timed again on their own (shapes from the profiler, see ``gemm_floor.py``), and the work outside the
model, the same code for both (the loss's forward, the clipping and the Adam step). The lowest ratio b2t_lib could
reach is its products plus that outside work, over nn.Transformer's whole step.
"""

from __future__ import annotations

import datetime
import math
import platform
import time

import torch
import torch.nn.functional as F
from torch import nn

from b2t_lib import VARIANTS, EncoderDecoder, ModelConfig, seed_everything
from b2t_lib.special_tokens import EOS, PAD
from b2t_lib.embedding import build_token_embedding, sinusoidal_table
from b2t_lib.errors import ArgumentParser, UserError, run_command
from b2t_lib.loss import label_smoothed_nll_loss
from gemm_floor import profile_products, replay_products

D_MODEL, HEADS, D_FF, LAYERS, DROPOUT = 512, 8, 2048, 6, 0.1
TARGET = 0.85  # the ratio this benchmark is judged by (benchmarks/RESULTS.md section 12)


class TorchTransformerMT(nn.Module):
    """``nn.Transformer`` (Post-LN, batch_first) with the same embeddings and output layer as ours."""

    def __init__(
        self,
        vocab: int,
        d: int = D_MODEL,
        heads: int = HEADS,
        layers: int = LAYERS,
        d_ff: int = D_FF,
        dropout: float = DROPOUT,
    ):
        super().__init__()
        self.d, self.dropout = d, dropout
        self.embed = build_token_embedding(vocab, d, PAD)
        self.register_buffer("positions", sinusoidal_table(1026, d, PAD), persistent=False)
        self.core = nn.Transformer(d, heads, layers, layers, d_ff, dropout, batch_first=True)

    def _embed(self, tokens):
        not_pad = tokens.ne(PAD).long()
        positions = torch.cumsum(not_pad, 1) * not_pad + PAD
        return F.dropout(
            self.embed(tokens) * math.sqrt(self.d) + self.positions[positions], self.dropout, self.training
        )

    def forward(self, src, prev):
        t = prev.shape[1]
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=src.device), diagonal=1)  # True: masked
        out = self.core(
            self._embed(src),
            self._embed(prev),
            tgt_mask=causal,
            src_key_padding_mask=src.eq(PAD),
            tgt_key_padding_mask=prev.eq(PAD),
            memory_key_padding_mask=src.eq(PAD),
        )
        return F.linear(out, self.embed.weight)  # (B, T, V)


def ours(
    variant: str,
    vocab: int,
    d: int = D_MODEL,
    heads: int = HEADS,
    layers: int = LAYERS,
    d_ff: int = D_FF,
    dropout: float = DROPOUT,
) -> nn.Module:
    return EncoderDecoder(
        ModelConfig(
            vocab_size=vocab,
            d_model=d,
            n_heads=heads,
            d_ff=d_ff,
            encoder_layers=layers,
            decoder_layers=layers,
            variant=variant,
            dropout=dropout,
            attention_dropout=dropout,
            activation_dropout=dropout,
        )
    )


def make_batch(batch: int, length: int, vocab: int, device) -> dict:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, vocab, (batch, length), generator=g)
    tgt = torch.randint(4, vocab, (batch, length), generator=g)
    src[:, -1] = EOS
    tgt[:, -1] = EOS
    prev = torch.cat([torch.full((batch, 1), EOS), tgt[:, :-1]], dim=1)
    return {k: v.to(device) for k, v in dict(src=src, prev=prev, target=tgt).items()}


def model_flops_per_step(
    batch: int, length: int, vocab: int, d: int = D_MODEL, f: int = D_FF, layers: int = LAYERS
) -> float:
    r"""Matmul FLOPs of forward + backward ($3\times$ forward), counting $2mnk$ per matmul.

    Per encoder layer and token: $2(4d^2 + 2 d d_{ff})$, attention $2 \cdot 2 S d$; per decoder
    layer: self + cross attention projections and FFN $2(8d^2 + 2dd_{ff})$ (cross-attention keys and
    values are computed on the source, same length here), attention $2 \cdot 2 \cdot 2 S d$; output
    projection $2dV$ per target token.
    """
    s, n = length, batch * length
    enc = layers * n * (2 * (4 * d * d + 2 * d * f) + 4 * s * d)
    dec = layers * n * (2 * (8 * d * d + 2 * d * f) + 8 * s * d)
    out = n * 2 * d * vocab
    return 3.0 * (enc + dec + out)


class Stepper:
    """One model with its optimizer; ``step()`` runs one timed training step and returns seconds."""

    def __init__(self, model: nn.Module, batch: dict, device, amp: bool):
        self.model, self.batch, self.device, self.amp = model.train(), batch, device, amp
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0, fused=True
        )  # as the trainer
        self.outside: list[float] = []

    def step(self) -> float:
        """One training step; its seconds. ``self.outside`` keeps the seconds of the work outside the model (the
        loss's forward, the clipping and the Adam step: the same code for every model), one entry per step."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            logits = self.model(self.batch["src"], self.batch["prev"])
        t1 = time.perf_counter()
        loss = label_smoothed_nll_loss(logits, self.batch["target"], 0.1).loss
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sync()
        t4 = time.perf_counter()
        self.outside.append((t2 - t1) + (t4 - t3))
        return t4 - t0


def paired_times(reference: Stepper, candidate: Stepper, steps: int, warmup: int) -> tuple[float, float]:
    """Median step times of two models timed in alternation, so that load from other processes and
    clock changes hit both alike (the ratio is what matters on a shared machine)."""
    for _ in range(warmup):
        reference.step()
        candidate.step()
    ref, cand = [], []
    for _ in range(steps):
        ref.append(reference.step())
        cand.append(candidate.step())
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return median(ref), median(cand)


def profile_variant(variant: str, batch: dict, vocab: int, device, amp: bool) -> None:
    from torch.profiler import ProfilerActivity, profile

    stepper = Stepper(
        ours(variant, vocab).to(device) if variant != "torch" else TorchTransformerMT(vocab).to(device),
        batch,
        device,
        amp,
    )
    stepper.step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        stepper.step()
        stepper.step()
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=20))


def floor_line(name: str, stepper: Stepper, step_s: float, steps: int) -> tuple[str, float]:
    """One model's step split into its products alone, the work outside the model and the rest; and the sum
    of the first two (seconds), which no implementation of the same model and outside work can go below."""
    outside = sorted(stepper.outside[-steps:])[steps // 2]  # median over the timed steps
    _, products, _ = profile_products(stepper.step)
    alone = replay_products(products)
    rest = step_s - alone - outside
    text = (
        f"{name:<22} step {step_s * 1e3:7.1f} ms = products alone {alone * 1e3:6.1f} + outside the model "
        f"{outside * 1e3:6.1f} + the rest {rest * 1e3:6.1f}"
    )
    return text, alone + outside


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--variants", nargs="*", default=sorted(VARIANTS), help="b2t_lib variants to time")
    parser.add_argument("--batch", type=int, help="sentences per batch (CPU 4, CUDA 128)")
    parser.add_argument("--length", type=int, help="tokens per sentence, source and target (CPU 32, CUDA 64)")
    parser.add_argument("--vocab", type=int, default=32768, help="joint vocabulary size (WMT: ~32K)")
    parser.add_argument("--steps", type=int, help="timed steps per model (CPU 5, CUDA 20)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    parser.add_argument(
        "--peak-tflops", type=float, default=989.0, help="GPU dense bf16 peak for MFU (H100/H200 SXM: 989)"
    )
    parser.add_argument(
        "--profile", metavar="VARIANT", help="profile one variant ('torch' for nn.Transformer) instead of comparing"
    )
    parser.add_argument("--compile", action="store_true", help="also time each variant under torch.compile")
    parser.add_argument(
        "--floor", action="store_true", help="also split each step into its products alone, outside work and the rest"
    )
    args = parser.parse_args()
    if args.floor and args.device == "cuda":
        raise UserError("--floor times CPU work (the products are replayed on the CPU)", todo="use --device cpu")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: this machine has no CUDA GPU", todo="use --device cpu")

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    batch_size = args.batch or (128 if cuda else 4)
    length = args.length or (64 if cuda else 32)
    steps = args.steps or (20 if cuda else 5)
    if args.threads:
        torch.set_num_threads(args.threads)
    batch = make_batch(batch_size, length, args.vocab, device)
    if args.profile:
        profile_variant(args.profile, batch, args.vocab, device, cuda)
        return

    hardware = (
        torch.cuda.get_device_name(0)
        if cuda
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(f"# {datetime.date.today()}  torch {torch.__version__}  {device.type}: {hardware}")
    print(
        f"# 6L-6L d={D_MODEL} ffn={D_FF} heads={HEADS} vocab={args.vocab}  batch {batch_size} x {length} "
        f"tokens  {'bf16 autocast' if cuda else 'fp32'}  median of {steps} steps after {args.warmup}"
    )
    flops = model_flops_per_step(batch_size, length, args.vocab)
    tokens = batch_size * length
    seed_everything(0)
    reference = Stepper(TorchTransformerMT(args.vocab).to(device), batch, device, cuda)

    def line(name, seconds, ratio):
        text = f"{name:<22} {seconds * 1e3:9.1f} ms/step {tokens / seconds:10.0f} tgt tok/s  ratio {ratio:5.2f}"
        if cuda:
            text += f"  MFU {flops / seconds / (args.peak_tflops * 1e12):6.1%}"
        return text

    rows, reference_times = [], []
    for variant in args.variants:
        seed_everything(0)
        candidate = Stepper(ours(variant, args.vocab).to(device), batch, device, cuda)
        ref_s, ours_s = paired_times(reference, candidate, steps, args.warmup)
        reference_times.append(ref_s)
        rows.append(line(f"b2t_lib {variant}", ours_s, ours_s / ref_s))
        if args.floor:
            ref_text, _ = floor_line("nn.Transformer", reference, ref_s, steps)
            ours_text, lowest = floor_line(f"b2t_lib {variant}", candidate, ours_s, steps)
            allowed = TARGET * ref_s - lowest
            rows += [
                f"# floor of {variant}: {ref_text}",
                f"# floor of {variant}: {ours_text}",
                f"# lowest ratio {variant} could reach (its products alone + outside work, over nn.Transformer's "
                f"step): {lowest / ref_s:.2f}; at {TARGET} the rest would have to fit in {allowed * 1e3:.1f} ms "
                f"(it takes {(ours_s - lowest) * 1e3:.1f})",
            ]
        if args.compile:
            candidate.model = torch.compile(candidate.model)
            eager_ratio = ours_s / ref_s
            ref_s, compiled_s = paired_times(reference, candidate, steps, args.warmup + 2)  # + compilation
            rows.append(line(f"b2t_lib {variant} compiled", compiled_s, compiled_s / ref_s))
            rows.append(f"# torch.compile speed-up of {variant}: {eager_ratio / (compiled_s / ref_s):.2f}x")
        del candidate
    ref_median = sorted(reference_times)[len(reference_times) // 2]
    print(line("nn.Transformer", ref_median, 1.0))
    print("\n".join(rows))
    print("# ratio = b2t_lib / nn.Transformer, each timed in alternation with its own reference window")


if __name__ == "__main__":
    raise SystemExit(run_command(main))
