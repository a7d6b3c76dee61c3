"""Figures that put the methods side by side: training curves per method and depth (notebook 11)
and validation NLL over updates (Figure 10's DeepNet-versus-B2T comparison, notebook 10).

The inputs are the cell records of :mod:`b2t_lib.trainability` (``train_curve`` and
``valid_curve`` lists of ``[update, value]``). The gradient profile of all methods at
initialization (Figure 3 style) is :func:`b2t_lib.plots.gradients.plot_layer_gradient_norms`.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .style import apply_style, variant_color, variant_label


def plot_training_curves(
    cells: list[dict], curve: str = "train_curve", ylabel: str = "training loss (bits)", title: str | None = None
):
    """One panel per depth; one line per variant (``curve`` is ``train_curve`` or ``valid_curve``).

    The y-range is that of the runs that did not diverge, so one exploding run does not flatten the
    others; a diverged run is drawn as far as it stays in range and marked with a cross at the top
    edge where it ended.
    """
    apply_style()
    if not cells:
        raise ValueError("no training runs to plot")
    depths = sorted({c["layers"] for c in cells})
    fig, axes = plt.subplots(1, len(depths), figsize=(4.6 * len(depths), 3.6), squeeze=False, sharey=True)
    kept = [v for c in cells if c.get("status") != "diverged" for _, v in c[curve] if np.isfinite(v)]
    low, high = (min(kept), max(kept)) if kept else (None, None)
    for ax, depth in zip(axes[0], depths):
        for cell in (c for c in cells if c["layers"] == depth):
            points = cell[curve]
            if not points:
                continue
            updates, values = zip(*points)
            color = variant_color(cell["variant"])
            failed = cell.get("status") in ("diverged", "stalled")  # b2t_lib.train.failure
            label = variant_label(cell["variant"]) + (f" ({cell['status']})" if failed else "")
            ax.plot(updates, values, color=color, label=label)
            if cell.get("status") == "diverged" and high is not None:
                ax.plot(updates[-1], high + 0.04 * (high - low), marker="x", markersize=9, color=color, clip_on=False)
        if low is not None:
            margin = 0.05 * (high - low) or 0.5
            ax.set_ylim(low - margin, high + margin)
        ax.set_title(f"{depth}L-{depth}L")
        ax.set_xlabel("update")
        ax.set_ylabel(ylabel)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    # one legend under the panels: inside, it covered the curves' starts (where a loss spike or a divergence shows)
    names = {}
    for ax in axes[0]:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            if name not in names:
                names[name] = handle
    fig.legend(
        list(names.values()),
        list(names),
        loc="upper center",
        ncol=min(len(names), 4),
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
    )
    return fig
