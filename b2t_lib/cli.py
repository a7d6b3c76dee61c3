"""Command line: ``python -m b2t_lib {train,evaluate,table,preset,trainability} ...``.

``train`` options are generated from :class:`b2t_lib.train.TrainConfig`; each defaults from the
preset of ``--task`` at ``--scale`` (then ``--recipe``), and ``--help`` shows those defaults::

    python -m b2t_lib train --task mt --variant b2t --encoder-layers 18 --decoder-layers 18 \\
        --save-dir runs/b2t_18 --help
    torchrun --nproc_per_node 8 -m b2t_lib train --task mt --scale full --data data/wmt14_en_de ...

Exit status: 0 done, 2 bad options, 3 training diverged (the result record says so).
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from dataclasses import fields

from .presets import RECIPES, TASKS, preset
from .scale import SCALES, get_scale

EXIT_DIVERGED = 3
_TYPES = {"int": int, "float": float, "str": str}


def _scale_default() -> str:
    try:
        return get_scale(require_hardware=False)
    except Exception:  # a bad B2T_SCALE is reported when it is used, not while printing help
        return "tiny"


def _first_stage(argv: list[str]) -> argparse.Namespace:
    """Read only --task, --scale and --recipe, which decide every other default."""
    stage = argparse.ArgumentParser(add_help=False)
    stage.add_argument("--task", default="mt", choices=TASKS)
    stage.add_argument("--scale", default=_scale_default(), choices=SCALES)
    stage.add_argument("--recipe", default="", choices=[""] + sorted(RECIPES))
    known, _ = stage.parse_known_args(argv)
    return known


def build_train_parser(task: str = "mt", scale: str = "tiny", recipe: str = "") -> argparse.ArgumentParser:
    """The ``train`` parser with defaults from ``preset(task, scale)`` and ``recipe``."""
    from .presets import recipe as recipe_values
    from .train.options import TrainConfig

    defaults = preset(task, scale)
    defaults.update(dict(save_dir="checkpoints", device="auto", amp="auto", compile=False,
                         progress_bar=True, resume=False, eval_at_end=True, recipe=recipe))
    if recipe:
        defaults.update(recipe_values(recipe))
    parser = argparse.ArgumentParser(
        prog="python -m b2t_lib train",
        description=f"Train one model. Defaults shown are the '{task}' preset at scale '{scale}'"
                    + (f" with recipe '{recipe}'" if recipe else "")
                    + "; pass --task/--scale/--recipe to see another preset's defaults.",
        usage="python -m b2t_lib train [--task T] [--scale S] [--recipe R] [options]  (--help lists all)",
        allow_abbrev=False)
    groups = {}
    titles = {"task": "task and data", "model": "model", "optim": "optimization", "batch": "batching",
              "runtime": "runtime", "ckpt": "checkpoints and logs", "diverge": "divergence",
              "eval": "evaluation at the end"}
    for f in fields(TrainConfig):
        meta = f.metadata
        group = groups.setdefault(meta["group"], parser.add_argument_group(titles[meta["group"]]))
        flag = "--" + f.name.replace("_", "-")
        kwargs = dict(dest=f.name, default=argparse.SUPPRESS, help=meta["help"])
        if f.name == "recipe":
            kwargs["choices"] = [""] + sorted(RECIPES)
        elif "choices" in meta:
            kwargs["choices"] = list(meta["choices"])
        if f.type == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _TYPES[f.type]
            if "choices" not in kwargs:
                kwargs["metavar"] = f.type.upper()
        if f.name == "variant":
            from .variants import VARIANTS
            kwargs["help"] += f"; registered: {', '.join(sorted(VARIANTS))}"
        # Show the preset's value without making it "given": SUPPRESS keeps explicit options apart.
        kwargs["help"] += f" (default: {defaults[f.name]!r})"
        group.add_argument(flag, **kwargs)
    return parser


def cmd_train(argv: list[str]) -> int:
    from .train.options import TrainConfig
    from .train.trainer import Trainer

    stage = _first_stage(argv)
    parser = build_train_parser(stage.task, stage.scale, stage.recipe)
    args = vars(parser.parse_args(argv))
    task, scale, recipe = args.pop("task", stage.task), args.pop("scale", stage.scale), args.pop("recipe", "")
    try:
        cfg = TrainConfig.from_preset(task, scale, recipe or None, **args)
    except ValueError as err:
        parser.error(str(err))
    try:
        trainer = Trainer(cfg)
    except (ValueError, FileNotFoundError, FileExistsError, NotImplementedError, RuntimeError) as err:
        parser.error(str(err))
    record = trainer.train()
    if trainer.env.is_main:
        print(json.dumps({"status": record["status"], "metrics": {
            k: v for k, v in record["metrics"].items() if k not in ("samples",)}}, indent=1))
    from .train.distributed import destroy
    destroy(trainer.env)
    return EXIT_DIVERGED if record["status"] == "diverged" else 0


def cmd_evaluate(argv: list[str]) -> int:
    from .train.evaluate import evaluate_run

    parser = argparse.ArgumentParser(prog="python -m b2t_lib evaluate", allow_abbrev=False,
                                     description="Test a trained run: average its last N checkpoints "
                                                 "and compute the task's metric (BLEU for MT).")
    parser.add_argument("--save-dir", required=True, help="the run's directory")
    parser.add_argument("--checkpoint", help="evaluate this one checkpoint file instead (no averaging)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="device")
    parser.add_argument("--data", help="data directory (default: the one the run was trained on)")
    parser.add_argument("--average-last", type=int, help="average the last N checkpoints (default: the run's)")
    parser.add_argument("--beam", type=int, help="beam size (default: the run's, 4)")
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
    from .paper_tables import collect_mt_results, render_table

    parser = argparse.ArgumentParser(prog="python -m b2t_lib table", allow_abbrev=False,
                                     description="Print a paper table with our results beside it.")
    parser.add_argument("--table", type=int, default=1, help="paper table number (MT: 1, 2, 8)")
    parser.add_argument("results", nargs="*", help="run directories or result.json files (globs allowed)")
    args = parser.parse_args(argv)
    paths = [p for pattern in args.results for p in (glob.glob(pattern) or [pattern])]
    try:
        print(render_table(args.table, collect_mt_results(paths)))
    except KeyError as err:
        parser.error(str(err))
    return 0


def cmd_preset(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m b2t_lib preset", allow_abbrev=False,
                                     description="Print the training options of a preset as JSON.")
    parser.add_argument("--task", default="mt", choices=TASKS)
    parser.add_argument("--scale", default=_scale_default(), choices=SCALES)
    parser.add_argument("--recipe", default="", choices=[""] + sorted(RECIPES))
    args = parser.parse_args(argv)
    from .train.options import TrainConfig
    print(json.dumps(TrainConfig.from_preset(args.task, args.scale, args.recipe or None).to_dict(),
                     indent=1, sort_keys=True))
    return 0


def cmd_trainability(argv: list[str]) -> int:
    """Issue 5: the trainability map (variants x depths x learning rates), see b2t_lib/trainability.py."""
    from .trainability import main as trainability_main

    return trainability_main(argv)


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "table": cmd_table, "preset": cmd_preset,
            "trainability": cmd_trainability}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        usage = ("usage: python -m b2t_lib {train,evaluate,table,preset,trainability} [options]\n"
                 "  train     train one model (options default from the task's scale preset)\n"
                 "  evaluate  test a trained run (averaged checkpoints, BLEU)\n"
                 "  table     print a paper table with our result.json files beside it\n"
                 "  preset    print a preset's options as JSON\n"
                 "  trainability  train variants x depths x learning rates; converged/diverged map as JSON\n"
                 "Run `python -m b2t_lib COMMAND --help` for the options of one command.")
        if argv and argv[0] not in ("-h", "--help"):
            print(f"unknown command {argv[0]!r}\n{usage}", file=sys.stderr)
            return 2
        print(usage)
        return 0
    return COMMANDS[argv[0]](argv[1:])
