"""The paper's table beside ours, as a figure: one panel per section (``6L-6L``, ``18L-18L``, ...), one pair of
bars per method, the paper's score (hatched) and ours (solid) on one axis.

Both are in the table's unit (BLEU, ROUGE, perplexity, WER in %), but they are not comparable numbers: the
paper's come from WMT, Gigaword, WikiText-103 or LibriSpeech after tens of thousands of updates, ours (at the
tiny scale) from synthetic data after a few hundred. What the figure lets a reader compare is the *pattern*:
which method fails, which ranks first, how far a run is from a trained model's score. A run that failed to
train is drawn as a red cross with "failed" where its bar would be, as the paper prints "Training failed"; a
method we did not run has no solid bar.

Our rows are what :func:`b2t_lib.paper_tables.collect_results` returns (``{section: {variant: row}}``).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from ..paper_tables import FailedRun, paper_table
from .style import apply_style, variant_color, variant_label


def _our_value(row, columns: list[str], column: str) -> float | None:
    """Our score in ``column`` from a row (a list in the table's columns or a dict ``{column: value}``)."""
    if isinstance(row, dict):
        value = row.get(column)
    elif isinstance(row, (list, tuple)) and column in columns:
        value = row[columns.index(column)]
    else:
        value = None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _failed(ax, x: float) -> None:
    """A run that failed to train, where its bar would stand."""
    ax.plot(x, 0, marker="x", color="red", markersize=9, clip_on=False)
    ax.annotate("failed", (x, 0), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8, color="red")


def plot_paper_vs_ours(
    number: int, ours: dict[str, dict[str, object]], column: str, ours_label: str = "ours", metric: str | None = None
):
    """Figure: paper table ``number``'s ``column`` (for example ``"Average"`` BLEU, ``"R-1"``, ``"Test"``
    perplexity) beside our rows, for the methods we ran. ``metric`` names the quantity on the axes (default:
    the column's name); lower is better where the paper's table says so (perplexity, WER)."""
    apply_style()
    table = paper_table(number)
    sections = [s for s in table.sections if ours.get(s)] + [s for s in ours if s not in table.sections and ours[s]]
    if not sections:
        raise ValueError(f"no rows of ours to plot beside Table {number}")
    metric = metric or column
    fig, axes = plt.subplots(1, len(sections), figsize=(3.6 * len(sections) + 0.8, 3.6), squeeze=False)
    for ax, section in zip(axes[0], sections):
        paper_rows = table.sections.get(section, {})
        methods = [m for m in paper_rows if m in ours[section]] + [m for m in ours[section] if m not in paper_rows]
        for i, method in enumerate(methods):
            color = variant_color(method)
            paper_row = paper_rows.get(method, "absent")
            if paper_row is None:  # the paper's "Training failed"
                _failed(ax, i - 0.2)
            elif paper_row != "absent":
                ax.bar(
                    i - 0.2,
                    table.value(section, method, column),
                    width=0.38,
                    color=color,
                    alpha=0.35,
                    hatch="//",
                    edgecolor=color,
                )
            row = ours[section][method]
            if isinstance(row, FailedRun) or row == "failed":
                _failed(ax, i + 0.2)
                continue
            value = _our_value(row, table.columns, column)
            if value is not None:
                ax.bar(i + 0.2, value, width=0.38, color=color)
        ax.set_xticks(range(len(methods)), [variant_label(m) for m in methods], rotation=20, ha="right")
        ax.set_title(f"{section}: paper (hatched), {ours_label} (solid)", fontsize=9)
        ax.set_ylabel(metric)
        ax.set_ylim(bottom=0)
    better = "higher is better" if table.higher_is_better else "lower is better"
    fig.suptitle(f"Table {number}, {column} ({better}): the paper beside {ours_label}", fontsize=11)
    fig.tight_layout()
    return fig
