"""The trainability map as a heatmap: one panel per variant, depth by peak learning rate, each cell
colored by how training ended, the trainer's status (:mod:`b2t_lib.trainability`,
:mod:`b2t_lib.train.failure`): "completed" is labeled "trained" in the legend."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ..trainability import STATUSES, status_grid
from .style import apply_style, variant_label

# completed (trained) / stalled / diverged / not run
STATUS_COLORS = {"completed": "#4c9f70", "stalled": "#f2c14e", "diverged": "#d1495b", None: "#eeeeee"}
STATUS_LABELS = {
    "completed": "trained",
    "stalled": "stalled (Training failed)",
    "diverged": "diverged (Training failed)",
}
_ORDER = list(STATUSES) + [None]


def plot_trainability_map(result: dict, variants: list[str] | None = None, annotate: bool = True):
    """Heatmap of a trainability map: rows are depths (N L-N L), columns peak learning rates.

    ``annotate`` writes each cell's final validation NLL (bits per token) in it; the title says
    the bar a trained cell ends below (the unigram baseline minus the stall rule's margin).
    """
    apply_style()
    if not result.get("cells"):
        raise ValueError("the trainability map has no cells yet; run b2t_lib.trainability first")
    if variants is None:
        variants = list(dict.fromkeys(c["variant"] for c in result["cells"]))
    cmap = ListedColormap([STATUS_COLORS[s] for s in _ORDER])
    fig, axes = plt.subplots(1, len(variants), figsize=(2.2 + 2.0 * len(variants), 3.0), squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        depths, lrs, grid = status_grid(result, variant)
        codes = np.array([[_ORDER.index(s) for s in row] for row in grid], dtype=float)  # (depths, lrs)
        ax.imshow(codes, cmap=cmap, vmin=-0.5, vmax=len(_ORDER) - 0.5, aspect="auto", origin="lower")
        ax.set_xticks(range(len(lrs)), [f"{lr:g}" for lr in lrs], rotation=45)
        ax.set_yticks(range(len(depths)), [f"{d}L-{d}L" for d in depths])
        ax.set_xlabel("peak learning rate")
        ax.set_title(variant_label(variant))
        ax.grid(False)
        if annotate:
            nll = {(c["layers"], c["lr"]): c["valid_nll"] for c in result["cells"] if c["variant"] == variant}
            for i, depth in enumerate(depths):
                for j, lr in enumerate(lrs):
                    value = nll.get((depth, lr))
                    if value is not None:
                        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8)
    axes[0][0].set_ylabel("depth")
    handles = [Patch(color=STATUS_COLORS[s], label=STATUS_LABELS[s]) for s in STATUSES]
    fig.legend(handles=handles, loc="lower center", ncol=len(STATUSES), bbox_to_anchor=(0.5, -0.12))
    threshold, baseline, margin = result.get("threshold"), result.get("unigram_baseline"), result.get("stall_margin")
    bar = ""
    if threshold is not None and baseline is not None and margin is not None:
        bar = f"; trained = valid NLL < unigram {baseline:.2f} - {margin:g} = {threshold:.2f} bits"
    elif threshold is not None:
        bar = f"; trained = valid NLL < {threshold:.2f} bits"
    fig.suptitle(
        f"Trainability map ({result.get('scale', '?')} scale, {result.get('max_update', '?')} updates" + bar + ")",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
