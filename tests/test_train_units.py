"""Unit tests of the trainer's parts: loss, learning-rate schedules, divergence monitor, checkpoints."""

import math

import pytest
import torch
import torch.nn.functional as F

from b2t_lib.special_tokens import PAD
from b2t_lib.train import (
    CheckpointMismatch,
    DivergenceMonitor,
    LRSchedule,
    average_checkpoints,
    label_smoothed_nll_loss,
    list_checkpoints,
    load_checkpoint,
)
from b2t_lib.train.checkpoint import check_compatible, save_checkpoint
from b2t_lib.train.mt_task import lenpen_for


def _logits_and_target():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g)  # (B, T, V)
    target = torch.randint(4, 11, (3, 5), generator=g)  # (B, T)
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    return logits, target


def test_loss_without_smoothing_is_summed_cross_entropy_over_non_pad_tokens():
    logits, target = _logits_and_target()
    out = label_smoothed_nll_loss(logits, target, epsilon=0.0)
    expected = F.cross_entropy(logits.view(-1, 11), target.view(-1), ignore_index=PAD, reduction="sum")
    assert torch.allclose(out.loss, expected)
    assert torch.allclose(out.nll, expected)
    assert int(out.ntokens) == int(target.ne(PAD).sum()) == 9


def test_label_smoothing_matches_the_fairseq_formula():
    logits, target = _logits_and_target()
    eps = 0.1
    out = label_smoothed_nll_loss(logits, target, epsilon=eps)
    lprobs = F.log_softmax(logits, -1)
    expected = 0.0
    for b in range(3):
        for t in range(5):
            if target[b, t] != PAD:
                expected += (1 - eps) * -lprobs[b, t, target[b, t]] + eps / 11 * -lprobs[b, t].sum()
    assert torch.allclose(out.loss, torch.as_tensor(expected), atol=1e-5)
    # padding never contributes: changing logits at padded positions leaves the loss unchanged
    logits2 = logits.clone()
    logits2[2, 1:] += 100.0
    assert torch.equal(label_smoothed_nll_loss(logits2, target, eps).loss, out.loss)


def test_inverse_sqrt_warms_up_linearly_then_decays_as_one_over_sqrt_t():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    s = LRSchedule(opt, "inverse_sqrt", lr=1e-3, warmup_updates=4000, warmup_init_lr=1e-7)
    assert s.lr_at(0) == pytest.approx(1e-7)
    assert s.lr_at(2000) == pytest.approx((1e-7 + 1e-3) / 2, rel=1e-6)
    assert s.lr_at(4000) == pytest.approx(1e-3)
    assert s.lr_at(16000) == pytest.approx(0.5e-3)  # sqrt(4000 / 16000) = 1/2
    assert s.step(16000) == opt.param_groups[0]["lr"]


def test_inverse_sqrt_nowarmup_is_tfixups_schedule():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.0)
    s = LRSchedule(opt, "inverse_sqrt_nowarmup", lr=5e-4, decay_period=4000)
    assert s.lr_at(0) == pytest.approx(5e-4)  # no warmup: the peak at once
    assert s.lr_at(12000) == pytest.approx(5e-4 * math.sqrt(4000 / 16000))
    with pytest.raises(ValueError, match="unknown lr scheduler"):
        LRSchedule(opt, "cosine", lr=1e-3)


def test_divergence_monitor_flags_non_finite_and_persistently_high_loss():
    assert "nan" in DivergenceMonitor().update(1, float("nan"), 1.0)
    assert "gradient norm" in DivergenceMonitor().update(1, 2.0, float("inf"))
    m = DivergenceMonitor(factor=1.5, patience=5, warmup=2, alpha=1.0)
    for t in range(1, 3):
        assert m.update(t, 4.0, 1.0) is None
    flags = [m.update(t, 7.0, 1.0) for t in range(3, 8)]
    assert flags[:4] == [None] * 4 and "stayed above 1.5" in flags[4]
    m2 = DivergenceMonitor(factor=1.5, patience=5, warmup=2, alpha=1.0)
    for t, loss in enumerate([4.0, 4.0, 7.0, 7.0, 3.0, 7.0, 7.0, 7.0], start=1):
        assert m2.update(t, loss, 1.0) is None  # a dip resets the count
    m3 = DivergenceMonitor()
    m3.load_state_dict(m2.state_dict())
    assert m3.state_dict() == m2.state_dict()


def _state(value: float, update: int) -> dict:
    return {"model": {"w": torch.full((2, 2), value), "steps": torch.tensor(update)}, "update": update}


def test_checkpoints_keep_last_n_and_best_and_average(tmp_path):
    for update, value, best in [(10, 1.0, True), (20, 2.0, False), (30, 4.0, False)]:
        save_checkpoint(_state(value, update), tmp_path, update, keep_last=2, is_best=best)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint_20.pt", "checkpoint_30.pt"]
    assert load_checkpoint(tmp_path / "checkpoint_best.pt")["update"] == 10  # kept after pruning
    assert load_checkpoint(tmp_path / "checkpoint_last.pt")["update"] == 30
    assert not list(tmp_path.glob("*.tmp*"))  # no temporary file (atomic_write and the links: .tmp-<pid>)
    avg = average_checkpoints(list_checkpoints(tmp_path))
    assert torch.allclose(avg["w"], torch.full((2, 2), 3.0)) and avg["w"].dtype == torch.float32
    assert int(avg["steps"]) == 30  # integers: from the last


def test_unreadable_checkpoint_and_config_differences_are_named(tmp_path):
    bad = tmp_path / "checkpoint_5.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointMismatch, match="not a readable checkpoint"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointMismatch) as err:
        check_compatible(
            {"encoder_layers": 6, "lr": 1e-3, "max_update": 10},
            {"encoder_layers": 18, "lr": 1e-3, "max_update": 20},
            frozenset({"max_update"}),
        )
    assert "--encoder-layers: checkpoint has 6, this run asks for 18" in str(err.value)
    assert "max-update" not in str(err.value)


def test_run_many_refuses_runs_that_would_share_a_save_dir():
    from b2t_lib.runs.sweep import run_many
    from b2t_lib.train import TrainConfig

    a = TrainConfig.from_preset("mt", "tiny", save_dir="runs/x")
    with pytest.raises(ValueError, match="its own --save-dir"):
        run_many([a, TrainConfig.from_preset("mt", "tiny", save_dir="runs/x", variant="pre_ln")])
    assert run_many([]) == []


def test_length_penalty_rule_follows_the_readme():
    assert lenpen_for("newstest2014", 0.6, 1.0) == 0.6
    assert lenpen_for("newstest2012", 0.6, 1.0) == 1.0
    assert lenpen_for("test", 0.6, 1.0) == 0.6
