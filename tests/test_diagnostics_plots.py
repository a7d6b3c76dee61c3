"""The figure functions draw the data they are given (checked on the drawn artists, not by eye)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from b2t_lib.diagnostics import LayerGradientNorms, LayerSimilarity, ResidualPathGradients  # noqa: E402
from b2t_lib.plots.gradients import (
    plot_b2t_no_ln_scales,
    plot_layer_gradient_norms,  # noqa: E402
    plot_layer_norm_gradient_scaling,
    plot_residual_path_gradients,
)
from b2t_lib.plots.similarity import plot_layer_similarity  # noqa: E402
from b2t_lib.plots.style import variant_color  # noqa: E402


def profile(variant, scale):
    return LayerGradientNorms(
        variant=variant,
        output={"encoder": np.array([1.0, 2.0, 3.0]) * scale, "decoder": np.array([4.0, 5.0]) * scale},
        parameters={"encoder": np.ones(3), "decoder": np.ones(2) * 7},
    )


def test_figure3_draws_each_profile_per_stack():
    fig = plot_layer_gradient_norms([profile("post_ln", 1.0), profile("b2t", 2.0)])
    encoder, decoder = fig.axes
    np.testing.assert_allclose(encoder.lines[1].get_ydata(), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(decoder.lines[0].get_xdata(), [1, 2])
    assert encoder.lines[1].get_color() == variant_color("b2t") and encoder.get_yscale() == "log"
    fig_params = plot_layer_gradient_norms([profile("pre_ln", 1.0)], kind="parameters", labels=["x"])
    np.testing.assert_allclose(fig_params.axes[1].lines[0].get_ydata(), [7.0, 7.0])
    below = plot_layer_gradient_norms([profile("post_ln", 1.0), profile("b2t", 2.0)], legend="below")
    assert not any(ax.get_legend() for ax in below.axes) and len(below.legends) == 1
    assert [t.get_text() for t in below.legends[0].get_texts()] == ["Post-LN", "B2T connection"]
    plt.close("all")


def test_figure4_bars_follow_points():
    path = ResidualPathGradients(
        "post_ln", "decoder", 17, 18, ["input", "SA-LN in", "SA-LN out = output"], np.array([0.5, 0.25, 1.0])
    )
    fig = plot_residual_path_gradients([path, path], paper_numbers={"SA-LN in": "(1)"})
    assert len(fig.axes) == 2
    heights = [bar.get_height() for bar in fig.axes[0].patches]
    np.testing.assert_allclose(heights, [0.5, 0.25, 1.0])
    assert "(1)" in fig.axes[0].get_xticklabels()[1].get_text()
    assert "decoder layer 18 of 18" in fig.axes[0].get_title()
    plt.close("all")


def test_figure5_shows_lower_triangle():
    matrix = np.array([[1.0, 0.2, 0.3], [0.2, 1.0, 0.4], [0.3, 0.4, 1.0]])
    fig = plot_layer_similarity([LayerSimilarity("pre_ln", "encoder", matrix)] * 2)
    image = fig.axes[0].images[0].get_array()
    assert np.ma.is_masked(image[0, 2]) or np.isnan(image[0, 2])
    assert image[2, 0] == 0.3
    wrapped = plot_layer_similarity([LayerSimilarity("b2t", "decoder", matrix)] * 3, ncols=2)
    assert sum(ax.get_visible() and bool(ax.images) for ax in wrapped.axes) == 3  # a 2 x 2 grid, one hidden
    plt.close("all")


def test_scale_figures():
    sigma = np.array([1.0, 2.0, 4.0])
    fig = plot_layer_norm_gradient_scaling(sigma, 0.9 / sigma)
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), 1.0 / sigma)
    fig = plot_b2t_no_ln_scales(np.arange(1, 4), np.ones(3), np.array([64, 128]), np.array([0.4, 0.3]))
    np.testing.assert_allclose(fig.axes[1].lines[0].get_ydata(), [0.4, 0.3])
    plt.close("all")


def test_figure3_letters_its_panels_only_when_there_are_two():
    both = plot_layer_gradient_norms([profile("post_ln", 1.0)])
    assert [ax.get_title() for ax in both.axes] == ["(a) encoder side", "(b) decoder side"]
    decoder_only = LayerGradientNorms(variant="b2t", output={"decoder": np.ones(4)}, parameters={"decoder": np.ones(4)})
    single = plot_layer_gradient_norms([decoder_only], title="16L language models at initialization")
    assert [ax.get_title() for ax in single.axes] == ["decoder side"]  # a language model's one panel: no "(b)"
    plt.close("all")
