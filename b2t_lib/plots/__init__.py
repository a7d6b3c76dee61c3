"""Plot functions, one per figure of the paper, all in the one style of :mod:`b2t_lib.plots.style`.

Each function takes plain data (arrays, dicts, dataclasses from :mod:`b2t_lib.diagnostics` or result
records) and returns a :class:`matplotlib.figure.Figure`; saving is the caller's job
(:func:`save_figure`).
"""

from .style import VARIANT_COLORS, apply_style, save_figure, variant_color, variant_label

__all__ = ["VARIANT_COLORS", "apply_style", "save_figure", "variant_color", "variant_label"]
