"""Training curves: Figure 1 (training loss of 18L-18L models), Figure 6 (validation NLL), and both for every run
of a table (:func:`plot_run_curves`).

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
