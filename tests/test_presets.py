"""The presets carry the paper's Table 6 / Appendix C recipe, and every preset builds a valid model."""
import pytest

from b2t_lib import ModelConfig
from b2t_lib.presets import RECIPES, TASKS, preset, recipe
from b2t_lib.scale import SCALES
from b2t_lib.train import TrainConfig


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("scale", SCALES)
def test_every_preset_is_a_valid_config_and_model(task, scale):
    cfg = TrainConfig.from_preset(task, scale)
    assert cfg.task == task and cfg.scale == scale
    model = ModelConfig(vocab_size=1000, d_model=cfg.d_model, n_heads=cfg.n_heads, d_ff=cfg.d_ff,
                        encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
                        variant=cfg.variant, dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
                        activation_dropout=cfg.activation_dropout)
    assert model.d_model % model.n_heads == 0


# Table 6 of the paper: hidden, FFN, heads, lr, warmup, max updates, max tokens per GPU.
TABLE6 = {"mt": (512, 2048, 8, 1e-3, 4000, 50000, 3584), "summarization": (512, 2048, 8, 1e-3, 4000, 50000, 3584),
          "lm": (1024, 4096, 8, 1e-3, 2000, 50000, 1024), "asr": (512, 2048, 8, 1e-3, 4000, 150000, 40000)}


@pytest.mark.parametrize("task", TASKS)
def test_full_presets_are_table6(task):
    p = preset(task, "full")
    got = (p["d_model"], p["d_ff"], p["n_heads"], p["lr"], p["warmup_updates"], p["max_update"], p["max_tokens"])
    assert got == TABLE6[task]
    assert (p["adam_beta1"], p["adam_beta2"], p["adam_eps"]) == (0.9, 0.98, 1e-8)
    assert p["lr_scheduler"] == "inverse_sqrt" and p["warmup_init_lr"] == 1e-7 and p["label_smoothing"] == 0.1


def test_full_mt_batch_is_the_papers_459k_tokens_on_any_number_of_gpus():
    cfg = TrainConfig.from_preset("mt", "full")
    for gpus in (1, 8, 128):
        tokens = cfg.max_tokens * gpus * cfg.update_freq_for(gpus)
        assert 458_752 <= tokens < 458_752 + cfg.max_tokens * gpus
    assert cfg.update_freq_for(8) == 16                   # the README: 8 GPUs x update-freq 16
    assert (cfg.dropout, cfg.clip_norm, cfg.weight_decay) == (0.3, 0.0, 0.0)


def test_deep100_recipe_is_appendix_c():
    cfg = TrainConfig.from_preset("mt", "full", "deep100", encoder_layers=100, decoder_layers=100)
    assert (cfg.dropout, cfg.word_dropout, cfg.init_scale, cfg.clip_norm, cfg.max_update) == (0.5, 0.1, 0.1, 0.1, 25000)
    assert TrainConfig.from_preset("mt", "full", "deep100", max_update=30000).max_update == 30000   # explicit wins
    assert recipe("tfixup")["lr_scheduler"] == "inverse_sqrt_nowarmup" and set(RECIPES) >= {"deep100", "tfixup"}


def test_unknown_and_contradictory_settings_are_refused_with_their_names():
    with pytest.raises(ValueError, match="unknown task 'mtx'"):
        preset("mtx", "tiny")
    with pytest.raises(ValueError, match="unknown training options: bogus"):
        TrainConfig.from_preset("mt", "tiny", bogus=1)
    with pytest.raises(ValueError, match="--warmup-updates has no effect"):
        TrainConfig.from_preset("mt", "tiny", lr_scheduler="inverse_sqrt_nowarmup", warmup_updates=10)
    with pytest.raises(ValueError, match="--amp bf16 needs --device cuda"):
        TrainConfig.from_preset("mt", "tiny", device="cpu", amp="bf16")
    with pytest.raises(ValueError, match="--b2t-rescale-init applies to the B2T variants"):
        TrainConfig.from_preset("mt", "tiny", variant="pre_ln", b2t_rescale_init=True)


def test_tfixup_gets_its_own_no_warmup_recipe_without_asking():
    from b2t_lib.train import TrainConfig

    cfg = TrainConfig.from_preset("mt", "tiny", variant="tfixup")
    assert cfg.recipe == "tfixup" and cfg.lr_scheduler == "inverse_sqrt_nowarmup"
    assert TrainConfig.from_preset("mt", "tiny", variant="b2t").lr_scheduler == "inverse_sqrt"
