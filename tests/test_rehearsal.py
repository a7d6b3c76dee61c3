"""The rehearsal (``B2T_REHEARSAL=1``): small and full on a CPU, with one shrink rule and the real loaders.

* the switch is read where the scale is read, lets small/full run without CUDA, and refuses a bad value;
* a rehearsal preset differs from the real one only in the fields of the shrink rule, for every task and both
  scales, and the rule reaches options set explicitly too (caps: idempotent, 0 stays 0);
* every task's real ``prepare_real`` (the options a small/full run passes) prepares its data from the miniature
  sources through ``load_dataset`` / ``hf_hub_download`` with ``HF_HUB_OFFLINE=1``;
* the stall path at small (detached queue) and full (torchrun, two CPU processes on gloo).

The Hugging Face libraries read ``HF_HOME`` and ``HF_HUB_OFFLINE`` when they are imported, so everything that
touches the miniature sources runs in a child process with the rehearsal's environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from b2t_lib.presets import REHEARSAL_SIZES, REHEARSAL_THREADS, rehearsal_sizes
from b2t_lib.scale import REHEARSAL_GPUS, ScaleError, cuda_devices, get_scale, rehearsal
from b2t_lib.train import TrainConfig
from b2t_lib.train.registry import task_names

ROOT = Path(__file__).resolve().parents[1]


def shrink_fields(task: str) -> set[str]:
    return set(REHEARSAL_SIZES["*"]) | set(REHEARSAL_SIZES.get(task, {})) | {"threads"}


@pytest.fixture
def rehearsing(monkeypatch):
    monkeypatch.setenv("B2T_REHEARSAL", "1")


def test_the_switch_lets_small_and_full_run_on_a_cpu_and_refuses_a_bad_value(monkeypatch):
    monkeypatch.delenv("B2T_REHEARSAL", raising=False)
    assert not rehearsal()
    monkeypatch.setenv("B2T_SCALE", "small")
    monkeypatch.setenv("B2T_REHEARSAL", "1")
    assert rehearsal() and get_scale() == "small"  # no CUDA needed
    import torch

    if not torch.cuda.is_available():  # CPU processes stand in for GPUs
        assert cuda_devices() == [str(i) for i in range(REHEARSAL_GPUS)]
    monkeypatch.setenv("B2T_REHEARSAL", "maybe")
    with pytest.raises(ScaleError, match="B2T_REHEARSAL='maybe' is not understood"):
        get_scale()


@pytest.mark.parametrize("task", task_names())
@pytest.mark.parametrize("scale", ["small", "full"])
def test_a_rehearsal_preset_differs_from_the_real_one_only_in_the_shrink_rule(task, scale, monkeypatch):
    monkeypatch.delenv("B2T_REHEARSAL", raising=False)
    real = TrainConfig.from_preset(task, scale).to_dict()
    monkeypatch.setenv("B2T_REHEARSAL", "1")
    rehearsed = TrainConfig.from_preset(task, scale).to_dict()
    changed = {k for k in real if real[k] != rehearsed[k]}
    assert changed <= shrink_fields(task), sorted(changed - shrink_fields(task))
    assert {"d_model", "max_update", "max_tokens"} <= changed  # it does shrink
    for name in (
        "encoder_layers",
        "decoder_layers",
        "variant",
        "beam",
        "lenpen",
        "average_last",
        "keep_last",
        "save_interval_epochs",
        "data",
        "stall_margin",
        "stall_deadline",
        "lr",
    ):
        assert rehearsed[name] == real[name], name  # what stays as at the scale
    assert rehearsed["threads"] == REHEARSAL_THREADS
    for name, cap in {**REHEARSAL_SIZES["*"], **REHEARSAL_SIZES.get(task, {})}.items():
        if name in real and not isinstance(cap, tuple):
            assert rehearsed[name] == min(real[name], cap), name


def test_the_rule_reaches_explicit_options_is_idempotent_and_leaves_tiny_alone(rehearsing):
    cfg = TrainConfig.from_preset(
        "mt",
        "full",
        "deep100",
        variant="b2t",
        encoder_layers=100,
        decoder_layers=100,
        max_update=2000,
        save_interval=0,
        d_model=8,
        n_heads=1,
    )
    assert (cfg.max_update, cfg.save_interval, cfg.model.d_model, cfg.model.n_heads) == (8, 0, 8, 1)  # caps
    assert cfg.model.encoder_layers == 100 and cfg.recipe == "deep100" and cfg.model.init_scale == 0.1
    values = cfg.to_dict()
    assert rehearsal_sizes(values) == values  # applying it twice
    assert TrainConfig.from_dict(values).to_dict() == values  # a stored config round-trips
    assert cfg.replace(max_update=5000).max_update == 8  # replace() goes through it too
    tiny = TrainConfig.from_preset("mt", "tiny")
    assert tiny.model.d_model == 64 and tiny.max_update == 1000  # tiny is never shrunk
    from b2t_lib.cli import _config_file
    from b2t_lib.files import write_json_atomic

    with tempfile.TemporaryDirectory() as folder:  # a detached run's config file gives this config back exactly
        write_json_atomic(Path(folder) / "config.json", values)
        assert _config_file(["--config", str(Path(folder) / "config.json")])[1].to_dict() == values
    lm = TrainConfig.from_preset("lm", "full")
    assert lm.model.adaptive_cutoff == REHEARSAL_SIZES["lm"]["adaptive_cutoff"]


@pytest.mark.parametrize("scale", ["tiny", "small", "full"])
def test_a_rehearsed_trainability_map_trains_the_corners_of_its_grid_at_their_depths(scale, monkeypatch, rehearsing):
    import b2t_lib.trainability as trainability

    trained = []

    def fake_cell(variant, layers, lr, **_):  # records what would train, trains nothing
        trained.append((variant, layers, lr))
        return {"variant": variant, "layers": layers, "lr": lr, "status": "completed", "stall_rule": None}

    monkeypatch.setattr(trainability, "train_cell", fake_cell)
    trainability.run_trainability_map(["post_ln", "b2t"], [12, 6, 36, 18], [1e-3, 5e-4, 2e-3], scale=scale)
    grid = [(v, n, lr) for v in ("post_ln", "b2t") for n in (12, 6, 36, 18) for lr in (1e-3, 5e-4, 2e-3)]
    if scale == "tiny":  # the rehearsal never touches tiny: every cell
        assert trained == grid
    else:  # shallowest and deepest depth, smallest and largest lr, every variant, in the grid's order
        assert trained == [(v, n, lr) for v, n, lr in grid if n in (6, 36) and lr in (5e-4, 2e-3)]
    monkeypatch.delenv("B2T_REHEARSAL")
    trained.clear()
    trainability.run_trainability_map(["b2t"], [6, 12, 36], [1e-3, 2e-3, 5e-4], scale=scale)
    assert len(trained) == 9  # outside the rehearsal, the whole grid at every scale


def rehearsal_plan() -> dict[str, list[str]]:
    """The notebooks of each rehearsal pass, as ``make rehearse`` runs them (``make rehearsal-plan``)."""
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "rehearsal-plan"], cwd=ROOT, text=True, capture_output=True, check=True
    )
    lines = [line.split(":", 1) for line in done.stdout.splitlines() if line.startswith(("small:", "full:"))]
    return {scale: names.split() for scale, names in lines}


def notebook_code(path: str) -> str:
    cells = json.loads((ROOT / path).read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


# SCALE compared with "small" or "full", or tested for membership: a cell that tells small from full
TELLS_SMALL_FROM_FULL = re.compile(
    r'SCALE\s*[!=]=\s*"(?:small|full)"|"(?:small|full)"\s*[!=]=\s*SCALE|SCALE\s+(?:not\s+)?in\b'
)
TASKS = re.compile(r'from_preset\(\s*"(\w+)"|\btask\s*=\s*"(\w+)"')


def test_the_rehearsal_runs_every_scaled_notebook_at_full_and_skips_at_small_only_what_full_covers():
    """``make rehearse`` runs every notebook that reads the scale at full; a notebook it leaves out at small trains only
    the MT preset and never tells small from full, and a notebook of the small pass rehearses MT at small. So the
    small pass would run the left-out notebooks' cells over a code path it already takes."""
    plan = rehearsal_plan()
    scaled = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb") if "get_scale" in p.read_text()
    )
    assert sorted(plan["full"]) == scaled and len(scaled) >= 8
    assert set(plan["small"]) <= set(plan["full"])
    full_only = [nb for nb in plan["full"] if nb not in plan["small"]]
    assert full_only, "the small pass leaves nothing out: this test checks nothing"
    for nb in full_only:
        code = notebook_code(nb)
        assert "get_scale" in code and not TELLS_SMALL_FROM_FULL.search(code), nb
        tasks = {a or b for a, b in TASKS.findall(code)}
        assert tasks == {"mt"}, f"{nb} trains {tasks}"
    assert any("mt" in {a or b for a, b in TASKS.findall(notebook_code(nb))} for nb in plan["small"])
    # the premise check itself: it finds a cell that tells small from full, and another task
    assert TELLS_SMALL_FROM_FULL.search('if SCALE == "full":') and TELLS_SMALL_FROM_FULL.search("if SCALE in S:")
    assert not TELLS_SMALL_FROM_FULL.search('if SCALE == "tiny":')
    assert {a or b for a, b in TASKS.findall('from_preset("lm", SCALE) x(task="asr")')} == {"lm", "asr"}


# ---------------------------------------------------------------------------------------------- in child processes
@pytest.fixture(scope="module")
def hf_home(tmp_path_factory):
    """The miniature sources, built once for this module (about 10 s)."""
    home = tmp_path_factory.mktemp("hf")
    subprocess.run(
        [sys.executable, "-m", "b2t_lib.data.miniature", str(home)], check=True, cwd=ROOT, capture_output=True
    )
    return home


def run_rehearsed(code: str, hf_home: Path, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        B2T_REHEARSAL="1",
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        B2T_RUNS=str(cwd / "runs"),
        PYTHONPATH=str(ROOT),
        TQDM_DISABLE="1",
    )
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_every_task_prepares_its_real_data_from_the_miniature_sources(hf_home, tmp_path):
    """The real call a small/full run makes (``prepare_real`` with ``presets.DATA_PREPARATION``), through the Hub
    libraries' offline caches: what a GPU user's first run does after its download."""
    done = run_rehearsed(
        """
        import json
        from pathlib import Path
        from b2t_lib.train import TrainConfig
        from b2t_lib.train.registry import build_task

        out = {}
        if __name__ == "__main__":
            for task, scale in (("mt", "small"), ("mt", "full"), ("summarization", "small"), ("lm", "full"),
                                ("asr", "small")):
                path = build_task(TrainConfig.from_preset(task, scale, data=f"data/{task}_{scale}")).prepare_data()
                out[f"{task}_{scale}"] = json.loads((path / "manifest.json").read_text())
            print(json.dumps(out))
        """,
        hf_home,
        tmp_path,
    )
    manifests = json.loads(done.stdout.strip().splitlines()[-1])
    from b2t_lib.presets import REHEARSAL_SOURCES

    mt = manifests["mt_full"]
    assert mt["test_splits"] == [f"newstest{y}" for y in range(2010, 2017)] and mt["params"]["bpe_merges"] == 32000
    assert manifests["mt_small"]["params"]["max_pairs"] == 1_000_000  # the small scale's subset option
    summ = manifests["summarization_small"]
    assert summ["params"]["bpe_merges"] == 32000 and summ["tokenizer"] == "none"  # the paper's 32K merges
    assert summ["stats"]["train"]["sentences"] == REHEARSAL_SOURCES["gigaword"]["train"]
    lm = manifests["lm_full"]
    assert lm["vocabulary"]["word_types"] + 1 == REHEARSAL_SOURCES["wikitext103"]["vocab"]
    asr = manifests["asr_small"]
    assert asr["vocab_size"] == 10000 and asr["parts"]["train"] == ["train_clean_100"]  # SentencePiece's 10,000
    assert asr["valid_splits"] == ["dev_clean", "dev_other"] and asr["test_splits"] == ["test_clean", "test_other"]


@pytest.mark.slow
def test_the_stall_path_at_small_on_the_detached_queue_and_at_full_through_torchrun(hf_home, tmp_path):
    """The rehearsal's runs end before the scale's stall deadline; with an explicit early deadline they are judged
    at small (a detached run on a stand-in GPU) and at full (torchrun over the two stand-ins, gloo)."""
    done = run_rehearsed(
        """
        import json
        from b2t_lib.train import TrainConfig
        from b2t_lib.runs import launch

        if __name__ == "__main__":
            for scale in ("small", "full"):
                cfg = TrainConfig.from_preset("mt", scale, variant="post_ln", encoder_layers=2, decoder_layers=2,
                                              stall_deadline=8, data="data/mt")
                record = launch({"post_ln": cfg}, f"stall_{scale}", progress=False, poll_interval=0.5)["post_ln"]
                print(json.dumps({"scale": scale, "status": record["status"], "world_size": record["world_size"],
                                  "verdict": record["stall_rule"]["verdict"], "at": record["stall_rule"]["judged_at"]}))
        """,
        hf_home,
        tmp_path,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(r["scale"], r["status"], r["verdict"], r["at"]) for r in lines] == [
        ("small", "stalled", "stalled", 8),
        ("full", "stalled", "stalled", 8),
    ]
    assert [r["world_size"] for r in lines] == [1, REHEARSAL_GPUS]
    record = tmp_path / "runs" / "stall_full" / "post_ln" / "launch.json"
    for _ in range(120):  # the queue records the exit code when it reaps the process, just after the result
        launched = json.loads(record.read_text())
        if launched["exit_code"] is not None:
            break
        time.sleep(0.25)
    assert "torch.distributed.run" in launched["command"] and launched["nproc"] == REHEARSAL_GPUS
    assert launched["exit_code"] == 0  # a failed run is a result: torchrun must not report a crash (or restart)
    small = json.loads((tmp_path / "runs" / "stall_small" / "post_ln" / "launch.json").read_text())
    assert small["exit_code"] in (None, 3)  # one process: "Training failed"
    assert "ChildFailedError" not in (tmp_path / "runs" / "stall_full" / "post_ln" / "train.log").read_text()
