"""Figure 2 is traced from each variant's own layer_forward, so a variant added to the registry gets its picture."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from b2t_lib.plots.architecture import (  # noqa: E402
    draw_layer,
    graph_of,
    has_norm_free_path,
    layout,
    plot_layer_wiring,
    trace_layer,
)
from b2t_lib.variants import VARIANTS, Variant, register  # noqa: E402


def ops(output):
    return [n.op for n in graph_of(output)]


@pytest.mark.parametrize("role,sublayers", [("encoder", 2), ("decoder", 3)])
def test_the_paper_s_three_layers_come_out_as_their_equations(role, sublayers):
    post, pre, b2t = (trace_layer(v, role) for v in ("post_ln", "pre_ln", "b2t"))
    assert post.op == "norm" and ops(post).count("norm") == sublayers  # Eq. 1: LN after every residual sum
    assert pre.op == "add" and ops(pre).count("norm") == sublayers  # Eq. 2: the stream ends in a sum
    nodes, places = layout(pre)
    assert all(places[id(n)][0] == 1 for n in nodes if n.op == "norm"), "Pre-LN's LayerNorms sit on the branches"
    assert not has_norm_free_path(post) and has_norm_free_path(pre) and not has_norm_free_path(b2t)
    assert ops(b2t).count("add") == ops(post).count("add") + 1  # Eq. 5: one more sum, the layer input's
    _, ax = plt.subplots()
    assert draw_layer(ax, post) == 0 and draw_layer(ax, pre) == 0
    assert draw_layer(ax, b2t) == 1, "B2T's connection is the one edge that jumps over a LayerNorm (drawn in red)"
    plt.close("all")


def test_every_registered_variant_traces_and_draws():
    for name in VARIANTS:
        for role, sublayers in (("encoder", 2), ("decoder", 3)):
            assert ops(trace_layer(name, role)).count("branch") == sublayers, name
    fig = plot_layer_wiring(tuple(VARIANTS), ("encoder",))
    assert len(fig.axes) == len(VARIANTS)
    plt.close("all")


def test_a_new_variant_gets_its_picture_from_its_layer_forward():
    @register
    class Sandwich(Variant):  # x + LN(F(LN(x))): nothing in the plotting code knows it
        name, title, equation = "sandwich_test", "Sandwich", "test"

        def layer_forward(self, layer, x, sublayers):
            for branch, norm in sublayers:
                x = x + norm(branch(norm(x)))
            return x

    try:
        out = trace_layer("sandwich_test", "encoder")
        nodes, places = layout(out)
        norms = [n for n in nodes if n.op == "norm"]
        assert len(norms) == 4 and all(places[id(n)][0] == 1 for n in norms), "both LNs of each sub-layer on the branch"
        assert has_norm_free_path(out)
        _, ax = plt.subplots()
        assert draw_layer(ax, out, "Sandwich") == 0
        assert [t.get_text() for t in ax.texts].count("LN") == 4
    finally:
        VARIANTS.pop("sandwich_test")
        plt.close("all")
