r"""The prepared GPU check (``make gpu-check``): what the course needs measured on a GPU, in a few minutes.

On one CUDA GPU (bf16 autocast), with the sizes of the presets:

1. **training step** of Transformer-base (the full MT preset's width, heads and FFN; a batch of its 3584 tokens
   per GPU) at 6L-6L and 18L-18L: b2t_lib's Post-LN and B2T against ``torch.nn.Transformer`` on the same batch,
   timed in alternation: ms per step, target tokens/s, model FLOPs utilization (MFU) against the GPU's dense
   bf16 peak (``--peak-tflops``, 989 for an H100/H200 SXM) and peak memory; and 6L-6L B2T under ``torch.compile``
   (the trainer's ``--compile``, timed in alternation with the reference again after its compilation; rehearsed,
   the graph is traced and run by the eager backend);
2. **the LM's output layer at WikiText-103's vocabulary** (V = 267,744; the full LM preset's 16L at d 1024):
   adaptive input and softmax against a full softmax, loss layer and whole step, time and peak memory;
3. **100 updates of the small preset's 18L-18L Post-LN and B2T** on the synthetic translation pair: the
   training loss curves (a figure), ms per update and tokens/s, and the stall rule's verdict off (a check of
   speed and of the curves, not a result).

It writes ``OUT/gpu_check.md`` (tables in the format of ``benchmarks/RESULTS.md``, with the rows of its
``gpu-throughput`` table that :mod:`b2t_lib.runs.cost` reads), ``OUT/gpu_check.json`` and
``OUT/gpu_check_loss.png``. The tables are written again after every part, so a check stopped early (the end of a
GPU lease, a crash) keeps what it measured; each part prints its time as it ends::

    make gpu-check                                   # python benchmarks/gpu_check.py --out build/gpu_check
    python benchmarks/gpu_check.py --updates 300     # a longer training part

Without a GPU it stops with the scale switch's message (exit 2). Under the rehearsal (``B2T_REHEARSAL=1``,
``make rehearse``) it runs on the CPU with every size shrunk by the presets' one rule and the benchmark's own
sizes from :data:`b2t_lib.presets.REHEARSAL_SOURCES` (``"benchmark"``), so CI keeps it working.
"""

from __future__ import annotations

import datetime
import json
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing
sys.path.insert(0, str(HERE))  # the two benchmark scripts whose models this check reuses

import bench_lm_adaptive as lm_bench  # noqa: E402
import bench_train_step as step_bench  # noqa: E402

from b2t_lib import seed_everything  # noqa: E402
from b2t_lib.presets import source_sizes  # noqa: E402
from b2t_lib.errors import ArgumentParser, UserError, run_command  # noqa: E402
from b2t_lib.scale import rehearsal  # noqa: E402

# The benchmark's synthetic batches: WMT's ~32K joined vocabulary, WikiText-103's 267,744 ids, 64-token
# sentences, and the synthetic translation pair of part 3 (under the rehearsal: REHEARSAL_SOURCES["benchmark"]).
SIZES = dict(mt_vocab=32768, lm_vocab=lm_bench.VOCAB, length=64, train_pairs=20000)


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def peak_memory(run, device) -> int | None:
    """Peak bytes allocated during one more ``run()`` above what was allocated before (CUDA only)."""
    if device.type != "cuda":
        return None
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run()
    return torch.cuda.max_memory_allocated() - base


def training_steps(sizes: dict, device, steps: int, peak_tflops: float) -> list[dict]:
    """Part 1: ours (Post-LN, B2T) and nn.Transformer, 6L-6L and 18L-18L, the same batch."""
    from b2t_lib.train import TrainConfig

    mt = TrainConfig.from_preset("mt", "full")
    d, heads, d_ff = mt.model.d_model, mt.model.n_heads, mt.model.d_ff
    length = sizes["length"]
    batch_size = max(1, mt.max_tokens // length)
    batch = step_bench.make_batch(batch_size, length, sizes["mt_vocab"], device)
    amp, rows = device.type == "cuda", []
    for layers in (6, 18):
        flops = step_bench.model_flops_per_step(batch_size, length, sizes["mt_vocab"], d, d_ff, layers)
        seed_everything(0)
        reference = step_bench.Stepper(
            step_bench.TorchTransformerMT(sizes["mt_vocab"], d, heads, layers, d_ff).to(device), batch, device, amp
        )
        for variant in ("post_ln", "b2t"):
            seed_everything(0)
            candidate = step_bench.Stepper(
                step_bench.ours(variant, sizes["mt_vocab"], d, heads, layers, d_ff).to(device), batch, device, amp
            )
            ref_s, ours_s = step_bench.paired_times(reference, candidate, steps, warmup=3)

            def add_row(name, seconds, ref_window, stepper):
                rows.append(
                    dict(
                        model=name,
                        layers=layers,
                        ms=seconds * 1e3,
                        tokens_per_s=batch_size * length / seconds,
                        mfu=flops / seconds / (peak_tflops * 1e12) if amp else None,
                        peak_bytes=peak_memory(stepper.step, device),
                        ratio=seconds / ref_window,
                        batch=f"{batch_size} x {length}",
                        d=d,
                    )
                )

            if not any(r["model"] == "nn.Transformer" and r["layers"] == layers for r in rows):
                add_row("nn.Transformer", ref_s, ref_s, reference)
            add_row(f"b2t_lib {variant}", ours_s, ref_s, candidate)
            if variant == "b2t" and layers == 6:  # the trainer's --compile: torch.compile of the same model
                # Rehearsed on a CPU, dynamo traces the model (graph breaks and all) but hands the graph to the eager
                # backend: Inductor's C++ code generation would add a minute or two of CI time and measure nothing.
                candidate.model = torch.compile(candidate.model, backend="eager" if rehearsal() else "inductor")
                ref_c, compiled_s = step_bench.paired_times(reference, candidate, steps, warmup=3)
                add_row(f"b2t_lib {variant} compiled", compiled_s, ref_c, candidate)
            del candidate
        del reference
    return rows


def adaptive_softmax(sizes: dict, device, steps: int) -> list[dict]:
    """Part 2: adaptive vs full softmax at the LM's vocabulary, the loss layer and the whole step."""
    from b2t_lib.train import TrainConfig

    lm = TrainConfig.from_preset("lm", "full", decoder_layers=16)
    args = SimpleNamespace(
        d_model=lm.model.d_model,
        d_ff=lm.model.d_ff,
        heads=lm.model.n_heads,
        layers=lm.model.decoder_layers,
        batch=4,
        length=lm.tokens_per_sample,
        vocab=sizes["lm_vocab"],
        cutoff=list(lm.model.adaptive_cutoff),
    )
    batch = lm_bench.make_batch(args, device)
    full = lm_bench.build("full", args, device)
    adaptive = lm_bench.build("adaptive", args, device, trunk=full.lm.decoder.layers.state_dict())
    rows = []
    for what in ("output", "step"):
        steppers = {
            kind: lm_bench.Stepper(model, batch, what, args, device)
            for kind, model in (("full", full), ("adaptive", adaptive))
        }
        times: dict[str, list[float]] = {"full": [], "adaptive": []}
        for i in range(2 + steps):
            for kind, stepper in steppers.items():
                seconds = stepper.run()
                if i >= 2:
                    times[kind].append(seconds)
        for kind, stepper in steppers.items():
            rows.append(
                dict(
                    part="loss layer (fwd+bwd)" if what == "output" else "training step",
                    kind=kind,
                    ms=median(times[kind]) * 1e3,
                    peak_bytes=peak_memory(stepper.run, device),
                    vocab=args.vocab,
                    cutoff=args.cutoff,
                    layers=args.layers,
                    d=args.d_model,
                    batch=f"{args.batch} x {args.length}",
                )
            )
        del steppers
    return rows


def small_preset_runs(sizes: dict, out: Path, updates: int) -> dict:
    """Part 3: the small preset's 18L-18L Post-LN and B2T on the synthetic pair, ``updates`` updates each."""
    from b2t_lib.data import prepare_synthetic_mt
    from b2t_lib.train import TrainConfig, read_log, train

    started = time.time()
    data = prepare_synthetic_mt(out / "data", n_train=sizes["train_pairs"], seed=0)
    print(f"part 3: synthetic pair prepared in {time.time() - started:.0f} s", flush=True)
    runs = {}
    for variant in ("post_ln", "b2t"):
        save_dir = out / "runs" / variant
        shutil.rmtree(save_dir, ignore_errors=True)
        cfg = TrainConfig.from_preset(
            "mt",
            "small",
            variant=variant,
            encoder_layers=18,
            decoder_layers=18,
            data=str(data),
            save_dir=str(save_dir),
            max_update=updates,
            valid_interval=max(1, updates // 3),
            save_interval=updates,
            log_interval=10,
            stall_deadline=0,
            eval_at_end=False,
            progress_bar=False,
        )
        started = time.time()
        record = train(cfg)
        print(f"part 3: {variant} trained {updates} updates in {time.time() - started:.0f} s", flush=True)
        runs[variant] = dict(
            status=record["status"],
            updates=record["metrics"]["num_updates"],
            ms_per_update=1e3 * record["train_time_s"] / max(record["metrics"]["num_updates"], 1),
            tokens_per_s=record["tokens_per_s"],
            update_freq=record["update_freq"],
            tokens_per_update=cfg.tokens_per_update,
            amp=record["amp"],
            log=read_log(save_dir, "train"),
            valid=read_log(save_dir, "valid"),
        )
    return runs


def write_outputs(
    out: Path, hardware: str, peak: float, steps: list[dict], lm: list[dict] | None, runs: dict | None
) -> str:
    """Write the tables (and the figure, once part 3 is done); a part not measured yet is said so.

    The check calls it after every part, so a check stopped by a lease's end or a crash keeps what it measured."""
    from b2t_lib.plots.training import plot_training_loss

    not_yet = "(not measured: the check stopped before this part; its earlier parts are above)"

    today, cmd = datetime.date.today().isoformat(), "python benchmarks/gpu_check.py"
    mib = lambda b: "-" if b is None else f"{b / 2**20:.0f}"  # noqa: E731
    precision = "bf16 autocast" if steps[0]["mfu"] is not None else "fp32"
    lines = [
        f"**{today}, {hardware}, torch {torch.__version__}, {precision}"
        f"{' (rehearsal: sizes shrunk)' if rehearsal() else ''}** (`{cmd}`)",
        "",
        f"Training step, batch {steps[0]['batch']} tokens, d {steps[0]['d']}:",
        "",
        "| model | layers | ms/step | target tok/s | MFU | peak memory (MiB) | ratio to nn.Transformer |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in steps:
        mfu = "-" if r["mfu"] is None else f"{r['mfu']:.1%}"
        lines.append(
            f"| {r['model']} | {r['layers']}L-{r['layers']}L | {r['ms']:.1f} | {r['tokens_per_s']:.0f} | {mfu} | "
            f"{mib(r['peak_bytes'])} | {r['ratio']:.2f} |"
        )
    lines += (
        ["", "LM vocabulary layer, adaptive against full softmax:", ""]
        if lm is None
        else [
            "",
            f"LM vocabulary layer, V = {lm[0]['vocab']:,}, cutoffs {lm[0]['cutoff']}, {lm[0]['layers']}L d "
            f"{lm[0]['d']}, batch {lm[0]['batch']}:",
            "",
            "| part | full softmax ms | adaptive ms | ratio | full MiB | adaptive MiB |",
            "|---|---:|---:|---:|---:|---:|",
        ]
    )
    if lm is None:
        lines.append(not_yet)
    for part in dict.fromkeys(r["part"] for r in lm or []):
        full, ada = (next(r for r in lm if r["part"] == part and r["kind"] == k) for k in ("full", "adaptive"))
        lines.append(
            f"| {part} | {full['ms']:.1f} | {ada['ms']:.1f} | {ada['ms'] / full['ms']:.3f} | "
            f"{mib(full['peak_bytes'])} | {mib(ada['peak_bytes'])} |"
        )
    lines += [
        "",
        "Small preset, 18L-18L, synthetic pair:",
        "",
        "| variant | updates | ms/update | tokens/s | update_freq | precision | last training loss (bits) |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    if runs is None:
        lines[-2:] = [not_yet]
    for variant, r in (runs or {}).items():
        last = r["log"][-1]["loss"] if r["log"] else float("nan")
        lines.append(
            f"| {variant} | {r['updates']} | {r['ms_per_update']:.0f} | {r['tokens_per_s']:.0f} | "
            f"{r['update_freq']} | {r['amp']} | {last:.2f} |"
        )
    if steps[0]["mfu"] is not None:  # rows for the estimator's table (b2t_lib.runs.cost reads them)
        lines += ["", "Rows for the `gpu-throughput` table:", ""]
        lines += [
            f"| {today} | {hardware} | {peak:g} | {r['model']} {r['layers']}L-{r['layers']}L | {r['mfu']:.1%} | "
            f"`{cmd}` |"
            for r in steps
            if r["model"] != "nn.Transformer"
        ]
    table = "\n".join(lines) + "\n"
    (out / "gpu_check.md").write_text(table, encoding="utf-8")
    (out / "gpu_check.json").write_text(
        json.dumps(dict(date=today, hardware=hardware, peak_tflops=peak, steps=steps, lm=lm, runs=runs), indent=1),
        encoding="utf-8",
    )
    if runs is None:
        return table
    fig = plot_training_loss(
        {v: r["log"] for v, r in runs.items()},
        {v: r["status"] for v, r in runs.items()},
        title="Small preset 18L-18L, synthetic pair: training loss",
    )
    fig.savefig(out / "gpu_check_loss.png")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("build/gpu_check"), help="where the tables and figure go")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak for MFU")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model (after 3 untimed)")
    parser.add_argument("--updates", type=int, default=100, help="updates of each small-preset run (part 3)")
    args = parser.parse_args(argv)
    if not (torch.cuda.is_available() or rehearsal()):  # a GPU, or the rehearsal (the CPU, every size shrunk)
        raise UserError(
            "the GPU check needs a CUDA GPU, and this machine has none",
            todo="run it on a GPU machine, or rehearse it on this CPU with `make rehearse`",
        )
    sizes = source_sizes("benchmark", dict(SIZES))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    hardware = torch.cuda.get_device_name(0) if device.type == "cuda" else "CPU"
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    steps = training_steps(sizes, device, args.steps, args.peak_tflops)
    write_outputs(args.out, hardware, args.peak_tflops, steps, None, None)  # kept if a later part never ends
    print(f"part 1 (training step) done in {time.time() - started:.0f} s", flush=True)
    lm = adaptive_softmax(sizes, device, args.steps)
    write_outputs(args.out, hardware, args.peak_tflops, steps, lm, None)
    print(f"part 2 (adaptive softmax) done in {time.time() - started:.0f} s", flush=True)
    runs = small_preset_runs(sizes, args.out, args.updates)
    print(f"part 3 (small-preset runs) done in {time.time() - started:.0f} s", flush=True)
    print(write_outputs(args.out, hardware, args.peak_tflops, steps, lm, runs))
    print(f"written: {args.out / 'gpu_check.md'}, gpu_check.json, gpu_check_loss.png ({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_command(main))
