"""pytest set-up shared by the unit tests (tests/) and the notebooks under nbval (notebooks/).

* Tests always run at the ``tiny`` scale: the kernel nbval starts inherits this environment.
* Figures are not written during tests (``B2T_FIGURE_DIR`` unset); ``make course`` writes them.
* stderr is not compared in notebooks: library upgrades add warnings that say nothing about the course.
* Training runs go to a fresh temporary folder (``B2T_RUNS``), so tests always train and never reuse a run
  left in ``runs/`` (the launcher skips finished runs). ``make test`` sets its own; a direct ``pytest``
  call gets one here, removed when pytest exits.
"""

import atexit
import os
import shutil
import tempfile

os.environ["B2T_SCALE"] = "tiny"
os.environ.pop("B2T_FIGURE_DIR", None)
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
os.environ.setdefault("TQDM_DISABLE", "1")
if not os.environ.get("B2T_RUNS"):
    os.environ["B2T_RUNS"] = tempfile.mkdtemp(prefix="b2t_test_runs_")
    atexit.register(shutil.rmtree, os.environ["B2T_RUNS"], True)


def pytest_collectstart(collector):
    if getattr(collector, "fspath", None) is not None and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
