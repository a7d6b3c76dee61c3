"""Command line: ``python -m b2t_lib {train,evaluate,table,preset,trainability,runs,estimate} ...``.

``train`` has one option per field of :class:`b2t_lib.train.TrainConfig` and per settable field of
:class:`b2t_lib.config.ModelConfig` (help text and group come from the fields' metadata); each
defaults from the preset of ``--task`` at ``--scale`` (then ``--recipe``), and ``--help`` shows
those defaults::

    python -m b2t_lib train --task mt --variant b2t --encoder-layers 18 --decoder-layers 18 \\
        --save-dir runs/b2t_18 --help
    torchrun --nproc_per_node 8 -m b2t_lib train --task mt --scale full --data data/wmt14_en_de ...

Exit status: 0 done, 2 bad options (an unknown ``B2T_SCALE`` included), 3 training failed: the run
diverged or stalled (:mod:`b2t_lib.train.failure`; the result record says which and why). Under ``torchrun``
a failed run exits 0 too once its result is written: torchrun takes any other status for a crash of its
workers (it prints a ChildFailedError, and with ``--max-restarts`` it would start the run again); the printed
status and ``result.json`` say "stalled" or "diverged". Messages
of the library (resume notices, failed runs) go to stderr through :mod:`logging`; the final result
is printed to stdout as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .errors import ArgumentParser, UserError, decode_error, run_command
from .presets import RECIPES
from .scale import SCALES, get_scale

# The train command's parser lives with the trainer (the launcher builds run commands with it too).
from .train.command import add_run_options, build_train_parser, config_from_args, parse_train_args  # noqa: F401
from .train.registry import task_names

EXIT_FAILED = 3  # the run diverged or stalled ("Training failed")
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


def _config_file(argv: list[str]):
    """``train --config FILE``: the run's whole config as JSON (``TrainConfig.to_dict``), what the launcher's
    detached runs execute; None when ``argv`` does not use it."""
    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        return None
    from .train.options import TrainConfig

    parser = ArgumentParser(
        prog="python -m b2t_lib train",
        allow_abbrev=False,
        description="Train the run described by a JSON config (TrainConfig.to_dict).",
    )
    parser.add_argument("--config", required=True, help="a JSON file with every option, as result.json's config")
    args = parser.parse_args(argv)  # any other option is refused: the file holds them all
    path = Path(args.config)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"cannot read the config file ({err.strerror})", where=path, todo="pass a JSON file") from None
    try:
        values = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise decode_error(path, data, err) from None
    except json.JSONDecodeError as err:
        raise UserError(f"not JSON: {err.msg}", where=f"{path}:{err.lineno}", todo="pass a JSON object") from None
    if not isinstance(values, dict):
        raise UserError("the config is not a JSON object", where=path, todo="write TrainConfig.to_dict() into it")
    return parser, TrainConfig.from_dict(values)


def cmd_train(argv: list[str]) -> int:
    from .train.trainer import Trainer

    from_file = _config_file(argv)
    if from_file is not None:
        _, cfg = from_file
    else:
        cfg = config_from_args(parse_train_args(argv)[1])
    trainer = Trainer(cfg)  # a user error (options, data, --save-dir) ends in one line, raised where it is known
    record = trainer.train()
    if trainer.env.is_main:
        printed = {"status": record["status"]}
        if record.get("message"):
            printed["message"] = record["message"]
        printed["metrics"] = {k: v for k, v in record["metrics"].items() if k not in ("samples",)}
        print(json.dumps(printed, indent=1))
    from .train.distributed import destroy
    from .train.failure import is_failed

    destroy(trainer.env)
    # Under torchrun a failed run is a result, not a crashed worker: exit 0 (see the module docstring).
    return EXIT_FAILED if is_failed(record["status"]) and not trainer.env.enabled else 0


def cmd_evaluate(argv: list[str]) -> int:
    from .train.evaluate import EVAL_OPTIONS, evaluate_run

    parser = ArgumentParser(
        prog="python -m b2t_lib evaluate",
        allow_abbrev=False,
        description="Test a trained run: average its last N checkpoints and "
        "compute the task's metric (BLEU for MT, ROUGE for "
        "summarization, perplexity for the LM, WER for ASR). With --fairseq-checkpoint: "
        "test a fairseq translation checkpoint (the authors' models) with its own dictionaries "
        "and BPE codes on the newstest sets of --data, and print its row beside the README's and the paper's.",
    )
    parser.add_argument("--save-dir", help="the run's directory")
    parser.add_argument("--checkpoint", help="evaluate this one checkpoint file instead (no averaging)")
    add_run_options(parser, ("device",) + EVAL_OPTIONS, defaults={"device": "auto"})  # what evaluation may change
    fairseq = parser.add_argument_group("a fairseq checkpoint (instead of --save-dir)")
    fairseq.add_argument("--fairseq-checkpoint", help="a fairseq translation checkpoint (averaged, as the README's)")
    fairseq.add_argument("--fairseq-dict", help="the folder of its dict.en.txt and dict.de.txt")
    fairseq.add_argument("--bpe-codes", help="its subword-nmt BPE codes file")
    fairseq.add_argument(
        "--aggressive-dash-splits",
        action="store_true",
        help="split hyphens in the sources (fairseq's prepare-wmt14en2de.sh; off for the scaling_nmt data)",
    )
    fairseq.add_argument("--trust-checkpoint", action="store_true", help="load any pickled object (a file you trust)")
    args = vars(parser.parse_args(argv))
    if args["fairseq_checkpoint"] or args["fairseq_dict"] or args["bpe_codes"]:
        return _evaluate_fairseq(parser, args)
    for name in ("fairseq_checkpoint", "fairseq_dict", "bpe_codes", "aggressive_dash_splits", "trust_checkpoint"):
        args.pop(name)
    if not args["save_dir"]:
        parser.error("give --save-dir (a run of the course) or --fairseq-checkpoint (a fairseq model)")
    if args["checkpoint"] and args["average_last"]:
        parser.error("--checkpoint evaluates one file; --average-last averages numbered checkpoints; give one")
    save_dir, checkpoint, device = args.pop("save_dir"), args.pop("checkpoint"), args.pop("device")
    metrics = evaluate_run(save_dir, checkpoint, device, **args)
    print(json.dumps({k: v for k, v in metrics.items() if k != "samples"}, indent=1))
    return 0


def _evaluate_fairseq(parser, args: dict) -> int:
    """``evaluate --fairseq-checkpoint``: Table 1's row of a fairseq model, beside the authors' README and the paper."""
    from .paper_tables import AUTHORS_README_18L, NEWSTEST, paper_table
    from .train.fairseq_eval import evaluate_fairseq_checkpoint

    missing = [
        f"--{n.replace('_', '-')}"
        for n in ("fairseq_checkpoint", "fairseq_dict", "bpe_codes", "data")
        if not args.get(n)
    ]
    if missing:
        parser.error(f"a fairseq checkpoint is evaluated with {', '.join(missing)} too")
    if args["save_dir"] or args["checkpoint"] or args["average_last"] or args["context_window"]:
        parser.error(
            "--fairseq-checkpoint evaluates one fairseq file: drop --save-dir, --checkpoint, --average-last "
            "and --context-window"
        )
    options = {k: args[k] for k in ("beam", "lenpen", "lenpen_other", "max_len_a", "max_len_b", "eval_batch_size")}
    metrics = evaluate_fairseq_checkpoint(
        args["fairseq_checkpoint"],
        args["fairseq_dict"],
        args["bpe_codes"],
        args["data"],
        device=args["device"],
        aggressive_dash_splits=args["aggressive_dash_splits"],
        trust_checkpoint=args["trust_checkpoint"],
        **options,
    )
    years = NEWSTEST[:-1]
    ours = [metrics["bleu"].get(f"newstest{y}") for y in years] + [metrics["bleu_avg"]]
    rows = [
        ("this checkpoint", ours),
        *AUTHORS_README_18L.items(),
        ("paper Table 1, B2T 18L-18L", paper_table(1).sections["18L-18L"]["b2t"]),
    ]
    print(f"{'SacreBLEU':<40}" + "".join(f"{c:>8}" for c in NEWSTEST))
    for label, row in rows:
        print(f"{label:<40}" + "".join(f"{'-' if v is None else f'{v:.2f}':>8}" for v in row))
    print(json.dumps({"bleu": metrics["bleu"], "bleu_avg": metrics["bleu_avg"], **metrics["eval_options"]}))
    return 0


def cmd_table(argv: list[str]) -> int:
    from .errors import ArgumentParser
    from .paper_tables import PAPER_TABLES, collect_results, render_table, result_files

    parser = ArgumentParser(
        prog="python -m b2t_lib table",
        allow_abbrev=False,
        description="Print a paper table with our results beside it. Runs that "
        'stalled or diverged print as "Training failed", the kind '
        "and its numbers in a footnote. An argument without a result.json, a file that is not a run "
        "record and a metric that is not a number are each named in a warning on stderr.",
    )
    parser.add_argument(
        "--table",
        type=int,
        default=1,
        choices=sorted(PAPER_TABLES),
        help="paper table number (MT: 1, 2, 8; summarization: 3, 9; LM: 4; ASR: 5); runs of other tasks are left out",
    )
    parser.add_argument("results", nargs="*", help="run directories or result.json files (globs allowed)")
    args = parser.parse_args(argv)

    def warn(text: str) -> None:
        print(f"warning: {text}", file=sys.stderr)

    paths = result_files(args.results, warn)
    print(render_table(args.table, collect_results(paths, table=args.table, warn=warn)))
    return 0


def cmd_preset(argv: list[str]) -> int:
    parser = ArgumentParser(
        prog="python -m b2t_lib preset",
        allow_abbrev=False,
        description="Print the training options of a preset as JSON.",
    )
    parser.add_argument("--task", default="mt", choices=task_names())
    parser.add_argument("--scale", default=get_scale(require_hardware=False), choices=SCALES)
    parser.add_argument("--recipe", default="", choices=[""] + sorted(RECIPES))
    args = parser.parse_args(argv)
    from .train.options import TrainConfig

    cfg = TrainConfig.from_preset(args.task, args.scale, args.recipe or None)
    print(json.dumps(cfg.to_dict(), indent=1, sort_keys=True))
    return 0


def _number_list(text: str, kind):
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {text!r}") from error


def _option(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option takes KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key.replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.replace("-", "_"), value  # a plain string (a path, a device name)


def build_trainability_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m b2t_lib trainability",
        allow_abbrev=False,
        description="Train each variant across depths and peak learning rates; record each cell's status "
        "(completed / stalled / diverged, the trainer's; a cell is judged by the stall rule at its "
        "end) as JSON (resumable), and optionally draw the heatmap.",
    )
    parser.add_argument(
        "--variants",
        type=lambda s: _number_list(s, str),
        default=["post_ln", "pre_ln", "b2t"],
        help="comma-separated variant names (default: post_ln,pre_ln,b2t; 'all' for every one)",
    )
    parser.add_argument(
        "--depths",
        type=lambda s: _number_list(s, int),
        default=[6, 12, 18],
        help="comma-separated depths N (N encoder and N decoder layers)",
    )
    parser.add_argument(
        "--lrs",
        type=lambda s: _number_list(s, float),
        default=[5e-4, 1e-3, 2e-3],
        help="comma-separated peak learning rates",
    )
    parser.add_argument("--max-update", type=int, default=200, help="updates per cell")
    parser.add_argument("--task", default="mt", choices=["mt"], help="task preset (the map is defined for mt)")
    parser.add_argument("--scale", default=None, help="preset scale (default: $B2T_SCALE or tiny)")
    parser.add_argument("--out", required=True, help="the JSON file (resumed when it exists)")
    parser.add_argument("--work-dir", default=None, help="where runs go (default: a temporary folder)")
    parser.add_argument("--keep-runs", action="store_true", help="keep each cell's checkpoints and logs")
    parser.add_argument(
        "--option",
        type=_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training option for every cell, e.g. --option d_model=32 --option device=cuda",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="cells trained at a time, each in its own process (default 1)"
    )
    parser.add_argument("--figure", default=None, help="also save the heatmap to this PNG file")
    return parser


def _print_cell(cell: dict) -> None:
    nll = "-" if cell["valid_nll"] is None else f"{cell['valid_nll']:.3f}"
    print(
        f"{cell['variant']:>10} {cell['layers']:>3}L lr {cell['lr']:<8g} {cell['status']:<9} valid nll {nll}"
        f"  ({cell['seconds']:.0f} s)",
        flush=True,
    )


def cmd_trainability(argv: list[str]) -> int:
    """The trainability map (variants x depths x learning rates), see :mod:`b2t_lib.trainability`."""
    from .trainability import STATUSES, run_trainability_map
    from .variants import VARIANTS

    parser = build_trainability_parser()
    args = parser.parse_args(argv)
    variants = sorted(VARIANTS) if args.variants == ["all"] else args.variants
    result = run_trainability_map(
        variants,
        args.depths,
        args.lrs,
        args.out,
        task=args.task,
        scale=args.scale,
        max_update=args.max_update,
        options=dict(args.option),
        work_dir=args.work_dir,
        keep_runs=args.keep_runs,
        progress=_print_cell,
        workers=args.workers,
    )
    if args.figure:
        from .plots.style import apply_style
        from .plots.trainability import plot_trainability_map

        apply_style()
        plot_trainability_map(result).savefig(args.figure)
    counts = {s: sum(c["status"] == s for c in result["cells"]) for s in STATUSES}
    print(json.dumps({"out": str(args.out), "cells": len(result["cells"]), **counts}))
    return 0


def cmd_runs(argv: list[str]) -> int:
    """The launched runs of a group (or every group): state, updates, loss, device, pid, log."""
    from .runs.state import group_dir, group_statuses, runs_root

    parser = ArgumentParser(
        prog="python -m b2t_lib runs",
        allow_abbrev=False,
        description="Show the runs that b2t_lib.runs.launch started or "
        "trained (under $B2T_RUNS, else <repository>/runs).",
    )
    parser.add_argument("groups", nargs="*", help="group names (default: every group)")
    args = parser.parse_args(argv)
    root = runs_root()
    groups = args.groups or (
        sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
    )
    if not groups:
        print(f"no runs under {root}")
    for group in groups:
        statuses = group_statuses(group)  # a bad group name is a ConfigError: one line
        print(f"{group_dir(group)}")
        for name, s in statuses.items():
            total = (s.launch.get("config") or (s.result or {}).get("config") or {}).get("max_update", "?")
            loss = f"loss {s.loss:.3f}" if s.loss is not None else ""
            pid, device = s.launch.get("pid") or s.process.get("pid"), s.launch.get("device", "this machine")
            where = f"pid {pid} on {device}" if s.state == "running" else ""
            print(f"  {name:<16} {s.describe():<12} {s.update:>7}/{total:<7} {loss:<11} {where}")
    return 0


def cmd_launch_queue(argv: list[str]) -> int:
    """The detached queue runner that ``launch`` starts (not meant to be typed)."""
    from .runs.queue import run_queue

    parser = ArgumentParser(
        prog="python -m b2t_lib launch-queue",
        allow_abbrev=False,
        description="Run the queue of a launch plan (started by b2t_lib.runs.launch, in its own session).",
    )
    parser.add_argument("plan", help="runs/<group>/.launch/plan.json")
    return run_queue(parser.parse_args(argv).plan)


def cmd_estimate(argv: list[str]) -> int:
    """Estimated GPU-hours of the run that the same ``train`` options describe, or the README's table."""
    from .runs.cost import estimate_gpu_hours, estimate_table

    if "--table" in argv:
        print(estimate_table())
        return 0
    if argv and argv[0] in ("-h", "--help"):
        print(
            "usage: python -m b2t_lib estimate [train options] | --table\n"
            "Print the estimated GPU-hours of the run `python -m b2t_lib train [train options]` would train\n"
            "(FLOP count of one update x updates, at the MFU measured in benchmarks/RESULTS.md or an\n"
            "assumed one); --table prints the README's table for the paper's configurations."
        )
        return 0
    cfg = config_from_args(parse_train_args(argv)[1])
    est = estimate_gpu_hours(cfg)
    print(
        json.dumps(
            {
                "gpu_hours": round(est.gpu_hours, 3),
                "flops_per_update": est.flops_per_update,
                "tokens_per_update": est.tokens_per_update,
                "updates": est.updates,
                "flops": est.flops,
                "mfu": est.throughput.mfu,
                "mfu_measured": est.throughput.measured,
                "gpu": est.throughput.gpu,
                "source": est.throughput.source,
            },
            indent=1,
        )
    )
    return 0


COMMANDS = {
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "table": cmd_table,
    "preset": cmd_preset,
    "trainability": cmd_trainability,
    "runs": cmd_runs,
    "estimate": cmd_estimate,
    "launch-queue": cmd_launch_queue,
}


USAGE = (
    "usage: python -m b2t_lib {train,evaluate,table,preset,trainability,runs,estimate} [options]\n"
    "  train     train one model (options default from the task's scale preset)\n"
    "  evaluate  test a trained run (averaged checkpoints; BLEU, ROUGE, perplexity, WER)\n"
    "  table     print a paper table with our result.json files beside it\n"
    "  preset    print a preset's options as JSON\n"
    "  trainability  train variants x depths x learning rates; completed/stalled/diverged map as JSON\n"
    "  runs      the runs the launcher started (state, updates, loss, pid, device), per group\n"
    "  estimate  estimated GPU-hours of the run the same train options describe (--table: README's)\n"
    "  (launch-queue PLAN: the detached queue runner that b2t_lib.runs.launch starts itself)\n"
    "Run `python -m b2t_lib COMMAND --help` for the options of one command."
)


def _dispatch(argv: list[str]) -> int:
    _configure_logging()
    get_scale(require_hardware=False)  # an unknown B2T_SCALE stops every command, listing the valid ones
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] not in COMMANDS:
        raise UserError(
            f"unknown command {argv[0]!r}", todo=f"choose one of {', '.join(sorted(COMMANDS))} (see --help)"
        )
    return COMMANDS[argv[0]](argv[1:])


def main(argv: list[str] | None = None) -> int:
    """Run one command; a user error ends in one ``error:`` line and exit code 2 (:func:`b2t_lib.errors.run_command`),
    a closed pipe quietly, anything else with its traceback."""
    return run_command(_dispatch, list(sys.argv[1:] if argv is None else argv))
