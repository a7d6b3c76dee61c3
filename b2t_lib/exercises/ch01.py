"""Chapter 01's exercises: the two wirings (Eq. 1, 2), and a Post-LN encoder layer built from nn.Linear modules."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import DecoderLayer, EncoderLayer, seed_everything
from ._core import Wrong, call, diagnose, exercise, seeded

D_MODEL, N_HEADS, D_FF = 16, 4, 32


# --- wirings of a list of (branch, norm) sub-layers: the reference and the usual mistakes -------------------------


def post_ln(x, sublayers):
    for branch, norm in sublayers:
        x = norm(x + branch(x))  # Eq. 1
    return x


def pre_ln(x, sublayers):
    for branch, norm in sublayers:
        x = x + branch(norm(x))  # Eq. 2
    return x


def _post_ln_without_residual(x, sublayers):
    for branch, norm in sublayers:
        x = norm(branch(x))
    return x


def _only_last_norm(x, sublayers):
    for branch, _ in sublayers:
        x = x + branch(x)
    return sublayers[-1][1](x)


def _pre_ln_norm_on_output(x, sublayers):
    for branch, norm in sublayers:
        x = x + norm(branch(x))
    return x


def _pre_ln_without_residual(x, sublayers):
    for branch, norm in sublayers:
        x = branch(norm(x))
    return x


def randomize_norms(layer: nn.Module, generator: torch.Generator) -> None:
    """Non-trivial LayerNorm gains and biases and output-projection biases, so that misplacing one shows."""
    with torch.no_grad():
        for module in layer.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.copy_(0.5 + torch.rand(module.weight.shape, generator=generator, dtype=torch.float64))
                module.bias.copy_(0.3 * torch.randn(module.bias.shape, generator=generator, dtype=torch.float64))
            elif isinstance(module, nn.Linear):
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator, dtype=torch.float64))


def wiring_cases(variant: str):
    """An encoder and a decoder layer of ``variant`` (float64, eval mode), inputs, and a function returning
    sublayers."""
    seed_everything(11)
    generator = seeded(11)
    enc = EncoderLayer(D_MODEL, N_HEADS, D_FF, variant, num_layers=6).double().eval()
    dec = DecoderLayer(D_MODEL, N_HEADS, D_FF, variant, num_layers=6).double().eval()
    for layer in (enc, dec):
        randomize_norms(layer, generator)
    x = torch.randn(2, 5, D_MODEL, generator=generator, dtype=torch.float64)
    memory = torch.randn(2, 4, D_MODEL, generator=generator, dtype=torch.float64)
    return [
        ("encoder", x, enc.sublayers, enc(x).detach()),
        ("decoder", x, lambda: dec.sublayers(memory), dec(x, memory).detach()),
    ]


def check_wiring(fn, cases, what: str, reference, mistakes_for) -> None:
    """Run ``fn(x, sublayers)`` on the encoder case, then the decoder case (three sub-layers)."""
    for stack, x, sublayers, expected in cases:
        with torch.no_grad():
            got = call(fn, x, sublayers(), what=what)
            mistakes = list(mistakes_for(x, sublayers()))
            if stack == "decoder":
                mistakes.append(
                    (
                        reference(x, sublayers()[:2]),
                        f"{what} is right for the encoder's two sub-layers "
                        "but stops after two of the decoder's three: loop over every (branch, norm) pair",
                    )
                )
        diagnose(got, expected, mistakes, f"{what} ({stack} layer)", rtol=1e-6, atol=1e-9)


@exercise("1.1", "the Post-LN and Pre-LN wirings")
def check_layer_wiring(post_ln_forward, pre_ln_forward) -> str:
    """``post_ln_forward(x, sublayers)`` must compute Eq. 1 and ``pre_ln_forward(x, sublayers)`` Eq. 2 for every
    ``(branch, norm)`` pair in turn, as the library's layers do."""

    def post_mistakes(x, subs):
        yield (
            pre_ln(x, subs),
            "post_ln_forward computes Pre-LN (Eq. 2): in Post-LN the LayerNorm comes after the residual sum, LN(x + "
            "F(x))",
        )
        yield (
            _post_ln_without_residual(x, subs),
            "post_ln_forward forgot the residual: Eq. 1 normalizes x + F(x), not F(x)",
        )
        yield (
            _only_last_norm(x, subs),
            "post_ln_forward applies only the last LayerNorm: each sub-layer has its own, x = LN(x + F(x))",
        )
        yield post_ln(x, subs[:1]), "post_ln_forward uses only the first sub-layer: loop over all of them"
        yield post_ln(x, subs[-1:]), "post_ln_forward uses only the last sub-layer: loop over all of them"

    def pre_mistakes(x, subs):
        yield (
            post_ln(x, subs),
            "pre_ln_forward computes Post-LN (Eq. 1): in Pre-LN the LayerNorm is applied to the sub-layer's input, x "
            "+ F(LN(x))",
        )
        yield (
            _pre_ln_norm_on_output(x, subs),
            "pre_ln_forward normalizes the branch's output; Eq. 2 normalizes its input: x + F(LN(x))",
        )
        yield _pre_ln_without_residual(x, subs), "pre_ln_forward forgot the residual: Eq. 2 adds x back, x + F(LN(x))"
        yield pre_ln(x, subs[:1]), "pre_ln_forward uses only the first sub-layer: loop over all of them"
        yield pre_ln(x, subs[-1:]), "pre_ln_forward uses only the last sub-layer: loop over all of them"

    check_wiring(post_ln_forward, wiring_cases("post_ln"), "post_ln_forward", post_ln, post_mistakes)
    check_wiring(pre_ln_forward, wiring_cases("pre_ln"), "pre_ln_forward", pre_ln, pre_mistakes)
    return "both wirings match the library's layers, encoder and decoder"


# --- a Post-LN encoder layer from nn.Linear modules ----------------------------------------------------------------

# the learner's module names -> the library layer's (fairseq's) names
MODULE_NAMES = {
    "q_proj": "self_attn.q_proj",
    "k_proj": "self_attn.k_proj",
    "v_proj": "self_attn.v_proj",
    "out_proj": "self_attn.out_proj",
    "fc1": "fc1",
    "fc2": "fc2",
    "self_attn_layer_norm": "self_attn_layer_norm",
    "final_layer_norm": "final_layer_norm",
}


def _functional_post_ln_layer(
    ref: EncoderLayer,
    x: torch.Tensor,
    wiring: str = "post",
    scale: str = "head",
    heads: int = N_HEADS,
    softmax_dim: int = -1,
    relu: bool = True,
    out_proj: bool = True,
) -> torch.Tensor:
    """The library layer recomputed from its parameters, with switches that reproduce the usual mistakes."""
    attn = ref.self_attn
    batch, time, d = x.shape

    def attention(h):
        q, k, v = (
            proj(h).view(batch, time, heads, d // heads).transpose(1, 2)  # (batch, heads, time, d_head)
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj)
        )
        divisor = {"head": d // N_HEADS, "model": d, "none": 1}[scale]
        weights = (q @ k.transpose(-1, -2) / math.sqrt(divisor)).softmax(dim=softmax_dim)
        out = (weights @ v).transpose(1, 2).reshape(batch, time, d)
        return attn.out_proj(out) if out_proj else out

    def ffn(h):
        hidden = ref.fc1(h)
        return ref.fc2(F.relu(hidden) if relu else hidden)

    sublayers = [(attention, ref.self_attn_layer_norm), (ffn, ref.final_layer_norm)]
    return post_ln(x, sublayers) if wiring == "post" else pre_ln(x, sublayers)


@exercise("1.2", "a Post-LN encoder layer from nn.Linear")
def check_post_ln_layer(layer_class) -> str:
    """``layer_class(d_model, n_heads, d_ff)`` is an nn.Module with the modules of ``MODULE_NAMES`` whose
    ``forward(x)`` (x: (batch, time, d_model)) computes a Post-LN encoder layer without dropout or masks."""
    learner = call(layer_class, D_MODEL, N_HEADS, D_FF, what="building your layer")
    if not isinstance(learner, nn.Module):
        raise Wrong(f"your class must be an nn.Module, got {type(learner).__name__}")
    seed_everything(12)
    generator = seeded(12)
    ref = EncoderLayer(D_MODEL, N_HEADS, D_FF, "post_ln", num_layers=6).double().eval()
    randomize_norms(ref, generator)
    learner.double()
    for name, ref_name in MODULE_NAMES.items():
        mine, theirs = getattr(learner, name, None), ref.get_submodule(ref_name)
        if not isinstance(mine, type(theirs)):
            raise Wrong(
                f"your layer needs a module `{name}` of type nn.{type(theirs).__name__} (the check copies the "
                f"library layer's `{ref_name}` into it); found {type(mine).__name__}"
            )
        shapes = {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
        if {k: tuple(v.shape) for k, v in mine.state_dict().items()} != shapes:
            raise Wrong(f"`{name}` has the wrong shape: the library's is {theirs}")
        mine.load_state_dict(theirs.state_dict())
    learner.eval()
    x = torch.randn(2, 5, D_MODEL, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        got = call(learner, x, what="your layer's forward")
        expected = ref(x)
        if not torch.allclose(_functional_post_ln_layer(ref, x), expected, atol=1e-10):
            raise RuntimeError("the checker's own reference disagrees with the library layer")
        mistakes = [
            (
                _functional_post_ln_layer(ref, x, wiring="pre"),
                "your layer is wired as Pre-LN (Eq. 2); Post-LN is LN(x + F(x)) for each sub-layer (Eq. 1)",
            ),
            (
                _functional_post_ln_layer(ref, x, scale="none"),
                "the attention scores are not scaled: divide q k^T by sqrt(d_head)",
            ),
            (
                _functional_post_ln_layer(ref, x, scale="model"),
                "the scores are divided by sqrt(d_model); scaled dot-product attention divides by sqrt(d_head) = "
                "sqrt(d_model / n_heads)",
            ),
            (
                _functional_post_ln_layer(ref, x, heads=1),
                "your attention uses one head: split q, k and v into n_heads heads of d_model / n_heads each",
            ),
            (
                _functional_post_ln_layer(ref, x, heads=1, scale="model"),
                "your attention uses one head: split q, k and v into n_heads heads of d_model / n_heads each",
            ),
            (
                _functional_post_ln_layer(ref, x, softmax_dim=-2),
                "the softmax runs over the queries; it must normalize over the keys (the last axis of q k^T)",
            ),
            (_functional_post_ln_layer(ref, x, relu=False), "the FFN has no ReLU between fc1 and fc2"),
            (
                _functional_post_ln_layer(ref, x, out_proj=False),
                "the attention output skips out_proj: apply it to the concatenated heads",
            ),
        ]
    diagnose(
        got,
        expected,
        mistakes,
        "your layer's output",
        rtol=1e-6,
        atol=1e-9,
        hint="compare it step by step with EncoderLayer(..., 'post_ln') and inspect.getsource",
    )
    return "your layer computes the library's Post-LN encoder layer"
