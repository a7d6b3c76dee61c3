"""Figure 5: heat maps of the cosine similarity between the outputs of every pair of layers."""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..diagnostics.similarity import LayerSimilarity
from .style import apply_style, variant_label


def plot_layer_similarity(
    similarities: Sequence[LayerSimilarity], titles: Sequence[str] | None = None, ncols: int | None = None
):
    """One heat map per model, lower triangle only (the matrix is symmetric), values written in cells.

    Row i, column j is layer i+1 against layer j+1; the bottom row is the final layer, so the
    paper's "lower-left" cells (shallow layers against the final one) are at the bottom left.
    ``ncols`` wraps the maps into rows (e.g. 3 variants x encoder/decoder: ``ncols=3``).
    """
    apply_style()
    if not similarities:
        raise ValueError("plot_layer_similarity needs at least one matrix")
    ncols = ncols or len(similarities)
    nrows = -(-len(similarities) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols + 0.8, 3.6 * nrows), squeeze=False)
    for ax in axes.flat[len(similarities) :]:
        ax.set_visible(False)
    image = None
    for i, (ax, sim) in enumerate(zip(axes.flat, similarities)):
        n = sim.matrix.shape[0]
        shown = np.where(np.tril(np.ones((n, n), dtype=bool)), sim.matrix, np.nan)
        image = ax.imshow(shown, vmin=0.0, vmax=1.0, cmap="viridis")
        if n <= 8:
            for row in range(n):
                for col in range(row + 1):
                    value = sim.matrix[row, col]
                    ax.text(
                        col,
                        row,
                        f"{value:.2f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if value < 0.6 else "black",
                    )
        ax.set_xticks(range(n), [str(k + 1) for k in range(n)])
        ax.set_yticks(range(n), [str(k + 1) for k in range(n)])
        ax.set_xlabel("layer")
        ax.set_ylabel("layer")
        ax.grid(False)
        ax.set_title(titles[i] if titles else f"{variant_label(sim.variant)} ({sim.stack})")
    fig.colorbar(image, ax=list(axes.flat), shrink=0.8, label="cosine similarity")
    return fig
