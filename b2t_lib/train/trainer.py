r"""The one trainer for every task: token batches grouped into updates, DDP, AMP, checkpoints,
exact resume, failed runs (diverged or stalled, :mod:`.failure`), logs and the result record.

One update (fairseq's ``train_step``, docs/methods.md §3.3):

1. every process runs ``update_freq`` batches forward and backward, summing the label-smoothed
   loss over target tokens (DDP synchronizes gradients only on the last batch);
2. gradients are normalized by the target tokens of the *whole* update,
   $g \leftarrow g \cdot W / N_{tok}$ ($W$ processes; DDP already averaged over them, so this is
   $\sum_{\text{all batches}} \nabla \mathcal{L} / N_{tok}$);
3. the global gradient norm is clipped to ``clip_norm`` (0 = off);
4. Adam steps with the learning rate of update $t$ (:mod:`.schedule`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from ..errors import UserError
from ..files import remove_stale_temporaries, write_json_atomic
from ..model import forward_batch
from ..utils import seed_everything
from . import records
from .checkpoint import (
    average_checkpoints,
    capture_rng_state,
    check_compatible,
    list_checkpoints,
    newest_readable_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from .distributed import DistEnv, all_gather_object, all_reduce_min_int, all_reduce_sum, barrier, init_distributed
from .divergence import DivergenceMonitor
from .failure import COMPLETED, DIVERGED, STALLED, StallRule
from .optimizer import FusedAdamW
from .options import RESUMABLE_CHANGES, TrainConfig
from .schedule import LRSchedule
from .task import Task
from .registry import build_task

LN2 = math.log(2.0)  # losses are logged in base 2, as fairseq does
logger = logging.getLogger(__name__)


class SaveDirError(UserError, OSError):
    """A ``--save-dir`` that cannot hold a run: a file, or a folder that cannot be written."""


class HeldRunError(SaveDirError, FileExistsError):
    """A ``--save-dir`` that holds a run already, refused without ``--resume``."""


def check_save_dir(save_dir: Path) -> None:
    """Refuse a ``--save-dir`` that is (or lies below) a file, or that cannot be written, before any data or model
    is built: the first write would fail only once training had begun."""
    existing = Path(save_dir)
    while not existing.exists() and existing.parent != existing:  # the nearest folder the run would be made in
        existing = existing.parent
    if not existing.is_dir():
        raise SaveDirError(
            f"--save-dir {save_dir} cannot be a folder: {existing} is a file", todo="choose another --save-dir"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SaveDirError(
            f"--save-dir {save_dir} cannot be written: {existing} is not writable",
            todo="choose a folder you can write to (or change its permissions)",
        )


def refuse_held_run(save_dir: Path) -> None:
    """Refuse to start a new run in a folder that holds any record of one (checkpoints, log, result, launch files)."""
    found = records.run_records(save_dir)
    if found:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise HeldRunError(
            f"{save_dir} already holds a run ({shown})",
            todo="pass --resume to continue it, or choose another --save-dir",
        )


def remove_killed_writes(save_dir: Path) -> None:
    """Delete the temporary files that killed writes of an earlier start of this run left in its folder (said in
    the log): checkpoints and records being written (``*.tmp-<pid>``) and links being moved (``*.pt.tmp``)."""
    removed = remove_stale_temporaries(save_dir)
    for link in Path(save_dir).glob("checkpoint_*.pt.tmp"):  # written without a pid by older versions
        link.unlink(missing_ok=True)
        removed.append(link)
    if removed:
        logger.info(
            "removed %d temporary file(s) of killed writes: %s", len(removed), ", ".join(p.name for p in removed)
        )


class Trainer:
    """Build everything from a :class:`TrainConfig` and run :meth:`train`."""

    def __init__(self, cfg: TrainConfig, task: Task | None = None, env: DistEnv | None = None):
        cfg.check()  # also a config read from a file or built by hand
        self.cfg = cfg
        self.env = env or init_distributed(cfg.device)
        self.device = self.env.device
        cfg.check_hardware()  # small/full need a GPU (or the rehearsal, which trains them on the CPU)
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        self.amp = cfg.precision(self.device.type)
        self.save_dir = Path(cfg.save_dir)
        check_save_dir(self.save_dir)  # before any data is prepared or model built
        if not cfg.resume:
            refuse_held_run(self.save_dir)
        if self.env.is_main:
            remove_killed_writes(self.save_dir)
        self.task = task or build_task(cfg)
        if self.env.is_main:
            self.task.prepare_data()
        barrier(self.env)
        self.task.load_datasets()
        self.model_config = self.task.model_config().to_dict()  # stored in checkpoints and result.json
        self.stall_rule = StallRule(cfg.stall_margin, cfg.stall_deadline, self._unigram_baseline())

        seed_everything(cfg.seed)  # the same initial weights on every process
        self.model = self.task.build_model().to(self.device)
        # The parameters, listed once in the model's order (the gradient norm sums their norms in it): walking a
        # deep model's modules for them costs milliseconds, every update.
        self.params = list(self.model.parameters())
        self.update_freq = cfg.update_freq_for(self.env.world_size)
        # fairseq's Adam decays weights decoupled from the gradient, as AdamW does: torch.optim.AdamW(fused=True)'s
        # kernel, called with less bookkeeping around it (optimizer.py)
        self.optimizer = FusedAdamW(
            self.params,
            lr=cfg.warmup_init_lr,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay,
            slab=not self.env.enabled,  # one process: the parameters in one buffer, stepped by one call (optimizer.py)
        )
        self.schedule = LRSchedule(
            self.optimizer, cfg.lr_scheduler, cfg.lr, cfg.warmup_updates, cfg.warmup_init_lr, cfg.decay_period
        )
        self.scaler = torch.amp.GradScaler("cuda") if self.amp == "fp16" else None
        self.monitor = DivergenceMonitor(cfg.divergence_factor, cfg.divergence_patience)
        self.num_updates, self.epoch, self.group_offset = 0, 0, 0
        self.best_valid: float | None = None
        self.train_tokens, self.train_seconds = 0, 0.0
        self.train_model = self.model  # what forward() goes through (DDP / compiled)

    # ------------------------------------------------------------------ setup
    def _unigram_baseline(self) -> float | None:
        """The stall rule's bar (bits per token): computed by rank 0 (it caches it with the data), then
        read by the others. None, with a warning, for a task that provides no unigram baseline."""
        if self.cfg.stall_deadline <= 0:
            return None
        baseline = None
        for turn in ("main", "others"):
            if self.env.is_main == (turn == "main"):
                try:
                    baseline = self.task.unigram_baseline()
                except NotImplementedError as err:
                    if self.env.is_main:
                        logger.warning(
                            "no stall rule for this run: %s. A run that never leaves the plateau ends 'completed'.", err
                        )
            barrier(self.env)
        return baseline

    def _wrap(self) -> None:
        if self.env.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=ids)
        if self.cfg.compile:
            self.train_model = torch.compile(self.train_model)

    def _autocast(self):
        if self.amp == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.amp == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _to_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) if torch.is_tensor(v) else v for k, v in batch.items()}

    def _config_for_checkpoint(self) -> dict:
        values = self.cfg.to_dict()
        values["world_size"] = self.env.world_size
        return values

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> dict:
        rng = all_gather_object(capture_rng_state(), self.env)  # every process's generators
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "trainer": {
                "num_updates": self.num_updates,
                "epoch": self.epoch,
                "group_offset": self.group_offset,
                "best_valid": self.best_valid,
                "train_tokens": self.train_tokens,
                "train_seconds": self.train_seconds,
                "monitor": self.monitor.state_dict(),
                "stall_rule": self.stall_rule.state_dict(),
            },
            "rng": rng,
            "train_config": self._config_for_checkpoint(),
            "model_config": self.model_config,
        }

    def save(self, valid_nll: float, numbered: bool = True) -> None:
        is_best = self.best_valid is None or valid_nll <= self.best_valid
        if is_best:
            self.best_valid = valid_nll
        state = self._state()  # collective: every process takes part
        if self.env.is_main:
            save_checkpoint(state, self.save_dir, self.num_updates, self.cfg.keep_last, is_best, numbered)
        barrier(self.env)

    def _resume_or_start(self) -> None:
        found = newest_readable_checkpoint(self.save_dir) if self.cfg.resume else None
        if found is not None:
            path, state, problems = found
            if problems and self.env.is_main:  # never silently: say which file, and why newer ones were skipped
                logger.warning(
                    "resuming from %s (update %d), the newest readable checkpoint, because:\n  %s",
                    path,
                    state["trainer"]["num_updates"],
                    "\n  ".join(problems),
                )
            elif self.env.is_main:
                logger.info("resuming from %s (update %d)", path, state["trainer"]["num_updates"])
            check_compatible(state["train_config"], self._config_for_checkpoint(), RESUMABLE_CHANGES)
            check_compatible(state["model_config"], self.model_config, frozenset(), "model field")
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scaler and state["scaler"]:
                self.scaler.load_state_dict(state["scaler"])
            t = state["trainer"]
            self.num_updates, self.epoch, self.group_offset = t["num_updates"], t["epoch"], t["group_offset"]
            self.best_valid, self.train_tokens = t["best_valid"], t["train_tokens"]
            self.train_seconds = t["train_seconds"]
            self.monitor.load_state_dict(t["monitor"])
            self.stall_rule.load_state_dict(t.get("stall_rule"))  # absent in checkpoints before the rule
            restore_rng_state(state["rng"][self.env.rank])
            if self.env.is_main:
                records.truncate_log(self.save_dir, self.num_updates)
            return
        if self.cfg.resume and self.env.is_main:
            logger.info("--resume: no checkpoint in %s yet, so training starts from scratch", self.save_dir)
        elif not self.cfg.resume:
            refuse_held_run(self.save_dir)  # written since __init__ checked
        # A fresh start: variants such as Admin run their profiling pass on the first batch here.
        first = self.task.train_batches(0, self.env.rank, self.env.world_size)[0]
        batch = self._to_device(self.task.collate("train", first))
        if hasattr(self.model, "prepare_for_training"):
            self.model.prepare_for_training(lambda: forward_batch(self.model, batch))
        if self.env.is_main:
            (self.save_dir / records.LOG_NAME).unlink(missing_ok=True)

    # ------------------------------------------------------------------ one update
    def train_step(self, group: list[list[int]]) -> dict:
        """Forward/backward over ``group`` (this process's batches of one update), then one step."""
        if not self.model.training:  # after a validation; train() walks every module, so not at every update
            self.model.train()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, nll, ntokens
        for i, indices in enumerate(group):
            batch = self._to_device(self.task.collate("train", indices))
            last = i == len(group) - 1
            sync = contextlib.nullcontext() if (last or not self.env.enabled) else self.train_model.no_sync()
            with sync:
                with self._autocast():
                    out = self.task.loss(self.train_model, batch)
                loss = self.scaler.scale(out.loss) if self.scaler else out.loss
                loss.backward()
            sums += torch.stack([out.loss.detach().double(), out.nll.double(), out.ntokens.double()])
        all_reduce_sum(sums, self.env)
        loss_sum, nll_sum, ntokens = sums.tolist()
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grads = self.optimizer.gradients()  # in a one-process run, most of them gathered into one tensor (the slab)
        # g <- g * W / N_tok: DDP averaged over the W processes; this makes it the per-token mean.
        torch._foreach_mul_(grads, self.env.world_size / max(ntokens, 1.0))
        if self.cfg.clip_norm > 0:  # g <- g * min(1, c / (|g| + 1e-6)), as torch.nn.utils.clip_grad_norm_ computes it
            total = torch.nn.utils.get_total_norm(self.optimizer.gradients_each())  # its sum, in its order
            torch._foreach_mul_(grads, torch.clamp(self.cfg.clip_norm / (total + 1e-6), max=1.0))
            grad_norm = float(total)
        else:  # the norm only (the log, the divergence rule): clipping at infinity would multiply every g by 1
            grad_norm = float(torch.nn.utils.get_total_norm(grads))
        lr = self.schedule.step(self.num_updates)
        loss_per_token = loss_sum / max(ntokens, 1.0) / LN2
        stepped = math.isfinite(loss_per_token) and (self.scaler is not None or math.isfinite(grad_norm))
        if stepped:
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {
            "loss": loss_per_token,
            "nll": nll_sum / max(ntokens, 1.0) / LN2,
            "ntokens": ntokens,
            "lr": lr,
            "gnorm": grad_norm,
        }

    # ------------------------------------------------------------------ validation
    @torch.no_grad()
    def validate(self) -> float:
        """Per-token NLL (base 2, no label smoothing) on the validation set, computed by rank 0 and
        shared with every process."""
        value = torch.zeros(1, dtype=torch.float64, device=self.device)
        if self.env.is_main:
            self.model.eval()
            nll, ntokens = 0.0, 0.0
            for indices in self.task.valid_batches():
                batch = self._to_device(self.task.collate("valid", indices))
                with self._autocast():
                    out = self.task.loss(self.model, batch)
                nll += float(out.nll)
                ntokens += float(out.ntokens)
            value[0] = nll / max(ntokens, 1.0) / LN2
        all_reduce_sum(value, self.env)  # only rank 0 contributed
        return float(value[0])

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict:
        """Train until ``max_update``, or until the run diverges or stalls (:mod:`.failure`); write and
        return the result record.

        While it trains, the run's process record (:func:`.records.write_process`) names this process, so the run
        reads as running, however it was started; an exception (a crash, Ctrl-C) marks it stopped, since this
        process (a notebook kernel, a pool worker) may live on."""
        try:
            return self._train()
        except BaseException:
            if self.env.is_main and records.read_process(self.save_dir).get("pid") == os.getpid():
                with contextlib.suppress(OSError):  # the exception on its way matters more than this record
                    records.write_process(self.save_dir, records.STOPPED, self.num_updates)
            raise

    def _train(self) -> dict:
        cfg, started = self.cfg, time.time()
        self._resume_or_start()
        barrier(self.env)  # every process has checked the folder before the record below appears in it
        if self.env.is_main:  # this process trains the run: it is "running", whatever launched it
            records.write_process(self.save_dir, records.TRAINING, self.num_updates)
        self._wrap()
        status, message, valid_nll = COMPLETED, "", None
        self._start_reports()
        try:
            while status == COMPLETED and self.num_updates < cfg.max_update:
                groups = self._epoch_updates()
                for gi in range(self.group_offset, len(groups)):
                    stats = self._update(groups[gi], gi)  # forward, backward, one step
                    diverged = self._diverged(stats)
                    if diverged:
                        status, message = DIVERGED, diverged
                        break
                    self._report(stats)  # progress bar, log.jsonl
                    done = self.num_updates >= cfg.max_update
                    epoch_end = self._epoch_end_checkpoint(gi, len(groups))
                    on_interval = cfg.save_interval > 0 and self.num_updates % cfg.save_interval == 0
                    if done or epoch_end or on_interval or self.num_updates % cfg.valid_interval == 0:
                        valid_nll = self._validate_and_log()
                        stalled = self._judge_stall(valid_nll)  # "Training failed": the stall rule
                        if stalled:
                            status, message = STALLED, stalled
                    # A stalled run's weights are finite: keep them (to inspect, evaluate or resume).
                    if done or epoch_end or on_interval or status == STALLED:
                        self._checkpoint(valid_nll, epoch_end, on_interval)
                    if done or status != COMPLETED:
                        break
                if status == COMPLETED and self.num_updates < cfg.max_update and self.group_offset >= len(groups):
                    self.epoch, self.group_offset = self.epoch + 1, 0  # the epoch ended without an epoch-end save
        finally:
            self._end_reports()
        return self._finish(status, message, started)

    def _epoch_updates(self) -> list[list[list[int]]]:
        """This epoch's updates, each ``update_freq`` of this process's batches; every process gets as many."""
        batches = self.task.train_batches(self.epoch, self.env.rank, self.env.world_size)
        n = all_reduce_min_int(len(batches), self.env)
        return [batches[i : i + self.update_freq] for i in range(0, n, self.update_freq)]

    def _update(self, group: list[list[int]], index: int) -> dict:
        """One update (:meth:`train_step`) and the counters a checkpoint stores: ``index`` is its place in the epoch."""
        t0 = time.time()
        stats = self.train_step(group)
        self.train_seconds += time.time() - t0
        self.num_updates += 1
        self.group_offset = index + 1
        self.train_tokens += int(stats["ntokens"])
        return stats

    def _diverged(self, stats: dict) -> str | None:
        """The divergence rule (:class:`.divergence.DivergenceMonitor`) after an update: why the run diverged, or
        None."""
        gnorm = stats["gnorm"] if self.scaler is None else 0.0  # with fp16 an overflowing gradient is routine
        return self.monitor.update(self.num_updates, stats["loss"], gnorm)

    def _epoch_end_checkpoint(self, index: int, n_updates: int) -> bool:
        """Whether update ``index`` of ``n_updates`` ends an epoch that is saved (every ``save_interval_epochs``)."""
        every = self.cfg.save_interval_epochs
        return index == n_updates - 1 and every > 0 and (self.epoch + 1) % every == 0

    def _validate_and_log(self) -> float:
        valid_nll = self.validate()
        self._log({"kind": "valid", "update": self.num_updates, "valid_nll": valid_nll})
        return valid_nll

    def _checkpoint(self, valid_nll: float, epoch_end: bool, on_interval: bool) -> None:
        if epoch_end:  # the checkpoint holds the next epoch's start, as fairseq's do
            self.epoch, self.group_offset = self.epoch + 1, 0
        # Saving by epoch, the last mid-epoch state is checkpoint_last.pt only: the numbered checkpoints, which
        # decoding averages, are epoch ends (docs/methods.md §1.8).
        by_epoch_only = self.cfg.save_interval_epochs > 0 and self.cfg.save_interval == 0
        self.save(valid_nll, numbered=epoch_end or on_interval or not by_epoch_only)

    # ------------------------------------------------------------------ what a run reports as it goes
    def _log(self, entry: dict) -> None:
        if self.env.is_main:
            records.append_log(self.save_dir, entry)

    def _start_reports(self) -> None:
        self._progress = self._progress_bar()
        self._window = dict.fromkeys(("loss", "nll", "ntokens"), 0.0)  # token-weighted sums since the last log

    def _report(self, stats: dict) -> None:
        """The progress bar after every update; a ``train`` line in log.jsonl every ``log_interval`` updates
        (loss and NLL averaged over the tokens since the previous line)."""
        for key in ("loss", "nll"):
            self._window[key] += stats[key] * stats["ntokens"]
        self._window["ntokens"] += stats["ntokens"]
        tok_s = self.train_tokens / max(self.train_seconds, 1e-9)
        if self._progress is not None:
            self._progress.update(1)
            self._progress.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}", tok_s=f"{tok_s:.0f}")
        if self.num_updates % self.cfg.log_interval == 0:
            w = max(self._window["ntokens"], 1.0)
            self._log(
                {
                    "kind": "train",
                    "update": self.num_updates,
                    "epoch": self.epoch,
                    "loss": self._window["loss"] / w,
                    "nll": self._window["nll"] / w,
                    "lr": stats["lr"],
                    "gnorm": stats["gnorm"],
                    "tokens_per_s": tok_s,
                }
            )
            self._window = dict.fromkeys(("loss", "nll", "ntokens"), 0.0)

    def _end_reports(self) -> None:
        if self._progress is not None:
            self._progress.close()

    def _judge_stall(self, valid_nll: float) -> str | None:
        """Apply the stall rule at a validation; log its verdict when it is given (once per run)."""
        judged_before = self.stall_rule.passed is not None
        problem = self.stall_rule.check(self.num_updates, valid_nll)
        if problem or (self.stall_rule.passed is not None and not judged_before):
            self._log(
                {
                    "kind": "stall_rule",
                    "update": self.num_updates,
                    "valid_nll": valid_nll,
                    "verdict": STALLED if problem else "passed",
                    "unigram_baseline": self.stall_rule.baseline,
                    "bar": self.stall_rule.bar,
                    **({"message": problem} if problem else {}),
                }
            )
        return problem

    def _progress_bar(self):
        if not (self.cfg.progress_bar and self.env.is_main):
            return None
        from tqdm.auto import tqdm

        return tqdm(
            total=self.cfg.max_update,
            initial=self.num_updates,
            desc=f"{self.cfg.model.variant}",
            unit="upd",
            dynamic_ncols=True,
        )

    # ------------------------------------------------------------------ the end
    def _finish(self, status: str, message: str, started: float) -> dict:
        metrics: dict = {"num_updates": self.num_updates, "best_valid_nll": self.best_valid}
        barrier(self.env)  # every checkpoint is on disk; only rank 0 goes on (evaluation can be long)
        if not self.env.is_main:
            return {"status": status, "message": message, "metrics": metrics}
        records.write_process(self.save_dir, records.FINISHING, self.num_updates)  # evaluating, then result.json
        if status != DIVERGED:  # the last validation: the number a stalled run is judged by
            valid = records.read_log(self.save_dir, "valid")
            if valid:
                metrics["valid_nll"] = valid[-1]["valid_nll"]
        if status == COMPLETED:
            if self.cfg.eval_at_end:
                metrics.update(self.evaluate_checkpoints())
        else:  # no test-set evaluation of a failed run: the paper prints "Training failed"
            model = self.cfg.model
            logger.warning(
                "TRAINING %s (%s, %dL-%dL): %s. Checkpoints and logs written before are kept%s; the "
                "result record says status '%s' (tables print \"Training failed\").",
                status.upper(),
                model.variant,
                model.encoder_layers,
                model.decoder_layers,
                message,
                ", and the stopping point is saved" if status == STALLED else "",
                status,
            )
        record = {
            "status": status,
            "message": message,
            "task": self.cfg.task,
            "variant": self.cfg.model.variant,
            "stall_rule": self.stall_rule.summary(self.num_updates),
            "config": self.cfg.to_dict(),
            "model_config": self.model_config,
            "world_size": self.env.world_size,
            "update_freq": self.update_freq,
            "amp": self.amp,
            "metrics": metrics,
            "git_revision": records.git_revision(),
            "environment": records.environment(),
            "wall_time_s": round(time.time() - started, 2),
            "train_time_s": round(self.train_seconds, 2),
            "train_tokens": self.train_tokens,
            "tokens_per_s": round(self.train_tokens / max(self.train_seconds, 1e-9), 1),
        }
        write_json_atomic(self.save_dir / records.RESULT_NAME, record)
        return record

    def evaluate_checkpoints(self) -> dict:
        """Average the last ``average_last`` checkpoints (as the paper decodes) and evaluate them."""
        paths = list_checkpoints(self.save_dir)[-self.cfg.average_last :]
        model = self.task.build_model().to(self.device)
        if paths:
            model.load_state_dict(average_checkpoints(paths))
        else:
            model.load_state_dict(self.model.state_dict())
        with self._autocast():  # bf16 decoding on GPUs, fp32 on CPU
            result = self.task.evaluate(model, self.device)
        result["averaged_checkpoints"] = [p.name for p in paths]
        return result


def train(cfg: TrainConfig, task: Task | None = None) -> dict:
    """Train ``cfg`` to completion (or divergence) and return its result record."""
    return Trainer(cfg, task).train()
