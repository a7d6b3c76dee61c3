"""The trainability map: its convergence bar, the grid runner (JSON, resume), the command line and
the heatmap."""
import json
import math

import matplotlib
import numpy as np
import pytest
import torch

from b2t_lib.cli import cmd_trainability
from b2t_lib.trainability import (STATUSES, classify, load_trainability, run_trainability_map, status_grid,
                                  unigram_nll)

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from b2t_lib.data import prepare_synthetic_mt

    return prepare_synthetic_mt(tmp_path_factory.mktemp("synthetic"), n_train=300, n_valid=30, n_test=30, seed=0)


OPTIONS = dict(d_model=16, n_heads=2, d_ff=32, max_tokens=512, warmup_updates=2, threads=1)


def test_classify_separates_the_three_outcomes():
    assert classify("diverged", 3.0, threshold=7.0) == "diverged"
    assert classify("completed", None, threshold=7.0) == "diverged"
    assert classify("completed", math.nan, threshold=7.0) == "diverged"
    assert classify("completed", 6.9, threshold=7.0) == "converged"
    assert classify("completed", 7.0, threshold=7.0) == "stalled"


@pytest.mark.slow
def test_unigram_bar_is_the_trainers_nll_of_a_frequency_only_model(tiny_data):
    from b2t_lib.data import load_translation_split
    from b2t_lib.train import label_smoothed_nll_loss

    train, valid = load_translation_split(tiny_data, "train"), load_translation_split(tiny_data, "valid")
    counts = torch.bincount(torch.from_numpy(np.array(train.tgt.data, dtype=np.int64)),
                            minlength=len(train.dictionary)).double() + 1
    batch = valid.collate(list(range(len(valid))))
    logits = counts.log().expand(*batch["target"].shape, -1)  # the same prediction at every position
    out = label_smoothed_nll_loss(logits, batch["target"], epsilon=0.0)
    bits = float(out.nll) / float(out.ntokens) / math.log(2)  # the trainer's valid_nll, in bits
    assert unigram_nll(tiny_data) == pytest.approx(bits, rel=1e-4)
    assert unigram_nll(tiny_data) < math.log2(len(train.dictionary))  # better than uniform


@pytest.mark.slow
def test_grid_is_trained_written_and_resumed(tiny_data, tmp_path):
    out = tmp_path / "map.json"
    options = dict(OPTIONS, data=str(tiny_data))
    seen = []
    result = run_trainability_map(["post_ln", "tfixup"], [2], [3e-3], out, scale="tiny", max_update=4,
                                  options=options, progress=seen.append)
    assert [(c["variant"], c["layers"], c["lr"]) for c in result["cells"]] == [
        ("post_ln", 2, 3e-3), ("tfixup", 2, 3e-3)]
    assert all(c["status"] in STATUSES and c["updates"] == 4 for c in result["cells"])
    assert result["threshold"] == pytest.approx(unigram_nll(tiny_data), abs=1e-3)
    tfixup = result["cells"][1]
    assert tfixup["recipe"] == "tfixup"  # its own no-warmup schedule
    assert load_trainability(out) == json.loads(json.dumps(result))  # what is returned is what is saved
    # a second call with one more learning rate trains only the new cells
    seen.clear()
    result = run_trainability_map(["post_ln", "tfixup"], [2], [3e-3, 1e-3], out, scale="tiny", max_update=4,
                                  options=options, progress=seen.append)
    assert [(c["variant"], c["lr"]) for c in seen] == [("post_ln", 1e-3), ("tfixup", 1e-3)]
    assert len(result["cells"]) == 4
    depths, lrs, grid = status_grid(result, "tfixup")
    assert depths == [2] and lrs == [1e-3, 3e-3] and all(s in STATUSES for s in grid[0])


@pytest.mark.slow
def test_command_line_writes_the_map_and_draws_the_heatmap(tiny_data, tmp_path, capsys):
    from b2t_lib.cli import COMMANDS

    assert "trainability" in COMMANDS
    out, figure = tmp_path / "map.json", tmp_path / "map.png"
    argv = ["--variants", "b2t", "--depths", "2", "--lrs", "2e-3", "--max-update", "3", "--scale", "tiny",
            "--out", str(out), "--figure", str(figure), "--option", f"data={tiny_data}"]
    argv += [arg for key, value in OPTIONS.items() for arg in ("--option", f"{key}={value}")]
    assert cmd_trainability(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["cells"] == 1 and figure.stat().st_size > 0
    assert load_trainability(out)["options"]["d_model"] == 16


def test_command_line_refuses_an_unknown_variant(tmp_path):
    with pytest.raises(SystemExit):
        cmd_trainability(["--variants", "no_such_variant", "--out", str(tmp_path / "x.json")])


def test_heatmap_colors_each_cell_by_its_status():
    from b2t_lib.plots.trainability import STATUS_COLORS, plot_trainability_map

    cells = [dict(variant="post_ln", layers=6, lr=1e-3, status="converged", valid_nll=5.0),
             dict(variant="post_ln", layers=18, lr=1e-3, status="stalled", valid_nll=7.9),
             dict(variant="post_ln", layers=18, lr=3e-3, status="diverged", valid_nll=None),
             dict(variant="b2t", layers=18, lr=3e-3, status="converged", valid_nll=6.0)]
    fig = plot_trainability_map({"cells": cells, "threshold": 7.5, "scale": "tiny", "max_update": 10})
    assert [ax.get_title() for ax in fig.axes] == ["Post-LN", "B2T connection"]
    for ax, expected in zip(fig.axes, ([["converged", None], ["stalled", "diverged"]],
                                       [[None, None], [None, "converged"]])):
        image = ax.get_images()[0]
        rgba = image.cmap(image.norm(image.get_array()))  # (depths, lrs, 4)
        for i, row in enumerate(expected):
            for j, status in enumerate(row):
                assert matplotlib.colors.to_hex(rgba[i, j]) == STATUS_COLORS[status]


def test_a_map_of_other_settings_is_refused_not_overwritten(tmp_path):
    from b2t_lib.trainability import save_trainability

    out = tmp_path / "map.json"
    old = {"version": 1, "task": "mt", "scale": "tiny", "max_update": 100, "options": {}, "threshold": 7.0,
           "cells": [dict(variant="b2t", layers=6, lr=1e-3, status="converged", valid_nll=5.0)]}
    save_trainability(old, out)
    with pytest.raises(ValueError, match="max_update"):
        run_trainability_map(["b2t"], [6], [1e-3], out, scale="tiny", max_update=50)
    assert load_trainability(out) == old
    with pytest.raises(ValueError, match="translation task"):
        run_trainability_map(["b2t"], [6], [1e-3], None, task="lm", scale="tiny")
