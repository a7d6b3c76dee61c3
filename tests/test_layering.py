"""The library's layering, read from its source: no import cycle (imports inside functions count), the
diagnostics never reach the trainer, plotting loads no trainer, the data knows no model config, the run
orchestration sits above the training engine, and the core modules know no baseline."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import b2t_lib

ROOT = Path(b2t_lib.__file__).parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (imports for annotations, never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.If)
                and getattr(child.test, "id", getattr(child.test, "attr", "")) == "TYPE_CHECKING"
            ):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def _import_graph() -> dict[str, set[str]]:
    """module -> the library modules it imports when it runs, at the top or inside a function."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # ``from pkg import sub`` imports the module pkg.sub when there is one
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:  # ``import b2t_lib.x.y`` -> the deepest known module
                    target = target.rpartition(".")[0]
                if target and target.startswith("b2t_lib") and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def _reachable(graph, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for succ in graph[todo.pop()]:
            if succ not in seen:
                seen.add(succ)
                todo.append(succ)
    return seen


def test_the_import_graph_is_read_from_the_source():
    graph = _import_graph()
    assert "b2t_lib.loss" in graph["b2t_lib.diagnostics.forward"]
    assert "b2t_lib.train.records" in graph["b2t_lib.train.trainer"]  # ``from . import records``
    assert "b2t_lib.train.mt_task" in graph["b2t_lib.train.registry"]


def test_no_import_cycle():
    assert _cycles(_import_graph()) == []


def test_diagnostics_and_the_model_never_reach_the_trainer():
    graph = _import_graph()
    for name in graph:
        if name.startswith(
            (
                "b2t_lib.diagnostics",
                "b2t_lib.model",
                "b2t_lib.layers",
                "b2t_lib.variants",
                "b2t_lib.baselines",
                "b2t_lib.loss",
                "b2t_lib.config",
            )
        ):
            reached = {m for m in _reachable(graph, name) if m.startswith("b2t_lib.train")}
            assert not reached, (name, sorted(reached))


def test_computation_modules_do_not_import_plots():
    graph = _import_graph()
    for name in ("b2t_lib.trainability", "b2t_lib.train.trainer", "b2t_lib.diagnostics"):
        assert not {m for m in _reachable(graph, name) if m.startswith("b2t_lib.plots")}, name


def test_plotting_loads_no_trainer():
    """A heatmap of a stored trainability map needs no training engine (read from the source, and checked in a
    fresh interpreter: ``b2t_lib.train`` imports its modules lazily)."""
    graph = _import_graph()
    for name in graph:
        if name.startswith("b2t_lib.plots"):
            reached = {m for m in _reachable(graph, name) if m.startswith(("b2t_lib.train.", "b2t_lib.runs"))}
            assert not reached & {"b2t_lib.train.trainer", "b2t_lib.runs.launch"}, (name, sorted(reached))
    code = "import sys, b2t_lib.plots, b2t_lib.plots.trainability; print('b2t_lib.train.trainer' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_data_knows_no_model_config():
    """The data pipelines read the special tokens from their leaf module, never the model's configuration."""
    graph = _import_graph()
    for name in graph:
        if name.startswith("b2t_lib.data"):
            reached = _reachable(graph, name)
            assert not reached & {"b2t_lib.config", "b2t_lib.model", "b2t_lib.train"}, (name, sorted(reached))
            assert not {m for m in reached if m.startswith(("b2t_lib.train.", "b2t_lib.runs"))}, name


def test_orchestration_sits_above_the_engine():
    """The run orchestration (launch, queue, run states, progress, sweeps, cost) may use the training engine; the
    engine never reaches the orchestration."""
    graph = _import_graph()
    assert "b2t_lib.train.options" in _reachable(graph, "b2t_lib.runs.launch")
    for name in graph:
        if name.startswith("b2t_lib.train"):
            reached = {m for m in _reachable(graph, name) if m.startswith("b2t_lib.runs")}
            assert not reached, (name, sorted(reached))


def test_no_string_in_the_library_holds_a_control_character():
    r"""A backslash in a non-raw docstring can turn LaTeX into control characters (``"\approx"`` starts with a BEL)."""
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                bad = {c for c in node.value if c in "\a\b\f\v" and not _deliberate(path, node)}
                assert not bad, f"{path}:{node.lineno} holds {sorted(map(repr, bad))}: use a raw string"


def _deliberate(path: Path, node: ast.Constant) -> bool:
    """The whitespace table of the text normalizer lists \\v and \\f on purpose."""
    return path.name == "text.py" and len(node.value) < 16
