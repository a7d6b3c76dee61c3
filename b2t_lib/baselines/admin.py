r"""Admin (Liu et al. 2020): Post-LN with a learned per-dimension weight on every shortcut (docs/methods.md §2.2).

Sub-layer :math:`i` (self-attention, cross-attention, FFN, in execution order) computes

.. math::
    x_i = \mathrm{LN}\big(\omega_i \odot x_{i-1} + \mathrm{Drop}(f_i(x_{i-1}))\big), \qquad \omega_i \in \mathbb{R}^d

and :math:`\omega_i` is trained like any other parameter. Its *initial* value comes from a
profiling pass: one forward pass on the first training batch, in training mode, that keeps a
running scalar :math:`s` per stack (encoder and decoder separately, both starting at 1):

.. math::
    \omega_i := s, \qquad s := \sqrt{\mathrm{Var}(\omega_i \odot x_{i-1}) + \mathrm{Var}(\mathrm{Drop}(f_i(x_{i-1})))}

Each :math:`\mathrm{Var}` is one scalar over all elements of the tensor (padding included). As the
:math:`x_{i-1}` are LayerNorm outputs (variance about 1), this gives
:math:`\omega_i^2 \approx \mathrm{Var}(x_0) + \sum_{j<i} \mathrm{Var}(f_j)`: every shortcut is as
strong as everything the branches below have added, which keeps each LayerNorm from shrinking the
gradient of the shortcut.

How it runs here:

* :meth:`Admin.prepare_for_training` is the profiling pass. The trainer calls
  ``model.prepare_for_training(run_forward)`` once when it starts from scratch, with a function that
  runs the model on its first training batch (Admin never sees the batch). The official code writes
  the ratios to ``profile.ratio.init`` and needs a second launch; here they go straight into the
  :math:`\omega` parameters, and a boolean buffer ``admin_profiled`` on each stack (saved in the
  state dict) makes a resumed run skip the pass. What it set is logged (logger ``b2t_lib.baselines.admin``).
* Before profiling every :math:`\omega_i = 1`, so an unprofiled Admin model computes exactly Post-LN.
* As in the Admin repository: fc1/fc2 use ``xavier_uniform_`` with zero bias, and the q/k/v biases are zero.
* Parameter names: ``admin_shortcut_weights.{i}`` on each layer (no fairseq name is reused). They
  live in :class:`ShortcutWeights`, a parameter list that also holds the profiler during the pass.
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn

from ..model import model_stacks
from ..variants import Variant, register
from .common import xavier_ffn_init, zero_attention_biases

logger = logging.getLogger(__name__)


class AdminProfiler:
    """The running scalar :math:`s` of one stack during the profiling pass, and what it set."""

    def __init__(self) -> None:
        self.s = 1.0  # omega of the next sub-layer
        self.omegas: list[float] = []  # omega_i, in execution order
        self.branch_variances: list[float] = []  # Var(Drop(f_i(x_{i-1})))

    def step(self, omega: nn.Parameter, x: torch.Tensor, branch_out: torch.Tensor) -> torch.Tensor:
        """Set ``omega`` to :math:`s`, return the shortcut :math:`\\omega\\odot x`, advance :math:`s`."""
        with torch.no_grad():
            omega.fill_(self.s)  # omega_i := s
        shortcut = omega * x  # (batch, time, d_model)
        shortcut_var, branch_var = float(shortcut.float().var()), float(branch_out.float().var())
        self.omegas.append(self.s)
        self.branch_variances.append(branch_var)
        self.s = math.sqrt(shortcut_var + branch_var)  # s := sqrt(Var(omega_i x_{i-1}) + Var(f_i))
        return shortcut


class ShortcutWeights(nn.ParameterList):
    r"""One layer's :math:`\omega_i` (one vector per sub-layer), and the stack's profiler while
    :meth:`Admin.prepare_for_training` runs (None otherwise)."""

    def __init__(self, d_model: int, sublayers: int):
        super().__init__(nn.Parameter(torch.ones(d_model)) for _ in range(sublayers))  # omega_i = 1
        self.profiler: AdminProfiler | None = None


@register
class Admin(Variant):
    r"""Post-LN with :math:`x \leftarrow \mathrm{LN}(\omega \odot x + \mathcal{F}(x))`, :math:`\omega` profiled."""

    name, title, equation = "admin", "Admin", "Liu et al. 2020 (docs/methods.md §2.2)"

    def build_layer(self, layer: nn.Module) -> None:
        sublayers = 3 if getattr(layer, "cross_attention", False) else 2
        layer.admin_shortcut_weights = ShortcutWeights(layer.d_model, sublayers)
        xavier_ffn_init(layer)
        zero_attention_biases(layer)

    def build_model(self, model: nn.Module) -> None:
        for stack in model_stacks(model).values():
            stack.register_buffer("admin_profiled", torch.zeros((), dtype=torch.bool))

    def layer_forward(self, layer, x, sublayers):
        omegas = layer.admin_shortcut_weights
        for (branch, norm), omega in zip(sublayers, omegas):
            f = branch(x)  # Drop(f_i(x_{i-1})), (batch, time, d_model)
            shortcut = omegas.profiler.step(omega, x, f) if omegas.profiler is not None else omega * x
            x = norm(shortcut + f)  # x_i = LN(omega_i * x_{i-1} + Drop(f_i(x_{i-1})))
        return x

    def prepare_for_training(self, model: nn.Module, run_forward) -> bool:
        r"""The profiling pass: ``run_forward()`` in training mode, without gradients, sets every :math:`\omega`.

        Returns False (and does nothing) when the model was profiled before, e.g. on resume.
        """
        stacks = list(model_stacks(model).values())
        if all(bool(stack.admin_profiled) for stack in stacks):
            logger.info("admin: shortcut weights were profiled before (restored from a checkpoint); skipping")
            return False
        profilers = {}
        for stack in stacks:
            profilers[stack] = AdminProfiler()  # one running s per stack
            for layer in stack.layers:
                layer.admin_shortcut_weights.profiler = profilers[stack]
        was_training = model.training
        model.train()  # the official profiling runs with dropout on
        try:
            with torch.no_grad():
                run_forward()
        finally:
            model.train(was_training)
            for stack in stacks:
                for layer in stack.layers:
                    layer.admin_shortcut_weights.profiler = None
        for stack, profiler in profilers.items():
            stack.admin_profiled.fill_(True)
            logger.info(
                "admin: profiled %d %s shortcut weights, omega from %.3f to %.3f: %s",
                len(profiler.omegas),
                stack.stack.role,
                min(profiler.omegas),
                max(profiler.omegas),
                " ".join(f"{w:.3f}" for w in profiler.omegas),
            )
        return True
