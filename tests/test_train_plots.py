"""Figures 1, 6, 8 and 9 are drawn from run logs; a failed run is marked, not dropped."""

import matplotlib

matplotlib.use("Agg")

from b2t_lib.plots.style import variant_color  # noqa: E402
from b2t_lib.plots.training import plot_training_loss, plot_valid_nll  # noqa: E402


def _logs():
    train = lambda losses: [{"kind": "train", "update": i + 1, "loss": v} for i, v in enumerate(losses)]  # noqa: E731
    return {
        "pre_ln": train([9.0, 6.0, 4.0]) + [{"kind": "valid", "update": 3, "valid_nll": 3.5}],
        "post_ln": train([9.0, 9.5, float("nan")]),
        "b2t": train([9.0, 5.5, 3.5]) + [{"kind": "valid", "update": 3, "valid_nll": 3.0}],
    }


def test_figure1_draws_every_run_and_marks_the_failed_one():
    fig = plot_training_loss(_logs(), {"post_ln": "diverged", "pre_ln": "completed", "b2t": "completed"}, clip=20.0)
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["Pre-LN", "Post-LN (training failed)", "B2T connection"]
    post = next(line for line in ax.get_lines() if line.get_label().startswith("Post-LN"))
    assert post.get_linestyle() == "--" and list(post.get_ydata()) == [9.0, 9.5, 20.0]  # NaN drawn at the clip
    assert post.get_color() == variant_color("post_ln")


def test_figure6_uses_the_validation_entries_only():
    fig = plot_valid_nll(_logs())
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}
    assert lines == {"Pre-LN": [3.5], "B2T connection": [3.0]}
    stalled = plot_valid_nll(_logs(), {"pre_ln": "stalled", "b2t": "completed"})  # a stalled run failed too
    assert [line.get_label() for line in stalled.axes[0].get_lines() if not line.get_label().startswith("_")] == [
        "Pre-LN (training failed)",
        "B2T connection",
    ]


def test_training_curves_put_one_depth_per_panel_and_mark_diverged_runs():
    from b2t_lib.plots.methods import plot_training_curves

    cells = [
        dict(variant="post_ln", layers=6, status="stalled", train_curve=[[1, 10.0], [2, 8.0]]),
        dict(variant="b2t", layers=6, status="completed", train_curve=[[1, 10.0], [2, 6.0]]),
        dict(variant="post_ln", layers=18, status="diverged", train_curve=[[1, 10.0], [2, 1e6], [3, float("nan")]]),
        dict(variant="b2t", layers=18, status="completed", train_curve=[[1, 10.0], [2, 7.0]]),
    ]
    fig = plot_training_curves(cells, title="t")
    assert [ax.get_title() for ax in fig.axes] == ["6L-6L", "18L-18L"]
    deep = fig.axes[1]
    labels = [line.get_label() for line in deep.get_lines() if not line.get_label().startswith("_")]
    assert labels == ["Post-LN (diverged)", "B2T connection"]
    low, high = deep.get_ylim()
    assert low < 6.0 and 10.0 < high < 100.0, "the y-range is that of the runs that did not diverge"
    cross = [line for line in deep.get_lines() if line.get_marker() == "x"]
    assert len(cross) == 1 and list(cross[0].get_xdata()) == [3]  # where the diverged run ended
    assert cross[0].get_color() == variant_color("post_ln")
    # one legend, under the panels (inside it covered the first updates), naming every line once
    assert not any(ax.get_legend() for ax in fig.axes) and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "Post-LN (stalled)",
        "B2T connection",
        "Post-LN (diverged)",
    ]
    try:
        plot_training_curves([])
    except ValueError as err:
        assert "no training runs" in str(err)
    else:
        raise AssertionError("an empty list must be refused")


def test_run_curves_put_training_above_validation_one_column_per_section():
    from b2t_lib.plots.training import plot_run_curves

    logs = {"6L-6L": _logs(), "18L-18L": {"b2t": _logs()["b2t"]}}
    fig = plot_run_curves(logs, {"6L-6L": {"post_ln": "stalled"}}, baseline=7.0)
    (top6, top18), (bottom6, bottom18) = fig.axes[0:2], fig.axes[2:4]
    assert (top6.get_title(), top18.get_title()) == ("6L-6L", "18L-18L")
    drawn = lambda ax: {ln.get_label(): list(ln.get_ydata()) for ln in ax.get_lines() if ln.get_label()[0] != "_"}  # noqa: E731
    assert drawn(top6)["Post-LN (training failed)"][:2] == [9.0, 9.5] and drawn(bottom6)["B2T connection"] == [3.0]
    assert set(drawn(top18)) == {"B2T connection", "unigram baseline"} and drawn(bottom18)["unigram baseline"] == [7, 7]


def test_paper_beside_ours_draws_both_scores_and_marks_each_failed_run():
    from b2t_lib.paper_tables import FailedRun, paper_table
    from b2t_lib.plots.tables import plot_paper_vs_ours

    ours = {"18L-18L": {"b2t": [None] * 7 + [12.5], "post_ln": FailedRun("stalled"), "pre_ln": [None] * 7 + [11.0]}}
    fig = plot_paper_vs_ours(1, ours, "Average", "tiny", "BLEU")
    ax = fig.axes[0]
    heights = sorted(round(bar.get_height(), 2) for bar in ax.patches)
    paper = paper_table(1)
    assert heights == sorted([12.5, 11.0, paper.value("18L-18L", "b2t", "Average"),
                              paper.value("18L-18L", "pre_ln", "Average")])  # fmt: skip
    failed = [text.get_text() for text in ax.texts]
    assert failed == ["failed", "failed"]  # the paper's Post-LN 18L-18L and ours: no bar, a cross
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["Post-LN", "Pre-LN", "B2T connection"]  # paper order


def test_valid_curve_finds_the_lowest_point_and_the_rise_after_it(tmp_path):
    from b2t_lib.train import valid_curve
    from b2t_lib.train.records import append_log

    for update, nll in [(10, 6.0), (20, 4.0), (30, 3.5), (40, 3.5), (50, 3.9)]:
        append_log(tmp_path, {"kind": "train", "update": update, "loss": 1.0})
        append_log(tmp_path, {"kind": "valid", "update": update, "valid_nll": nll})
    curve = valid_curve(tmp_path)
    assert curve.points == ((10, 6.0), (20, 4.0), (30, 3.5), (40, 3.5), (50, 3.9))
    assert (curve.best, curve.best_update, curve.last) == (3.5, 30, 3.9)  # the first update at the lowest value
    assert abs(curve.rise - 0.4) < 1e-12


def test_valid_curve_of_a_run_that_never_validated_says_so(tmp_path):
    import pytest

    from b2t_lib.train import valid_curve
    from b2t_lib.train.records import append_log

    append_log(tmp_path, {"kind": "train", "update": 1, "loss": 9.0})
    with pytest.raises(ValueError, match="no validation entries"):
        valid_curve(tmp_path)


def test_figure8_marks_each_runs_lowest_point_and_dashes_the_recipe():
    from b2t_lib.plots.training import plot_overfitting
    from b2t_lib.train.records import ValidCurve

    plain = ValidCurve(((10, 8.0), (20, 4.0), (30, 4.3)))
    recipe = ValidCurve(((10, 9.0), (20, 5.0), (30, 4.5)))
    fig = plot_overfitting([dict(variant="b2t", curve=plain), dict(variant="b2t", curve=recipe, recipe="deep100")])
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert [line.get_label() for line in lines] == ["B2T connection", "B2T connection, deep100 recipe"]
    assert [line.get_linestyle() for line in lines] == ["-", "--"]
    dots = [(line.get_xdata()[0], line.get_ydata()[0]) for line in ax.get_lines() if line.get_marker() == "o"]
    assert dots == [(20, 4.0), (30, 4.5)]
    low, high = ax.get_ylim()
    assert low < 4.0 and 4.5 < high < 8.0, "zoomed on the lowest values and the rise, not on the first ones"


def test_figure9_draws_best_nll_against_the_total_number_of_layers():
    from b2t_lib.plots.training import plot_best_by_depth

    best = {"pre_ln": {1: 4.3, 3: 4.1, 6: 4.1}, "b2t": {1: 4.4, 3: 4.3, 6: 4.2}}
    extra = [dict(variant="b2t", layers=6, value=4.4, label="B2T connection, deep100 recipe")]
    fig = plot_best_by_depth(best, extra=extra)
    ax = fig.axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
    assert lines["Pre-LN"] == ([2, 6, 12], [4.3, 4.1, 4.1])  # encoder + decoder layers, as the paper's x-axis
    assert lines["B2T connection, deep100 recipe"] == ([12], [4.4])
    assert list(ax.get_xticks()) == [2, 6, 12]


def test_every_variant_of_the_registry_has_its_own_color():
    from b2t_lib import VARIANTS
    from b2t_lib.plots.style import VARIANT_COLORS

    assert set(VARIANT_COLORS) == set(VARIANTS)
    assert len(set(VARIANT_COLORS.values())) == len(VARIANT_COLORS), "two variants share a color"
