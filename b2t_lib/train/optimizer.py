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

**The slab** (``slab=True``, what the trainer asks for in a one-process run). A tiny model has hundreds of small
tensors, and every operation over all of them (the gradient's scaling, its norm, the kernel's per-tensor loop)
pays a fixed cost per tensor. With the slab, the parameters whose sizes are multiples of :data:`BLOCK` live in one
contiguous buffer (each parameter a view into it), with their moments in two more; :meth:`FusedAdamW.gradients`
gathers their gradients into a fourth, and one kernel call steps them all. The kernel computes each element alone,
in blocks of :data:`BLOCK` elements, so a parameter computed inside the slab gets the same bits as computed on its
own (``tests/test_optimizer.py``); a parameter of another size (a scalar, say) would have its last elements
computed by the kernel's scalar tail on its own and stays outside, stepped as before. An 18L-18L tiny update
(``benchmarks/RESULTS.md`` §10): the work after backward fell from about 4.8 to 1.5 ms, of 60.
"""

from __future__ import annotations

import torch

# Elements per cache line of float32 (64 bytes): the fused kernel splits a tensor into chunks of whole lines and runs
# its vector loop over each, leaving only a tensor's last ``numel % vector width`` elements to a scalar loop. A
# parameter whose size is a multiple of BLOCK (the AVX-512 vector's 16 floats, twice AVX2's) never reaches that loop,
# in the slab or on its own.
BLOCK = 16

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
    ``slab=True`` moves the parameters into one buffer (the module docstring); each stays a parameter of its module.
    """

    def __init__(
        self, params, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, slab: bool = False
    ):
        params = list(params)
        if not params:
            raise ValueError("FusedAdamW got an empty parameter list")
        group = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **_GROUP_DEFAULTS)
        self.param_groups = [dict(group, params=params)]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}  # parameter -> step, exp_avg, exp_avg_sq
        self.slab = Slab(params) if slab else None
        self._gathered = False  # gradients() gathered this update's slab gradients: step() reads them there

    def _state(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state.get(param)
        if state is None and self.slab is not None and param in self.slab.index:
            state = self.state[param] = self.slab.state_of(param)  # views into the slab's moments and steps
        elif state is None:  # zero moments and a float32 step on the parameter's device, as torch.optim's fused path
            state = self.state[param] = {
                "step": torch.zeros((), dtype=torch.float32, device=param.device),
                "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
            }
        return state

    def gradients(self) -> list[torch.Tensor]:
        """This update's gradients, as the tensors to scale and clip in place before :meth:`step`. With a slab whose
        every parameter has a gradient and the same step count: the slab's gradients gathered into one tensor
        (:meth:`step` then reads them there, not from ``.grad``), then the other parameters'. Otherwise every
        ``.grad`` that is not None."""
        params = self.param_groups[0]["params"]
        if self.slab is not None and self.slab.ready():
            self.slab.gather()
            self._gathered = True
            return [self.slab.grad] + [p.grad for p in self.slab.others if p.grad is not None]
        return [p.grad for p in params if p.grad is not None]

    def gradients_each(self) -> list[torch.Tensor]:
        """After :meth:`gradients`: one gradient per parameter that has one, in the parameters' order (views into
        the slab's gathered ones): a norm summed over this list adds the same numbers in the same order as
        ``torch.nn.utils.clip_grad_norm_`` over the parameters."""
        params = self.param_groups[0]["params"]
        if not self._gathered:
            return [p.grad for p in params if p.grad is not None]
        views = self.slab.grad_views
        return [views[p] if p in views else p.grad for p in params if p in views or p.grad is not None]

    @torch.no_grad()
    def step(self) -> None:
        """One AdamW update of every parameter that has a gradient."""
        group = self.param_groups[0]
        if self.slab is not None and (self._gathered or self.slab.ready()):
            if not self._gathered:
                self.slab.gather()
            if self.slab.members[0] not in self.state:  # the first step: states in the parameters' order
                for param in group["params"]:
                    if param in self.slab.index or param.grad is not None:
                        self._state(param)
            self.slab.steps.add_(1)  # t, counted from 1: every slab parameter's step is a view into this
            self._kernel(group, [self.slab.data], [self.slab.grad], [self.slab.exp_avg], [self.slab.exp_avg_sq],
                         [self.slab.steps[0]])  # fmt: skip
            self._step_each(group, self.slab.others)
        else:
            if self.slab is not None and self.slab.uniform:
                self.slab.uniform = None  # some members may skip this step: count their steps again next time
            self._step_each(group, group["params"])
        self._gathered = False

    def _step_each(self, group: dict, params: list[torch.Tensor]) -> None:
        """Step each of ``params`` that has a gradient, one kernel call per device and dtype."""
        by_device: dict[tuple, list[list[torch.Tensor]]] = {}  # (device, dtype) -> params, grads, m, v, steps
        for param in params:
            if param.grad is None:
                continue
            if param.grad.is_sparse:
                raise RuntimeError("FusedAdamW does not take sparse gradients")
            state = self._state(param)
            lists = by_device.setdefault((param.device, param.dtype), [[], [], [], [], []])
            for values, value in zip(lists, (param, param.grad, state["exp_avg"], state["exp_avg_sq"], state["step"])):
                values.append(value)
        for tensors, grads, exp_avgs, exp_avg_sqs, steps in by_device.values():
            torch._foreach_add_(steps, 1)  # t, counted from 1
            self._kernel(group, tensors, grads, exp_avgs, exp_avg_sqs, steps)

    @staticmethod
    def _kernel(group: dict, params, grads, exp_avgs, exp_avg_sqs, steps) -> None:
        beta1, beta2 = group["betas"]
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
        self._gathered = False
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
        if self.slab is not None:
            self.slab.reset()
        for saved, own in zip(groups, self.param_groups):
            own.update({k: v for k, v in saved.items() if k in ("lr", "betas", "eps", "weight_decay")})
            own["betas"] = tuple(own["betas"])
            for number, param in zip(saved["params"], own["params"]):
                values = state_dict["state"].get(number)
                if values is None:
                    continue
                if self.slab is not None and param in self.slab.index:  # into the slab's views
                    state = self.state[param] = self.slab.state_of(param)
                    for key in ("step", "exp_avg", "exp_avg_sq"):
                        state[key].copy_(values[key])
                    continue
                self.state[param] = {  # copies: the loaded state is this optimizer's own from here on
                    "step": values["step"].to(dtype=torch.float32, device=param.device, copy=True),
                    "exp_avg": values["exp_avg"].to(dtype=param.dtype, device=param.device, copy=True),
                    "exp_avg_sq": values["exp_avg_sq"].to(dtype=param.dtype, device=param.device, copy=True),
                }
        if self.slab is not None:
            self.slab.uniform = None  # the loaded steps may differ between members: count them before the next step


class Slab:
    """The parameters whose sizes are multiples of :data:`BLOCK` (and that share the first one's device and dtype),
    moved into one contiguous buffer, ``data``, each parameter a view into it in the parameters' order; their first
    and second moments, their step counts and their gathered gradients in buffers laid out alike. ``others`` are the
    parameters left outside."""

    def __init__(self, params: list[torch.Tensor]):
        first = params[0]

        def fits(p: torch.Tensor) -> bool:
            return p.numel() % BLOCK == 0 and p.device == first.device and p.dtype == first.dtype and p.is_contiguous()

        self.members = [p for p in params if fits(p)]
        self.others = [p for p in params if not fits(p)]
        self.index = {p: i for i, p in enumerate(self.members)}
        sizes = [p.numel() for p in self.members]
        with torch.no_grad():
            self.data = torch.cat([p.detach().reshape(-1) for p in self.members] or [first.new_zeros(0)])
            for p, view in zip(self.members, self.data.split(sizes)):
                p.data = view.view_as(p)  # the same Parameter, now stored in the slab
        self.exp_avg, self.exp_avg_sq, self.grad = (torch.zeros_like(self.data) for _ in range(3))
        self.steps = torch.zeros(len(self.members), dtype=torch.float32, device=first.device)
        self.moments = {
            p: (m.view_as(p), v.view_as(p))
            for p, m, v in zip(self.members, self.exp_avg.split(sizes), self.exp_avg_sq.split(sizes))
        }
        self.grad_views = {p: g.view_as(p) for p, g in zip(self.members, self.grad.split(sizes))}
        self.uniform: bool | None = True  # every member has taken the same number of steps (None: count them)

    def state_of(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        """``param``'s optimizer state in ``torch.optim``'s form: views into the slab's steps and moments."""
        exp_avg, exp_avg_sq = self.moments[param]
        return {"step": self.steps[self.index[param]], "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}

    def ready(self) -> bool:
        """Whether one kernel call can step the slab now: every member has a dense gradient and every member has
        taken the same number of steps (a member skipped once, for want of a gradient, is stepped alone from then)."""
        if not self.members or any(p.grad is None or p.grad.is_sparse for p in self.members):
            return False
        if self.uniform is None:
            self.uniform = bool((self.steps == self.steps[0]).all())
        return self.uniform

    def gather(self) -> None:
        """Copy every member's gradient into ``grad`` (one operation)."""
        torch.cat([p.grad.reshape(-1) for p in self.members], out=self.grad)

    def reset(self) -> None:
        """Zero moments and step counts (before a state is loaded)."""
        for buffer in (self.exp_avg, self.exp_avg_sq, self.steps):
            buffer.zero_()
        self.uniform = True
