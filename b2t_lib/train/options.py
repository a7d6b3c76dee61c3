"""Every training option: :class:`TrainConfig` holds the run's options and one
:class:`~b2t_lib.config.ModelConfig`; the command line is generated from both.

* The run's own options (task, optimizer, batching, checkpoints, evaluation, ...) are the fields
  of :class:`TrainConfig`. The model's options are the fields of :class:`~b2t_lib.config.ModelConfig`
  and are **not** repeated here: ``TrainConfig.model`` is a ``ModelConfig``.
* Both kinds are set by the same flat names everywhere: ``--d-model 32`` and ``--lr 1e-3`` on the
  command line, ``d_model=32`` in presets and in ``TrainConfig.from_preset(..., d_model=32)``,
  ``"d_model"`` in ``TrainConfig.to_dict()`` (what checkpoints and ``result.json`` store).
  :func:`option_fields` lists them all, each with its help text and group.
* Defaults: a field's own default, then :func:`b2t_lib.presets.preset` (task x scale), then an
  optional named recipe, then what the caller sets explicitly (:func:`option_defaults`).

:meth:`TrainConfig.check` refuses contradictory settings with a message that names the options
involved; :class:`~b2t_lib.config.ModelConfig` checks the model's own.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import MISSING, dataclass, field, fields

from ..config import ConfigError, ModelConfig, option
from ..presets import RECIPES, preset, recipe, rehearsal_sizes
from ..scale import SCALES, ScaleError, require_cuda
from ..variants import VARIANTS
from .schedule import SCHEDULERS
from .registry import task_class, task_names
from .task import is_preset_data, resolved_path

AMP_CHOICES = ("auto", "fp32", "bf16", "fp16")
DEVICE_CHOICES = ("auto", "cpu", "cuda")

TASK, OPTIM, BATCH, RUNTIME = "task and data", "optimization", "batching", "runtime"
CKPT, FAILURE, EVAL = (
    "checkpoints and logs",
    "training failed: diverged or stalled (b2t_lib.train.failure)",
    "evaluation at the end",
)


def recipe_names() -> list[str]:
    return [""] + sorted(RECIPES)


@dataclass(kw_only=True)
class TrainConfig:
    """One training run.

    A field's default is the paper's choice for every task and scale (Table 6 and the official commands); the
    fields without one depend on the scale, and every preset states them (:mod:`b2t_lib.presets`)."""

    # ---- task and data
    task: str = option(group=TASK, help="task to train", choices=task_names)
    scale: str = option(
        group=TASK, help="preset scale the other defaults come from ($B2T_SCALE, else tiny)", choices=SCALES
    )
    data: str = option(
        group=TASK,
        help="data directory (binarized by data_scripts/; the tiny preset's is generated)",
    )
    synthetic_train_pairs: int = option(
        0,
        group=TASK,
        help="training pairs (lm: training tokens) of the "
        "synthetic task when --data must be generated (tiny scale; 0 = never "
        "generate; the preset's value applies to the preset's own --data folder only)",
    )
    tokens_per_sample: int = option(
        1024,
        group=TASK,
        help="lm: tokens per block; training cuts the token "
        "stream into contiguous blocks of this length (fairseq --tokens-per-sample, "
        "--sample-break-mode none), evaluation uses blocks of the same length",
    )
    save_dir: str = option("checkpoints", group=TASK, help="where checkpoints, log.jsonl and result.json are written")
    recipe: str = option(
        "",
        group=TASK,
        choices=recipe_names,
        help="named overrides on top of the preset (deep100: Appendix C, tfixup: T-Fixup's "
        "own recipe); explicit options still win",
    )
    # ---- the model: every settable ModelConfig field is an option of its own (see option_fields)
    model: ModelConfig = field(metadata={"model": True})
    # ---- optimization
    lr: float = option(1e-3, group=OPTIM, help="peak learning rate")
    lr_scheduler: str = option("inverse_sqrt", group=OPTIM, help="learning-rate schedule", choices=SCHEDULERS)
    warmup_updates: int = option(group=OPTIM, help="linear warmup updates (inverse_sqrt)")
    warmup_init_lr: float = option(1e-7, group=OPTIM, help="learning rate at the first warmup update")
    decay_period: int = option(4000, group=OPTIM, help="decay period P of inverse_sqrt_nowarmup")
    adam_beta1: float = option(0.9, group=OPTIM, help="Adam beta1")
    adam_beta2: float = option(0.98, group=OPTIM, help="Adam beta2")
    adam_eps: float = option(1e-8, group=OPTIM, help="Adam epsilon")
    weight_decay: float = option(0.0, group=OPTIM, help="decoupled weight decay (fairseq's Adam)")
    clip_norm: float = option(0.0, group=OPTIM, help="clip the global gradient norm to this value (0 = off)")
    label_smoothing: float = option(0.1, group=OPTIM, help="label smoothing epsilon")
    max_update: int = option(group=OPTIM, help="stop after this many updates")
    # ---- batching
    max_tokens: int = option(
        group=BATCH,
        help="tokens per batch per process, padding included (--task asr: feature frames, 100 per second of audio)",
    )
    update_freq: int = option(1, group=BATCH, help="accumulate gradients over this many batches per update")
    tokens_per_update: int = option(
        0,
        group=BATCH,
        help="target tokens per update; sets update_freq from max_tokens x processes (0 = use --update-freq)",
    )
    # ---- runtime
    seed: int = option(1, group=RUNTIME, help="random seed (model init, data order, dropout)")
    device: str = option("auto", group=RUNTIME, help="device to compute on", choices=DEVICE_CHOICES)
    amp: str = option(
        "auto",
        group=RUNTIME,
        choices=AMP_CHOICES,
        help="precision: auto = bf16 autocast on CUDA, fp32 on CPU; fp16 uses a gradient scaler",
    )
    compile: bool = option(False, group=RUNTIME, help="wrap the model with torch.compile")
    threads: int = option(0, group=RUNTIME, help="torch CPU threads (0 = torch's default)")
    progress_bar: bool = option(True, group=RUNTIME, help="show a tqdm progress bar")
    # ---- checkpoints and logs
    resume: bool = option(False, group=CKPT, help="continue exactly from the last checkpoint in --save-dir")
    save_interval: int = option(
        group=CKPT, help="write a checkpoint every N updates (0 = off; one is always written at the end)"
    )
    save_interval_epochs: int = option(
        0, group=CKPT, help="write a checkpoint at the end of every N-th epoch (0 = off), as fairseq does by default"
    )
    keep_last: int = option(10, group=CKPT, help="keep the last N numbered checkpoints (the best is kept too)")
    log_interval: int = option(group=CKPT, help="append a line to log.jsonl every N updates")
    valid_interval: int = option(group=CKPT, help="compute the validation loss every N updates")
    # ---- training failed: diverged (the loss) or stalled (the validation NLL never left the plateau)
    divergence_factor: float = option(
        1.5,
        group=FAILURE,
        help="diverged: stop when the smoothed loss stays above this multiple of its starting value ...",
    )
    divergence_patience: int = option(200, group=FAILURE, help="... for this many consecutive updates")
    stall_margin: float = option(
        group=FAILURE,
        help="stalled: stop when the validation NLL is not this many bits below the data's unigram baseline ...",
    )
    stall_deadline: int = option(
        group=FAILURE,
        help="... at the first validation at or after this update (a shorter run is not judged; 0 = no stall rule)",
    )
    # ---- evaluation
    beam: int = option(5, group=EVAL, help="beam size")
    lenpen: float = option(1.0, group=EVAL, help="length penalty (newstest2014 and single-test-set tasks)")
    lenpen_other: float = option(1.0, group=EVAL, help="length penalty for the other newstest years")
    max_len_a: float = option(
        0.0,
        group=EVAL,
        help="generate at most a*src_len+b tokens, then EOS (src_len: the batch's padded source width, as fairseq): a",
    )
    max_len_b: int = option(200, group=EVAL, help="generate at most a*src_len+b tokens, then EOS: b")
    eval_batch_size: int = option(group=EVAL, help="sentences per generation batch")
    average_last: int = option(10, group=EVAL, help="average the last N checkpoints before testing (1 = none)")
    eval_at_end: bool = option(True, group=EVAL, help="evaluate the test sets when training ends")
    context_window: int = option(
        0,
        group=EVAL,
        help="lm: perplexity with this many earlier tokens of context "
        "in each evaluation block, not scored (fairseq eval_lm --context-window; each "
        "block scores tokens_per_sample - context_window new tokens)",
    )

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_preset(cls, task: str, scale: str, recipe_name: str | None = None, **explicit) -> "TrainConfig":
        """Preset of (task, scale), then the recipe, then ``explicit`` overrides (flat option names,
        model options included: ``from_preset("mt", "tiny", variant="b2t", d_model=32, lr=1e-3)``).

        Without a recipe, a variant that needs its own (T-Fixup: ``Variant.recipe == "tfixup"``, its
        no-warmup schedule, Appendix A.1) gets it.
        """
        unknown = sorted(set(explicit) - set(option_names()))
        if unknown:
            raise ConfigError(f"unknown training options: {', '.join(unknown)}")
        values = option_defaults(task, scale, recipe_name, variant=explicit.get("variant"))
        values.update(explicit)
        if "data" in explicit and "synthetic_train_pairs" not in explicit and not is_preset_data(task, scale, values):
            values["synthetic_train_pairs"] = 0  # the preset's synthetic corpus goes into its own folder only
        cfg = cls.from_dict(values)
        cfg.check(set(explicit))
        return cfg

    def to_dict(self) -> dict:
        """Every option by its flat name (model options included), as the command line names them."""
        values = {}
        for f in fields(self):
            if f.metadata.get("model"):
                values.update(self.model.settable_dict())
            else:
                values[f.name] = getattr(self, f.name)
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "TrainConfig":
        """The inverse of :meth:`to_dict`; other keys (``world_size`` in a checkpoint) are ignored. Every
        config is built here, so the rehearsal's shrink rule (:func:`b2t_lib.presets.rehearsal_sizes`) reaches
        every run at small/full, whatever set its options."""
        values = dict(values)
        model_values = dict(values.pop("model", None) or {})
        values = rehearsal_sizes({**model_values, **values})  # small/full under the rehearsal: shrunk
        model_values = {}
        for f in ModelConfig.settable_fields():
            if f.name in values:
                model_values[f.name] = values.pop(f.name)
        own = {f.name: values[f.name] for f in train_fields() if f.name in values}
        missing = [f.name for f in train_fields() if f.name not in own and f.default is MISSING]
        if missing:
            raise ConfigError(f"missing training options: {', '.join(missing)}")
        return cls(model=ModelConfig(**model_values), **own)

    def replace(self, **changes) -> "TrainConfig":
        """A copy with ``changes`` (flat option names, model options included), checked again."""
        unknown = sorted(set(changes) - set(option_names()))
        if unknown:
            raise ConfigError(f"unknown training options: {', '.join(unknown)}")
        values = {**self.to_dict(), **changes}
        moved = "data" in changes and resolved_path(changes["data"]) != resolved_path(self.data)
        if moved and "synthetic_train_pairs" not in changes and not is_preset_data(self.task, self.scale, values):
            values["synthetic_train_pairs"] = 0  # as in from_preset: never generated into another named folder
        cfg = TrainConfig.from_dict(values)
        cfg.check(set(changes))
        return cfg

    def __getattr__(self, name: str):
        # Only called for a missing attribute: point a model option read on the run's config to its home.
        if name != "model" and name in ModelConfig.__dataclass_fields__:
            raise AttributeError(
                f"{name!r} is a model option: read it as cfg.model.{name} "
                f"(TrainConfig holds the run's options and one ModelConfig)"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ checks
    def check(self, explicit: set[str] = frozenset()) -> None:
        """Refuse impossible or contradictory settings; ``explicit`` names what the user set."""

        def bad(msg):
            raise ConfigError(msg)

        if self.task not in task_names():
            bad(f"unknown --task {self.task!r}; known tasks are: {', '.join(task_names())}")
        if self.lr_scheduler not in SCHEDULERS:
            bad(f"unknown --lr-scheduler {self.lr_scheduler!r}; choose one of {', '.join(SCHEDULERS)}")
        if self.amp not in AMP_CHOICES:
            bad(f"unknown --amp {self.amp!r}; choose one of {', '.join(AMP_CHOICES)}")
        if self.device not in DEVICE_CHOICES:
            bad(f"unknown --device {self.device!r}; choose one of {', '.join(DEVICE_CHOICES)}")
        for name in AT_LEAST_ONE:
            if getattr(self, name) < 1:
                bad(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("tokens_per_update", "save_interval", "save_interval_epochs"):
            if getattr(self, name) < 0:
                bad(f"--{name.replace('_', '-')} must be 0 (off) or positive, got {getattr(self, name)}")
        if self.lr <= 0:
            bad(f"--lr must be positive, got {self.lr}")
        if self.lr_scheduler == "inverse_sqrt" and self.warmup_updates <= 0:
            bad("--lr-scheduler inverse_sqrt needs --warmup-updates > 0; use inverse_sqrt_nowarmup for none")
        if self.lr_scheduler == "inverse_sqrt_nowarmup" and self.decay_period <= 0:
            bad(f"--decay-period must be positive, got {self.decay_period}")
        if self.divergence_factor <= 1.0:
            bad(f"--divergence-factor must be above 1, got {self.divergence_factor}")
        if self.stall_margin < 0:
            bad(
                f"--stall-margin is in bits below the unigram baseline and must be 0 or positive, got "
                f"{self.stall_margin}"
            )
        if self.stall_deadline < 0:
            bad(f"--stall-deadline must be 0 (no stall rule) or an update number, got {self.stall_deadline}")
        if self.clip_norm < 0:
            bad(f"--clip-norm must be 0 (off) or positive, got {self.clip_norm}")
        if self.tokens_per_sample < 1:
            bad(f"--tokens-per-sample must be at least 1, got {self.tokens_per_sample}")
        if not 0 <= self.context_window < self.tokens_per_sample:
            bad(
                f"--context-window must lie in [0, --tokens-per-sample={self.tokens_per_sample}), got "
                f"{self.context_window}: each evaluation block must score at least one new token"
            )
        # Contradictions between options the user gave explicitly.
        if {"update_freq", "tokens_per_update"} <= explicit and self.tokens_per_update > 0:
            bad(
                "--update-freq and --tokens-per-update both set the accumulation; give only one "
                "(--tokens-per-update 0 turns the automatic one off)"
            )
        if self.lr_scheduler == "inverse_sqrt_nowarmup" and "warmup_updates" in explicit:
            bad(
                "--warmup-updates has no effect with --lr-scheduler inverse_sqrt_nowarmup; "
                "drop it or use --lr-scheduler inverse_sqrt"
            )
        if self.lr_scheduler == "inverse_sqrt" and "decay_period" in explicit:
            bad("--decay-period belongs to --lr-scheduler inverse_sqrt_nowarmup; drop it or switch the scheduler")
        task_class(self.task).check_config(self)  # the shape of model and batch this task can train
        if self.device == "cpu":
            self.precision("cpu")

    def precision(self, device_type: str) -> str:
        """The arithmetic of a run on ``device_type``: ``--amp``, with ``auto`` = bf16 autocast on CUDA and fp32
        elsewhere; bf16/fp16 asked for off CUDA are refused."""
        amp = self.amp if self.amp != "auto" else ("bf16" if device_type == "cuda" else "fp32")
        if amp in ("bf16", "fp16") and device_type != "cuda":
            raise ConfigError(f"--amp {amp} needs --device cuda; on {device_type} training runs in fp32 (--amp fp32)")
        return amp

    def check_hardware(self) -> None:
        """``small`` and ``full`` need a CUDA GPU, unless the run asks for the CPU itself (``--device cpu``) or the
        rehearsal is on (:func:`b2t_lib.scale.require_cuda`). The trainer and the launcher both refuse here."""
        if self.device == "cpu":
            return
        try:
            require_cuda(self.scale)
        except ScaleError as err:
            raise ScaleError(
                f"{err} To train this --scale {self.scale} run on the CPU anyway, pass --device cpu."
            ) from None

    def update_freq_for(self, world_size: int) -> int:
        """Batches accumulated per update: from ``tokens_per_update`` when set, else ``update_freq``."""
        if self.tokens_per_update > 0:
            return max(1, math.ceil(self.tokens_per_update / (self.max_tokens * world_size)))
        return self.update_freq


# Options that must be at least 1 (the command line refuses smaller values as it reads them).
AT_LEAST_ONE = (
    "max_tokens",
    "update_freq",
    "max_update",
    "log_interval",
    "valid_interval",
    "keep_last",
    "beam",
    "eval_batch_size",
    "average_last",
    "divergence_patience",
)


# Options that may change between a run and its resumption without changing the trajectory.
RESUMABLE_CHANGES = frozenset(
    {
        "max_update",
        "save_dir",
        "resume",
        "progress_bar",
        "log_interval",
        "keep_last",
        "threads",
        "eval_at_end",
        "eval_batch_size",
        "beam",
        "lenpen",
        "lenpen_other",
        "max_len_a",
        "max_len_b",
        "average_last",
        "compile",
        "data",
        "synthetic_train_pairs",
        "valid_interval",
        "save_interval",
        "scale",
        "recipe",
        "device",
        "save_interval_epochs",
        "context_window",
        "stall_margin",
        "stall_deadline",  # when to stop a run on the plateau, not how it trains
    }
)


def train_fields() -> list[dataclasses.Field]:
    """The run's own options: the fields of :class:`TrainConfig` except ``model``."""
    return [f for f in fields(TrainConfig) if not f.metadata.get("model")]


def option_fields() -> list[dataclasses.Field]:
    """Every option, in the order ``--help`` lists them: the run's options, with the settable
    :class:`~b2t_lib.config.ModelConfig` fields where ``TrainConfig.model`` stands."""
    listed = []
    for f in fields(TrainConfig):
        listed.extend(ModelConfig.settable_fields() if f.metadata.get("model") else [f])
    return listed


def option_names() -> list[str]:
    return [f.name for f in option_fields()]


def option_defaults(task: str, scale: str, recipe_name: str | None = None, variant: str | None = None) -> dict:
    """The default of every option (flat names) for ``task`` at ``scale``: each field's own default,
    then the preset, then the recipe (by default the one ``variant`` asks for, see
    :meth:`TrainConfig.from_preset`). ``--help`` shows these; ``from_preset`` starts from them."""
    values = {f.name: f.default for f in option_fields() if f.default is not MISSING}
    given = preset(task, scale)
    _check_known(given, f"preset ({task}, {scale})")
    values.update(given)
    if recipe_name is None:
        chosen = VARIANTS.get(variant or values.get("variant"))
        recipe_name = (chosen.recipe if chosen is not None else "") or None
    values["recipe"] = recipe_name or ""
    if recipe_name:
        overrides = recipe(recipe_name)
        _check_known(overrides, f"recipe {recipe_name!r}")
        # an option of some variants only (b2t_rescale_init: B2T's) applies to those; the rest of the recipe to all
        owners = {f.name: f.metadata.get("variants") for f in ModelConfig.settable_fields()}
        chosen = variant or values.get("variant")
        values.update({k: v for k, v in overrides.items() if not owners.get(k) or chosen in owners[k]})
    return values


def _check_known(values: dict, where: str) -> None:
    unknown = sorted(set(values) - set(option_names()))
    if unknown:
        raise ValueError(
            f"the {where} sets {', '.join(unknown)}, which is no option of TrainConfig or a settable ModelConfig field"
        )


def _check_one_name_per_option() -> None:
    shared = {f.name for f in train_fields()} & {f.name for f in ModelConfig.settable_fields()}
    if shared:
        raise TypeError(f"TrainConfig and ModelConfig both declare {sorted(shared)}: every option has one home")


_check_one_name_per_option()
