r"""What a training run costs, before it starts: FLOPs per update and estimated GPU-hours.

**FLOPs of one update.** A matrix multiplication of an $(m \times k)$ by a $(k \times n)$ matrix costs
$2mkn$ FLOPs; the backward pass costs twice the forward pass, so training costs $3\times$ the forward
FLOPs (Kaplan et al. 2020: $C \approx 6 N_{\text{non-emb}}$ per token, plus the attention term). Per
position, with model width $d$, FFN width $d_{ff}$ and vocabulary (output logits) $V$:

* encoder layer: $2(4d^2 + 2 d\, d_{ff})$ for the projections and the FFN, plus
  $4 d\, n_s$ for the attention scores and the weighted sum over $n_s$ source positions;
* decoder layer: the same $2(4d^2 + 2 d\, d_{ff})$, the cross-attention's query and output projections
  $2 \cdot 2d^2$ (its key and value projections, $2 \cdot 2d^2$, run once per *source* position),
  causal self-attention over $n_t/2$ positions on average ($4 d\, n_t / 2$) and cross-attention over
  $n_s$ ($4 d\, n_s$);
* output layer: $2 d V$ per target position (the tied projection to the logits);
* speech front end (ASR only): two stride-2 convolutions, kernel 5, 80 -> 1024 -> $2d$ channels.

.. math::

    \text{FLOPs}_{\text{update}} = 3\,\bigl(s\,L_e\,[2(4d^2+2dd_{ff}) + 4dn_s]
      + t\,L_d\,[2(4d^2+2dd_{ff}) + 4d^2 + 2dn_t + 4dn_s] + s\,L_d\,4d^2 + 2\,t\,d\,V\bigr)

where $s$ and $t$ are the source and target positions of one update. The update's size is
``tokens_per_update`` (or ``max_tokens x update_freq``), which counts padded positions the way the
batcher does (:data:`TASK_SHAPES` says how many source and target positions that is per task, and the
typical lengths $n_s$, $n_t$). Embedding lookups, layer norms, softmax, dropout and the optimizer step
are left out (a few per cent), so is the evaluation at the end (beam search).

**GPU-hours.** $\text{updates} \times \text{FLOPs}_{\text{update}} / (\text{peak} \times \text{MFU})$. The
model FLOPs utilization (MFU) comes from ``benchmarks/RESULTS.md`` when a GPU measurement is recorded
there (the table after the ``gpu-throughput`` marker, written from ``benchmarks/bench_train_step.py
--device cuda``); otherwise an assumed 30 % of an H100-class GPU's dense bf16 peak (989 TFLOPS), and the
estimate says so. Either way it is an estimate: real runs also validate, checkpoint and decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ASSUMED_GPU = "H100-class GPU"
ASSUMED_PEAK_TFLOPS = 989.0  # H100 / H200 SXM, dense bf16
ASSUMED_MFU = 0.30  # typical of Transformer-base training in bf16 (not measured here)
RESULTS_MARKER = "<!-- gpu-throughput"  # the line before the table the estimator reads
SPEECH_CONV_CHANNELS, SPEECH_FEATURES, SPEECH_KERNEL = 1024, 80, 5


@dataclass(frozen=True)
class TaskShape:
    """How one task's ``tokens_per_update`` turns into model positions (typical values, documented)."""

    src_per_token: float  # encoder positions per counted token
    tgt_per_token: float  # decoder positions per counted token
    src_len: float  # typical source length n_s (attention span)
    tgt_len: float  # typical target length n_t (causal span: n_t / 2 on average)
    logits: int  # output logits computed per target position
    note: str


TASK_SHAPES = {
    # The batcher counts max(source, target) per sentence: about as many source as target positions.
    "mt": TaskShape(
        1.0, 1.0, 28, 28, 32768, "WMT'14 En-De after 32K BPE merges: ~28 tokens per sentence, a ~32K joined vocabulary"
    ),
    # Gigaword: articles ~31 words, headlines ~8 (data_scripts/README.md); the article is the longer side.
    "summarization": TaskShape(1.0, 0.3, 35, 10, 32768, "Gigaword: ~35-token articles (counted), ~10-token headlines"),
    # WikiText-103 blocks; adaptive softmax: 20,000 head words + 2 cluster logits for every token, the
    # tails (d/4 and d/16 wide) only for the ~8 % of tokens in them (docs/methods.md §3.4): ~21K logits.
    "lm": TaskShape(
        0.0, 1.0, 0, 1024, 21000, "WikiText-103 blocks of 1024 tokens; adaptive softmax ~21K effective logits"
    ),
    # LibriSpeech: max_tokens counts fbank frames (100 per second); the front end subsamples 4x; an
    # utterance of ~12.3 s has ~1230 frames and ~42 target pieces (10K unigram vocabulary).
    "asr": TaskShape(
        0.25,
        0.034,
        308,
        42,
        10000,
        "LibriSpeech: tokens are fbank frames, 4x subsampled; ~42 pieces per 1230-frame utterance",
    ),
}


def tokens_per_update(cfg) -> int:
    """The counted tokens (padding included) of one update: ``tokens_per_update`` when set, else
    ``max_tokens x update_freq`` (one process)."""
    return int(cfg.tokens_per_update) if cfg.tokens_per_update > 0 else int(cfg.max_tokens * cfg.update_freq)


def flops_per_update(model, tokens: int, task: str = "mt") -> float:
    """Training FLOPs (forward + backward) of one update of ``tokens`` counted tokens for a model of
    :class:`~b2t_lib.config.ModelConfig` ``model`` on ``task`` (see the module docstring)."""
    shape = TASK_SHAPES[task]
    d, f, le, ld = model.d_model, model.d_ff, model.encoder_layers, model.decoder_layers
    s, t = tokens * shape.src_per_token, tokens * shape.tgt_per_token
    block = 2 * (4 * d * d + 2 * d * f)  # projections + FFN, per position and layer
    encoder = s * le * (block + 4 * d * shape.src_len)
    cross = le > 0
    decoder = t * ld * (block + 2 * d * shape.tgt_len + (4 * d * d + 4 * d * shape.src_len if cross else 0))
    cross_kv = s * ld * 4 * d * d if cross else 0.0
    output = t * 2 * d * shape.logits
    frontend = 0.0
    if task == "asr":  # two stride-2 convolutions: 80 -> C channels at T/2, C/2 -> 2d at T/4
        frames = tokens
        frontend = (
            frames / 2 * 2 * SPEECH_FEATURES * SPEECH_KERNEL * SPEECH_CONV_CHANNELS
            + frames / 4 * 2 * (SPEECH_CONV_CHANNELS // 2) * SPEECH_KERNEL * 2 * d
        )
    return 3.0 * (encoder + decoder + cross_kv + output + frontend)


@dataclass(frozen=True)
class Throughput:
    """The MFU the estimate uses and where it comes from."""

    mfu: float
    peak_tflops: float
    gpu: str
    measured: bool
    source: str


@dataclass(frozen=True)
class CostEstimate:
    """Estimated cost of one run. ``gpu_hours`` is the total over all its GPUs (wall hours x GPUs)."""

    gpu_hours: float
    flops: float
    flops_per_update: float
    tokens_per_update: int
    updates: int
    throughput: Throughput

    def __float__(self) -> float:
        return self.gpu_hours

    def __str__(self) -> str:
        how = "measured MFU" if self.throughput.measured else "assumed MFU"
        return (
            f"~{format_hours(self.gpu_hours)} GPU-hours on an {self.throughput.gpu} (estimated: "
            f"{self.flops:.2e} FLOPs at {how} {self.throughput.mfu:.0%})"
        )


def format_hours(hours: float) -> str:
    return f"{hours:.2g}" if hours < 10 else f"{hours:,.0f}"


def results_path() -> Path:
    return Path(__file__).resolve().parents[2] / "benchmarks" / "RESULTS.md"


def measured_throughput(results_md: str | Path | None = None) -> Throughput | None:
    """The MFU recorded in ``benchmarks/RESULTS.md`` (median over the rows of the table after the
    ``<!-- gpu-throughput`` marker; columns ``date | GPU | peak bf16 TFLOPS | model | MFU | command``),
    or None when the file or the table has no row."""
    path = Path(results_md) if results_md is not None else results_path()
    if not path.is_file():
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith(RESULTS_MARKER)), None)
    if start is None:
        return None
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip().startswith("|"):
            if rows or line.strip():
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or set(cells[0]) <= set("-: ") or cells[0].lower() == "date":
            continue  # the separator and the header
        mfu = float(cells[4].rstrip("%")) / (100 if cells[4].endswith("%") else 1)
        rows.append((mfu, float(cells[2]), cells[1], cells[0]))
    if not rows:
        return None
    mfus = sorted(r[0] for r in rows)
    median = mfus[len(mfus) // 2] if len(mfus) % 2 else (mfus[len(mfus) // 2 - 1] + mfus[len(mfus) // 2]) / 2
    latest = rows[-1]
    return Throughput(
        median,
        latest[1],
        latest[2],
        True,
        f"median MFU of {len(rows)} measurement(s) in {path.name} (latest {latest[3]}, {latest[2]})",
    )


def assumed_throughput() -> Throughput:
    return Throughput(
        ASSUMED_MFU,
        ASSUMED_PEAK_TFLOPS,
        ASSUMED_GPU,
        False,
        f"no GPU measurement in benchmarks/RESULTS.md yet: assumed {ASSUMED_MFU:.0%} MFU of "
        f"{ASSUMED_PEAK_TFLOPS:.0f} bf16 TFLOPS",
    )


def estimate_gpu_hours(cfg, *, results_md: str | Path | None = None, updates: int | None = None) -> CostEstimate:
    """Estimated GPU-hours of training the :class:`~b2t_lib.train.TrainConfig` ``cfg`` for ``updates``
    updates (default ``cfg.max_update``), from :func:`flops_per_update` and the MFU of
    :func:`measured_throughput` (or :func:`assumed_throughput`)."""
    tokens = tokens_per_update(cfg)
    model = cfg.model
    per_update = flops_per_update(model, tokens, cfg.task)
    n = cfg.max_update if updates is None else updates
    throughput = measured_throughput(results_md) or assumed_throughput()
    seconds = n * per_update / (throughput.peak_tflops * 1e12 * throughput.mfu)
    return CostEstimate(seconds / 3600.0, n * per_update, per_update, tokens, n, throughput)


# Table 7 of the paper: (GPUs, hours) per model, mostly P100s; the configurations it reports per task.
PAPER_TABLE7 = {
    ("mt", 6, 6): (128, 5),
    ("mt", 18, 18): (128, 13),
    ("summarization", 6, 6): (64, 4),
    ("summarization", 18, 18): (144, 17),
    ("lm", 0, 6): (128, 4),
    ("lm", 0, 16): (192, 7),
    ("asr", 6, 6): (32, 22),
    ("asr", 12, 6): (32, 34),
}


def estimate_table(results_md: str | Path | None = None) -> str:
    """The README's cost table (Markdown): every configuration of Table 7 at the small and full scale."""
    from ..train.options import TrainConfig

    throughput = measured_throughput(results_md) or assumed_throughput()
    lines = [
        "| task | model | small: updates x tokens | small: GPU-hours | full: updates x tokens | "
        "full: GPU-hours | paper (Table 7): GPUs x hours |",
        "|---|---|---|---:|---|---:|---|",
    ]
    for (task, enc, dec), (gpus, hours) in PAPER_TABLE7.items():
        row = [task, f"{dec}L" if enc == 0 else f"{enc}L-{dec}L"]
        for scale in ("small", "full"):
            cfg = TrainConfig.from_preset(task, scale, encoder_layers=enc, decoder_layers=dec)
            est = estimate_gpu_hours(cfg, results_md=results_md)
            row += [f"{cfg.max_update // 1000}K x {est.tokens_per_update:,}", f"~{format_hours(est.gpu_hours)}"]
        row.append(f"{gpus} x {hours} h = {gpus * hours:,} GPU-hours")
        lines.append("| " + " | ".join(row) + " |")
    how = "measured" if throughput.measured else "assumed"
    lines.append("")
    lines.append(
        f"Estimated GPU-hours on an {throughput.gpu} at {how} {throughput.mfu:.0%} MFU "
        f"({throughput.source}); the paper's hours are wall-clock on P100s."
    )
    return "\n".join(lines)


def describe(cfg) -> str:
    """One line for a plan: the run's shape and its estimate."""
    est = estimate_gpu_hours(cfg)
    m = cfg.model
    depth = f"{m.decoder_layers}L" if m.encoder_layers == 0 else f"{m.encoder_layers}L-{m.decoder_layers}L"
    return (
        f"{cfg.task} {cfg.scale} {m.variant} {depth}, {cfg.max_update} updates x "
        f"{est.tokens_per_update} tokens: ~{format_hours(est.gpu_hours)} GPU-hours"
    )
