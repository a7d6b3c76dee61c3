"""The preparation steps: two processes preparing the same folder at once build each step once."""

import multiprocessing as mp
import time
from pathlib import Path

from b2t_lib.data.steps import StepRunner


def _prepare(folder: str) -> list[str]:
    root = Path(folder)
    builds = root / "builds.txt"

    def build(tmps):
        with open(builds, "a") as f:  # one line per build, whoever runs it
            f.write("built\n")
        time.sleep(0.5)  # long enough for the other process to arrive meanwhile
        tmps[0].write_text("the output\n")

    runner = StepRunner(root, root / "work")
    runner.run("slow-step", {"n": 1}, [], [root / "out.txt"], build)
    return runner.ran


def test_two_processes_build_a_step_once(tmp_path):
    with mp.get_context("spawn").Pool(2) as pool:
        ran = pool.map(_prepare, [str(tmp_path)] * 2)
    assert sorted(ran) == [[], ["slow-step"]], "one process built the step, the other found it done"
    assert (tmp_path / "builds.txt").read_text() == "built\n"
    assert (tmp_path / "out.txt").read_text() == "the output\n"
