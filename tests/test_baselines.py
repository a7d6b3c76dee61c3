"""The five baselines: each forward pass equals its definition computed by hand from the model's own
parameters (eval mode, no dropout), and each initialization matches its formulas at two depths."""

import math

import pytest
import torch
import torch.nn.functional as F

import b2t_lib
from b2t_lib import EncoderDecoder, LanguageModel, ModelConfig, seed_everything
from b2t_lib.special_tokens import EOS, PAD

V, D, HEADS, FF = 40, 16, 4, 32


def make(variant, enc=2, dec=3, lm=False, perturb_norms=True, **extra):
    seed_everything(0)
    cfg = ModelConfig(
        vocab_size=V,
        d_model=D,
        n_heads=HEADS,
        d_ff=FF,
        encoder_layers=0 if lm else enc,
        decoder_layers=dec,
        variant=variant,
        dropout=0.0,
        **extra,
    )
    model = (LanguageModel(cfg) if lm else EncoderDecoder(cfg)).eval()
    with torch.no_grad():  # LayerNorms start as identities; make each one distinct, so a mix-up shows
        for module in model.modules() if perturb_norms else ():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    return model


def tokens(batch=3, time=7, seed=1, pad_rows=True):
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(4, V, (batch, time), generator=g)
    t[:, -1] = EOS
    if pad_rows:
        t[0, -3:] = PAD  # one padded row: the masks matter
    return t


# ------------------------------------------------------------------ pieces written out by hand
def ln(norm, x):
    return F.layer_norm(x, (x.shape[-1],), norm.weight, norm.bias, 1e-5)


def linear(module, x):
    return x @ module.weight.T + module.bias


def ffn(layer, h):
    return linear(layer.fc2, torch.relu(linear(layer.fc1, h)))


def scores_by_hand(attn, query, memory):
    """Q K^T / sqrt(d_head) per head: (batch, heads, tgt, src)."""
    b, heads, dh = query.shape[0], attn.n_heads, attn.d_head
    q = linear(attn.q_proj, query).view(b, -1, heads, dh).transpose(1, 2)
    k = linear(attn.k_proj, memory).view(b, -1, heads, dh).transpose(1, 2)
    return q @ k.transpose(-1, -2) / math.sqrt(dh)


def attend_by_hand(attn, logits, memory, key_padding_mask=None, causal=False):
    """softmax(logits + M) V W_O."""
    b, heads, dh = memory.shape[0], attn.n_heads, attn.d_head
    if key_padding_mask is not None:
        logits = logits.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    if causal:
        t, s = logits.shape[-2:]
        logits = logits.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(1), float("-inf"))
    v = linear(attn.v_proj, memory).view(b, -1, heads, dh).transpose(1, 2)
    context = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, heads * dh)
    return linear(attn.out_proj, context)


def attention(attn, query, memory, mask=None, causal=False):
    return attend_by_hand(attn, scores_by_hand(attn, query, memory), memory, mask, causal)


def embedded(stack, toks):
    x, mask = stack.input(toks, stack.embed_tokens)  # (batch, time, d), dropout is 0
    return x, mask


# ------------------------------------------------------------------ registry
def test_registry_holds_the_four_variants_of_the_paper_the_five_baselines_and_the_methods_after():
    from b2t_lib.after_b2t import AFTER_B2T
    from b2t_lib.baselines import BASELINES

    paper = {"post_ln", "pre_ln", "b2t", "b2t_no_ln"}
    assert set(b2t_lib.VARIANTS) == paper | set(BASELINES) | set(AFTER_B2T) and len(BASELINES) == 5
    for name in AFTER_B2T:  # likewise, one module of b2t_lib.after_b2t per method (DyT holds its B2T form too)
        assert type(b2t_lib.VARIANTS[name]).__module__.startswith("b2t_lib.after_b2t."), name
    for name in BASELINES:  # each baseline lives whole in its own module of b2t_lib.baselines
        variant = b2t_lib.VARIANTS[name]
        assert type(variant).__module__ == f"b2t_lib.baselines.{name}", name
        assert variant.title and variant.equation, name
    # DLCL and RealFormer are Post-LN variants: they inherit its layer instead of copying it
    assert isinstance(b2t_lib.VARIANTS["dlcl"], type(b2t_lib.VARIANTS["post_ln"]))
    assert isinstance(b2t_lib.VARIANTS["realformer"], type(b2t_lib.VARIANTS["post_ln"]))
    assert type(b2t_lib.VARIANTS["dlcl"]).layer_forward is type(b2t_lib.VARIANTS["post_ln"]).layer_forward


def test_the_core_layers_and_attention_know_no_baseline():
    from pathlib import Path

    root = Path(b2t_lib.__file__).parent
    for module in ("layers.py", "attention.py", "model.py"):
        text = (root / module).read_text().lower()
        for name in ("realformer", "admin", "dlcl", "deepnet", "tfixup", "t-fixup"):
            assert name not in text, (module, name)


@pytest.mark.parametrize("variant", ["dlcl", "admin", "deepnet"])
def test_official_code_biases_are_zero(variant):
    """DLCL, Admin and DeepNet (official code): zero q/k/v biases and zero FFN biases."""
    model = make(variant, perturb_norms=False)
    for layer in list(model.encoder.layers) + list(model.decoder.layers):
        attentions = [layer.self_attn] + ([layer.encoder_attn] if hasattr(layer, "encoder_attn") else [])
        for attn in attentions:
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
                assert float(proj.bias.detach().abs().max()) == 0.0
        assert float(layer.fc1.bias.detach().abs().max()) == 0.0 == float(layer.fc2.bias.detach().abs().max())
    fairseq = make("post_ln", perturb_norms=False)  # fairseq 0.9 keeps PyTorch's default biases
    assert float(fairseq.encoder.layers[0].self_attn.q_proj.bias.detach().abs().max()) > 0.0


def test_post_ln_models_carry_no_baseline_parameters():
    names = [n for n, _ in make("post_ln").named_parameters()] + list(make("post_ln").state_dict())
    assert not any(key in n for n in names for key in ("admin", "dlcl", "deepnet"))


# ------------------------------------------------------------------ DeepNet
@pytest.mark.parametrize("lm", [False, True])
def test_deepnet_forward_is_post_ln_with_alpha_on_every_shortcut(lm):
    model, N, M = make("deepnet", enc=2, dec=3, lm=lm), 2, 3
    src, tgt = tokens(), tokens(seed=2, pad_rows=False)
    if not lm:
        alpha_e = 0.81 * (N**4 * M) ** (1 / 16)
        x, mask = embedded(model.encoder, src)
        for layer in model.encoder.layers:
            h = ln(layer.self_attn_layer_norm, alpha_e * x + attention(layer.self_attn, x, x, mask))
            x = ln(layer.final_layer_norm, alpha_e * h + ffn(layer, h))
        memory, memory_mask = model.encoder(src)
        torch.testing.assert_close(memory, x)
    alpha_d = (2 * M) ** 0.25 if lm else (3 * M) ** 0.25
    y, _ = embedded(model.decoder, tgt)
    for layer in model.decoder.layers:
        y = ln(layer.self_attn_layer_norm, alpha_d * y + attention(layer.self_attn, y, y, causal=True))
        if not lm:
            y = ln(layer.encoder_attn_layer_norm, alpha_d * y + attention(layer.encoder_attn, y, memory, memory_mask))
        y = ln(layer.final_layer_norm, alpha_d * y + ffn(layer, y))
    torch.testing.assert_close(model.decoder.extract_features(tgt, *(() if lm else (memory, memory_mask))), y)


def _std(tensors):
    return float(torch.cat([t.detach().flatten() for t in tensors]).std())


@pytest.mark.parametrize("depth", [6, 18])
def test_deepnet_init_std_matches_beta_scaled_xavier(depth):
    seed_everything(0)
    cfg = ModelConfig(
        vocab_size=V,
        d_model=64,
        n_heads=4,
        d_ff=256,
        encoder_layers=depth,
        decoder_layers=depth,
        variant="deepnet",
        dropout=0.0,
    )
    model = EncoderDecoder(cfg)
    beta_e = 0.87 * (depth**4 * depth) ** (-1 / 16)
    beta_d = (12 * depth) ** -0.25
    xavier = {"ffn": math.sqrt(2 / (64 + 256)), "attn": math.sqrt(2 / (64 + 64))}
    enc, dec = model.encoder.layers, model.decoder.layers
    expected = {
        "enc fc1": (_std(l.fc1.weight for l in enc), beta_e * xavier["ffn"]),
        "enc fc2": (_std(l.fc2.weight for l in enc), beta_e * xavier["ffn"]),
        "enc v_proj": (_std(l.self_attn.v_proj.weight for l in enc), beta_e * xavier["attn"]),
        "enc out_proj": (_std(l.self_attn.out_proj.weight for l in enc), beta_e * xavier["attn"]),
        "enc q_proj": (_std(l.self_attn.q_proj.weight for l in enc), xavier["attn"]),
        "dec fc1": (_std(l.fc1.weight for l in dec), beta_d * xavier["ffn"]),
        "dec cross v_proj": (_std(l.encoder_attn.v_proj.weight for l in dec), beta_d * xavier["attn"]),
        "dec cross out_proj": (_std(l.encoder_attn.out_proj.weight for l in dec), beta_d * xavier["attn"]),
        "dec k_proj": (_std(l.self_attn.k_proj.weight for l in dec), xavier["attn"]),
    }
    for name, (measured, formula) in expected.items():
        assert measured == pytest.approx(formula, rel=0.03), name


def test_deepnet_encoder_beta_factor_is_switchable():
    seed_everything(0)
    common = dict(
        vocab_size=V,
        d_model=64,
        n_heads=4,
        d_ff=256,
        encoder_layers=6,
        decoder_layers=6,
        variant="deepnet",
        dropout=0.0,
    )
    paper = _std(l.fc1.weight for l in EncoderDecoder(ModelConfig(**common)).encoder.layers)
    seed_everything(0)
    torchscale = _std(
        l.fc1.weight for l in EncoderDecoder(ModelConfig(**common, deepnet_encoder_beta_factor=1.15)).encoder.layers
    )
    assert torchscale / paper == pytest.approx(1.15 / 0.87, rel=0.03)


# ------------------------------------------------------------------ Admin
def test_admin_forward_weights_every_shortcut_by_omega():
    model = make("admin")
    with torch.no_grad():  # arbitrary per-dimension omegas, so that the test sees them
        for layer in list(model.encoder.layers) + list(model.decoder.layers):
            for omega in layer.admin_shortcut_weights:
                omega.uniform_(0.5, 3.0)
    src, tgt = tokens(), tokens(seed=2, pad_rows=False)
    x, mask = embedded(model.encoder, src)
    for layer in model.encoder.layers:
        w_att, w_ffn = layer.admin_shortcut_weights
        h = ln(layer.self_attn_layer_norm, w_att * x + attention(layer.self_attn, x, x, mask))
        x = ln(layer.final_layer_norm, w_ffn * h + ffn(layer, h))
    memory, memory_mask = model.encoder(src)
    torch.testing.assert_close(memory, x)
    y, _ = embedded(model.decoder, tgt)
    for layer in model.decoder.layers:
        w_self, w_cross, w_ffn = layer.admin_shortcut_weights
        y = ln(layer.self_attn_layer_norm, w_self * y + attention(layer.self_attn, y, y, causal=True))
        y = ln(layer.encoder_attn_layer_norm, w_cross * y + attention(layer.encoder_attn, y, memory, memory_mask))
        y = ln(layer.final_layer_norm, w_ffn * y + ffn(layer, y))
    torch.testing.assert_close(model.decoder.extract_features(tgt, memory, memory_mask), y)


def _batch():
    src, tgt = tokens(batch=4, time=9), tokens(batch=4, time=8, seed=3)
    prev = torch.roll(tgt, 1, dims=1)
    prev[:, 0] = EOS
    return {"src_tokens": src, "prev_output_tokens": prev, "target": tgt}


def test_admin_profiling_sets_omega_squared_to_the_cumulative_branch_variance(caplog):
    model = make("admin", enc=4, dec=4, perturb_norms=False)  # LN outputs of variance ~1, as at init
    batch = _batch()
    with caplog.at_level("INFO", logger="b2t_lib.baselines.admin"):
        assert model.prepare_for_training(batch) is True
    assert "profiled" in caplog.text
    assert model.training is False  # the model's mode is restored
    with torch.no_grad():
        _check_admin_profile(model, batch)
    omegas = [float(w[0].detach()) for l in model.encoder.layers for w in l.admin_shortcut_weights]
    assert omegas == sorted(omegas) and omegas[-1] > 1.5, "shortcut weights grow with the depth"


def _check_admin_profile(model, batch):
    memory, memory_mask = model.encoder(batch["src_tokens"])
    for stack, inputs in ((model.encoder, batch["src_tokens"]), (model.decoder, batch["prev_output_tokens"])):
        x, mask = embedded(stack, inputs)
        cumulative = float(x.var())  # Var(x_0)
        s = 1.0  # the recursion s := sqrt(Var(omega_i x_{i-1}) + Var(f_i)), starting at 1
        kwargs = (
            dict(padding_mask=mask) if stack is model.encoder else dict(memory=memory, memory_padding_mask=memory_mask)
        )
        for i, (branch, norm, omega) in enumerate(
            (b, n, w)
            for layer in stack.layers
            for (b, n), w in zip(layer.sublayers(**kwargs), layer.admin_shortcut_weights)
        ):
            assert torch.all(omega == omega[0]), "profiling fills omega with one scalar"
            assert float(omega[0]) == pytest.approx(s, rel=1e-5)
            if i > 0:  # omega_i^2 ~ Var(x_0) + sum_{j<i} Var(f_j), as the LN outputs have variance ~1
                assert float(omega[0]) ** 2 == pytest.approx(cumulative, rel=0.02)
            f = branch(x)
            s = math.sqrt(float((omega * x).var()) + float(f.var()))
            cumulative += float(f.var())
            x = norm(omega * x + f)


def test_admin_profile_is_saved_and_not_redone_on_resume():
    model = make("admin")
    assert bool(model.encoder.admin_profiled) is False
    assert model.prepare_for_training(_batch()) is True
    assert bool(model.encoder.admin_profiled) and bool(model.decoder.admin_profiled)
    state = model.state_dict()
    assert "encoder.admin_profiled" in state and "encoder.layers.0.admin_shortcut_weights.0" in state
    resumed = make("admin")
    resumed.load_state_dict(state)
    before = [w.clone() for w in resumed.encoder.layers[1].admin_shortcut_weights]
    assert resumed.prepare_for_training(_batch()) is False
    for w, b in zip(resumed.encoder.layers[1].admin_shortcut_weights, before):
        torch.testing.assert_close(w.detach(), b)


def test_admin_profiling_works_for_a_language_model():
    model = make("admin", dec=3, lm=True)
    assert model.prepare_for_training({"prev_output_tokens": tokens(), "target": tokens()}) is True
    assert float(model.decoder.layers[-1].admin_shortcut_weights[-1][0].detach()) > 1.0


# ------------------------------------------------------------------ T-Fixup
def test_tfixup_has_no_layer_norm_and_plain_residuals():
    model = make("tfixup")
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())
    src, tgt = tokens(), tokens(seed=2, pad_rows=False)
    x, mask = embedded(model.encoder, src)
    for layer in model.encoder.layers:
        x = x + attention(layer.self_attn, x, x, mask)
        x = x + ffn(layer, x)
    memory, memory_mask = model.encoder(src)
    torch.testing.assert_close(memory, x)
    y, _ = embedded(model.decoder, tgt)
    for layer in model.decoder.layers:
        y = y + attention(layer.self_attn, y, y, causal=True)
        y = y + attention(layer.encoder_attn, y, memory, memory_mask)
        y = y + ffn(layer, y)
    torch.testing.assert_close(model.decoder.extract_features(tgt, memory, memory_mask), y)


@pytest.mark.parametrize("depth", [6, 18])
def test_tfixup_init_std_matches_its_scaling(depth):
    seed_everything(0)
    cfg = ModelConfig(
        vocab_size=400,
        d_model=64,
        n_heads=4,
        d_ff=256,
        encoder_layers=depth,
        decoder_layers=depth,
        variant="tfixup",
        dropout=0.0,
        share_embeddings=False,
    )
    model = EncoderDecoder(cfg)
    enc_factor, dec_factor = 0.67 * depth**-0.25, (9 * depth) ** -0.25
    ffn_xavier, attn_xavier = math.sqrt(2 / (64 + 256)), math.sqrt(2 / 128)
    enc, dec = model.encoder.layers, model.decoder.layers
    expected = {
        "enc fc1": (_std(l.fc1.weight for l in enc), enc_factor * ffn_xavier),
        "enc out_proj": (_std(l.self_attn.out_proj.weight for l in enc), enc_factor * attn_xavier),
        # v_proj starts at xavier gain 1/sqrt(2); T-Fixup's extra sqrt(2) cancels it
        "enc v_proj": (_std(l.self_attn.v_proj.weight for l in enc), enc_factor * attn_xavier),
        "enc q_proj (unchanged)": (_std(l.self_attn.q_proj.weight for l in enc), attn_xavier / math.sqrt(2)),
        "dec fc2": (_std(l.fc2.weight for l in dec), dec_factor * ffn_xavier),
        "dec cross v_proj": (_std(l.encoder_attn.v_proj.weight for l in dec), dec_factor * attn_xavier),
        "dec self out_proj": (_std(l.self_attn.out_proj.weight for l in dec), dec_factor * attn_xavier),
        "enc embedding": (_std([model.encoder.embed_tokens.weight[4:]]), 64**-0.5 * (9 * depth) ** -0.25),
        "dec embedding": (_std([model.decoder.embed_tokens.weight[4:]]), 64**-0.5 * (9 * depth) ** -0.25),
    }
    for name, (measured, formula) in expected.items():
        assert measured == pytest.approx(formula, rel=0.03), name
    assert float(model.encoder.layers[0].fc1.bias.detach().abs().max()) == 0.0


def test_tfixup_shared_embedding_is_scaled_once_by_the_encoder_factor():
    seed_everything(0)
    cfg = ModelConfig(
        vocab_size=400,
        d_model=64,
        n_heads=4,
        d_ff=128,
        encoder_layers=12,
        decoder_layers=3,
        variant="tfixup",
        dropout=0.0,
    )
    model = EncoderDecoder(cfg)
    assert model.encoder.embed_tokens is model.decoder.embed_tokens
    measured = _std([model.encoder.embed_tokens.weight[4:]])
    assert measured == pytest.approx(64**-0.5 * (9 * 12) ** -0.25, rel=0.03)


def test_tfixup_names_its_no_warmup_recipe():
    from b2t_lib.presets import recipe

    assert recipe(b2t_lib.VARIANTS["tfixup"].recipe)["lr_scheduler"] == "inverse_sqrt_nowarmup"


# ------------------------------------------------------------------ RealFormer
@pytest.mark.parametrize("running_mean", [False, True])
def test_realformer_adds_the_previous_raw_scores_in_each_attention_type(running_mean):
    model = make("realformer", enc=3, dec=3, realformer_running_mean=running_mean)
    src, tgt = tokens(), tokens(seed=2, pad_rows=False)
    x, mask = embedded(model.encoder, src)
    summed = 0.0
    for l, layer in enumerate(model.encoder.layers, start=1):
        summed = scores_by_hand(layer.self_attn, x, x) + summed  # S_l = QK^T/sqrt(d) + S_{l-1}, unmasked
        logits = summed / l if running_mean else summed
        h = ln(layer.self_attn_layer_norm, x + attend_by_hand(layer.self_attn, logits, x, mask))
        x = ln(layer.final_layer_norm, h + ffn(layer, h))
    memory, memory_mask = model.encoder(src)
    torch.testing.assert_close(memory, x)
    y, _ = embedded(model.decoder, tgt)
    self_sum, cross_sum = 0.0, 0.0  # two more streams, one per attention type
    for l, layer in enumerate(model.decoder.layers, start=1):
        self_sum = scores_by_hand(layer.self_attn, y, y) + self_sum
        logits = self_sum / l if running_mean else self_sum
        y = ln(layer.self_attn_layer_norm, y + attend_by_hand(layer.self_attn, logits, y, causal=True))
        cross_sum = scores_by_hand(layer.encoder_attn, y, memory) + cross_sum
        logits = cross_sum / l if running_mean else cross_sum
        y = ln(layer.encoder_attn_layer_norm, y + attend_by_hand(layer.encoder_attn, logits, memory, memory_mask))
        y = ln(layer.final_layer_norm, y + ffn(layer, y))
    torch.testing.assert_close(model.decoder.extract_features(tgt, memory, memory_mask), y)


# ------------------------------------------------------------------ DLCL
def test_dlcl_average_init_is_lower_triangular_running_mean():
    model = make("dlcl", enc=4, dec=2)
    w = model.encoder.dlcl_weights.detach()  # (L+1, L+1); W_00 = 1 scales the first layer's input
    assert model.encoder.dlcl_weights.requires_grad and float(w[0, 0]) == 1.0
    assert w.shape == (5, 5) and model.decoder.dlcl_weights.shape == (3, 3)
    for k in range(5):
        torch.testing.assert_close(w[k, : k + 1], torch.full((k + 1,), 1 / (k + 1)))
        assert float(w[k, k + 1 :].abs().sum()) == 0.0
    assert len(model.encoder.dlcl_layer_norms) == 4


@pytest.mark.parametrize("lm", [False, True])
def test_dlcl_layer_inputs_are_normalized_combinations_of_all_earlier_outputs(lm):
    model = make("dlcl", enc=3, dec=3, lm=lm)
    with torch.no_grad():  # arbitrary lower-triangular weights, so that the test sees them
        for stack in ([] if lm else [model.encoder]) + [model.decoder]:
            stack.dlcl_weights.copy_(torch.randn(stack.dlcl_weights.shape).tril())
    src, tgt = tokens(), tokens(seed=2, pad_rows=False)

    def by_hand(stack, x, run):
        W, norms, ys = stack.dlcl_weights, stack.dlcl_layer_norms, [x]  # y_0
        for k, layer in enumerate(stack.layers):  # x_1 = W_00 y_0 (LN_0 is the identity)
            inp = W[0, 0] * ys[0] if k == 0 else ln(norms[k - 1], sum(W[k, j] * ys[j] for j in range(k + 1)))
            ys.append(run(layer, inp))
        L = len(stack.layers)
        return ln(norms[L - 1], sum(W[L, j] * ys[j] for j in range(L + 1)))

    memory = memory_mask = None
    if not lm:
        x, mask = embedded(model.encoder, src)

        def enc_layer(layer, h):  # an ordinary Post-LN layer
            h = ln(layer.self_attn_layer_norm, h + attention(layer.self_attn, h, h, mask))
            return ln(layer.final_layer_norm, h + ffn(layer, h))

        memory, memory_mask = model.encoder(src)
        torch.testing.assert_close(memory, by_hand(model.encoder, x, enc_layer))

    def dec_layer(layer, h):
        h = ln(layer.self_attn_layer_norm, h + attention(layer.self_attn, h, h, causal=True))
        if not lm:
            h = ln(layer.encoder_attn_layer_norm, h + attention(layer.encoder_attn, h, memory, memory_mask))
        return ln(layer.final_layer_norm, h + ffn(layer, h))

    y, _ = embedded(model.decoder, tgt)
    torch.testing.assert_close(
        model.decoder.extract_features(tgt, memory, memory_mask), by_hand(model.decoder, y, dec_layer)
    )


# ------------------------------------------------------------------ generation
@pytest.mark.parametrize("variant", ["dlcl", "realformer", "admin", "deepnet", "tfixup"])
def test_incremental_decoding_matches_the_full_forward(variant):
    model = make(variant, realformer_running_mean=variant == "realformer")
    src, tgt = tokens(), tokens(batch=3, time=5, seed=4, pad_rows=False)
    with torch.no_grad():
        full = model(src, tgt)
        memory, memory_mask = model.encoder(src)
        cache: dict = {}
        steps = [model.decoder(tgt[:, : t + 1], memory, memory_mask, cache)[:, -1] for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=1e-4)
