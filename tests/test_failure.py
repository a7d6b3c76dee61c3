""" "Training failed": the stall rule (a run that never leaves the unigram plateau ends "stalled"),
the unigram baseline stored with the data, the exit code, and the tables that print both failure
kinds as the paper does, with the kind in a footnote (tasks MT, summarization, LM and ASR)."""

import json

import numpy as np
import pytest

from b2t_lib.cli import EXIT_FAILED, main
from b2t_lib.errors import run_command
from b2t_lib.data.unigram import CACHE_NAME, cached_unigram_baseline, stored_unigram_baseline, unigram_cross_entropy
from b2t_lib.paper_tables import FailedRun, collect_results, render_table, row_from_result, section_of
from b2t_lib.presets import preset
from b2t_lib.train.registry import task_names
from b2t_lib.scale import SCALES
from b2t_lib.train import TrainConfig, Trainer, list_checkpoints, load_checkpoint, read_log
from b2t_lib.train.failure import StallRule, failure_note, is_failed
from b2t_lib.train.task import Task


# ---------------------------------------------------------------------- the rule
def test_the_rule_waits_for_the_deadline_then_judges_the_first_validation_at_or_after_it():
    rule = StallRule(margin=0.5, deadline=400, baseline=7.81)  # bar: 7.31 bits
    assert rule.active and rule.bar == pytest.approx(7.31)
    for update in (25, 200, 375):  # far above the bar, but too early
        assert rule.check(update, 9.5) is None
    message = rule.check(425, 7.89)  # first validation after 400
    assert message and "7.89 bits at update 425" in message and "7.81" in message and "plateau" in message
    assert rule.summary(425) == {
        "verdict": "stalled",
        "unigram_baseline": 7.81,
        "margin": 0.5,
        "deadline": 400,
        "bar": 7.31,
        "judged_at": 425,
        "valid_nll": 7.89,
    }


def test_a_run_below_the_bar_at_the_deadline_is_never_judged_again():
    rule = StallRule(margin=0.5, deadline=400, baseline=7.81)
    assert rule.check(400, 7.30) is None  # 0.51 bits below: trained
    assert rule.check(425, 9.0) is None and rule.check(10_000, float("nan")) is None
    assert rule.summary(500)["verdict"] == "passed" and rule.summary(500)["judged_at"] == 400
    # ... and the verdict survives a checkpoint: a resumed run is not judged twice
    resumed = StallRule(margin=0.5, deadline=400, baseline=7.81)
    resumed.load_state_dict(json.loads(json.dumps(rule.state_dict())))
    assert resumed.check(600, 9.0) is None and resumed.summary(600)["verdict"] == "passed"


def test_at_the_bar_or_non_finite_is_stalled_and_short_or_switched_off_runs_are_not_judged():
    assert StallRule(0.5, 400, 7.81).check(400, 7.31) is not None  # not *below* the bar
    assert StallRule(0.5, 400, 7.81).check(400, float("nan")) is not None
    short = StallRule(0.5, 400, 7.81)
    assert short.check(300, 9.0) is None
    assert short.summary(300)["verdict"] == "not judged" and "before the deadline" in short.summary(300)["reason"]
    assert StallRule(0.5, 0, 7.81).check(500, 9.0) is None  # deadline 0: off
    assert StallRule(0.5, 400, None).summary(500)["verdict"] == "off"  # a task without a baseline
    stalled = StallRule(0.5, 400, 7.81)
    stalled.check(400, 7.9)
    stalled.load_state_dict(stalled.state_dict())  # resuming a stalled run judges it again
    assert stalled.check(425, 7.9) is not None


def test_the_options_come_from_every_preset_and_are_checked():
    for task in task_names():
        for scale in SCALES:
            values = preset(task, scale)
            assert values["stall_margin"] > 0 and values["stall_deadline"] >= values["warmup_updates"], (task, scale)
            assert values["stall_deadline"] < values["max_update"], (task, scale)
    assert (preset("mt", "tiny")["stall_margin"], preset("mt", "tiny")["stall_deadline"]) == (0.5, 400)
    with pytest.raises(ValueError, match="--stall-margin"):
        TrainConfig.from_preset("mt", "tiny", stall_margin=-1.0)
    with pytest.raises(ValueError, match="--stall-deadline"):
        TrainConfig.from_preset("mt", "tiny", stall_deadline=-5)
    from b2t_lib.cli import build_train_parser

    text = build_train_parser("mt", "full").format_help()
    assert "--stall-margin" in text and "--stall-deadline" in text and "(default: 8000)" in text


# ---------------------------------------------------------------------- the unigram baseline
def test_unigram_cross_entropy_by_hand():
    train, valid, vocab = np.array([4, 4, 5, 2, 2, 2]), np.array([4, 2, 7]), 8
    # p(w) = (n(w) + 1) / (N + V): 4 -> 3/14, 2 -> 4/14, 7 (unseen) -> 1/14
    expected = -(np.log2(3 / 14) + np.log2(4 / 14) + np.log2(1 / 14)) / 3
    assert unigram_cross_entropy(train, valid, vocab) == pytest.approx(expected)
    with pytest.raises(ValueError, match="beyond the dictionary"):
        unigram_cross_entropy(np.array([9]), valid, vocab)


class _IdsTask(Task):
    """A task with nothing but the two hooks of the unigram baseline."""

    name = "ids_only"
    calls = 0

    def target_token_ids(self, split):
        type(self).calls += 1
        return {"train": np.array([4, 4, 5, 2, 2, 2]), "valid": np.array([4, 2, 7])}[split]

    def target_vocab_size(self):
        return 8

    def load_datasets(self):  # the baseline is computed from loaded data: unigram_baseline loads it
        self.train_data = self.valid_data = "loaded"

    train_batches = valid_batches = collate = build_model = evaluate = None


def test_a_baseline_missing_from_older_data_is_computed_once_and_cached_next_to_the_manifest(tmp_path):
    class Cfg:
        data = str(tmp_path)

    (tmp_path / "manifest.json").write_text(json.dumps({"format": "b2t-translation-v1"}))  # older code's manifest
    expected = unigram_cross_entropy(np.array([4, 4, 5, 2, 2, 2]), np.array([4, 2, 7]), 8)
    assert stored_unigram_baseline(tmp_path) is None
    task = _IdsTask(Cfg())
    assert task.unigram_baseline() == pytest.approx(expected) and _IdsTask.calls == 2  # train and valid ids
    assert task.train_data == "loaded"  # the data was read for it
    assert json.loads((tmp_path / CACHE_NAME).read_text())["valid"]["bits_per_token"] == pytest.approx(expected)
    assert task.unigram_baseline() == pytest.approx(expected) and _IdsTask.calls == 2  # read, not recomputed
    # data prepared again (another manifest) is measured again; a manifest that stores it wins
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "b2t-translation-v1", "again": 1}))
    assert stored_unigram_baseline(tmp_path) is None
    (tmp_path / "manifest.json").write_text(json.dumps({"unigram": {"valid": {"bits_per_token": 6.5}}}))
    assert cached_unigram_baseline(tmp_path, compute=lambda: 1 / 0) == 6.5


def test_a_task_without_the_hooks_says_so():
    class Cfg:
        data = "/nonexistent"

    class NoHooks(_IdsTask):
        target_token_ids = Task.target_token_ids

    with pytest.raises(NotImplementedError, match="target_token_ids"):
        NoHooks(Cfg()).unigram_baseline()


# ---------------------------------------------------------------------- tables, from hand-made records
def _record(task, variant, enc, dec, status="completed", **metrics):
    return {
        "task": task,
        "variant": variant,
        "status": status,
        "message": "",
        "config": {"task": task, "variant": variant, "encoder_layers": enc, "decoder_layers": dec},
        "metrics": metrics,
    }


STALLED = dict(
    _record("mt", "post_ln", 18, 18, status="stalled", valid_nll=7.89),
    message="validation NLL 7.89 bits at update 400 ...",
    stall_rule={
        "verdict": "stalled",
        "unigram_baseline": 7.81,
        "margin": 0.5,
        "deadline": 400,
        "bar": 7.31,
        "judged_at": 400,
        "valid_nll": 7.89,
    },
)
DIVERGED = dict(
    _record("mt", "deepnet", 18, 18, status="diverged"), message="the training loss became nan at update 37"
)


def test_row_builders_of_the_four_tasks():
    mt = _record("mt", "b2t", 18, 18, bleu={"newstest2013": 26.7, "newstest2014": 28.5}, bleu_avg=27.6)
    assert row_from_result(mt) == [None, None, None, 26.7, 28.5, None, None, 27.6] and section_of(mt) == "18L-18L"
    synthetic = _record("mt", "b2t", 6, 6, bleu={"test": 79.74}, bleu_avg=79.74)
    assert row_from_result(synthetic) == [None] * 7 + [79.74]  # only the Average
    summ = _record(
        "summarization",
        "b2t",
        6,
        6,
        rouge={"test": {"rouge1": 38.4, "rouge2": 19.4, "rougeL": 35.7}},
        rouge1=38.4,
        rouge2=19.4,
        rougeL=35.7,
    )
    assert row_from_result(summ) == [38.4, 19.4, 35.7] and section_of(summ) == "6L-6L"
    lm = _record("lm", "pre_ln", 0, 16, valid_ppl=18.53, test_ppl=19.24, valid_nll=4.2)
    assert row_from_result(lm) == [18.53, 19.24] and section_of(lm) == "16L"
    asr = _record(
        "asr", "b2t", 12, 6, wer={"dev_clean": 3.26, "dev_other": 7.74, "test_clean": 3.48, "test_other": 7.68}
    )
    assert row_from_result(asr) == {"Dev clean": 3.26, "Dev other": 7.74, "Test clean": 3.48, "Test other": 7.68}
    assert section_of(asr) == "12L-6L"
    assert row_from_result(_record("asr", "b2t", 6, 6, wer={"test": 12.5})) == {"test": 12.5}  # synthetic
    assert row_from_result(_record("lm", "b2t", 0, 6)) == [None, None]  # not evaluated: "-"
    for failed in (STALLED, DIVERGED, dict(lm, status="stalled"), dict(asr, status="diverged")):
        row = row_from_result(failed)
        assert isinstance(row, FailedRun) and row.kind == failed["status"] and is_failed(failed["status"])


def test_failure_notes_name_the_kind_and_the_numbers():
    assert failure_note(STALLED) == (
        "stalled: validation NLL 7.89 bits at update 400, unigram baseline 7.81 bits "
        "(margin 0.5; never left the plateau)"
    )
    assert failure_note(DIVERGED) == "diverged: the training loss became nan at update 37"
    assert failure_note(_record("mt", "b2t", 6, 6)) is None


# The layout of notebook 06's Table 1 before failure footnotes existed: unchanged where nothing failed.
TABLE1_TINY = """\
Table 1: BLEU scores of each method on WMT newstest2010-2016 and their averages
Method                          2010    2011    2012    2013    2014    2015    2016 Average
--------------------------------------------------------------------------------------------
Enc-Dec: 6L-6L
  Post-LN (paper)              24.27   22.06   22.43   26.11   27.13   29.70   34.40   26.59
  Post-LN (tiny)                   -       -       -       -       -       -       -   44.46
  Pre-LN (paper)               24.03   21.77   22.08   25.63   26.27   29.07   33.84   26.10
  DLCL (paper)                 23.94   22.00   22.24   26.11   27.37   29.71   34.26   26.52
  Admin (paper)                24.32   21.79   22.17   26.26   27.14   29.61   34.12   26.49
  T-Fixup (paper)              24.09   21.98   22.04   25.96   26.92   29.45   34.56   26.43
  RealFormer (paper)           24.18   22.02   22.17   26.02   26.98   29.36   34.15   26.41
  DeepNet (paper)              24.08   21.76   22.09   25.90   26.85   29.62   34.39   26.38
  B2T connection (paper)       24.12   21.93   22.29   26.31   26.84   29.48   34.73   26.53
  B2T connection (tiny)            -       -       -       -       -       -       -   79.74
Enc-Dec: 18L-18L
  Post-LN (paper)             Training failed
  Pre-LN (paper)               24.07   21.98   22.40   26.28   27.36   29.74   34.16   26.57
  Pre-LN (tiny)                    -       -       -       -       -       -       -    0.05
  DLCL (paper)                 24.20   22.51   22.83   26.59   27.97   30.24   33.98   26.90
  DLCL (tiny)                  24.50       -       -       -       -       -       -   25.00
  Admin (paper)                24.56   22.17   22.62   26.48   27.99   30.35   33.88   26.86
  T-Fixup (paper)              24.45   22.29   22.76   26.57   27.71   30.13   34.69   26.94
  RealFormer (paper)           24.32   22.42   22.68   26.59   28.58   30.36   33.71   26.95
  DeepNet (paper)              24.70   22.40   22.92   26.85   28.21   30.60   34.25   27.13
  B2T connection (paper)       24.62   22.51   22.86   26.74   28.48   30.99   34.93   27.30"""


def row(label: str, cells: str) -> str:
    """One printed row: the label in its 26-wide column, then the cells."""
    return f"  {label:<26}{cells}"


def test_table1_layout_is_unchanged_where_nothing_failed():
    ours = {
        "6L-6L": {"post_ln": [None] * 7 + [44.46], "b2t": [None] * 7 + [79.74]},
        "18L-18L": {"pre_ln": [None] * 7 + [0.05], "dlcl": [24.5] + [None] * 6 + [25.0]},
    }
    assert render_table(1, ours, ours_label="tiny") == TABLE1_TINY


def test_both_failure_kinds_print_training_failed_with_a_footnote_each(tmp_path):
    paths = []
    for name, record in (
        ("stalled", STALLED),
        ("diverged", DIVERGED),
        ("b2t", _record("mt", "b2t", 18, 18, bleu={"test": 7.5}, bleu_avg=7.5)),
        ("lm", _record("lm", "b2t", 0, 16, valid_ppl=30.0, test_ppl=31.0)),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(record))
        paths.append(tmp_path / name)
    ours = collect_results(paths + [tmp_path / "missing"], table=1)  # the LM run is not Table 1's
    assert set(ours) == {"18L-18L"} and set(ours["18L-18L"]) == {"post_ln", "deepnet", "b2t"}
    lines = render_table(1, ours).splitlines()
    assert row("Post-LN (ours)", "  Training failed*") in lines
    assert row("DeepNet (ours)", "  Training failed**") in lines
    assert row("Post-LN (paper)", "  Training failed") in lines  # the paper's: no footnote
    assert lines[-3:] == ["", "* " + failure_note(STALLED), "** " + failure_note(DIVERGED)]
    assert row("B2T connection (ours)", "       -" * 7 + "    7.50") in lines
    # a hand-written "failed" row (notebooks) still prints, without a footnote
    assert row("Pre-LN (ours)", "  Training failed") in render_table(1, {"18L-18L": {"pre_ln": "failed"}})


def test_tables_of_the_other_tasks_read_their_metrics(tmp_path):
    records = [
        _record("summarization", "b2t", 18, 18, rouge1=39.6, rouge2=20.3, rougeL=36.7),
        dict(
            _record("summarization", "post_ln", 18, 18, status="stalled", valid_nll=7.0),
            stall_rule=dict(STALLED["stall_rule"], valid_nll=7.0, unigram_baseline=7.2),
        ),
        _record("lm", "pre_ln", 0, 6, valid_ppl=20.98, test_ppl=21.93),
        _record(
            "asr", "b2t", 12, 6, wer={"dev_clean": 3.26, "dev_other": 7.74, "test_clean": 3.48, "test_other": 7.68}
        ),
        _record("asr", "pre_ln", 6, 6, wer={"valid": 20.0, "test": 21.5}),
    ]
    for i, record in enumerate(records):
        (tmp_path / f"run{i}.json").write_text(json.dumps(record))
    paths = sorted(tmp_path.glob("*.json"))
    table3 = render_table(3, collect_results(paths, table=3)).splitlines()
    assert row("B2T connection (ours)", "   39.60   20.30   36.70") in table3
    assert row("Post-LN (ours)", "  Training failed*") in table3
    assert table3[-1].startswith("* stalled: validation NLL 7.00 bits at update 400, unigram baseline 7.20 bits")
    table4 = render_table(4, collect_results(paths, table=4)).splitlines()
    assert "Dec: 6L" in table4 and row("Pre-LN (ours)", "   20.98   21.93") in table4
    table5 = render_table(5, collect_results(paths, table=5)).splitlines()
    assert table5[1].split()[-2:] == ["valid", "test"]  # the synthetic corpus' own splits
    assert any(
        line.startswith("  B2T connection (ours)") and line.split()[-6:] == ["3.26", "7.74", "3.48", "7.68", "-", "-"]
        for line in table5
    )
    assert any(
        line.startswith("  Pre-LN (ours)") and line.split()[-6:] == ["-", "-", "-", "-", "20.00", "21.50"]
        for line in table5
    )


def test_table_command_reads_any_task_and_refuses_unknown_tables(tmp_path, capsys):
    (tmp_path / "lm.json").write_text(json.dumps(_record("lm", "b2t", 0, 16, valid_ppl=30.0, test_ppl=31.0)))
    assert main(["table", "--table", "4", str(tmp_path / "*.json")]) == 0
    assert row("B2T connection (ours)", "   30.00   31.00") in capsys.readouterr().out
    assert run_command(main, ["table", "--table", "6", str(tmp_path / "*.json")]) == 2
    assert capsys.readouterr().err.startswith("error: argument --table: invalid choice: 6")
    (tmp_path / "train.log").write_text("not a record")  # a glob such as runs/* matches logs too
    assert main(["table", "--table", "4", str(tmp_path / "*")]) == 0
    assert capsys.readouterr().err == ""
    (tmp_path / "broken.json").write_text('{"status": ')  # a damaged record is named in a warning, then skipped
    assert main(["table", "--table", "4", str(tmp_path / "*")]) == 0
    out, err = capsys.readouterr()
    assert row("B2T connection (ours)", "   30.00   31.00") in out
    assert err.startswith("warning: not a run record: not JSON") and "broken.json:1" in err
    assert len(err.splitlines()) == 1


# ---------------------------------------------------------------------- the trainer (slow: trains)
@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    from b2t_lib.data import prepare_synthetic_mt

    return prepare_synthetic_mt(
        tmp_path_factory.mktemp("data") / "synthetic", n_train=200, n_valid=20, n_test=20, bpe_vocab_size=300, workers=1
    )


def tiny(data_dir, save_dir, **overrides):
    """A 1L-1L run validated every 4 updates; the rule's deadline at 6, so the first judged validation is 8."""
    values = dict(
        data=str(data_dir),
        save_dir=str(save_dir),
        d_model=32,
        n_heads=2,
        d_ff=64,
        encoder_layers=1,
        decoder_layers=1,
        max_tokens=256,
        threads=1,
        progress_bar=False,
        eval_at_end=False,
        log_interval=1,
        valid_interval=4,
        save_interval=100,
        warmup_updates=5,
        max_update=20,
        stall_deadline=6,
        stall_margin=0.5,
    )
    values.update(overrides)
    return TrainConfig.from_preset("mt", "tiny", **values)


@pytest.mark.slow
def test_the_manifest_stores_the_baseline_the_trainers_nll_gives_a_frequency_only_model(small_data):
    import math

    import torch

    from b2t_lib.data import load_translation_split
    from b2t_lib.train import build_task, label_smoothed_nll_loss

    train, valid = load_translation_split(small_data, "train"), load_translation_split(small_data, "valid")
    counts = (
        torch.bincount(
            torch.from_numpy(np.array(train.tgt.data, dtype=np.int64)), minlength=len(train.dictionary)
        ).double()
        + 1
    )
    batch = valid.collate(list(range(len(valid))))
    logits = counts.log().expand(*batch["target"].shape, -1)  # the same prediction at every position
    out = label_smoothed_nll_loss(logits, batch["target"], epsilon=0.0)
    bits = float(out.nll) / float(out.ntokens) / math.log(2)  # the trainer's valid_nll, in bits
    manifest = json.loads((small_data / "manifest.json").read_text())
    assert manifest["unigram"]["valid"]["bits_per_token"] == pytest.approx(bits, abs=1e-5)
    task = build_task(tiny(small_data, "unused"))
    task.load_datasets()
    assert task.unigram_baseline() == manifest["unigram"]["valid"]["bits_per_token"]
    assert bits < math.log2(len(train.dictionary))  # better than a uniform guess


@pytest.mark.slow
def test_data_prepared_before_the_baseline_was_stored_gets_it_without_loading_first(small_data, tmp_path):
    """A data folder from an older version has no baseline in its manifest: a task that has not loaded its
    data yet (a notebook asking for the baseline first) computes it, caches it, and gets the stored value."""
    import shutil

    from b2t_lib.train import build_task

    old = tmp_path / "old_data"
    shutil.copytree(small_data, old)
    manifest = json.loads((old / "manifest.json").read_text())
    expected = manifest.pop("unigram")["valid"]["bits_per_token"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert stored_unigram_baseline(old) is None
    task = build_task(tiny(old, "unused"))  # nothing loaded
    assert task.unigram_baseline() == pytest.approx(expected, abs=1e-9)
    assert (old / CACHE_NAME).is_file() and stored_unigram_baseline(old) == pytest.approx(expected, abs=1e-9)


@pytest.mark.slow
def test_a_stalled_run_stops_at_the_first_validation_after_the_deadline_and_keeps_what_it_wrote(small_data, tmp_path):
    # A margin no 1L model can reach in 20 updates: the NLL is above the bar at every validation.
    record = Trainer(tiny(small_data, tmp_path / "run", stall_margin=100.0, save_interval=4)).train()
    assert record["status"] == "stalled" and record["metrics"]["num_updates"] == 8
    valid = read_log(tmp_path / "run", "valid")
    assert [e["update"] for e in valid] == [4, 8]  # above the bar at 4 too: not judged before 6
    verdict = read_log(tmp_path / "run", "stall_rule")
    assert len(verdict) == 1 and verdict[0]["verdict"] == "stalled" and verdict[0]["update"] == 8
    assert verdict[0]["message"] == record["message"] and "update 8" in record["message"]
    stored = json.loads((tmp_path / "run" / "result.json").read_text())
    assert stored["status"] == "stalled" and stored["stall_rule"]["judged_at"] == 8
    assert stored["metrics"]["valid_nll"] == valid[-1]["valid_nll"] and "bleu" not in stored["metrics"]
    assert [p.name for p in list_checkpoints(tmp_path / "run")] == ["checkpoint_4.pt", "checkpoint_8.pt"]
    assert load_checkpoint(tmp_path / "run" / "checkpoint_last.pt")["trainer"]["num_updates"] == 8
    assert len(read_log(tmp_path / "run", "train")) == 8


@pytest.mark.slow
def test_resumed_runs_keep_the_rules_state(small_data, tmp_path, monkeypatch):
    # Stalled: once in one go, once stopped before the deadline (not judged) and resumed: the same verdict.
    once = Trainer(tiny(small_data, tmp_path / "once", stall_margin=100.0)).train()
    short = Trainer(tiny(small_data, tmp_path / "twice", stall_margin=100.0, max_update=4)).train()
    assert short["status"] == "completed" and short["stall_rule"]["verdict"] == "not judged"
    twice = Trainer(tiny(small_data, tmp_path / "twice", stall_margin=100.0, resume=True)).train()
    assert (twice["status"], twice["message"]) == (once["status"], once["message"])
    untimed = lambda path: [{k: v for k, v in e.items() if k != "tokens_per_s"} for e in read_log(path)]  # noqa: E731
    assert untimed(tmp_path / "twice") == untimed(tmp_path / "once")
    # A stalled run resumed with the rule off trains on to max_update.
    on = Trainer(tiny(small_data, tmp_path / "twice", stall_deadline=0, max_update=12, resume=True)).train()
    assert on["status"] == "completed" and on["metrics"]["num_updates"] == 12
    assert on["stall_rule"]["verdict"] == "off"
    # Passed: judged trained at update 8 (a baseline it is below); resumed where it would not be, it is not
    # judged again.
    monkeypatch.setattr(Task, "unigram_baseline", lambda self: 100.0)
    first = Trainer(tiny(small_data, tmp_path / "passed", max_update=12, save_interval=12)).train()
    assert first["stall_rule"]["verdict"] == "passed" and first["stall_rule"]["judged_at"] == 8
    monkeypatch.setattr(Task, "unigram_baseline", lambda self: 0.0)
    later = Trainer(tiny(small_data, tmp_path / "passed", resume=True)).train()
    assert later["status"] == "completed" and later["metrics"]["num_updates"] == 20
    assert later["stall_rule"]["verdict"] == "passed" and later["stall_rule"]["judged_at"] == 8


# The notebook-06 setting: 18L-18L at d 32 on the synthetic pair, 400 updates, the tiny preset's rule.
NOTEBOOK06 = [
    "--d-model",
    "32",
    "--n-heads",
    "2",
    "--d-ff",
    "64",
    "--max-tokens",
    "256",
    "--warmup-updates",
    "100",
    "--max-update",
    "400",
    "--valid-interval",
    "25",
    "--save-interval",
    "400",
    "--threads",
    "1",
    "--no-progress-bar",
    "--log-interval",
    "25",
    "--keep-last",
    "1",
    "--average-last",
    "1",
]


# The test trains it to update 200 and judges it there (an explicit deadline); the preset's deadline, 400, is what
# chapter 06 judges on three seeds. Measured at 200 (Xeon, one thread): Post-LN 18L-18L 7.89 bits, on the plateau
# since update 150 (7.91, 7.89, 7.89); B2T 6L-6L 6.80, half a bit below the bar 7.31. Half the training of 400.
STALL_TEST = [*NOTEBOOK06, "--stall-deadline", "200"]
for _option in ("--max-update", "--save-interval"):
    STALL_TEST[STALL_TEST.index(_option) + 1] = "200"


@pytest.fixture(scope="module")
def synthetic_mt(tmp_path_factory):
    from b2t_lib.data import prepare_synthetic_mt

    return prepare_synthetic_mt(tmp_path_factory.mktemp("data") / "synthetic_mt", n_train=20000, seed=0)


@pytest.mark.slow
def test_post_ln_18L_stalls_exits_3_and_prints_training_failed_while_b2t_trains(synthetic_mt, tmp_path, capsys):
    post = tmp_path / "post_ln_18L"
    code = main(
        [
            "train",
            "--data",
            str(synthetic_mt),
            "--save-dir",
            str(post),
            "--variant",
            "post_ln",
            "--encoder-layers",
            "18",
            "--decoder-layers",
            "18",
            *STALL_TEST,
        ]
    )
    captured = capsys.readouterr()
    assert code == EXIT_FAILED == 3 and "TRAINING STALLED" in captured.err
    printed = json.loads(captured.out)
    assert printed["status"] == "stalled" and "never left the plateau" in printed["message"]
    record = json.loads((post / "result.json").read_text())
    rule = record["stall_rule"]
    assert rule["judged_at"] == 200 and (rule["margin"], rule["deadline"]) == (0.5, 200)  # the tiny preset's margin
    assert rule["valid_nll"] > rule["unigram_baseline"] - 0.2  # on the plateau (7.89 vs 7.81 measured)
    assert (post / "checkpoint_last.pt").is_file() and read_log(post, "valid")[-1]["update"] == 200

    b2t = tmp_path / "b2t_6L"  # the same setting at 6L-6L trains: not flagged
    code = main(
        [
            "train",
            "--data",
            str(synthetic_mt),
            "--save-dir",
            str(b2t),
            "--variant",
            "b2t",
            "--encoder-layers",
            "6",
            "--decoder-layers",
            "6",
            "--beam",
            "1",
            *STALL_TEST,
        ]
    )
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["status"] == "completed" and "bleu" in printed["metrics"]
    rule = json.loads((b2t / "result.json").read_text())["stall_rule"]
    assert rule["verdict"] == "passed" and rule["valid_nll"] < rule["bar"]

    assert main(["table", "--table", "1", str(tmp_path / "*")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert row("Post-LN (ours)", "  Training failed*") in lines
    assert lines[-1].startswith("* stalled: validation NLL ") and "never left the plateau" in lines[-1]
    assert any(line.startswith("  B2T connection (ours)") and "Training failed" not in line for line in lines)


def test_logs_by_section_lays_the_runs_out_as_the_tables_do(tmp_path):
    from b2t_lib.paper_tables import logs_by_section

    runs = {"b2t_18L": _record("mt", "b2t", 18, 18), "post_ln_18L": STALLED, "pre_ln_6L": _record("mt", "pre_ln", 6, 6)}
    for name, record in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(record))
        (tmp_path / name / "log.jsonl").write_text(json.dumps({"kind": "train", "update": 1, "loss": 9.0}) + "\n")
    (tmp_path / "not_a_run").mkdir()
    logs, status = logs_by_section(sorted(tmp_path.iterdir()))
    assert list(logs) == ["6L-6L", "18L-18L"] and list(logs["18L-18L"]) == ["post_ln", "b2t"]  # depth, registry order
    assert status == {"6L-6L": {"pre_ln": "completed"}, "18L-18L": {"post_ln": "stalled", "b2t": "completed"}}
    assert logs["6L-6L"]["pre_ln"] == [{"kind": "train", "update": 1, "loss": 9.0}]
