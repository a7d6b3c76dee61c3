r"""Gradient norms per layer: the paper's Figure 3.

For every layer :math:`l` of a stack we measure two numbers after one backward pass of the
per-token loss :math:`\mathcal{L}` (:func:`~b2t_lib.diagnostics.forward.model_loss`):

* the gradient reaching the layer's output, :math:`\lVert \partial\mathcal{L}/\partial y_l \rVert_F`
  over the whole (batch, time, d_model) tensor: how much signal back-propagation delivers to that
  depth. By the chain rule it is the gradient of the layer above, multiplied by that layer's
  Jacobian (Eq. 3 for Post-LN, Eq. 4 for Pre-LN, Eq. 8 for B2T), so a product of Jacobians with
  norm below one makes it decay geometrically towards the bottom: the vanishing gradient.
* the gradient of the layer's parameters, :math:`\lVert \partial\mathcal{L}/\partial\theta_l \rVert_2`
  over all its weights: how large an update the optimizer would make there.

Both are measured from outside the model: forward hooks collect each layer's output tensor and
``torch.autograd.grad`` differentiates the loss with respect to them, so neither the layer code
nor the parameters' ``.grad`` fields are touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ..model import model_stacks
from .forward import model_loss


@dataclass
class LayerGradientNorms:
    """Per-layer gradient norms of one model on one batch (index 0 is the bottom layer)."""

    variant: str
    output: dict[str, np.ndarray] = field(default_factory=dict)  # stack -> (num_layers,) ||dL/dy_l||
    parameters: dict[str, np.ndarray] = field(default_factory=dict)  # stack -> (num_layers,) ||dL/dtheta_l||
    loss: float = float("nan")

    @property
    def stacks(self) -> list[str]:
        return list(self.output)

    def norms(self, stack: str, kind: str = "output") -> np.ndarray:
        """The profile of ``stack`` (``"encoder"``/``"decoder"``); ``kind`` is ``output`` or ``parameters``."""
        table = {"output": self.output, "parameters": self.parameters}.get(kind)
        if table is None:
            raise ValueError(f"kind must be 'output' or 'parameters', got {kind!r}")
        if stack not in table:
            raise KeyError(f"no {stack!r} stack was measured; measured: {', '.join(table) or 'none'}")
        return table[stack]

    def bottom_to_top(self, stack: str, kind: str = "output") -> float:
        r"""Ratio :math:`g_1 / g_N` of the bottom layer's norm to the top layer's.

        Far below 1: the gradient vanishes on its way down (Post-LN decoder). Above 1: lower layers
        receive *more* than the top (Pre-LN).
        """
        values = self.norms(stack, kind)
        return float(values[0] / values[-1])

    def argmin(self, stack: str, kind: str = "output") -> int:
        """Index (0 = bottom) of the layer that receives the smallest gradient."""
        return int(np.argmin(self.norms(stack, kind)))


def layer_gradient_norms(model: nn.Module, batch: dict, label_smoothing: float = 0.1) -> LayerGradientNorms:
    """Measure Figure 3's gradient norms of every encoder and decoder layer of ``model`` on ``batch``.

    Works at initialization or on a trained checkpoint; the model's train/eval mode is kept as
    it is (build it with ``dropout=0.0``, or call ``model.eval()``, for a deterministic profile).
    """
    stacks = model_stacks(model)
    outputs: dict[str, list[torch.Tensor]] = {name: [] for name in stacks}
    handles = []
    for name, stack in stacks.items():
        for layer in stack.layers:
            # forward hook: keep the output tensor, whose gradient autograd.grad will return
            handles.append(
                layer.register_forward_hook(lambda module, args, output, store=outputs[name]: store.append(output))
            )
    try:
        loss = model_loss(model, batch, label_smoothing)
    finally:
        for handle in handles:
            handle.remove()

    tensors, params, spans = [], [], []
    for name, stack in stacks.items():
        if len(outputs[name]) != len(stack.layers):
            raise RuntimeError(
                f"expected one output per {name} layer ({len(stack.layers)}), hooks saw "
                f"{len(outputs[name])}; does the variant call a layer twice?"
            )
        tensors.extend(outputs[name])
        for layer in stack.layers:
            layer_params = [p for p in layer.parameters() if p.requires_grad]
            spans.append((name, len(params), len(params) + len(layer_params)))
            params.extend(layer_params)
    grads = torch.autograd.grad(loss, tensors + params, allow_unused=True)

    variant = model.cfg.variant if hasattr(model, "cfg") else "?"
    result = LayerGradientNorms(variant=variant, loss=float(loss.detach()))
    offset = 0
    for name, stack in stacks.items():
        n = len(stack.layers)
        result.output[name] = np.array([_norm([g]) for g in grads[offset : offset + n]])
        offset += n
    param_grads = grads[len(tensors) :]
    per_stack: dict[str, list[float]] = {name: [] for name in stacks}
    for name, start, stop in spans:
        per_stack[name].append(_norm(param_grads[start:stop]))
    result.parameters = {name: np.array(values) for name, values in per_stack.items()}
    return result


def _norm(grads) -> float:
    """L2 norm over a list of gradient tensors; a ``None`` (unused) gradient counts as zero."""
    total = sum(float(g.detach().double().pow(2).sum()) for g in grads if g is not None)
    return total**0.5
