"""The trainability map: the trainer's statuses per cell, the grid runner (JSON, resume), the command
line and the heatmap."""

import json

import matplotlib
import pytest

from b2t_lib.cli import cmd_trainability
from b2t_lib.config import ConfigError
from b2t_lib.data.unigram import stored_unigram_baseline
from b2t_lib.trainability import FORMAT_VERSION, STATUSES, load_trainability, run_trainability_map, status_grid

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    from b2t_lib.data import prepare_synthetic_mt

    return prepare_synthetic_mt(tmp_path_factory.mktemp("synthetic"), n_train=300, n_valid=30, n_test=30, seed=0)


OPTIONS = dict(d_model=16, n_heads=2, d_ff=32, max_tokens=512, warmup_updates=2, threads=1)


def test_a_cells_status_is_the_trainers():
    assert STATUSES == ("completed", "stalled", "diverged")


@pytest.mark.slow
def test_grid_is_trained_written_and_resumed(tiny_data, tmp_path):
    out = tmp_path / "map.json"
    options = dict(OPTIONS, data=str(tiny_data))
    seen = []
    result = run_trainability_map(
        ["post_ln", "tfixup"], [2], [3e-3], out, scale="tiny", max_update=4, options=options, progress=seen.append
    )
    assert [(c["variant"], c["layers"], c["lr"]) for c in result["cells"]] == [
        ("post_ln", 2, 3e-3),
        ("tfixup", 2, 3e-3),
    ]
    assert all(c["status"] in STATUSES and c["updates"] == 4 for c in result["cells"])
    # the trainer's stall rule judged every cell at its end, with the preset's margin
    assert all(
        c["status"] == c["stall_rule"]["verdict"] == "stalled"
        or (c["status"], c["stall_rule"]["verdict"]) == ("completed", "passed")
        for c in result["cells"]
    )
    assert all(c["stall_rule"]["judged_at"] == 4 for c in result["cells"])
    assert result["unigram_baseline"] == pytest.approx(stored_unigram_baseline(tiny_data), abs=1e-4)
    assert result["stall_margin"] == 0.5
    assert result["threshold"] == pytest.approx(result["unigram_baseline"] - 0.5, abs=1e-4)
    tfixup = result["cells"][1]
    assert tfixup["recipe"] == "tfixup"  # its own no-warmup schedule
    assert load_trainability(out) == json.loads(json.dumps(result))  # what is returned is what is saved
    # a second call with one more learning rate trains only the new cells
    seen.clear()
    result = run_trainability_map(
        ["post_ln", "tfixup"], [2], [3e-3, 1e-3], out, scale="tiny", max_update=4, options=options, progress=seen.append
    )
    assert [(c["variant"], c["lr"]) for c in seen] == [("post_ln", 1e-3), ("tfixup", 1e-3)]
    assert len(result["cells"]) == 4
    depths, lrs, grid = status_grid(result, "tfixup")
    assert depths == [2] and lrs == [1e-3, 3e-3] and all(s in STATUSES for s in grid[0])


@pytest.mark.slow
def test_cells_trained_side_by_side_give_the_map_trained_one_by_one(tiny_data, tmp_path):
    options = dict(OPTIONS, data=str(tiny_data))
    grid = dict(scale="tiny", max_update=4, options=options)
    alone = run_trainability_map(["pre_ln", "peri_ln"], [2], [3e-3], tmp_path / "alone.json", **grid)
    side_by_side = run_trainability_map(["pre_ln", "peri_ln"], [2], [3e-3], tmp_path / "two.json", workers=2, **grid)
    keys = ("variant", "layers", "lr", "status", "valid_nll", "train_curve", "valid_curve", "stall_rule")
    assert [{k: c[k] for k in keys} for c in side_by_side["cells"]] == [{k: c[k] for k in keys} for c in alone["cells"]]
    assert side_by_side["threshold"] == alone["threshold"]
    assert load_trainability(tmp_path / "two.json")["cells"] == json.loads(json.dumps(side_by_side["cells"]))


@pytest.mark.slow
def test_command_line_writes_the_map_and_draws_the_heatmap(tiny_data, tmp_path, capsys):
    from b2t_lib.cli import COMMANDS

    assert "trainability" in COMMANDS
    out, figure = tmp_path / "map.json", tmp_path / "map.png"
    argv = [
        "--variants",
        "b2t",
        "--depths",
        "2",
        "--lrs",
        "2e-3",
        "--max-update",
        "3",
        "--scale",
        "tiny",
        "--out",
        str(out),
        "--figure",
        str(figure),
        "--option",
        f"data={tiny_data}",
    ]
    argv += [arg for key, value in OPTIONS.items() for arg in ("--option", f"{key}={value}")]
    assert cmd_trainability(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["cells"] == 1 and figure.stat().st_size > 0
    assert load_trainability(out)["options"]["d_model"] == 16


def test_command_line_refuses_an_unknown_variant(tmp_path):
    with pytest.raises(ConfigError, match="unknown variants"):  # one line through the CLI's main
        cmd_trainability(["--variants", "no_such_variant", "--out", str(tmp_path / "x.json")])
    with pytest.raises(ConfigError, match="workers must be at least 1"):
        cmd_trainability(["--workers", "0", "--out", str(tmp_path / "x.json")])


def test_heatmap_colors_each_cell_by_its_status():
    from b2t_lib.plots.trainability import STATUS_COLORS, plot_trainability_map

    cells = [
        dict(variant="post_ln", layers=6, lr=1e-3, status="completed", valid_nll=5.0),
        dict(variant="post_ln", layers=18, lr=1e-3, status="stalled", valid_nll=7.9),
        dict(variant="post_ln", layers=18, lr=3e-3, status="diverged", valid_nll=None),
        dict(variant="b2t", layers=18, lr=3e-3, status="completed", valid_nll=6.0),
    ]
    fig = plot_trainability_map(
        {
            "cells": cells,
            "unigram_baseline": 8.0,
            "stall_margin": 0.5,
            "threshold": 7.5,
            "scale": "tiny",
            "max_update": 10,
        }
    )
    assert [ax.get_title() for ax in fig.axes] == ["Post-LN", "B2T connection"]
    assert "trained = valid NLL < unigram 8.00 - 0.5 = 7.50 bits" in fig._suptitle.get_text()
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "trained",
        "stalled (Training failed)",
        "diverged (Training failed)",
    ]
    for ax, expected in zip(
        fig.axes, ([["completed", None], ["stalled", "diverged"]], [[None, None], [None, "completed"]])
    ):
        image = ax.get_images()[0]
        rgba = image.cmap(image.norm(image.get_array()))  # (depths, lrs, 4)
        for i, row in enumerate(expected):
            for j, status in enumerate(row):
                assert matplotlib.colors.to_hex(rgba[i, j]) == STATUS_COLORS[status]


def test_a_map_of_other_settings_is_refused_not_overwritten(tmp_path):
    from b2t_lib.trainability import save_trainability

    out = tmp_path / "map.json"
    old = {
        "version": FORMAT_VERSION,
        "task": "mt",
        "scale": "tiny",
        "max_update": 100,
        "options": {},
        "threshold": 7.0,
        "cells": [dict(variant="b2t", layers=6, lr=1e-3, status="completed", valid_nll=5.0)],
    }
    save_trainability(old, out)
    with pytest.raises(ValueError, match="max_update"):
        run_trainability_map(["b2t"], [6], [1e-3], out, scale="tiny", max_update=50)
    assert load_trainability(out) == old
    with pytest.raises(ValueError, match="translation task"):
        run_trainability_map(["b2t"], [6], [1e-3], None, task="lm", scale="tiny")
    save_trainability(dict(old, version=1), out)  # a map of the first format said "converged": trained again
    with pytest.raises(ValueError, match="format version"):
        run_trainability_map(["b2t"], [6], [1e-3], out, scale="tiny", max_update=100)
