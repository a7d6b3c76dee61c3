"""pytest set-up shared by the unit tests (tests/) and the notebooks under nbval (notebooks/).

* Tests always run at the ``tiny`` scale: the kernel nbval starts inherits this environment.
* Figures are not written during tests (``B2T_FIGURE_DIR`` unset); ``make course`` writes them.
* stderr is not compared in notebooks: library upgrades add warnings that say nothing about the course.
"""
import os

os.environ["B2T_SCALE"] = "tiny"
os.environ.pop("B2T_FIGURE_DIR", None)
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
os.environ.setdefault("TQDM_DISABLE", "1")


def pytest_collectstart(collector):
    if getattr(collector, "fspath", None) is not None and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)
