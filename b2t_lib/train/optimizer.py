r"""AdamW, computed by PyTorch's fused kernel, with less bookkeeping around it than ``torch.optim``.

fairseq's Adam (the paper's optimizer, docs/methods.md §3.3) decays the weights apart from the gradient, as AdamW
does. For every parameter :math:`\theta` with gradient :math:`g` at step :math:`t` (counted from 1):

.. math::
    m_t = \beta_1 m_{t-1} + (1 - \beta_1) g, \qquad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g^2,

    \theta \leftarrow \theta (1 - \eta \lambda) - \eta \, \frac{m_t / (1 - \beta_1^t)}{\sqrt{v_t / (1 - \beta_2^t)}
    + \epsilon}

(:math:`\eta` the learning rate, :math:`\lambda` the weight decay). ``torch.optim.AdamW(fused=True)`` hands every
parameter to one fused kernel (``torch._fused_adamw_``), and so does :class:`FusedAdamW`, with the same arguments:
its updates are equal to the bit (``tests/test_optimizer.py``). What it leaves out is what a tiny model pays for:
``torch.optim``'s first call imports ``torch._dynamo`` (more than a second of every training process's start), and
its Python walk over the parameters costs a few milliseconds of every update (``benchmarks/RESULTS.md`` §10).

Its ``state_dict`` has ``torch.optim.AdamW``'s format, so a checkpoint written by either loads into the other, and
it has what ``torch.amp.GradScaler`` and the learning-rate schedule use: ``param_groups``, ``step``, ``zero_grad``.
"""

from __future__ import annotations

import torch

# the hyperparameters torch.optim.AdamW(fused=True) keeps in each group (its state_dict's keys, in its order)
_GROUP_DEFAULTS = dict(
    amsgrad=False,
    maximize=False,
    foreach=None,
    capturable=False,
    differentiable=False,
    fused=True,
    decoupled_weight_decay=True,
)


class FusedAdamW:
    """AdamW over one group of parameters, as ``torch.optim.AdamW(params, lr, betas, eps, weight_decay, fused=True)``.

    A parameter whose gradient is None at a step is skipped (no state, no decay), as ``torch.optim`` skips it.
    """

    def __init__(self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float):
        params = list(params)
        if not params:
            raise ValueError("FusedAdamW got an empty parameter list")
        group = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **_GROUP_DEFAULTS)
        self.param_groups = [dict(group, params=params)]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}  # parameter -> step, exp_avg, exp_avg_sq

    def _state(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state.get(param)
        if state is None:  # zero moments and a float32 step on the parameter's device, as torch.optim's fused path
            state = self.state[param] = {
                "step": torch.zeros((), dtype=torch.float32, device=param.device),
                "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
            }
        return state

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW update of every parameter that has a gradient."""
        for group in self.param_groups:
            by_device: dict[tuple, list[list[torch.Tensor]]] = {}  # (device, dtype) -> params, grads, m, v, steps
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise RuntimeError("FusedAdamW does not take sparse gradients")
                state = self._state(param)
                lists = by_device.setdefault((param.device, param.dtype), [[], [], [], [], []])
                for values, value in zip(
                    lists, (param, param.grad, state["exp_avg"], state["exp_avg_sq"], state["step"])
                ):
                    values.append(value)
            beta1, beta2 = group["betas"]
            for params, grads, exp_avgs, exp_avg_sqs, steps in by_device.values():
                torch._foreach_add_(steps, 1)  # t, counted from 1
                torch._fused_adamw_(
                    params,
                    grads,
                    exp_avgs,
                    exp_avg_sqs,
                    [],  # no AMSGrad maxima
                    steps,
                    lr=group["lr"],
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    amsgrad=False,
                    maximize=False,
                    grad_scale=None,
                    found_inf=None,
                )

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if set_to_none:
                    param.grad = None
                else:
                    param.grad.detach_().zero_()

    def state_dict(self) -> dict:
        """``torch.optim.AdamW``'s format: parameters numbered in group order, each state's tensors as they are."""
        index = {}
        groups = []
        for group in self.param_groups:
            numbers = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": numbers})
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state written by :meth:`state_dict` or by ``torch.optim.AdamW`` over the same parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
            len(saved["params"]) != len(own["params"]) for saved, own in zip(groups, self.param_groups)
        ):
            raise ValueError("the saved optimizer state has other parameter groups than this optimizer")
        if any(saved.get("amsgrad") or saved.get("maximize") for saved in groups):
            raise ValueError("the saved optimizer state is AMSGrad or maximizing, which FusedAdamW does not compute")
        self.state = {}
        for saved, own in zip(groups, self.param_groups):
            own.update({k: v for k, v in saved.items() if k in ("lr", "betas", "eps", "weight_decay")})
            own["betas"] = tuple(own["betas"])
            for number, param in zip(saved["params"], own["params"]):
                values = state_dict["state"].get(number)
                if values is None:
                    continue
                self.state[param] = {  # copies: the loaded state is this optimizer's own from here on
                    "step": values["step"].to(dtype=torch.float32, device=param.device, copy=True),
                    "exp_avg": values["exp_avg"].to(dtype=param.dtype, device=param.device, copy=True),
                    "exp_avg_sq": values["exp_avg_sq"].to(dtype=param.dtype, device=param.device, copy=True),
                }
