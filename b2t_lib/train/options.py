"""Every training option in one dataclass, with its help text; the CLI is generated from it.

Defaults come from :func:`b2t_lib.presets.preset` (task x scale), then an optional named recipe,
then what the caller sets explicitly. :meth:`TrainConfig.check` refuses contradictory settings
with a message that names the options involved.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from ..presets import TASKS, preset, recipe
from .schedule import SCHEDULERS

AMP_CHOICES = ("auto", "fp32", "bf16", "fp16")
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def opt(group: str, help: str, **kw):
    """A dataclass field that carries its CLI group and help text."""
    return field(metadata={"group": group, "help": help, **kw})


@dataclass
class TrainConfig:
    # ---- task and data
    task: str = opt("task", "task to train", choices=TASKS)
    scale: str = opt("task", "preset scale the other defaults come from ($B2T_SCALE, else tiny)",
                     choices=("tiny", "small", "full"))
    data: str = opt("task", "data directory (binarized by data_scripts/, or generated for the "
                    "synthetic tiny task when missing)")
    synthetic_train_pairs: int = opt("task", "training pairs of the synthetic task when --data "
                                     "must be generated (tiny scale; 0 = never generate)")
    save_dir: str = opt("task", "where checkpoints, log.jsonl and result.json are written")
    recipe: str = opt("task", "named overrides on top of the preset (deep100: Appendix C, "
                      "tfixup: T-Fixup's own recipe); explicit options still win")
    # ---- model
    variant: str = opt("model", "residual/normalization variant (post_ln, pre_ln, b2t, ...)")
    encoder_layers: int = opt("model", "number of encoder layers")
    decoder_layers: int = opt("model", "number of decoder layers")
    d_model: int = opt("model", "model (hidden) dimension")
    n_heads: int = opt("model", "attention heads")
    d_ff: int = opt("model", "FFN inner dimension")
    dropout: float = opt("model", "residual/embedding dropout p")
    attention_dropout: float = opt("model", "dropout on attention probabilities")
    activation_dropout: float = opt("model", "dropout after the FFN's ReLU")
    word_dropout: float = opt("model", "word dropout rate on both sides (methods_spec 1.7)")
    init_scale: float = opt("model", "multiply initial non-embedding weights (Appendix C: 0.1)")
    b2t_rescale_init: bool = opt("model", "official code's later N^-0.5 init rescaling for B2T")
    share_embeddings: bool = opt("model", "share encoder/decoder input and output embeddings")
    # ---- optimization
    lr: float = opt("optim", "peak learning rate")
    lr_scheduler: str = opt("optim", "learning-rate schedule", choices=SCHEDULERS)
    warmup_updates: int = opt("optim", "linear warmup updates (inverse_sqrt)")
    warmup_init_lr: float = opt("optim", "learning rate at the first warmup update")
    decay_period: int = opt("optim", "decay period P of inverse_sqrt_nowarmup")
    adam_beta1: float = opt("optim", "Adam beta1")
    adam_beta2: float = opt("optim", "Adam beta2")
    adam_eps: float = opt("optim", "Adam epsilon")
    weight_decay: float = opt("optim", "decoupled weight decay (fairseq's Adam)")
    clip_norm: float = opt("optim", "clip the global gradient norm to this value (0 = off)")
    label_smoothing: float = opt("optim", "label smoothing epsilon")
    max_update: int = opt("optim", "stop after this many updates")
    # ---- batching
    max_tokens: int = opt("batch", "tokens per batch per process (padding included)")
    update_freq: int = opt("batch", "accumulate gradients over this many batches per update")
    tokens_per_update: int = opt("batch", "target tokens per update; sets update_freq from "
                                 "max_tokens x processes (0 = use --update-freq)")
    # ---- runtime
    seed: int = opt("runtime", "random seed (model init, data order, dropout)")
    device: str = opt("runtime", "device to train on", choices=DEVICE_CHOICES)
    amp: str = opt("runtime", "precision: auto = bf16 autocast on CUDA, fp32 on CPU; fp16 "
                   "uses a gradient scaler", choices=AMP_CHOICES)
    compile: bool = opt("runtime", "wrap the model with torch.compile")
    threads: int = opt("runtime", "torch CPU threads (0 = torch's default)")
    progress_bar: bool = opt("runtime", "show a tqdm progress bar")
    # ---- checkpoints and logs
    resume: bool = opt("ckpt", "continue exactly from the last checkpoint in --save-dir")
    save_interval: int = opt("ckpt", "write a checkpoint every N updates (and at the end)")
    keep_last: int = opt("ckpt", "keep the last N numbered checkpoints (the best is kept too)")
    log_interval: int = opt("ckpt", "append a line to log.jsonl every N updates")
    valid_interval: int = opt("ckpt", "compute the validation loss every N updates")
    # ---- divergence
    divergence_factor: float = opt("diverge", "stop when the smoothed loss stays above this "
                                   "multiple of its starting value ...")
    divergence_patience: int = opt("diverge", "... for this many consecutive updates")
    # ---- evaluation
    beam: int = opt("eval", "beam size")
    lenpen: float = opt("eval", "length penalty (newstest2014 and single-test-set tasks)")
    lenpen_other: float = opt("eval", "length penalty for the other newstest years")
    max_len_a: float = opt("eval", "generate at most a*src_len+b tokens, then EOS (src_len: the batch's padded "
                                   "source width, as fairseq): a")
    max_len_b: int = opt("eval", "generate at most a*src_len+b tokens, then EOS: b")
    eval_batch_size: int = opt("eval", "sentences per generation batch")
    average_last: int = opt("eval", "average the last N checkpoints before testing (1 = none)")
    eval_at_end: bool = opt("eval", "evaluate the test sets when training ends")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_preset(cls, task: str, scale: str, recipe_name: str | None = None, **explicit) -> "TrainConfig":
        """Preset of (task, scale), then the recipe, then ``explicit`` overrides.

        Without a recipe, a variant that needs its own (T-Fixup: ``Variant.recipe == "tfixup"``, its
        no-warmup schedule, Appendix A.1) gets it.
        """
        values = preset(task, scale)
        if recipe_name is None:
            from ..variants import VARIANTS

            variant = VARIANTS.get(explicit.get("variant", values.get("variant")))
            recipe_name = (variant.recipe if variant is not None else "") or None
        values["recipe"] = recipe_name or ""
        if recipe_name:
            values.update(recipe(recipe_name))
        values.update(dict(save_dir="checkpoints", device="auto", amp="auto", compile=False,
                           progress_bar=True, resume=False, eval_at_end=True))
        unknown = sorted(set(explicit) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown training options: {', '.join(unknown)}")
        values.update(explicit)
        cfg = cls(**{f.name: values[f.name] for f in fields(cls)})
        cfg.check(set(explicit))
        return cfg

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    # ------------------------------------------------------------------ checks
    def check(self, explicit: set[str] = frozenset()) -> None:
        """Refuse impossible or contradictory settings; ``explicit`` names what the user set."""
        def bad(msg):
            raise ValueError(msg)

        if self.task not in TASKS:
            bad(f"unknown --task {self.task!r}; known tasks are: {', '.join(TASKS)}")
        if self.lr_scheduler not in SCHEDULERS:
            bad(f"unknown --lr-scheduler {self.lr_scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
        if self.amp not in AMP_CHOICES:
            bad(f"unknown --amp {self.amp!r}; choose one of {', '.join(AMP_CHOICES)}")
        if self.device not in DEVICE_CHOICES:
            bad(f"unknown --device {self.device!r}; choose one of {', '.join(DEVICE_CHOICES)}")
        for name in ("max_tokens", "update_freq", "max_update", "save_interval", "log_interval",
                     "valid_interval", "keep_last", "beam", "eval_batch_size", "average_last",
                     "divergence_patience"):
            if getattr(self, name) < 1:
                bad(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.tokens_per_update < 0:
            bad(f"--tokens-per-update must be 0 (off) or positive, got {self.tokens_per_update}")
        if self.divergence_factor <= 1.0:
            bad(f"--divergence-factor must be above 1, got {self.divergence_factor}")
        if self.clip_norm < 0:
            bad(f"--clip-norm must be 0 (off) or positive, got {self.clip_norm}")
        # Contradictions between options the user gave explicitly.
        if {"update_freq", "tokens_per_update"} <= explicit and self.tokens_per_update > 0:
            bad("--update-freq and --tokens-per-update both set the accumulation; give only one "
                "(--tokens-per-update 0 turns the automatic one off)")
        if self.lr_scheduler == "inverse_sqrt_nowarmup" and "warmup_updates" in explicit:
            bad("--warmup-updates has no effect with --lr-scheduler inverse_sqrt_nowarmup; "
                "drop it or use --lr-scheduler inverse_sqrt")
        if self.lr_scheduler == "inverse_sqrt" and "decay_period" in explicit:
            bad("--decay-period belongs to --lr-scheduler inverse_sqrt_nowarmup; drop it or "
                "switch the scheduler")
        if self.device == "cpu" and self.amp in ("bf16", "fp16"):
            bad(f"--amp {self.amp} needs --device cuda; on CPU training runs in fp32 (--amp fp32)")
        if self.b2t_rescale_init and not self.variant.startswith("b2t"):
            bad(f"--b2t-rescale-init applies to the B2T variants only, not --variant {self.variant}")

    def update_freq_for(self, world_size: int) -> int:
        """Batches accumulated per update: from ``tokens_per_update`` when set, else ``update_freq``."""
        if self.tokens_per_update > 0:
            return max(1, math.ceil(self.tokens_per_update / (self.max_tokens * world_size)))
        return self.update_freq


# Options that may change between a run and its resumption without changing the trajectory.
RESUMABLE_CHANGES = frozenset({
    "max_update", "save_dir", "resume", "progress_bar", "log_interval", "keep_last", "threads",
    "eval_at_end", "eval_batch_size", "beam", "lenpen", "lenpen_other", "max_len_a", "max_len_b",
    "average_last", "compile", "data", "synthetic_train_pairs", "valid_interval", "save_interval",
    "scale", "recipe", "device",
})
