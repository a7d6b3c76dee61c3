"""The one set of hyper-parameter presets: ``preset(task, scale)`` for every task and scale.

The defaults of the fields of :class:`~b2t_lib.train.TrainConfig` and :class:`~b2t_lib.config.ModelConfig` are the
paper's recipe that every task and scale shares; a preset states only what differs from them, and the options
that depend on the scale and so have no default (data, warmup, updates, batch, intervals, the stall rule). Model
options use their ModelConfig field names (``d_model``, ``variant``, ...):

* ``full``  - the paper's Appendix A (Table 6) and the official README (docs/methods.md §1.8, §3.3-3.5):
  Adam (0.9, 0.98), eps 1e-8, peak lr 1e-3, inverse-sqrt schedule with warmup from 1e-7,
  label smoothing 0.1, weight decay 0. The paper's batch (e.g. 3584 tokens x 128 GPU-steps for
  MT, about 459K tokens per update) is kept through ``tokens_per_update``: on fewer GPUs the
  trainer accumulates gradients (``update_freq``) until one update holds as many tokens.
* ``small`` - the same architectures on one GPU with a smaller batch and fewer updates (hours).
* ``tiny``  - CPU-sized models on the synthetic task, minutes on two cores (tests, CI, notebooks).

Named *recipes* are overrides applied on top of a preset (``--recipe deep100``: Appendix C).
Precedence: preset < recipe < options given explicitly on the command line.

**The rehearsal** (``B2T_REHEARSAL=1``, :func:`b2t_lib.scale.rehearsal`, ``make rehearse``) runs ``small`` and
``full`` on a CPU. One rule shrinks every run there, whatever set its options (preset, recipe, a notebook or
the command line): :data:`REHEARSAL_SIZES` caps the sizes (width, FFN, heads, tokens per batch and per update,
updates, warmup, log/validation/save intervals, the search's length limit) and :func:`rehearsal_sizes` applies it to
every :class:`~b2t_lib.train.TrainConfig` built at those scales. Everything else (depth, variant, task,
recipe, data preparation, decoding, checkpoint averaging, the launcher's queue and torchrun) stays exactly
as at the scale; the data sets are miniature copies of the real sources
(:data:`REHEARSAL_SOURCES`, :mod:`b2t_lib.data.miniature`), so evaluation sets are a few dozen examples.
"""

from __future__ import annotations

import copy

from .scale import SCALES, rehearsal

# The paper's recipe shared by every task and scale (Table 6, docs/methods.md §3.3: Adam (0.9, 0.98), eps 1e-8, peak
# lr 1e-3, inverse-sqrt warmup from 1e-7, label smoothing 0.1, no weight decay, no clipping; fairseq-generate's
# decoding defaults) is the default of each field of TrainConfig and ModelConfig (Transformer-base, 6+6 layers,
# the B2T connection). A preset states only what differs from those defaults, plus the options that depend on the
# scale and have no default (data, warmup and updates, batch, intervals, the stall rule).

# Translation decodes with the official command `generate.py --beam 4 --lenpen 0.6 --remove-bpe` (docs/methods.md
# §1.8), which passes no length options: fairseq's defaults (at most 0 * src_len + 200 tokens, then EOS) apply.
_MT_DECODING = dict(beam=4, lenpen=0.6)
# fairseq's transformer_lm_wiki103 (Baevski & Auli 2019; docs/methods.md §3.4 and §1.4) around any depth and
# width: adaptive input and softmax (bands at 20000 and 60000, factor 4: the field defaults), tied band
# embeddings and projections, softmax dropout 0.2, no final decoder LayerNorm (no_decoder_final_norm=True). Its
# loss (adaptive_loss) has no label smoothing; the last checkpoint is evaluated (the paper mentions checkpoint
# averaging for no LM).
_LM = dict(
    encoder_layers=0,
    share_decoder_io=False,
    decoder_final_norm=False,
    label_smoothing=0.0,
    adaptive_input=True,
    adaptive_softmax=True,
    adaptive_softmax_dropout=0.2,
    tie_adaptive_weights=True,
    tie_adaptive_proj=True,
    average_last=1,
    keep_last=2,
)
# Speech recognition at every scale (docs/methods.md §3.5): the S2T encoder input, no encoder embedding (so
# nothing to share with it), no label smoothing, clip 10; decoding is fairseq-generate's default (beam 5,
# lenpen 1, length limit 0 * frames + 200: src_len counts frames, so a text-style a=1.2 would allow thousands).
_SPEECH = dict(encoder_input="speech", share_embeddings=False, label_smoothing=0.0, clip_norm=10.0)
_S2T_DROPOUT = dict(dropout=0.15, attention_dropout=0.15, activation_dropout=0.15)  # T-Md: 0.15 everywhere
# The CPU-sized model of every tiny preset.
_TINY = dict(
    d_model=64,
    n_heads=4,
    d_ff=256,
    lr=2e-3,
    average_last=1,
    keep_last=2,
    divergence_patience=50,
    log_interval=10,
    threads=1,
)

_PRESETS: dict[tuple[str, str], dict] = {
    # ---------------------------------------------------------------- machine translation
    ("mt", "full"): dict(
        _MT_DECODING,
        dropout=0.3,
        warmup_updates=4000,
        max_update=50000,
        max_tokens=3584,
        tokens_per_update=3584 * 128,  # 8 GPUs x update-freq 16 in the README: ~459K tokens
        data="data/wmt14_en_de",
        eval_batch_size=128,
        # The official recipe averages the last 10 *epoch* checkpoints (docs/methods.md §1.8): save at
        # every epoch end (a few hundred updates of WMT'14 at this batch), keep and average the last 10.
        save_interval=0,
        save_interval_epochs=1,
        log_interval=100,
        valid_interval=1000,
    ),
    ("mt", "small"): dict(
        _MT_DECODING,
        dropout=0.3,
        warmup_updates=4000,
        max_update=20000,
        max_tokens=8192,
        tokens_per_update=65536,  # 1/7 of the paper's batch, one GPU
        data="data/wmt14_en_de_1m",
        eval_batch_size=128,
        log_interval=100,
        valid_interval=1000,
        save_interval=1000,
    ),
    ("mt", "tiny"): dict(
        # Tuned so that 6L-6L B2T reaches test BLEU >= 50 on the synthetic task within a few
        # minutes on 2 CPU cores (see benchmarks/RESULTS.md for the measurement). The synthetic sentences
        # are short: the search stops at 1.2 * src_len + 10 tokens.
        _TINY,
        **_MT_DECODING,
        max_len_a=1.2,
        max_len_b=10,
        warmup_updates=150,
        max_update=1000,
        max_tokens=1024,
        data="data/synthetic_mt",
        synthetic_train_pairs=20000,
        eval_batch_size=250,
        valid_interval=250,
        save_interval=500,
    ),
    # ---------------------------------------------------------------- summarization (Table 6 col. 2)
    # Headline decoding: the paper and the official READMEs (takase/b2t_connection, takase/rethink_perturbations)
    # give no Gigaword recipe; the first author's Gigaword code (takase/control-length encdec/README.md) decodes
    # with fairseq `--beam 5` after averaging the last 10 checkpoints. Hence beam 5, lenpen 1.0 and fairseq's
    # defaults (min_len 1, max_len_a 0, max_len_b 200): the field defaults, at every scale (the synthetic
    # headlines have at most 14 BPE tokens). Articles are single sentences and were not truncated.
    ("summarization", "full"): dict(
        dropout=0.3,
        warmup_updates=4000,
        max_update=50000,
        max_tokens=3584,
        # Not stated in the paper. Table 7's GPUs x Table 6's 3584 tokens per GPU read as for MT give 64 x 3584 ~ 229K
        # (6L-6L) and 144 x 3584 ~ 516K (18L-18L); the first author's Gigaword recipe (takase/control-length: 4 GPUs
        # x update-freq 16 x 3584) gives 229K. The preset keeps MT's 128 x 3584 ~ 459K at both depths, so that the
        # two depths differ in depth only, as in MT; --tokens-per-update 229376 / 516096 trains the per-depth reading.
        tokens_per_update=3584 * 128,
        data="data/gigaword",
        eval_batch_size=128,
        # As for MT: a checkpoint at every epoch end (fairseq's default; a few hundred updates of Gigaword at
        # this batch), the last 10 kept and averaged for decoding, as takase/control-length does.
        save_interval=0,
        save_interval_epochs=1,
        log_interval=100,
        valid_interval=1000,
    ),
    ("summarization", "small"): dict(
        dropout=0.3,
        warmup_updates=4000,
        max_update=20000,
        max_tokens=8192,
        tokens_per_update=65536,
        data="data/gigaword_small",
        eval_batch_size=128,
        log_interval=100,
        valid_interval=1000,
        save_interval=1000,
    ),
    ("summarization", "tiny"): dict(
        # Tuned so that 6L-6L B2T reaches test ROUGE-1 >= 60 on the synthetic headlines within 3 minutes
        # on 2 CPU cores (benchmarks/RESULTS.md). One thread: two on a shared 2-core machine ran 10x slower.
        _TINY,
        warmup_updates=150,
        max_update=800,
        max_tokens=1024,
        data="data/synthetic_summarization",
        synthetic_train_pairs=20000,
        eval_batch_size=250,
        valid_interval=200,
        save_interval=400,
    ),
    # ---------------------------------------------------------------- language model (Table 6 col. 3)
    # The adaptive-input Transformer of Baevski & Auli (fairseq transformer_lm_wiki103, _LM above) on
    # WikiText-103, 6L and 16L (Table 4). Where Table 6 and Baevski & Auli differ, Table 6 wins:
    # Adam (0.9, 0.98), inverse_sqrt at lr 1e-3 with 2K warmup, 50K updates (B&A: NAG, cosine
    # schedule at lr 1, 16K warmup, 286K updates), and 1024 tokens per GPU on 128 GPUs, i.e. one
    # block of tokens_per_sample 1024 (the field default) per GPU (B&A: 3072-token blocks, update-freq 3 on
    # 8 GPUs). Table 6 names no gradient clipping (B&A: 0.1): none, as in the B2T README's recipe. Table 7
    # lists 192 GPUs for 16L (128 for 6L); with Table 6's 1024 tokens per GPU that may mean 1.5x the
    # tokens per update for 16L (197K), which the paper does not state: the preset keeps 128 x 1024 at both depths,
    # so that they differ in depth only; --tokens-per-update 196608 trains the 16L reading.
    # Perplexity uses context_window 512 (fairseq's adaptive-input README of that time evaluates
    # with 512 new tokens per block: --context-window 2560 at 3072; see b2t_lib/train/lm_task.py).
    ("lm", "full"): dict(
        _LM,
        d_model=1024,
        d_ff=4096,
        dropout=0.3,
        attention_dropout=0.1,
        activation_dropout=0.1,
        warmup_updates=2000,
        max_update=50000,
        max_tokens=1024,
        tokens_per_update=1024 * 128,
        context_window=512,
        data="data/wikitext103",
        eval_batch_size=16,
        log_interval=100,
        valid_interval=1000,
        save_interval=1000,
    ),
    ("lm", "small"): dict(
        _LM,
        d_model=1024,
        d_ff=4096,
        dropout=0.3,
        attention_dropout=0.1,
        activation_dropout=0.1,
        warmup_updates=2000,
        max_update=20000,
        max_tokens=4096,
        tokens_per_update=32768,
        context_window=512,  # 1/4 of the paper's batch, one GPU
        data="data/wikitext103",
        eval_batch_size=16,
        log_interval=100,
        valid_interval=1000,
        save_interval=1000,
    ),
    ("lm", "tiny"): dict(
        # The synthetic corpus (b2t_lib.data.synthetic_lm: 1M training tokens, 6,352 ids) with small
        # bands: ids below 200 hold ~77% of the tokens, 200-1000 ~13%. Factor 2 (band dimensions 64,
        # 32, 16) instead of 4 (64, 16, 4): at d_model 64 factor 4 leaves the rarest band 4
        # dimensions, and it learns worse (benchmarks/RESULTS.md, "Language model at tiny scale").
        # One thread: d 64 gains little from a second, and loses 10x when the cores are shared.
        _LM,
        **_TINY,
        adaptive_cutoff=(200, 1000),
        adaptive_factor=2.0,
        adaptive_softmax_dropout=0.1,
        warmup_updates=100,
        max_update=800,
        max_tokens=1024,
        tokens_per_sample=256,
        context_window=128,
        data="data/synthetic_lm",
        synthetic_train_pairs=1_000_000,
        eval_batch_size=64,
        valid_interval=200,
        save_interval=400,
    ),
    # ---------------------------------------------------------------- ASR (Table 6 col. 4, docs/methods.md §3.5)
    # fairseq S2T Transformer (Wang et al. 2020) "T-Md": d 512, FFN 2048, 8 heads, dropout 0.15 everywhere,
    # the Conv1d subsampler (1024 channels, kernels 5,5) and SpecAugment ld (2 x F=27, 2 x T=100, p=1.0): the
    # field defaults; the paper trains 6L-6L and 12L-6L. Table 6: lr 1e-3, warmup 4K (the S2T docs use 10K),
    # 150K updates, 40K frames per GPU x 32 GPUs; clip 10. No label smoothing: the S2T LibriSpeech recipe passes
    # no --label-smoothing (criterion default 0; docs/methods.md §3.5). The last 10 epoch checkpoints averaged.
    ("asr", "full"): dict(
        _SPEECH,
        **_S2T_DROPOUT,
        warmup_updates=4000,
        max_update=150000,
        max_tokens=40000,
        tokens_per_update=40000 * 32,
        data="data/librispeech",
        eval_batch_size=64,
        save_interval=0,
        save_interval_epochs=1,  # ~270 updates per epoch of 960 h at this batch
        log_interval=100,
        valid_interval=2000,
    ),
    # One GPU on train_clean_100 (100 h, ~36M frames): 160K frames per update (update-freq 4 at 40K
    # frames), ~225 updates per epoch, 20K updates (~90 epochs); epoch checkpoints as at full.
    ("asr", "small"): dict(
        _SPEECH,
        **_S2T_DROPOUT,
        warmup_updates=4000,
        max_update=20000,
        max_tokens=40000,
        tokens_per_update=160000,
        data="data/librispeech_100h",
        eval_batch_size=64,
        save_interval=0,
        save_interval_epochs=1,
        log_interval=100,
        valid_interval=1000,
    ),
    # The synthetic spoken-word corpus (b2t_lib.data.synthetic_speech: 2,000 training utterances of
    # about 1.3 s). SpecAugment keeps ld's masks but with time masks under T=10 frames: ld's T=100
    # frames (1 s) is most of a 1.3 s utterance, while on LibriSpeech (~12 s) it is ~8 % of one; with
    # T=100 the 6L-6L model reached only ~55 % WER where T=10 gives ~2 % (benchmarks/RESULTS.md section 7).
    # Tuned so that 6L-6L B2T ends well under 30 % WER within 4 minutes on 2 cores (benchmarks/RESULTS.md).
    ("asr", "tiny"): dict(
        _SPEECH,
        **_TINY,
        conv_channels=256,
        specaug_time_width=10,
        warmup_updates=150,
        max_update=800,
        max_tokens=4000,
        data="data/synthetic_asr",
        synthetic_train_pairs=2000,
        eval_batch_size=100,
        valid_interval=200,
        save_interval=400,
    ),
}

# "Training failed", the stall rule (b2t_lib/train/failure.py): a run ends "stalled" when its validation NLL is
# not ``stall_margin`` bits below the unigram baseline of its data at the first validation at or after update
# ``stall_deadline`` (0 turns the rule off; a run that ends before the deadline is not judged). How the values
# were chosen, with the measurements behind them: benchmarks/RESULTS.md, "The stall rule's margin and deadline".
_STALL_RULE: dict[tuple[str, str], dict] = {
    **{(task, "tiny"): dict(stall_margin=0.5, stall_deadline=400) for task, _ in _PRESETS},
    ("mt", "small"): dict(stall_margin=1.0, stall_deadline=8000),  # 2 x warmup 4000
    ("mt", "full"): dict(stall_margin=1.0, stall_deadline=8000),
    ("summarization", "small"): dict(stall_margin=1.0, stall_deadline=8000),  # 2 x warmup 4000
    ("summarization", "full"): dict(stall_margin=1.0, stall_deadline=8000),
    ("lm", "small"): dict(stall_margin=1.0, stall_deadline=4000),  # 2 x warmup 2000
    ("lm", "full"): dict(stall_margin=1.0, stall_deadline=4000),
    ("asr", "small"): dict(stall_margin=1.0, stall_deadline=8000),  # 2 x warmup 4000
    ("asr", "full"): dict(stall_margin=1.0, stall_deadline=8000),
}

# Named overrides on top of a preset.
RECIPES: dict[str, dict] = {
    # Appendix C.1, the 100L-100L regularization: dropout 0.3 -> 0.5, word dropout 0.1 on both
    # sides, initial non-embedding weights x 0.1, gradient clipping 0.1, 50K -> 25K updates.
    "deep100": dict(dropout=0.5, word_dropout=0.1, init_scale=0.1, clip_norm=0.1, max_update=25000),
    # The authors' later 18L-18L recipe, with which their trained B2T model scores 27.52 on average (README of
    # takase/b2t_connection, revision of 2023-05-18; docs/methods.md §1.8): dropout 0.5, gradient clipping 0.1, word
    # dropout 0.1 on both sides, and for B2T the N^-1/2 weight rescaling of that day's code (B2T runs only). The
    # README trains in fp16 (--fp16); the course's CUDA runs use bf16 autocast unless given --amp fp16.
    "official18": dict(dropout=0.5, clip_norm=0.1, word_dropout=0.1, b2t_rescale_init=True),
    # Appendix A.1: T-Fixup (``--variant tfixup``) runs with its own recipe (Huang et al. 2020;
    # docs/methods.md §2.3): no warmup (inverse_sqrt_nowarmup, decay period 4000), lr 5e-4 as in its
    # IWSLT example. The exact values the B2T authors used are not published.
    "tfixup": dict(lr_scheduler="inverse_sqrt_nowarmup", lr=5e-4, decay_period=4000),
}

# How a task makes the data a preset names when its folder holds no finished preparation (the tiny
# presets generate theirs from ``synthetic_train_pairs``): the options of the task's ``prepare_real``
# (what its data_scripts/ command runs). The small MT data is a seeded random 1M-pair subset of WMT'14,
# the small headline data a 500K-pair subset of Gigaword (test sets unchanged); the small LM reads all of
# WikiText-103 (its presets cut the updates instead); small ASR trains on train-clean-100 (100 h).
DATA_PREPARATION: dict[tuple[str, str], dict] = {
    ("mt", "small"): dict(max_pairs=1_000_000),
    ("mt", "full"): dict(),
    ("summarization", "small"): dict(max_pairs=500_000),
    ("summarization", "full"): dict(),
    ("lm", "small"): dict(),
    ("lm", "full"): dict(),
    ("asr", "small"): dict(
        splits=("train.clean.100", "validation.clean", "validation.other", "test.clean", "test.other")
    ),  # = data.speech_sources.SMALL_HUB_SPLITS (tested)
    ("asr", "full"): dict(),
}


# ---------------------------------------------------------------- the rehearsal (B2T_REHEARSAL=1)
# At small and full under the rehearsal, every run's option named here is at most this value (a cap, so a run
# that asks for less keeps it, 0 = "off" stays off, and applying the rule twice changes nothing). Under "*" the
# caps of every task, then each task's own. Tokens per update are set so that both the one-process runs of
# small (4 batches per update) and the two-process torchrun of full (2 per process) accumulate gradients.
# The search's length limit b is the beam's work per sentence: an untrained model never ends a hypothesis, so
# at b = 200 decoding would cost ten times the training. At b = 24 the search still took 2.5 s of an 18L-18L MT
# run's 10 s process (seven test sets); b = 8 saves about 0.9 s of CPU per run, and 8 steps still run every part
# of the search (cache, reordering, finished hypotheses, length limit). The stall rule's deadline is not
# capped: an 8-update model is still at the uniform loss, so a deadline inside the run would stall every
# rehearsal run and no decoding or metric would ever run at small/full; the rehearsal's runs end before the
# scale's deadline (not judged) and are evaluated, and tests/test_rehearsal.py proves the stall path at small
# and full.
REHEARSAL_SIZES: dict[str, dict] = {
    "*": dict(
        d_model=16,
        n_heads=2,
        d_ff=32,
        max_update=8,
        warmup_updates=4,
        log_interval=2,
        valid_interval=4,
        save_interval=4,
        max_len_b=8,
    ),
    "mt": dict(max_tokens=128, tokens_per_update=512),
    "summarization": dict(max_tokens=128, tokens_per_update=512),
    # the miniature WikiText's bands must fit its vocabulary (506 words, REHEARSAL_SOURCES)
    "lm": dict(
        max_tokens=128, tokens_per_update=512, tokens_per_sample=64, context_window=32, adaptive_cutoff=(100, 300)
    ),
    "asr": dict(max_tokens=1000, tokens_per_update=4000, conv_channels=32),  # frames: 10 s of audio per batch
}
REHEARSAL_THREADS = 1  # each CPU process that stands in for a GPU computes on one thread (2 of them share 2 cores)
# A trainability map (b2t_lib.trainability) at small/full under the rehearsal keeps the corners of its grid: its
# shallowest and deepest depth, its smallest and largest learning rate, for every variant. Every cell that runs keeps
# its depth and the code path is the same for every cell, so the other cells would only repeat it: chapter 10's map
# at small, 36 cells of 8 updates at 6-36 layers per side, took 274 s of a 470 s rehearsal notebook (Xeon, 2 cores).

# The miniature copies of the real sources that the rehearsal's downloads read (b2t_lib.data.miniature builds
# them in the Hugging Face caches, with the Hub's repository ids, configs, splits, columns and files): how
# many examples each holds. The data checks that a real download must pass (row counts, vocabulary size)
# read these numbers instead of the published ones under the rehearsal (source_sizes).
REHEARSAL_SOURCES: dict[str, dict] = {
    # ~3 updates per epoch at the rehearsal's 512 tokens per update: an 8-update full run averages 2-3 epoch ends
    "wmt14_en_de": dict(train_min_pairs=120, newstest_lines={year: 16 for year in range(2010, 2017)}),
    "gigaword": dict(train=120, dev=24, test=16),
    "wikitext103": dict(rows=dict(train=600, valid=40, test=40), vocab=506),
    # SentencePiece's 10,000 pieces need ~18K training words in train.clean.100 alone (small prepares only it)
    # not a source: the synthetic batches of benchmarks/gpu_check.py (WMT's vocabulary, WikiText-103's, ...)
    "benchmark": dict(mt_vocab=512, lm_vocab=512, length=16, train_pairs=500),
    "librispeech": {
        "train.clean.100": 800,
        "train.clean.360": 40,
        "train.other.500": 40,
        "validation.clean": 12,
        "validation.other": 12,
        "test.clean": 12,
        "test.other": 12,
    },
}


def source_sizes(name: str, published: dict) -> dict:
    """The sizes the data source ``name`` must have: ``published`` (its release's counts), or, under the
    rehearsal, those of its miniature copy (:data:`REHEARSAL_SOURCES`)."""
    return copy.deepcopy(REHEARSAL_SOURCES[name]) if rehearsal() else published


def rehearsal_sizes(values: dict) -> dict:
    """``values`` (flat option names, ``task`` and ``scale`` included) with the rehearsal's shrink rule applied
    when the rehearsal is on and the scale is ``small`` or ``full``; otherwise unchanged. A copy."""
    values = dict(values)
    if values.get("scale") == "tiny" or not rehearsal():
        return values
    caps = {**REHEARSAL_SIZES["*"], **REHEARSAL_SIZES.get(values.get("task"), {})}
    for name, cap in caps.items():
        if name not in values:
            continue
        value = values[name]
        if isinstance(cap, tuple):  # a band layout: the rehearsal's when any edge lies beyond it
            values[name] = cap if max(value) > max(cap) else tuple(value)
        else:
            values[name] = min(value, cap)
    values["threads"] = REHEARSAL_THREADS
    return values


def rehearsal_grid(depths: list, lrs: list, scale: str) -> tuple[list, list]:
    """A trainability map's ``depths`` and ``lrs``, reduced to their smallest and largest values (the grid's
    corners) at small and full when the rehearsal is on; otherwise unchanged. Order is kept."""
    if scale == "tiny" or not rehearsal():
        return list(depths), list(lrs)

    def corners(values: list) -> list:
        return [v for v in dict.fromkeys(values) if v in (min(values), max(values))]

    return corners(list(depths)), corners(list(lrs))


def preset_tasks() -> list[str]:
    """The tasks that have presets, in the paper's order (the trainer's task registry must match them: tested)."""
    return list(dict.fromkeys(task for task, _ in _PRESETS))


def preset(task: str, scale: str) -> dict:
    """The options the preset of ``task`` at ``scale`` states: what differs from the fields' defaults, and the
    options every preset sets (a fresh dict the caller may change); under the rehearsal, small and full come
    shrunk (:func:`rehearsal_sizes`). :meth:`~b2t_lib.train.TrainConfig.from_preset` builds the whole config."""
    if task not in preset_tasks():
        raise ValueError(f"unknown task {task!r}; known tasks are: {', '.join(preset_tasks())}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; known scales are: {', '.join(SCALES)}")
    values = copy.deepcopy(_PRESETS[(task, scale)])
    values.update(_STALL_RULE[(task, scale)])
    values["task"] = task
    values["scale"] = scale
    return rehearsal_sizes(values)


def recipe(name: str) -> dict:
    """The overrides of a named recipe (``deep100``, ``official18``, ``tfixup``)."""
    if name not in RECIPES:
        raise ValueError(f"unknown recipe {name!r}; known recipes are: {', '.join(sorted(RECIPES))}")
    return dict(RECIPES[name])
