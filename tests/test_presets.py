"""The presets carry the paper's Table 6 / Appendix C recipe, state only what differs from the fields' defaults, and
every preset builds a valid model."""

from dataclasses import MISSING

import pytest

from b2t_lib import EncoderDecoder, LanguageModel, ModelConfig
from b2t_lib.presets import _PRESETS, RECIPES, preset, preset_tasks, recipe
from b2t_lib.scale import SCALES
from b2t_lib.train import TrainConfig
from b2t_lib.train.options import option_defaults, option_fields, option_names
from b2t_lib.train.registry import task_names

TASKS = task_names()


def test_the_task_list_is_the_task_registrys_and_every_task_has_a_preset_at_every_scale():
    assert preset_tasks() == TASKS == ["mt", "summarization", "lm", "asr"]
    assert set(_PRESETS) == {(task, scale) for task in TASKS for scale in SCALES}


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("scale", SCALES)
def test_a_preset_states_only_what_differs_from_the_defaults(task, scale):
    defaults = {f.name: f.default for f in option_fields() if f.default is not MISSING}
    restated = {k: v for k, v in _PRESETS[(task, scale)].items() if k in defaults and defaults[k] == v}
    assert not restated, f"the ({task}, {scale}) preset restates the defaults {restated}"
    required = {f.name for f in option_fields() if f.default is MISSING}
    assert required <= set(preset(task, scale)) | {"model"}, required - set(preset(task, scale))


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("scale", SCALES)
def test_every_preset_names_only_options_and_gives_a_buildable_model(task, scale):
    assert set(preset(task, scale)) <= set(option_names())  # a misspelt key would be silently unused
    cfg = TrainConfig.from_preset(task, scale)
    assert cfg.task == task and cfg.scale == scale
    assert isinstance(cfg.model, ModelConfig)
    assert cfg.model.variant == "b2t"  # the one default variant, ModelConfig's
    for name, value in preset(task, scale).items():  # model options reach the ModelConfig
        if name in ModelConfig.__dataclass_fields__:
            assert getattr(cfg.model, name) == value, name
    if scale == "tiny":  # the real sizes are too big to build in a unit test; the config checks them
        # a vocabulary that holds the adaptive bands of the tiny LM (cutoffs 200, 1000)
        model_cfg = cfg.model.replace(vocab_size=2000 if cfg.model.adaptive_input else 100)
        model = LanguageModel(model_cfg) if model_cfg.encoder_layers == 0 else EncoderDecoder(model_cfg)
        assert model.cfg == model_cfg


# Table 6 of the paper: hidden, FFN, heads, lr, warmup, max updates, max tokens per GPU.
TABLE6 = {
    "mt": (512, 2048, 8, 1e-3, 4000, 50000, 3584),
    "summarization": (512, 2048, 8, 1e-3, 4000, 50000, 3584),
    "lm": (1024, 4096, 8, 1e-3, 2000, 50000, 1024),
    "asr": (512, 2048, 8, 1e-3, 4000, 150000, 40000),
}


@pytest.mark.parametrize("task", TASKS)
def test_full_presets_are_table6(task):
    p = option_defaults(task, "full")
    got = (p["d_model"], p["d_ff"], p["n_heads"], p["lr"], p["warmup_updates"], p["max_update"], p["max_tokens"])
    assert got == TABLE6[task]
    assert (p["adam_beta1"], p["adam_beta2"], p["adam_eps"]) == (0.9, 0.98, 1e-8)
    assert p["lr_scheduler"] == "inverse_sqrt" and p["warmup_init_lr"] == 1e-7
    # label smoothing 0.1 (docs/methods.md §3.3), except the LM (fairseq's adaptive_loss has none) and ASR
    # (docs/methods.md §3.5: the S2T LibriSpeech recipe passes no --label-smoothing)
    assert p["label_smoothing"] == (0.0 if task in ("lm", "asr") else 0.1)


def test_full_mt_batch_is_the_papers_459k_tokens_on_any_number_of_gpus():
    cfg = TrainConfig.from_preset("mt", "full")
    for gpus in (1, 8, 128):
        tokens = cfg.max_tokens * gpus * cfg.update_freq_for(gpus)
        assert 458_752 <= tokens < 458_752 + cfg.max_tokens * gpus
    assert cfg.update_freq_for(8) == 16  # the README: 8 GPUs x update-freq 16
    assert (cfg.model.dropout, cfg.clip_norm, cfg.weight_decay) == (0.3, 0.0, 0.0)


def test_full_mt_averages_the_last_10_epoch_checkpoints():
    cfg = TrainConfig.from_preset("mt", "full")  # docs/methods.md §1.8: --num-epoch-checkpoints 10
    assert (cfg.save_interval_epochs, cfg.save_interval, cfg.keep_last, cfg.average_last) == (1, 0, 10, 10)


def test_deep100_recipe_is_appendix_c():
    cfg = TrainConfig.from_preset("mt", "full", "deep100", encoder_layers=100, decoder_layers=100)
    m = cfg.model
    assert (m.dropout, m.word_dropout, m.init_scale, cfg.clip_norm, cfg.max_update) == (0.5, 0.1, 0.1, 0.1, 25000)
    assert TrainConfig.from_preset("mt", "full", "deep100", max_update=30000).max_update == 30000  # explicit wins
    assert recipe("tfixup")["lr_scheduler"] == "inverse_sqrt_nowarmup" and set(RECIPES) >= {"deep100", "tfixup"}


def test_official18_recipe_is_the_authors_later_readme_and_rescales_b2t_only():
    # README of takase/b2t_connection, 2023-05-18 (docs/methods.md §1.8): dropout 0.5, clip 0.1, word dropout 0.1
    for variant, rescaled in (("b2t", True), ("b2t_no_ln", True), ("pre_ln", False), ("post_ln", False)):
        cfg = TrainConfig.from_preset("mt", "full", "official18", variant=variant, encoder_layers=18, decoder_layers=18)
        m = cfg.model
        assert (m.dropout, cfg.clip_norm, m.word_dropout, m.b2t_rescale_init) == (0.5, 0.1, 0.1, rescaled), variant
        assert (cfg.max_update, cfg.tokens_per_update, cfg.recipe) == (50000, 3584 * 128, "official18")
    with pytest.raises(ValueError, match="applies to variant b2t or b2t_no_ln only"):  # given explicitly: refused
        TrainConfig.from_preset("mt", "full", "official18", variant="pre_ln", b2t_rescale_init=True)


def test_unknown_and_contradictory_settings_are_refused_with_their_names():
    with pytest.raises(ValueError, match="unknown task 'mtx'"):
        preset("mtx", "tiny")
    with pytest.raises(ValueError, match="unknown training options: bogus"):
        TrainConfig.from_preset("mt", "tiny", bogus=1)
    with pytest.raises(ValueError, match="--warmup-updates has no effect"):
        TrainConfig.from_preset("mt", "tiny", lr_scheduler="inverse_sqrt_nowarmup", warmup_updates=10)
    with pytest.raises(ValueError, match="--amp bf16 needs --device cuda"):
        TrainConfig.from_preset("mt", "tiny", device="cpu", amp="bf16")
    with pytest.raises(
        ValueError,
        match=r"b2t_rescale_init \(--b2t-rescale-init\) applies to variant b2t or "
        r"b2t_no_ln only, not variant 'pre_ln'",
    ):
        TrainConfig.from_preset("mt", "tiny", variant="pre_ln", b2t_rescale_init=True)
    with pytest.raises(ValueError, match="applies to variant deepnet only"):
        TrainConfig.from_preset("mt", "tiny", variant="b2t", deepnet_encoder_beta_factor=1.15)
    with pytest.raises(ValueError, match="unknown training options: vocab_size"):  # the data decides it
        TrainConfig.from_preset("mt", "tiny", vocab_size=100)


def test_tfixup_gets_its_own_no_warmup_recipe_without_asking():
    from b2t_lib.train import TrainConfig

    cfg = TrainConfig.from_preset("mt", "tiny", variant="tfixup")
    assert cfg.recipe == "tfixup" and cfg.lr_scheduler == "inverse_sqrt_nowarmup"
    assert TrainConfig.from_preset("mt", "tiny", variant="b2t").lr_scheduler == "inverse_sqrt"


@pytest.mark.parametrize("scale", SCALES)
def test_asr_presets_are_the_s2t_recipe(scale):
    """docs/methods.md §3.5 at every scale: speech input, decoder embeddings tied and no encoder embedding,
    no label smoothing, clip 10, beam 5 with fairseq-generate's length limit (0 x frames + 200)."""
    cfg = TrainConfig.from_preset("asr", scale)
    m = cfg.model
    assert (m.encoder_input, m.share_embeddings, m.share_decoder_io) == ("speech", False, True)
    assert (cfg.label_smoothing, cfg.clip_norm, cfg.beam, cfg.lenpen) == (0.0, 10.0, 5, 1.0)
    assert (cfg.max_len_a, cfg.max_len_b) == (0.0, 200)
    assert (m.specaug_freq_masks, m.specaug_freq_width, m.specaug_time_masks, m.specaug_time_proportion) == (
        2,
        27,
        2,
        1.0,
    )
    # SpecAugment ld's T=100 frames is ~8% of a 12 s LibriSpeech utterance but most of a 1.3 s synthetic one
    assert m.specaug_time_width == (10 if scale == "tiny" else 100)
    if scale != "tiny":
        assert (m.d_model, m.d_ff, m.n_heads, m.conv_channels, m.conv_kernel_sizes) == (512, 2048, 8, 1024, (5, 5))
        assert m.dropout == m.attention_dropout == m.activation_dropout == 0.15  # T-Md
        assert cfg.max_tokens == 40000 and cfg.average_last == 10 and cfg.save_interval_epochs == 1
    if scale == "full":  # Table 6: 40K frames per GPU x 32 GPUs on any number of GPUs
        assert cfg.tokens_per_update == 40000 * 32 and cfg.update_freq_for(8) == 4 and cfg.update_freq_for(32) == 1
    for layers in (6, 12):  # the paper's 6L-6L and 12L-6L
        assert TrainConfig.from_preset("asr", scale, encoder_layers=layers).model.encoder_layers == layers


def test_every_task_prepares_its_real_data_at_small_and_full_scale(tmp_path, monkeypatch):
    """At small/full a missing data folder is prepared by the task's ``prepare_real`` with the options of
    DATA_PREPARATION (what its data_scripts/ command runs); the tiny scale never downloads."""
    from b2t_lib.data.speech_sources import SMALL_HUB_SPLITS
    from b2t_lib.presets import DATA_PREPARATION
    from b2t_lib.train import TrainConfig
    from b2t_lib.train.task import Task
    from b2t_lib.train.registry import build_task

    assert DATA_PREPARATION[("asr", "small")]["splits"] == SMALL_HUB_SPLITS
    calls = []
    for task_name in ("mt", "summarization", "lm", "asr"):
        for scale in ("small", "full"):
            task = build_task(TrainConfig.from_preset(task_name, scale, data=str(tmp_path / task_name / scale)))
            assert type(task).prepare_real is not Task.prepare_real, f"{task_name} downloads nothing"
            monkeypatch.setattr(
                type(task),
                "prepare_real",
                lambda self, path, **options: calls.append((self.name, self.cfg.scale, path, options)) or path,
            )
            assert task.prepare_data() == tmp_path / task_name / scale
            assert calls[-1] == (task_name, scale, tmp_path / task_name / scale, DATA_PREPARATION[(task_name, scale)])
        tiny = build_task(
            TrainConfig.from_preset(task_name, "tiny", data=str(tmp_path / "none"), synthetic_train_pairs=0)
        )
        with pytest.raises(FileNotFoundError, match=f"no prepared .* at {tmp_path / 'none'} .*: Prepare"):
            tiny.prepare_data()
    assert len(calls) == 8
