"""FusedAdamW (b2t_lib/train/optimizer.py) computes what torch.optim.AdamW(fused=True) computes, to the bit, keeps
its checkpoint format both ways, and spares a training process the import of torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from b2t_lib.train.optimizer import FusedAdamW

HYPER = dict(lr=3e-3, betas=(0.9, 0.98), eps=1e-8)


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 5), (5,), (3, 4, 2), (1,)]
    return [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in shapes]


def _grads(step: int, params, skip: int | None = None) -> None:
    g = torch.Generator().manual_seed(100 + step)
    for i, p in enumerate(params):
        p.grad = None if i == skip else torch.randn(p.shape, generator=g) * 10 ** (i - 2)


def _run(optimizer, params, steps: range, skip_at: int | None = None) -> None:
    for step in steps:
        _grads(step, params, skip=1 if step == skip_at else None)  # a parameter without a gradient at one step
        for group in optimizer.param_groups:
            group["lr"] = HYPER["lr"] * (step + 1) / 4  # as the schedule sets it
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def _same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_updates_and_moments_equal_torch_optim_adamw_fused_to_the_bit(weight_decay):
    ours, theirs = _params(), _params()
    mine = FusedAdamW(ours, weight_decay=weight_decay, **HYPER)
    reference = torch.optim.AdamW(theirs, weight_decay=weight_decay, fused=True, **HYPER)
    _run(mine, ours, range(6), skip_at=2)
    _run(reference, theirs, range(6), skip_at=2)
    _same(ours, theirs)
    for p, q in zip(ours, theirs):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(mine.state[p][key], reference.state[q][key]), key
    assert float(mine.state[ours[1]]["step"]) == 5  # skipped once: no update, no step counted


def test_the_state_dict_is_torch_optims_and_loads_both_ways():
    ours, theirs = _params(), _params()
    mine = FusedAdamW(ours, weight_decay=0.01, **HYPER)
    reference = torch.optim.AdamW(theirs, weight_decay=0.01, fused=True, **HYPER)
    _run(mine, ours, range(3))
    _run(reference, theirs, range(3))
    saved_mine, saved_reference = mine.state_dict(), reference.state_dict()
    assert saved_mine["param_groups"] == saved_reference["param_groups"]
    assert saved_mine["state"].keys() == saved_reference["state"].keys()
    for number, values in saved_reference["state"].items():
        assert values.keys() == saved_mine["state"][number].keys()
        assert all(torch.equal(values[k], saved_mine["state"][number][k]) for k in values)

    # torch.optim's checkpoint resumes in FusedAdamW, and FusedAdamW's in torch.optim: the runs continue as one
    resumed_mine_params, resumed_theirs_params = (
        [p.detach().clone().requires_grad_() for p in theirs],
        [p.detach().clone().requires_grad_() for p in ours],
    )
    resumed_mine = FusedAdamW(resumed_mine_params, lr=1.0, betas=(0.5, 0.5), eps=1.0, weight_decay=0.0)
    resumed_mine.load_state_dict(saved_reference)
    resumed_theirs = torch.optim.AdamW(resumed_theirs_params, fused=True, **HYPER)
    resumed_theirs.load_state_dict(saved_mine)
    assert resumed_mine.param_groups[0]["betas"] == HYPER["betas"] and resumed_mine.param_groups[0]["lr"] > 0
    for optimizer, params in (
        (reference, theirs),
        (resumed_mine, resumed_mine_params),
        (resumed_theirs, resumed_theirs_params),
    ):
        _run(optimizer, params, range(3, 6))
    _same(resumed_mine_params, theirs)
    _same(resumed_theirs_params, theirs)


def test_a_state_of_other_parameters_is_refused():
    mine = FusedAdamW(_params(), weight_decay=0.0, **HYPER)
    other = torch.optim.AdamW(_params()[:2], fused=True, **HYPER)
    with pytest.raises(ValueError, match="other parameter groups"):
        mine.load_state_dict(other.state_dict())


def test_a_training_update_does_not_import_torch_dynamo():
    """What FusedAdamW is for: torch.optim's first call imports torch._dynamo, over a second of every run's start."""
    code = (
        "import sys, torch\n"
        "from b2t_lib.train.optimizer import FusedAdamW\n"
        "model = torch.nn.Linear(4, 3)\n"
        "opt = FusedAdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.0)\n"
        "model(torch.randn(2, 4)).sum().backward()\n"
        "torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])\n"
        "opt.step(); opt.zero_grad()\n"
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n"
        "torch.optim.AdamW(model.parameters(), fused=True)\n"
        "assert 'torch._dynamo' in sys.modules, 'the check cannot see the import it guards against'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_grad_scaler_unscales_steps_and_skips_an_overflowing_step_as_with_torch_optim():
    """fp16 training (CUDA) steps through torch.amp.GradScaler; its CPU twin runs the same code here."""
    results = []
    for make in (
        lambda p: FusedAdamW(p, weight_decay=0.0, **HYPER),
        lambda p: torch.optim.AdamW(p, weight_decay=0.0, fused=True, **HYPER),
    ):
        params = _params()
        optimizer, scaler = make(params), torch.amp.GradScaler("cpu", init_scale=4.0)
        for step in range(3):
            _grads(step, params)
            scaler.scale(torch.ones(()))  # the scaled loss, whose backward() would leave the gradients below
            for p in params:
                p.grad = p.grad * scaler.get_scale()  # as backward() of a scaled loss leaves them
            if step == 1:
                params[0].grad[0, 0] = float("inf")  # an overflow: the step is skipped, the scale halves
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        results.append(([p.detach().clone() for p in params], scaler.get_scale()))
    (ours, our_scale), (theirs, their_scale) = results
    _same(ours, theirs)
    assert our_scale == their_scale == 2.0


def test_a_checkpoint_packs_the_moments_into_three_tensors_and_loads_them_back_exactly(tmp_path):
    from b2t_lib.train.checkpoint import load_checkpoint, pack_optimizer_state, save_checkpoint

    params = _params()
    mine = FusedAdamW(params, weight_decay=0.01, **HYPER)
    _run(mine, params, range(3), skip_at=0)  # parameter 1 gets its state one step late: the state's order differs
    saved = mine.state_dict()
    assert list(saved["state"]) == [0, 2, 3, 1]
    packed = pack_optimizer_state(saved)
    assert sum(torch.is_tensor(v) for v in packed.values()) == 3  # steps, first moments, second moments
    save_checkpoint({"model": {}, "optimizer": saved}, tmp_path, update=3, keep_last=1, is_best=True)
    loaded = load_checkpoint(tmp_path / "checkpoint_3.pt")["optimizer"]
    assert loaded["param_groups"] == saved["param_groups"] and list(loaded["state"]) == list(saved["state"])
    for number, values in saved["state"].items():
        for key, tensor in values.items():
            back = loaded["state"][number][key]
            assert back.dtype == tensor.dtype and back.shape == tensor.shape and torch.equal(back, tensor), key

    # a run resumed from the packed file, in FusedAdamW or in torch.optim, continues as the uninterrupted one
    resumed_runs = []
    for resumed_class, extra in ((FusedAdamW, {}), (torch.optim.AdamW, {"fused": True})):
        copies = [p.detach().clone().requires_grad_() for p in params]
        resumed = resumed_class(copies, weight_decay=0.01, **HYPER, **extra)
        resumed.load_state_dict(load_checkpoint(tmp_path / "checkpoint_3.pt")["optimizer"])
        _run(resumed, copies, range(3, 6))
        resumed_runs.append(copies)
    _run(mine, params, range(3, 6))
    for copies in resumed_runs:
        _same(copies, params)

    # a checkpoint written before the packing (torch.optim's format on disk) still loads, as it was
    old = tmp_path / "old"
    old.mkdir()
    torch.save({"model": {}, "optimizer": saved}, old / "checkpoint_3.pt")
    unpacked = load_checkpoint(old / "checkpoint_3.pt")["optimizer"]
    assert all(torch.equal(unpacked["state"][n]["exp_avg"], v["exp_avg"]) for n, v in saved["state"].items())
    # a state that does not fit the layout (mixed dtypes) is written as it is
    saved["state"][2]["exp_avg_sq"] = saved["state"][2]["exp_avg_sq"].double()
    assert pack_optimizer_state(saved) is saved


# ------------------------------------------------------------------ the slab (one buffer for the parameters)
SLAB_SHAPES = [(32, 16), (16,), (7, 5), (3, 16, 2), (1,), (48,)]  # (7, 5) and (1,): sizes the slab leaves outside


def _slab_params(seed: int = 0) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(*s, generator=g)) for s in SLAB_SHAPES]


def _slab_run(optimizer, params, steps: range, skip: dict[int, int], gather: bool) -> None:
    """Steps as the trainer takes them: gradients, scaled in place through ``gradients()`` (or ``.grad`` itself),
    then a step; ``skip`` maps a step to a parameter left without a gradient there."""
    for step in steps:
        g = torch.Generator().manual_seed(100 + step)
        for i, p in enumerate(params):
            p.grad = None if skip.get(step) == i else torch.randn(p.shape, generator=g) * 10 ** (i - 3)
        grads = optimizer.gradients() if gather else [p.grad for p in params if p.grad is not None]
        torch._foreach_mul_(grads, 1 / 3)  # the per-token mean's division, in place
        optimizer.param_groups[0]["lr"] = HYPER["lr"] * (step + 1) / 4
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("skip", [{}, {2: 0}, {1: 4}], ids=["every step", "a slab member skipped", "another skipped"])
def test_the_slab_steps_every_parameter_as_it_is_stepped_alone_to_the_bit(skip):
    """One kernel call over the slab gives each parameter the bits it gets on its own, also after a member has
    skipped a step (it is stepped alone from then), and the slab's members stay the modules' parameters."""
    ours, theirs = _slab_params(), _slab_params()
    slab = FusedAdamW(ours, weight_decay=0.01, slab=True, **HYPER)
    alone = FusedAdamW(theirs, weight_decay=0.01, **HYPER)
    members = [p for p in ours if p.numel() % 16 == 0]
    assert slab.slab.members == members and slab.slab.others == [ours[2], ours[4]]
    start, end = slab.slab.data.data_ptr(), slab.slab.data.data_ptr() + slab.slab.data.numel() * 4
    assert all(start <= p.data_ptr() < end for p in members), "members are views into the slab"
    assert all(torch.equal(p, q) for p, q in zip(ours, theirs)), "moving into the slab changes no value"
    _slab_run(slab, ours, range(6), skip, gather=True)
    _slab_run(alone, theirs, range(6), skip, gather=False)
    _same(ours, theirs)
    for p, q in zip(ours, theirs):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(slab.state[p][key], alone.state[q][key]), key
    assert list(slab.state_dict()["state"]) == list(alone.state_dict()["state"])  # the same order of states
    assert slab.slab.uniform is (0 not in skip.values())  # only a member's skipped step ends the one-call steps


def test_a_slab_optimizers_state_resumes_in_torch_optim_and_back():
    ours, theirs = _slab_params(), _slab_params()
    slab = FusedAdamW(ours, weight_decay=0.01, slab=True, **HYPER)
    reference = torch.optim.AdamW(theirs, weight_decay=0.01, fused=True, **HYPER)
    _slab_run(slab, ours, range(3), {}, gather=True)
    _slab_run(reference, theirs, range(3), {}, gather=False)
    saved = {k: v for k, v in slab.state_dict().items()}
    copies = [p.detach().clone().requires_grad_() for p in ours]
    into_torch = torch.optim.AdamW(copies, weight_decay=0.01, fused=True, **HYPER)
    into_torch.load_state_dict(saved)
    back = [p.detach().clone().requires_grad_() for p in theirs]
    into_slab = FusedAdamW(back, lr=1.0, betas=(0.5, 0.5), eps=1.0, weight_decay=0.0, slab=True)
    into_slab.load_state_dict(reference.state_dict())
    for optimizer, params, gather in ((reference, theirs, False), (into_torch, copies, False), (into_slab, back, True)):
        _slab_run(optimizer, params, range(3, 6), {}, gather=gather)
    _same(copies, theirs)
    _same(back, theirs)
