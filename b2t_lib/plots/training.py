"""Training curves: Figure 1 (training loss of 18L-18L models), Figure 6 (validation NLL), both for every run
of a table (:func:`plot_run_curves`), and Appendix C's depth sweep: Figure 8 (a deep model's validation NLL rising
again, :func:`plot_overfitting`) and Figure 9 (the best validation NLL against depth, :func:`plot_best_by_depth`).

Both take what a run writes to ``log.jsonl`` (:func:`b2t_lib.train.read_log`), one list of
entries per variant, and the runs' statuses, so that a run that diverged or stalled
(:mod:`b2t_lib.train.failure`) is drawn as failed (dashed, "training failed" in the legend) instead
of silently vanishing from the figure or passing for a trained one.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from .style import apply_style, variant_color, variant_label


def _series(entries: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(e["update"], e[key]) for e in entries if key in e]
    return [u for u, _ in points], [v for _, v in points]


def _plot_runs(ax, logs: dict[str, list[dict]], key: str, status: dict[str, str] | None, clip: float | None) -> None:
    status = status or {}
    for variant, entries in logs.items():
        updates, values = _series(entries, key)
        if not updates:
            continue
        failed = status.get(variant) in ("diverged", "stalled")
        label = variant_label(variant) + (" (training failed)" if failed else "")
        if clip is not None:  # keep exploded losses from flattening the other curves
            values = [min(v, clip) if math.isfinite(v) else clip for v in values]
        ax.plot(updates, values, color=variant_color(variant), label=label, linestyle="--" if failed else "-")
        if failed:
            ax.plot(updates[-1], values[-1], marker="x", color=variant_color(variant), markersize=8)


def plot_training_loss(
    logs: dict[str, list[dict]],
    status: dict[str, str] | None = None,
    title: str = "Training loss, 18L-18L",
    clip: float | None = None,
):
    """Figure 1: label-smoothed training loss (base 2, as fairseq logs it) against updates."""
    apply_style()
    fig, ax = plt.subplots()
    _plot_runs(
        ax,
        {v: [e for e in entries if e.get("kind", "train") == "train"] for v, entries in logs.items()},
        "loss",
        status,
        clip,
    )
    ax.set_xlabel("updates")
    ax.set_ylabel("training loss (bits / token)")
    ax.set_title(title)
    ax.legend()
    return fig


def plot_valid_nll(
    logs: dict[str, list[dict]],
    status: dict[str, str] | None = None,
    title: str = "Validation NLL, 18L-18L",
    clip: float | None = None,
):
    """Figure 6: negative log-likelihood on the validation set (base 2) against updates."""
    apply_style()
    fig, ax = plt.subplots()
    _plot_runs(
        ax,
        {v: [e for e in entries if e.get("kind") == "valid"] for v, entries in logs.items()},
        "valid_nll",
        status,
        clip,
    )
    ax.set_xlabel("updates")
    ax.set_ylabel("validation NLL (bits / token)")
    ax.set_title(title)
    ax.legend()
    return fig


def plot_run_curves(
    logs: dict[str, dict[str, list[dict]]],
    status: dict[str, dict[str, str]] | None = None,
    baseline: float | None = None,
    title: str | None = None,
    clip: float | None = None,
):
    """Every run a table reports, as curves: one column per section (``logs[section][variant]`` is a run's
    ``log.jsonl``), the training loss on top and the validation NLL below; a failed run is dashed, as in Figures
    1 and 6. ``baseline`` (the unigram baseline, bits per token) is drawn as a dotted line in both rows."""
    apply_style()
    status = status or {}
    fig, axes = plt.subplots(2, len(logs), figsize=(4.4 * len(logs), 6.4), squeeze=False, sharex="col")
    for column, (section, runs) in enumerate(logs.items()):
        train = {v: [e for e in entries if e.get("kind", "train") == "train"] for v, entries in runs.items()}
        valid = {v: [e for e in entries if e.get("kind") == "valid"] for v, entries in runs.items()}
        _plot_runs(axes[0][column], train, "loss", status.get(section), clip)
        _plot_runs(axes[1][column], valid, "valid_nll", status.get(section), clip)
        axes[0][column].set_title(section)
        axes[1][column].set_xlabel("updates")
        for ax in axes[:, column]:
            if baseline is not None:
                ax.axhline(baseline, color="gray", linestyle=":", label="unigram baseline")
    axes[0][0].set_ylabel("training loss (bits / token)")
    axes[1][0].set_ylabel("validation NLL (bits / token)")
    for ax in axes[0]:
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_overfitting(runs: list[dict], title: str = "Validation NLL, 36L-36L"):
    """Figure 8: validation NLL against updates, one line per run, each run's lowest value marked with a dot.

    ``runs``: ``dict(variant=..., curve=ValidCurve, recipe=None or a recipe's name)``; a recipe's run is dashed
    and its label names the recipe, so the same figure shows a model with and without more regularization. The
    y-range starts just below the lowest value and spans four times the largest rise above it, so that a rise of a
    few tenths of a bit is visible beside a fall of several bits (the curves' starts run off the top).
    """
    apply_style()
    fig, ax = plt.subplots()
    lowest = min(run["curve"].best for run in runs)
    span = max(max(run["curve"].last for run in runs) - lowest, 0.1)
    ax.set_ylim(lowest - 0.25 * span, lowest + 4 * span)
    for run in runs:
        curve, recipe = run["curve"], run.get("recipe")
        updates, values = zip(*curve.points)
        color = variant_color(run["variant"])
        label = variant_label(run["variant"]) + (f", {recipe} recipe" if recipe else "")
        ax.plot(updates, values, color=color, linestyle="--" if recipe else "-", label=label)
        ax.plot(curve.best_update, curve.best, marker="o", markersize=6, color=color)
    ax.set_xlabel("updates")
    ax.set_ylabel("validation NLL (bits / token)")
    ax.set_title(title)
    ax.legend(title="dot: the lowest value")
    return fig


def plot_best_by_depth(
    best: dict[str, dict[int, float]], extra: list[dict] | None = None, title: str = "Best validation NLL"
):
    """Figure 9: the best validation NLL against the total number of layers (encoder plus decoder, split equally).

    ``best[variant][layers per side]`` is one line per variant; ``extra`` adds single runs as stars
    (``dict(variant=..., layers=..., value=..., label=...)``), such as a recipe's run at one depth.
    """
    apply_style()
    fig, ax = plt.subplots()
    for variant, by_depth in best.items():
        depths = sorted(by_depth)
        totals = [2 * n for n in depths]
        ax.plot(
            totals,
            [by_depth[n] for n in depths],
            marker="o",
            color=variant_color(variant),
            label=variant_label(variant),
        )
    for point in extra or []:
        ax.plot(
            2 * point["layers"],
            point["value"],
            marker="*",
            markersize=12,
            linestyle="none",
            color=variant_color(point["variant"]),
            label=point["label"],
        )
    totals = sorted({2 * n for by_depth in best.values() for n in by_depth})
    ax.set_xticks(totals)
    ax.set_xlabel("total number of layers (encoder + decoder)")
    ax.set_ylabel("best validation NLL (bits / token)")
    ax.set_title(title)
    ax.legend()
    return fig
