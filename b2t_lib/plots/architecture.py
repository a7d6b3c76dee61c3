r"""Figure 2 of the paper, drawn from the code: one layer of each variant, where its LayerNorms and residual
connections sit.

Nothing here describes a variant by hand. :func:`trace_layer` runs the registry's own
:meth:`~b2t_lib.variants.Variant.layer_forward` on a real layer of the library with *symbolic* sub-layers: each
branch and each LayerNorm returns a :class:`Node` that remembers its input, and ``+`` and ``*`` build nodes too. What
comes out is the layer's computation graph, exactly as the variant wires it (Eq. 1 for Post-LN, Eq. 2 for Pre-LN,
Eq. 5-7 for B2T, and any variant registered later). :func:`plot_layer_wiring` draws it bottom to top:

* the residual stream in the left column, the sub-layers (and a Pre-LN LayerNorm, which only feeds its sub-layer)
  in the right column;
* a connection that jumps over a LayerNorm of the stream is drawn in red and labelled: B2T's bottom-to-top
  connection (Eq. 5), which carries the layer input past every LayerNorm but the last.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from torch import nn

from .style import apply_style, variant_label

SUBLAYER_NAMES = {"encoder": ("Self-Attn", "FFN"), "decoder": ("Self-Attn", "Cross-Attn", "FFN")}
SKIP_COLOR = "#d62728"


@dataclass(eq=False)
class Node:
    """One value of the traced layer: ``op`` is "input", "branch", "norm", "add" or "scale"."""

    op: str
    args: list = field(default_factory=list)
    label: str = ""

    def __add__(self, other):
        return Node("add", [self, other])

    def __radd__(self, other):
        return Node("add", [other, self])

    def __mul__(self, other):  # a weighted shortcut (DeepNet's alpha, Admin's omega, B2T w/o LN's alpha and beta)
        return Node("scale", [self], "×" + ("ω" if hasattr(other, "shape") else "α"))

    __rmul__ = __mul__


def trace_layer(variant: str, role: str = "encoder") -> Node:
    """The output :class:`Node` of one ``role`` layer ("encoder" or "decoder") of ``variant``, traced through the
    registry's ``layer_forward`` with symbolic sub-layers."""
    from ..layers import DecoderLayer, EncoderLayer
    from ..variants import get_variant

    entry = get_variant(variant)
    layer = (EncoderLayer if role == "encoder" else DecoderLayer)(16, 2, 32, variant, num_layers=6)

    def symbolic_norm(module):  # labelled by what the module is: "LN", or its own symbol ("DyT")
        label = getattr(module, "symbol", "LN")
        return lambda x: Node("norm", [x], label)

    for module in layer.modules():  # norms a variant adds itself (Sandwich-LN's output LayerNorms) trace too
        if isinstance(module, nn.LayerNorm) or hasattr(module, "symbol"):
            module.forward = symbolic_norm(module)

    def branch(name):
        return lambda x: Node("branch", [x], name)

    def norm(name):
        return symbolic_norm(layer.final_layer_norm) if entry.layer_norm else None

    sublayers = [(branch(name), norm(name)) for name in SUBLAYER_NAMES[role]]
    return entry.layer_forward(layer, Node("input", label="x"), sublayers)


def graph_of(output: Node) -> list[Node]:
    """Every node that ``output`` depends on, inputs before the nodes that read them."""
    order, seen = [], set()

    def visit(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        for arg in node.args:
            visit(arg)
        order.append(node)

    visit(output)
    return order


def has_norm_free_path(node: Node) -> bool:
    """True when some path from the layer input to ``node`` crosses no LayerNorm: Pre-LN's identity path (Eq. 4);
    in Post-LN and B2T every path ends in the last LayerNorm."""
    if node.op == "input":
        return True
    return node.op != "norm" and any(isinstance(a, Node) and has_norm_free_path(a) for a in node.args)


def layout(output: Node) -> tuple[list[Node], dict[int, tuple[float, float]]]:
    """(nodes, id -> (column, row)): a node's row is its longest path from the input; branches, the nodes that
    only feed a branch and a LayerNorm of a branch's output sit in column 1, the residual stream in column 0."""
    nodes = graph_of(output)
    readers = {id(n): [m for m in nodes if any(a is n for a in m.args)] for n in nodes}
    row, column = {}, {}
    for node in nodes:
        row[id(node)] = 1 + max((row[id(a)] for a in node.args), default=-1)
    for node in reversed(nodes):  # readers first
        feeds_branch_only = readers[id(node)] and all(
            r.op == "branch" or column.get(id(r)) == 1 for r in readers[id(node)]
        )
        column[id(node)] = 1 if node.op == "branch" or (node.op != "input" and feeds_branch_only) else 0
    for node in nodes:  # and a LayerNorm (or weight) applied to a branch's output belongs to that branch
        if node.op in ("norm", "scale") and node.args and all(column[id(a)] == 1 for a in node.args):
            column[id(node)] = 1
    return nodes, {i: (column[i], row[i]) for i in row}


def skips_a_norm(source: Node, target: Node, nodes: list[Node], places: dict) -> bool:
    """True when the edge source -> target jumps over a LayerNorm of the residual stream (B2T's connection)."""
    (c0, r0), (_, r1) = places[id(source)], places[id(target)]
    return c0 == 0 and any(n.op == "norm" and places[id(n)][0] == 0 and r0 < places[id(n)][1] < r1 for n in nodes)


def draw_layer(ax, output: Node, title: str = "") -> int:
    """Draw one traced layer on ``ax``; return how many connections skip a LayerNorm (drawn in red)."""
    nodes, places = layout(output)
    height = max(r for _, r in places.values())
    xy = {i: (1.6 * c, 1.0 * r) for i, (c, r) in places.items()}
    skips, lane = 0, 0
    for node in nodes:  # the edges first, under the boxes
        for arg in node.args:
            (x0, y0), (x1, y1) = xy[id(arg)], xy[id(node)]
            red = skips_a_norm(arg, node, nodes, places)
            if red or (
                x0 == x1 == 0
                and y1 - y0 > 1
                and any(places[id(n)] == (0, r) for n in nodes for r in range(int(y0) + 1, int(y1)))
            ):  # a long residual: around the stream, on the left
                lane += 1
                side = -0.55 - 0.3 * lane
                color = SKIP_COLOR if red else "0.35"
                ax.plot([x0 - 0.25, side, side], [y0, y0, y1], color=color, lw=2.2 if red else 1.2)
                ax.add_patch(
                    FancyArrowPatch(
                        (side, y1),
                        (x1 - 0.3, y1),
                        arrowstyle="-|>",
                        mutation_scale=10,
                        color=color,
                        lw=2.2 if red else 1.2,
                    )
                )
                if red:
                    skips += 1
                    ax.text(
                        side - 0.08,
                        (y0 + y1) / 2,
                        "B2T",
                        color=SKIP_COLOR,
                        rotation=90,
                        ha="right",
                        va="center",
                        fontsize=8,
                        fontweight="bold",
                    )
                continue
            ax.add_patch(
                FancyArrowPatch(
                    (x0, y0),
                    (x1, y1),
                    arrowstyle="-|>",
                    mutation_scale=10,
                    color="0.35",
                    lw=1.2,
                    shrinkA=11,
                    shrinkB=11,
                    connectionstyle="arc3,rad=0",
                )
            )
    styles = {"branch": ("#dbe9f6", "#1f77b4"), "norm": ("#fde9c9", "#ff7f0e"), "scale": ("#eeeeee", "0.4")}
    for node in nodes:
        x, y = xy[id(node)]
        if node.op == "add":
            ax.add_patch(plt.Circle((x, y), 0.17, facecolor="white", edgecolor="0.2", lw=1.2, zorder=3))
            ax.text(x, y, "+", ha="center", va="center", fontsize=11, zorder=4)
        elif node.op == "input":
            ax.text(x, y - 0.3, "layer input", ha="center", va="center", fontsize=8, zorder=4)
        else:
            face, edge = styles[node.op]
            width = 1.25 if node.op == "branch" else 0.55
            ax.add_patch(
                FancyBboxPatch(
                    (x - width / 2, y - 0.2),
                    width,
                    0.4,
                    boxstyle="round,pad=0.02",
                    facecolor=face,
                    edgecolor=edge,
                    lw=1.2,
                    zorder=3,
                )
            )
            ax.text(x, y, node.label, ha="center", va="center", fontsize=8, zorder=4)
            if node.label == "Cross-Attn":  # its keys and values come from the encoder, not from this stream
                ax.annotate(
                    "encoder\noutput",
                    xy=(x + 0.62, y),
                    xytext=(x + 1.25, y - 0.45),
                    fontsize=7,
                    ha="center",
                    va="center",
                    arrowprops=dict(arrowstyle="-|>", color="0.35", lw=1.0),
                )
    ax.annotate("", xy=(0, height + 0.75), xytext=(0, height + 0.2), arrowprops=dict(arrowstyle="-|>", color="0.35"))
    ax.text(0, height + 0.9, "layer output", ha="center", va="bottom", fontsize=8)
    ax.set_xlim(-0.6 - 0.3 * max(lane, 1) - 0.3, 2.9)
    ax.set_ylim(-0.7, height + 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    return skips


def plot_layer_wiring(variants=("post_ln", "pre_ln", "b2t"), roles=("encoder", "decoder")):
    """Figure 2: one panel per variant and layer type, each traced from the registry (:func:`trace_layer`)."""
    apply_style()
    traced = {(role, v): trace_layer(v, role) for role in roles for v in variants}
    rows = {role: max(max(r for _, r in layout(traced[role, v])[1].values()) for v in variants) for role in roles}
    fig, axes = plt.subplots(
        len(roles),
        len(variants),
        squeeze=False,
        figsize=(3.3 * len(variants), 0.5 * sum(rows[r] + 2.5 for r in roles)),
        gridspec_kw=dict(height_ratios=[rows[r] + 2.5 for r in roles]),
    )
    for i, role in enumerate(roles):
        for j, variant in enumerate(variants):
            draw_layer(axes[i][j], traced[role, variant], f"{variant_label(variant)}, {role} layer")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))  # the top 0.45 inch: room for a suptitle
    return fig
