r"""Gradient norms at every point on one layer's residual path: the paper's Figures 4 and 7.

Inside a layer the gradient passes a chain of residual sums and LayerNorms. For a Post-LN decoder
layer (Eq. 1 applied three times)

.. math::
    x \xrightarrow{+\mathrm{SA}} s_1 \xrightarrow{\mathrm{LN}} h_1 \xrightarrow{+\mathrm{CA}} s_2
      \xrightarrow{\mathrm{LN}} h_2 \xrightarrow{+\mathrm{FFN}} s_3 \xrightarrow{\mathrm{LN}} y

and we record :math:`\lVert\partial\mathcal{L}/\partial v\rVert_F` at every :math:`v` of that chain:
the layer input, the input of each LayerNorm (for Post-LN and B2T the residual sum just before it)
and each LayerNorm's output. Between a LayerNorm's output and its input the gradient is
multiplied by the LayerNorm Jacobian (:mod:`b2t_lib.diagnostics.jacobians`), which divides it
by the standard deviation of the sum; Figure 4 shows that this is where Post-LN loses its gradient.

The points are found from outside the layer: a forward pre-hook sees the layer input, a forward
hook on each LayerNorm module sees its input and output, a forward hook on the layer sees the
output. A tensor seen twice (Post-LN's last LayerNorm output *is* the layer output; Pre-LN's first
LayerNorm input *is* the layer input) is one point with a combined label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .forward import layer_of, model_loss

# The LayerNorms of a layer in the order the forward pass uses them, with short display names.
LAYER_NORMS = (
    ("self_attn_layer_norm", "SA-LN"),
    ("encoder_attn_layer_norm", "CA-LN"),
    ("final_layer_norm", "FFN-LN"),
)


@dataclass
class ResidualPathGradients:
    """Gradient norms along one layer, bottom (layer input) to top (layer output)."""

    variant: str
    stack: str
    layer_index: int  # 0-based index in the stack
    num_layers: int
    labels: list[str]  # e.g. ["input", "SA-LN in", "SA-LN out", ..., "FFN-LN out = output"]
    norms: np.ndarray  # (num_points,) ||dL/dv|| at each point

    @property
    def title(self) -> str:
        return f"{self.stack} layer {self.layer_index + 1} of {self.num_layers}"

    def norm(self, label: str) -> float:
        """The norm at the point called ``label`` (a point may have two names: ``"FFN-LN out = output"``)."""
        for names, value in zip(self.labels, self.norms):
            if label in names.split(" = "):
                return float(value)
        raise KeyError(f"no point {label!r}; the points are: {', '.join(self.labels)}")

    def layer_norm_ratios(self) -> dict[str, float]:
        r"""For each LayerNorm: :math:`\lVert g_{in}\rVert / \lVert g_{out}\rVert`, the factor the
        gradient is multiplied by when it crosses that LayerNorm (below 1 = a drop)."""
        ratios = {}
        for _, short in LAYER_NORMS:
            try:
                ratios[short] = self.norm(f"{short} in") / self.norm(f"{short} out")
            except KeyError:
                continue
        return ratios


def residual_path_gradients(
    model: nn.Module, batch: dict, stack: str = "decoder", layer_index: int = -1, label_smoothing: float = 0.1
) -> ResidualPathGradients:
    """Measure the gradient norm at each point of ``model.<stack>.layers[layer_index]`` on ``batch``.

    ``layer_index`` is 0-based; -1 is the top layer (Figure 4 is the 18th decoder layer of 18,
    Figure 7 the 1st and the 9th).
    """
    layer = layer_of(model, stack, layer_index)
    num_layers = len(getattr(model, stack).layers)
    points: list[tuple[str, torch.Tensor]] = []

    def add(label: str, tensor: torch.Tensor) -> None:
        for i, (seen_label, seen) in enumerate(points):
            if seen is tensor:  # the same tensor reached through two names: one point
                points[i] = (f"{seen_label} = {label}", seen)
                return
        points.append((label, tensor))

    # Hooks must return None: a forward hook that returns a value replaces the module's output.
    def see_input(module, args) -> None:
        add("input", args[0])

    def see_norm(short: str):
        def hook(module, args, output) -> None:
            add(f"{short} in", args[0])
            add(f"{short} out", output)

        return hook

    def see_output(module, args, output) -> None:
        add("output", output)

    handles = [layer.register_forward_pre_hook(see_input)]
    for attribute, short in LAYER_NORMS:
        norm = getattr(layer, attribute, None)
        if norm is not None:
            handles.append(norm.register_forward_hook(see_norm(short)))
    handles.append(layer.register_forward_hook(see_output))
    try:
        loss = model_loss(model, batch, label_smoothing)
    finally:
        for handle in handles:
            handle.remove()

    if not points or points[0][0].split(" = ")[0] != "input":
        raise RuntimeError("the layer input was not seen first; is the layer called more than once?")
    grads = torch.autograd.grad(loss, [tensor for _, tensor in points], allow_unused=True)
    norms = np.array([0.0 if g is None else float(g.detach().double().norm()) for g in grads])
    variant = model.cfg.variant if hasattr(model, "cfg") else layer.variant.name
    return ResidualPathGradients(
        variant=variant,
        stack=stack,
        layer_index=layer_index % num_layers,
        num_layers=num_layers,
        labels=[label for label, _ in points],
        norms=norms,
    )
