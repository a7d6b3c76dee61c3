r"""Figures of gradient flow: per-layer norms (Figure 3), points inside a layer (Figures 4 and 7),
the LayerNorm's :math:`1/\sigma` (Section 3) and the fixed scales of B2T without LayerNorm (Eq. 10-11).

Every function takes the plain data of :mod:`b2t_lib.diagnostics` and returns a Figure.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from ..diagnostics.layer_gradients import LayerGradientNorms
from ..diagnostics.residual_path import ResidualPathGradients
from .style import apply_style, variant_color, variant_label

STACK_TITLES = {"encoder": "encoder side", "decoder": "decoder side"}
PANEL_LETTERS = {"encoder": "(a)", "decoder": "(b)"}


def stack_title(stack: str, panels: int) -> str:
    """A panel's title: ``(a) encoder side`` / ``(b) decoder side`` next to each other (Figure 3's layout), the
    plain ``decoder side`` when the figure has one panel (a language model's decoder, chapter 08)."""
    title = STACK_TITLES.get(stack, stack)
    return f"{PANEL_LETTERS[stack]} {title}" if panels > 1 and stack in PANEL_LETTERS else title


def plot_layer_gradient_norms(
    profiles: Sequence[LayerGradientNorms],
    kind: str = "output",
    labels: Sequence[str] | None = None,
    linestyles: Sequence[str] | None = None,
    colors: Sequence[str] | None = None,
    title: str | None = None,
    legend: str = "inside",
):
    r"""Figure 3: one panel per stack, the gradient norm of every layer (1 = bottom), log scale; the panels are
    lettered (a) and (b) when there are two, a decoder-only model's one panel is not.

    ``kind="output"`` plots :math:`\lVert\partial\mathcal L/\partial y_l\rVert`, ``"parameters"`` the
    norm of the layer's parameter gradients. Lines are colored by variant; ``labels`` and
    ``linestyles`` (or ``colors``) tell apart profiles of one variant (for example 6L-6L against 18L-18L).
    ``legend="below"`` draws one legend under the panels instead of one inside each (for many profiles, whose
    legend would cover the curves).
    """
    apply_style()
    if not profiles:
        raise ValueError("plot_layer_gradient_norms needs at least one profile")
    stacks = [s for s in ("encoder", "decoder") if any(s in p.output for p in profiles)]
    fig, axes = plt.subplots(1, len(stacks), figsize=(5.2 * len(stacks), 3.8), squeeze=False)
    for ax, stack in zip(axes[0], stacks):
        for i, profile in enumerate(profiles):
            if stack not in profile.output:
                continue
            values = profile.norms(stack, kind)
            ax.plot(
                np.arange(1, len(values) + 1),
                values,
                marker="o",
                color=colors[i] if colors else variant_color(profile.variant),
                linestyle=linestyles[i] if linestyles else "-",
                label=labels[i] if labels else variant_label(profile.variant),
            )
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer (1 = bottom)")
        ax.set_ylabel("gradient norm" + (" of parameters" if kind == "parameters" else " of layer output"))
        ax.set_title(stack_title(stack, len(stacks)))
        if legend == "inside":
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if legend == "below":
        handles, names = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, names, loc="upper center", ncol=min(len(names), 5), bbox_to_anchor=(0.5, 0.0))
    return fig


def plot_residual_path_gradients(paths: Sequence[ResidualPathGradients], paper_numbers: dict[str, str] | None = None):
    r"""Figures 4 and 7: the gradient norm at each point of a layer, one panel per layer.

    Bars at a LayerNorm's input are light, the others dark, so each drop (dark output bar :math:`\to`
    light input bar of the same LayerNorm, read right to left as back-propagation runs) stands out.
    ``paper_numbers`` maps a point label to the paper's location number, e.g. ``{"SA-LN in": "(1)"}``.
    """
    apply_style()
    if not paths:
        raise ValueError("plot_residual_path_gradients needs at least one layer")
    fig, axes = plt.subplots(1, len(paths), figsize=(4.6 * len(paths), 3.8), squeeze=False)
    for ax, path in zip(axes[0], paths):
        color = variant_color(path.variant)
        at_norm_input = [label.split(" = ")[0].endswith("LN in") for label in path.labels]
        bars = ax.bar(range(len(path.norms)), path.norms, color=color)
        for bar, light in zip(bars, at_norm_input):
            bar.set_alpha(0.4 if light else 1.0)
        if any(at_norm_input):
            ax.set_ylim(0, 1.3 * float(np.max(path.norms)))  # headroom for the legend
            ax.legend(
                handles=[
                    Patch(color=color, alpha=0.4, label="LayerNorm input"),
                    Patch(color=color, label="other points"),
                ],
                loc="upper left",
            )
        ticks = []
        for label in path.labels:
            first = label.split(" = ")[0]
            number = (paper_numbers or {}).get(first, "")
            ticks.append(
                f"{number}\n{label.replace(' = ', chr(10) + '= ')}" if number else label.replace(" = ", "\n= ")
            )
        ax.set_xticks(range(len(path.labels)), ticks, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel("gradient norm")
        ax.set_title(f"{variant_label(path.variant)}: {path.title}")
    fig.tight_layout()
    return fig


def plot_layer_norm_gradient_scaling(input_std: np.ndarray, gradient_ratio: np.ndarray):
    r"""Section 3's mechanism: the factor :math:`\lVert g_{in}\rVert/\lVert g_{out}\rVert` a LayerNorm
    applies to a gradient, against the standard deviation :math:`\sigma` of its input, with the
    bound :math:`1/\sigma` (log-log)."""
    apply_style()
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    order = np.argsort(input_std)
    ax.plot(input_std[order], 1.0 / input_std[order], color="#333333", linestyle="--", label=r"$1/\sigma$ (bound)")
    ax.plot(
        input_std[order],
        gradient_ratio[order],
        marker="o",
        markersize=7,
        linestyle="none",
        color=variant_color("post_ln"),
        label="measured through LayerNorm",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"standard deviation $\sigma$ of the LayerNorm input")
    ax.set_ylabel(r"$\|g_{in}\| \,/\, \|g_{out}\|$")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_b2t_no_ln_scales(depths: np.ndarray, alphas: np.ndarray, widths: np.ndarray, betas: np.ndarray):
    r"""Eq. 10 and 11: :math:`\alpha=\min(N/12, N^{-0.15})` against depth and :math:`\beta=d^{-0.2}`
    against width (log axis), with the paper's 512 and our tiny 64 marked."""
    apply_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    color = variant_color("b2t_no_ln")
    left.plot(depths, alphas, marker="o", color=color)
    left.axvline(9, color="#999999", linestyle=":", label="N = 9: peak")
    left.set_xlabel("layers N in the stack")
    left.set_ylabel(r"$\alpha$ (Eq. 10)")
    left.legend()
    right.plot(widths, betas, marker="o", color=color)
    for width, text in ((64, "tiny (64)"), (512, "paper (512)")):
        right.axvline(width, color="#999999", linestyle=":")
        right.annotate(text, (width, betas.max()), rotation=90, fontsize=8, va="top", ha="right")
    right.set_xscale("log", base=2)
    right.set_xlabel("width d")
    right.set_ylabel(r"$\beta$ (Eq. 11)")
    fig.tight_layout()
    return fig
