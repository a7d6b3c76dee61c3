"""Command line: ``python -m b2t_lib {train,evaluate,table,preset,trainability} ...``.

``train`` has one option per field of :class:`b2t_lib.train.TrainConfig` and per settable field of
:class:`b2t_lib.config.ModelConfig` (help text and group come from the fields' metadata); each
defaults from the preset of ``--task`` at ``--scale`` (then ``--recipe``), and ``--help`` shows
those defaults::

    python -m b2t_lib train --task mt --variant b2t --encoder-layers 18 --decoder-layers 18 \\
        --save-dir runs/b2t_18 --help
    torchrun --nproc_per_node 8 -m b2t_lib train --task mt --scale full --data data/wmt14_en_de ...

Exit status: 0 done, 2 bad options (an unknown ``B2T_SCALE`` included), 3 training failed: the run
diverged or stalled (:mod:`b2t_lib.train.failure`; the result record says which and why). Messages
of the library (resume notices, failed runs) go to stderr through :mod:`logging`; the final result
is printed to stdout as JSON.
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import sys

from .config import choices_of, flag
from .presets import RECIPES, TASKS
from .scale import SCALES, ScaleError, get_scale

EXIT_FAILED = 3          # the run diverged or stalled ("Training failed")
EXIT_DIVERGED = EXIT_FAILED
_TYPES = {"int": int, "float": float, "str": str}


def _type_name(annotation) -> str:
    """A field's type as text: ``"int"``, ``"tuple[int, ...]"`` (annotations are strings in this library)."""
    if isinstance(annotation, str):
        return annotation
    return annotation.__name__ if isinstance(annotation, type) else str(annotation)


def _value_parser(type_name: str):
    """(parse function, metavar) for a field's type: int, float, str, or tuple[int|float, ...] as ``1,2,3``."""
    if type_name in _TYPES:
        return _TYPES[type_name], type_name.upper()
    for item in ("int", "float"):
        if type_name.replace(" ", "") == f"tuple[{item},...]":
            convert = _TYPES[item]

            def parse(text: str, convert=convert, item=item):
                try:
                    return tuple(convert(x) for x in text.split(",") if x.strip())
                except ValueError:
                    raise argparse.ArgumentTypeError(f"expected comma-separated {item}s, got {text!r}") from None
            return parse, f"{item.upper()},..."
    raise TypeError(f"the command line cannot read options of type {type_name!r}; use int, float, str, bool "
                    f"or tuple[int, ...]")


_logger = logging.getLogger("b2t_lib")


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a message comes (a notebook or a test
    may swap it), so one handler serves every call of :func:`main`."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ assigns it; the property always reads sys.stderr
        pass


def _configure_logging() -> None:
    """Show the library's messages (resume notices, divergence, data steps) plainly on stderr."""
    if not any(isinstance(h, _StderrHandler) for h in _logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        _logger.addHandler(handler)
    _logger.setLevel(logging.INFO)


def _first_stage(argv: list[str], scale: str) -> argparse.Namespace:
    """Read only --task, --scale and --recipe, which decide every other default."""
    stage = argparse.ArgumentParser(add_help=False)
    stage.add_argument("--task", default="mt", choices=TASKS)
    stage.add_argument("--scale", default=scale, choices=SCALES)
    stage.add_argument("--recipe", default="", choices=[""] + sorted(RECIPES))
    known, _ = stage.parse_known_args(argv)
    return known


def _variant_list() -> str:
    from .variants import VARIANTS

    return ", ".join(f"{name} ({v.title}, {v.equation})" for name, v in sorted(VARIANTS.items()))


def build_train_parser(task: str = "mt", scale: str = "tiny", recipe: str = "") -> argparse.ArgumentParser:
    """The ``train`` parser: one option per :class:`~b2t_lib.train.TrainConfig` field and per settable
    :class:`~b2t_lib.config.ModelConfig` field, with help, group and choices from the fields'
    metadata and defaults from ``option_defaults(task, scale, recipe)``."""
    from .train.options import option_defaults, option_fields

    defaults = option_defaults(task, scale, recipe or None)
    parser = argparse.ArgumentParser(
        prog="python -m b2t_lib train",
        description=f"Train one model. Defaults shown are the '{task}' preset at scale '{scale}'"
                    + (f" with recipe '{recipe}'" if recipe else "")
                    + "; pass --task/--scale/--recipe to see another preset's defaults. Variants: "
                    + _variant_list() + ".",
        usage="python -m b2t_lib train [--task T] [--scale S] [--recipe R] [options]  (--help lists all)",
        allow_abbrev=False)
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in option_fields():
        group = groups.get(f.metadata["group"])
        if group is None:
            group = groups[f.metadata["group"]] = parser.add_argument_group(f.metadata["group"])
        kwargs = dict(dest=f.name, default=argparse.SUPPRESS, help=f.metadata["help"])
        choices = choices_of(f)
        if choices is not None:
            kwargs["choices"] = choices
        type_name = _type_name(f.type)
        if type_name == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"], metavar = _value_parser(type_name)
            if choices is None:
                kwargs["metavar"] = metavar
        # Show the preset's value without making it "given": SUPPRESS keeps explicit options apart.
        kwargs["help"] += f" (default: {defaults[f.name]!r})"
        group.add_argument(flag(f.name), **kwargs)
    return parser


def cmd_train(argv: list[str]) -> int:
    from .train.checkpoint import CheckpointMismatch
    from .train.options import TrainConfig
    from .train.trainer import Trainer

    stage = _first_stage(argv, get_scale(require_hardware=False))
    parser = build_train_parser(stage.task, stage.scale, stage.recipe)
    args = vars(parser.parse_args(argv))
    task, scale, recipe = args.pop("task", stage.task), args.pop("scale", stage.scale), args.pop("recipe", "")
    try:
        cfg = TrainConfig.from_preset(task, scale, recipe or None, **args)
        trainer = Trainer(cfg)
    except (ValueError, FileNotFoundError, FileExistsError, NotImplementedError, RuntimeError) as err:
        parser.error(str(err))
    try:
        record = trainer.train()
    except CheckpointMismatch as err:  # --resume against another configuration, or no readable checkpoint
        parser.error(str(err))
    if trainer.env.is_main:
        printed = {"status": record["status"]}
        if record.get("message"):
            printed["message"] = record["message"]
        printed["metrics"] = {k: v for k, v in record["metrics"].items() if k not in ("samples",)}
        print(json.dumps(printed, indent=1))
    from .train.distributed import destroy
    from .train.failure import is_failed
    destroy(trainer.env)
    return EXIT_FAILED if is_failed(record["status"]) else 0


def cmd_evaluate(argv: list[str]) -> int:
    from .train.evaluate import evaluate_run

    parser = argparse.ArgumentParser(prog="python -m b2t_lib evaluate", allow_abbrev=False,
                                     description="Test a trained run: average its last N checkpoints "
                                                 "and compute the task's metric (BLEU for MT, WER for ASR).")
    parser.add_argument("--save-dir", required=True, help="the run's directory")
    parser.add_argument("--checkpoint", help="evaluate this one checkpoint file instead (no averaging)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="device")
    parser.add_argument("--data", help="data directory (default: the one the run was trained on)")
    parser.add_argument("--average-last", type=int, help="average the last N checkpoints (default: the run's)")
    parser.add_argument("--beam", type=int, help="beam size (default: the run's; 4 for MT, 5 for ASR)")
    parser.add_argument("--lenpen", type=float, help="length penalty for newstest2014 / single test sets")
    parser.add_argument("--lenpen-other", type=float, help="length penalty for the other newstest years")
    parser.add_argument("--max-len-a", type=float, help="max output length a*src_len+b: a")
    parser.add_argument("--max-len-b", type=int, help="max output length a*src_len+b: b")
    parser.add_argument("--eval-batch-size", type=int, help="sentences per generation batch")
    args = vars(parser.parse_args(argv))
    if args["checkpoint"] and args["average_last"]:
        parser.error("--checkpoint evaluates one file; --average-last averages numbered checkpoints; give one")
    save_dir, checkpoint, device = args.pop("save_dir"), args.pop("checkpoint"), args.pop("device")
    try:
        metrics = evaluate_run(save_dir, checkpoint, device, **args)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    print(json.dumps({k: v for k, v in metrics.items() if k != "samples"}, indent=1))
    return 0


def cmd_table(argv: list[str]) -> int:
    from .paper_tables import collect_results, render_table

    parser = argparse.ArgumentParser(prog="python -m b2t_lib table", allow_abbrev=False,
                                     description="Print a paper table with our results beside it. Runs that "
                                                 "stalled or diverged print as \"Training failed\", the kind "
                                                 "and its numbers in a footnote.")
    parser.add_argument("--table", type=int, default=1,
                        help="paper table number (MT: 1, 2, 8; summarization: 3, 9; LM: 4; ASR: 5); runs of "
                             "other tasks are left out")
    parser.add_argument("results", nargs="*", help="run directories or result.json files (globs allowed)")
    args = parser.parse_args(argv)
    paths = [p for pattern in args.results for p in (glob.glob(pattern) or [pattern])]
    try:
        print(render_table(args.table, collect_results(paths, table=args.table)))
    except (KeyError, ValueError) as err:
        parser.error(str(err))
    return 0


def cmd_preset(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m b2t_lib preset", allow_abbrev=False,
                                     description="Print the training options of a preset as JSON.")
    parser.add_argument("--task", default="mt", choices=TASKS)
    parser.add_argument("--scale", default=get_scale(require_hardware=False), choices=SCALES)
    parser.add_argument("--recipe", default="", choices=[""] + sorted(RECIPES))
    args = parser.parse_args(argv)
    from .train.options import TrainConfig
    try:
        cfg = TrainConfig.from_preset(args.task, args.scale, args.recipe or None)
    except ValueError as err:
        parser.error(str(err))
    print(json.dumps(cfg.to_dict(), indent=1, sort_keys=True))
    return 0


def _number_list(text: str, kind):
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list of {kind.__name__}, got {text!r}") from error


def _option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.replace("-", "_"), value  # a plain string (a path, a device name)


def build_trainability_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m b2t_lib trainability", allow_abbrev=False,
        description="Train each variant across depths and peak learning rates; record each cell's status "
                    "(completed / stalled / diverged, the trainer's; a cell is judged by the stall rule at its "
                    "end) as JSON (resumable), and optionally draw the heatmap.")
    parser.add_argument("--variants", type=lambda s: _number_list(s, str), default=["post_ln", "pre_ln", "b2t"],
                        help="comma-separated variant names (default: post_ln,pre_ln,b2t; 'all' for every one)")
    parser.add_argument("--depths", type=lambda s: _number_list(s, int), default=[6, 12, 18],
                        help="comma-separated depths N (N encoder and N decoder layers)")
    parser.add_argument("--lrs", type=lambda s: _number_list(s, float), default=[5e-4, 1e-3, 2e-3],
                        help="comma-separated peak learning rates")
    parser.add_argument("--max-update", type=int, default=200, help="updates per cell")
    parser.add_argument("--task", default="mt", choices=["mt"], help="task preset (the map is defined for mt)")
    parser.add_argument("--scale", default=None, help="preset scale (default: $B2T_SCALE or tiny)")
    parser.add_argument("--out", required=True, help="the JSON file (resumed when it exists)")
    parser.add_argument("--work-dir", default=None, help="where runs go (default: a temporary folder)")
    parser.add_argument("--keep-runs", action="store_true", help="keep each cell's checkpoints and logs")
    parser.add_argument("--option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                        help="a training option for every cell, e.g. --option d_model=32 --option device=cuda")
    parser.add_argument("--figure", default=None, help="also save the heatmap to this PNG file")
    return parser


def _print_cell(cell: dict) -> None:
    nll = "-" if cell["valid_nll"] is None else f"{cell['valid_nll']:.3f}"
    print(f"{cell['variant']:>10} {cell['layers']:>3}L lr {cell['lr']:<8g} {cell['status']:<9} valid nll {nll}"
          f"  ({cell['seconds']:.0f} s)", flush=True)


def cmd_trainability(argv: list[str]) -> int:
    """The trainability map (variants x depths x learning rates), see :mod:`b2t_lib.trainability`."""
    from .trainability import STATUSES, run_trainability_map
    from .variants import VARIANTS

    parser = build_trainability_parser()
    args = parser.parse_args(argv)
    variants = sorted(VARIANTS) if args.variants == ["all"] else args.variants
    try:
        result = run_trainability_map(
            variants, args.depths, args.lrs, args.out, task=args.task, scale=args.scale,
            max_update=args.max_update, options=dict(args.option), work_dir=args.work_dir,
            keep_runs=args.keep_runs,
            progress=_print_cell)
    except (ValueError, FileNotFoundError, ScaleError) as error:
        parser.error(str(error))
    if args.figure:
        from .plots.style import apply_style
        from .plots.trainability import plot_trainability_map

        apply_style()
        plot_trainability_map(result).savefig(args.figure)
    counts = {s: sum(c["status"] == s for c in result["cells"]) for s in STATUSES}
    print(json.dumps({"out": str(args.out), "cells": len(result["cells"]), **counts}))
    return 0


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "table": cmd_table, "preset": cmd_preset,
            "trainability": cmd_trainability}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _configure_logging()
    try:
        get_scale(require_hardware=False)  # an unknown B2T_SCALE stops every command, listing the valid ones
    except ScaleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        usage = ("usage: python -m b2t_lib {train,evaluate,table,preset,trainability} [options]\n"
                 "  train     train one model (options default from the task's scale preset)\n"
                 "  evaluate  test a trained run (averaged checkpoints, BLEU / WER)\n"
                 "  table     print a paper table with our result.json files beside it\n"
                 "  preset    print a preset's options as JSON\n"
                 "  trainability  train variants x depths x learning rates; completed/stalled/diverged map as JSON\n"
                 "Run `python -m b2t_lib COMMAND --help` for the options of one command.")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"unknown command {argv[0]!r}\n{usage}", file=sys.stderr)
            return 2
        print(usage)
        return 0
    return COMMANDS[argv[0]](argv[1:])
