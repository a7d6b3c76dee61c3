"""The one plotting style of the course: colors per variant, labels, sizes, and where figures go.

``make course`` sets ``B2T_FIGURE_DIR`` (``build/figures``); :func:`save_figure` writes a PNG there
when it is set and does nothing otherwise, so notebooks can call it unconditionally.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

from ..variants import VARIANTS

# One color per method, the same in every figure of the course (tests/test_train_plots.py: every variant has its own).
VARIANT_COLORS = {
    "post_ln": "#1f77b4",
    "pre_ln": "#ff7f0e",
    "b2t": "#d62728",
    "b2t_no_ln": "#9467bd",
    "dlcl": "#8c564b",
    "admin": "#e377c2",
    "tfixup": "#7f7f7f",
    "realformer": "#bcbd22",
    "deepnet": "#17becf",
    # the methods after B2T (b2t_lib/after_b2t)
    "resi_dual": "#2ca02c",
    "mix_ln": "#8c6d31",
    "ln_scaling": "#e6550d",
    "sandwich_ln": "#393b79",
    "peri_ln": "#6b6ecf",
    "dyt": "#e7ba52",
    "b2t_dyt": "#ff9896",
}

STYLE = {
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 9,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "lines.markersize": 4,
}


def apply_style() -> None:
    """Apply the course style to matplotlib's global settings (idempotent)."""
    matplotlib.rcParams.update(STYLE)


def variant_color(name: str) -> str:
    return VARIANT_COLORS.get(name, "#333333")


def variant_label(name: str) -> str:
    """The variant's one label, :attr:`b2t_lib.variants.Variant.title` (the name itself if unregistered)."""
    variant = VARIANTS.get(name)
    return variant.title if variant is not None else name


def figure_dir() -> Path | None:
    """The folder figures are written to (``B2T_FIGURE_DIR``), or None when figures are not saved."""
    target = os.environ.get("B2T_FIGURE_DIR")
    return Path(target) if target else None


def save_figure(fig, name: str) -> Path | None:
    """Save ``fig`` as ``<B2T_FIGURE_DIR>/<name>.png`` when ``B2T_FIGURE_DIR`` is set; return the path."""
    folder = figure_dir()
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    fig.savefig(path)
    return path


apply_style()
