r"""Adaptive input + adaptive softmax against a full softmax at WikiText-103's vocabulary (V = 267,744).

Two decoder-only language models that differ only at the vocabulary: the same b2t_lib decoder
stack (the adaptive model's layers are loaded from the full model's, so both run the same trunk),
with

* **full**: a tied ``nn.Embedding(V, d)`` input and output, logits :math:`hE^\top` over all
  :math:`V` words, cross entropy;
* **adaptive**: :class:`b2t_lib.adaptive.AdaptiveInput` and :class:`~b2t_lib.adaptive.AdaptiveSoftmax`
  (cutoffs 20000, 60000, factor 4, tied weights and projections, softmax dropout 0.2, as
  ``transformer_lm_wiki103``), loss without the :math:`(N, V)` logits.

Two measurements, each reported as ``adaptive / full``:

1. *output layer*: forward + backward of the loss from the same hidden states :math:`(N, d)`;
2. *training step*: embedding, decoder, loss, backward, gradient clipping and a fused Adam step.

Time is the median of steps timed in alternation (outside load hits both alike). Peak memory is
``torch.cuda.max_memory_allocated`` on CUDA; on CPU each model runs in a fresh subprocess and the
peak resident set size above the process's size before the model was built is reported.
CPU uses small sizes (minutes on 2 cores); CUDA the paper's (d 1024, FFN 4096, 8 heads, 16
layers, bf16 autocast)::

    python benchmarks/bench_lm_adaptive.py                       # CPU: d 256, 2 layers, 2 x 256 tokens
    python benchmarks/bench_lm_adaptive.py --device cuda         # d 1024, 16 layers, 4 x 1024 tokens
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from b2t_lib import LanguageModel, ModelConfig, seed_everything  # noqa: E402
from b2t_lib.adaptive import AdaptiveInput, AdaptiveSoftmax  # noqa: E402
from b2t_lib.errors import ArgumentParser, UserError, run_command  # noqa: E402
from b2t_lib.special_tokens import PAD  # noqa: E402

VOCAB = 267_744  # WikiText-103: 267,735 words + end-of-line - 1 + 4 specials, padded to a multiple of 8
CUTOFF = [20_000, 60_000]


class LM(nn.Module):
    """A b2t_lib decoder stack with either a full or an adaptive vocabulary layer; ``loss(tokens, target)``."""

    def __init__(self, kind: str, args):
        super().__init__()
        vocab, cutoff = getattr(args, "vocab", VOCAB), list(getattr(args, "cutoff", CUTOFF))
        self.vocab = vocab
        cfg = ModelConfig(
            vocab_size=vocab if kind == "full" else 8,
            d_model=args.d_model,
            n_heads=args.heads,
            d_ff=args.d_ff,
            encoder_layers=0,
            decoder_layers=args.layers,
            variant="pre_ln",
            dropout=0.1,
            attention_dropout=0.1,
            activation_dropout=0.1,
        )
        seed_everything(0)
        self.lm = LanguageModel(cfg)  # the adaptive model's 8-word embedding is replaced below
        self.kind = kind
        if kind == "adaptive":
            self.lm.decoder.embed_tokens = AdaptiveInput(vocab, args.d_model, cutoff, factor=4)
            self.softmax = AdaptiveSoftmax(
                vocab,
                args.d_model,
                cutoff,
                dropout=0.2,
                factor=4,
                adaptive_input=self.lm.decoder.embed_tokens,
                tie_proj=True,
            )

    def output_loss(self, hidden, target):
        if self.kind == "full":
            logits = self.lm.decoder.output_layer(hidden)  # (B, T, V)
            return F.cross_entropy(
                logits.float().view(-1, self.vocab), target.view(-1), ignore_index=PAD, reduction="sum"
            )
        return self.softmax.loss(hidden, target)[0]

    def loss(self, tokens, target):
        return self.output_loss(self.lm.decoder.extract_features(tokens), target)


def build(kind: str, args, device, trunk: dict | None = None) -> LM:
    model = LM(kind, args).to(device)
    if trunk is not None:
        model.lm.decoder.layers.load_state_dict(trunk)
    return model.train()


def make_batch(args, device):
    g = torch.Generator().manual_seed(0)
    # Zipf-like ids, as in real text: most tokens in the head band, some in each tail.
    vocab = getattr(args, "vocab", VOCAB)
    ranks = (
        torch.multinomial(
            1.0 / torch.arange(1, vocab - 3, dtype=torch.float),
            args.batch * (args.length + 1),
            replacement=True,
            generator=g,
        )
        + 4
    )
    stream = ranks.view(args.batch, args.length + 1)
    return stream[:, :-1].contiguous().to(device), stream[:, 1:].contiguous().to(device)


class Stepper:
    """One timed unit of work: ``what='step'`` (whole training step) or ``'output'`` (loss layer only)."""

    def __init__(self, model: LM, batch, what: str, args, device):
        self.model, self.batch, self.what, self.device = model, batch, what, device
        self.amp = device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0, fused=True
        )
        g = torch.Generator().manual_seed(1)
        self.hidden = torch.randn(*batch[0].shape, args.d_model, generator=g).to(device).requires_grad_()

    def run(self) -> float:
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            if self.what == "output":
                loss = self.model.output_loss(self.hidden, self.batch[1])
            else:
                loss = self.model.loss(*self.batch)
        loss.backward()
        if self.what == "step":
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.hidden.grad = None
        sync()
        return time.perf_counter() - t0


def proc_status_bytes(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process. Not ``getrusage``: its ``ru_maxrss`` keeps the
    parent's peak across fork and exec, so a child started by a large process reports the parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"no {field} in /proc/self/status (CPU memory is measured on Linux only)")


def worker(kind: str, what: str, args) -> None:
    """Child process (CPU memory): build one model, run a few units, print peak RSS above the start."""
    device = torch.device("cpu")
    start = proc_status_bytes("VmRSS")
    model = build(kind, args, device)
    stepper = Stepper(model, make_batch(args, device), what, args, device)
    for _ in range(2):
        stepper.run()
    peak = proc_status_bytes("VmHWM")
    print(json.dumps({"peak_bytes": peak - start}))


def cpu_peak(kind: str, what: str, argv: list[str]) -> int:
    out = subprocess.run(
        [sys.executable, __file__, *argv, "--worker", kind, what], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    parser.add_argument("--d-model", type=int, help="model dimension (CPU 256, CUDA 1024)")
    parser.add_argument("--d-ff", type=int, help="FFN dimension (default 4 x d)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads (default %(default)s)")
    parser.add_argument("--layers", type=int, help="decoder layers (CPU 2, CUDA 16)")
    parser.add_argument("--batch", type=int, help="blocks per batch (CPU 2, CUDA 4)")
    parser.add_argument("--length", type=int, help="tokens per block (CPU 256, CUDA 1024)")
    parser.add_argument("--steps", type=int, help="timed steps per model (CPU 3, CUDA 20)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (default %(default)s)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "WHAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UserError("--device cuda: this machine has no CUDA GPU", todo="use --device cpu")
    args.d_model = args.d_model or (1024 if cuda else 256)
    args.d_ff = args.d_ff or 4 * args.d_model
    args.layers = args.layers or (16 if cuda else 2)
    args.batch = args.batch or (4 if cuda else 2)
    args.length = args.length or (1024 if cuda else 256)
    args.steps = args.steps or (20 if cuda else 3)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        worker(*args.worker, args)
        return
    device = torch.device(args.device)
    sizes = [
        "--device",
        args.device,
        "--d-model",
        str(args.d_model),
        "--d-ff",
        str(args.d_ff),
        "--heads",
        str(args.heads),
        "--layers",
        str(args.layers),
        "--batch",
        str(args.batch),
        "--length",
        str(args.length),
    ]
    if args.threads:
        sizes += ["--threads", str(args.threads)]

    hardware = (
        torch.cuda.get_device_name(0)
        if cuda
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(f"# {datetime.date.today()}  torch {torch.__version__}  {device.type}: {hardware}")
    print(
        f"# decoder-only pre_ln, {args.layers} layers, d={args.d_model}, ffn={args.d_ff}, heads={args.heads}, "
        f"V={VOCAB:,}, cutoffs {CUTOFF} factor 4 (tied); batch {args.batch} x {args.length} tokens, "
        f"{'bf16 autocast' if cuda else 'fp32'}; median of {args.steps} after {args.warmup}"
    )
    batch = make_batch(args, device)
    full = build("full", args, device)
    adaptive = build("adaptive", args, device, trunk=full.lm.decoder.layers.state_dict())
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731  (shared tensors once)
    print(
        f"parameters: full {count(full) / 1e6:.1f}M, adaptive {count(adaptive) / 1e6:.1f}M "
        f"(ratio {count(adaptive) / count(full):.3f})"
    )
    for what in ("output", "step"):
        steppers = {
            kind: Stepper(model, batch, what, args, device) for kind, model in (("full", full), ("adaptive", adaptive))
        }
        times = {"full": [], "adaptive": []}
        for i in range(args.warmup + args.steps):
            for kind, stepper in steppers.items():
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                seconds = stepper.run()
                if i >= args.warmup:
                    times[kind].append(seconds)
        median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        if cuda:  # one more unit each, for its peak memory alone
            peak = {}
            for kind, stepper in steppers.items():
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                stepper.run()
                peak[kind] = torch.cuda.max_memory_allocated() - base
        else:
            peak = {kind: cpu_peak(kind, what, sizes) for kind in ("full", "adaptive")}
        label = "output layer (fwd+bwd)" if what == "output" else "training step"
        print(
            f"{label:<24} full {median['full'] * 1e3:9.1f} ms {peak['full'] / 2**20:8.0f} MiB | adaptive "
            f"{median['adaptive'] * 1e3:9.1f} ms {peak['adaptive'] / 2**20:8.0f} MiB | ratio time "
            f"{median['adaptive'] / median['full']:.3f} memory {peak['adaptive'] / peak['full']:.3f}"
        )
        del steppers
    print(
        "# ratio = adaptive / full; CPU memory = peak RSS of a fresh process above its size before building the "
        "model (weights, gradients, Adam state and activations)"
    )


if __name__ == "__main__":
    raise SystemExit(run_command(main))
