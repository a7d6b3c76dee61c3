"""Verdicts over seeds (b2t_lib.runs.seeds): the extra runs differ from the chapter's only in the seed, and the
judgment reads the validation NLL before the run's end and refuses a slow start as a failure."""

import json
import math

import pytest

from b2t_lib.runs.seeds import (
    agreement,
    judge_seed,
    judge_seeds,
    seed_folder,
    seed_statuses,
    seeds_group,
    valid_nll_at,
    with_seeds,
)
from b2t_lib.train import TrainConfig


def valid_log(points):
    """A log.jsonl as read_log returns it: train lines between validations, which the judgment must skip."""
    log = []
    for update, nll in points:
        log.append({"kind": "train", "update": update, "loss": 99.0})
        log.append({"kind": "valid", "update": update, "valid_nll": nll})
    return log


RULE = dict(at=300, fails="post", trains=["pre", "b2t"], fail_above=8.0, train_below=7.0, max_drop=0.1)
PLATEAU = valid_log([(100, 8.6), (200, 8.4), (300, 8.38), (400, 8.37)])
TRAINS = valid_log([(100, 8.5), (200, 7.5), (300, 6.5), (400, 6.0)])


def test_with_seeds_changes_the_seed_and_the_final_evaluation_only(tmp_path):
    cfg = TrainConfig.from_preset("mt", "tiny", encoder_layers=2, decoder_layers=2, data=str(tmp_path))
    more = with_seeds({"b2t_2L": cfg}, (2, 3))
    assert list(more) == ["b2t_2L_seed2", "b2t_2L_seed3"]
    for seed, other in zip((2, 3), more.values()):
        differs = {k for k, v in other.to_dict().items() if cfg.to_dict()[k] != v}
        assert differs == {"seed", "eval_at_end"} and other.seed == seed and not other.eval_at_end


def test_with_seeds_stops_the_named_runs_early_and_validates_less_often(tmp_path):
    cfg = TrainConfig.from_preset("mt", "tiny", encoder_layers=2, decoder_layers=2, data=str(tmp_path))
    runs = {"post": cfg.replace(max_update=400), "b2t": cfg.replace(max_update=400)}
    more = with_seeds(runs, (2,), until={"b2t": 300, "post": 900}, valid_interval=100)
    assert more["b2t_seed2"].max_update == 300
    assert more["post_seed2"].max_update == 400  # until never lengthens a run
    assert {c.valid_interval for c in more.values()} == {100}
    with pytest.raises(ValueError, match="pre"):
        with_seeds(runs, (2,), until={"pre": 300})  # a typo would silently train the whole run


def test_valid_nll_at_reads_the_first_validation_at_or_after_the_update():
    assert valid_nll_at(TRAINS, 250) == 6.5
    assert valid_nll_at(TRAINS, 300) == 6.5
    assert math.isnan(valid_nll_at(TRAINS, 401))  # the run stopped before: no verdict there


def test_a_plateau_against_two_runs_that_train_holds():
    verdict = judge_seed({"post": PLATEAU, "pre": TRAINS, "b2t": TRAINS}, 1, **RULE)
    assert verdict.holds
    assert verdict.at == {"post": 8.38, "pre": 6.5, "b2t": 6.5}
    assert verdict.fail_end == 8.37 and verdict.fail_drop == pytest.approx(0.01)


def test_a_slow_start_is_not_a_failure():
    # above the bar at the judgment update and at the end, but falling 0.3 bits in between: leaving the plateau
    slow = valid_log([(100, 8.6), (200, 8.5), (300, 8.4), (400, 8.1)])
    verdict = judge_seed({"post": slow, "pre": TRAINS, "b2t": TRAINS}, 1, **RULE)
    assert not verdict.holds and verdict.fail_drop == pytest.approx(0.3)


def test_without_a_fall_bound_a_late_escape_is_judged_by_where_it_ends():
    # the slow start above: above 8.0 at update 300, 8.1 at the end after falling 0.3 bits
    slow = valid_log([(100, 8.6), (200, 8.5), (300, 8.4), (400, 8.1)])
    logs = {"post": slow, "pre": TRAINS, "b2t": TRAINS}
    assert judge_seed(logs, 1, **dict(RULE, max_drop=None)).holds
    below_at_end = valid_log([(100, 8.6), (200, 8.5), (300, 8.4), (400, 7.9)])
    assert not judge_seed({**logs, "post": below_at_end}, 1, **dict(RULE, max_drop=None)).holds  # fail_above at the end


@pytest.mark.parametrize(
    "logs",
    [
        {"post": PLATEAU, "pre": TRAINS, "b2t": valid_log([(100, 8.5), (200, 7.5), (300, 7.2), (400, 6.0)])},
        {"post": PLATEAU, "pre": TRAINS, "b2t": valid_log([(100, 8.5), (200, 7.5)])},  # stopped before the point
        {"post": valid_log([(100, 8.6), (200, 8.4), (300, 7.9), (400, 7.9)]), "pre": TRAINS, "b2t": TRAINS},
        {"post": valid_log([(100, 8.6), (200, 8.4), (300, 8.1), (400, 7.95)]), "pre": TRAINS, "b2t": TRAINS},
    ],
    ids=[
        "a-training-run-above-its-bar",
        "a-training-run-without-the-point",
        "failing-run-below",
        "failing-run-ends-below",
    ],
)
def test_any_broken_condition_breaks_the_verdict(logs):
    assert not judge_seed(logs, 1, **RULE).holds


def test_seeds_are_read_from_the_chapter_group_and_its_seeds_group(tmp_path, monkeypatch):
    monkeypatch.setenv("B2T_RUNS", str(tmp_path))
    logs = {1: {"post": PLATEAU, "pre": TRAINS, "b2t": TRAINS}, 2: {"post": TRAINS, "pre": TRAINS, "b2t": TRAINS}}
    for seed, runs in logs.items():
        for name, log in runs.items():
            folder = seed_folder("ch", name, seed)
            folder.mkdir(parents=True)
            (folder / "log.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
            (folder / "result.json").write_text(json.dumps({"status": "completed"}))
    assert seed_folder("ch", "post", 1) == tmp_path / "ch" / "post"
    assert seed_folder("ch", "post", 2) == tmp_path / seeds_group("ch") / "post_seed2"
    verdicts = judge_seeds("ch", (1, 2), **RULE)
    assert [v.holds for v in verdicts.values()] == [True, False]  # seed 2's "post" trains: the claim fails there
    assert agreement(verdicts) == "1 of 2 seeds"
    assert seed_statuses("ch", "post", (1, 2, 3)) == {1: "completed", 2: "completed", 3: None}
