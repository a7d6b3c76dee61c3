"""The command line of one training run: ``python -m b2t_lib train``'s parser, generated from the fields of
:class:`~b2t_lib.train.TrainConfig` and :class:`~b2t_lib.config.ModelConfig`, and the inverse, the options that make
a detached run of the launcher trains from its config file instead (``train --config FILE``, :mod:`b2t_lib.cli`).

Every option defaults from the preset of ``--task`` at ``--scale`` (then ``--recipe``); an option is "given"
only when it is on the command line, which the contradiction checks of :meth:`TrainConfig.check` rely on.
"""

from __future__ import annotations

import argparse

from ..config import choices_of, flag
from ..errors import ArgumentParser
from ..presets import RECIPES
from ..scale import SCALES, get_scale
from .registry import task_names

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
    raise TypeError(
        f"the command line cannot read options of type {type_name!r}; use int, float, str, bool or tuple[int, ...]"
    )


def _at_least_one(convert):
    """The type of an option that must be at least 1 (:data:`~b2t_lib.train.options.AT_LEAST_ONE`)."""

    def parse(text: str):
        value = convert(text)
        if value < 1:
            raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
        return value

    parse.__name__ = convert.__name__  # argparse names the type in its message
    return parse


def _first_stage(argv: list[str], scale: str) -> argparse.Namespace:
    """Read only --task, --scale and --recipe, which decide every other default."""
    stage = ArgumentParser(prog="python -m b2t_lib train", add_help=False)
    stage.add_argument("--task", default="mt", choices=task_names())
    stage.add_argument("--scale", default=scale, choices=SCALES)
    stage.add_argument("--recipe", default="", choices=[""] + sorted(RECIPES))
    known, _ = stage.parse_known_args(argv)
    return known


def _variant_list() -> str:
    from ..variants import VARIANTS

    return ", ".join(f"{name} ({v.title}, {v.equation})" for name, v in sorted(VARIANTS.items()))


def build_train_parser(task: str = "mt", scale: str = "tiny", recipe: str = "") -> argparse.ArgumentParser:
    """The ``train`` parser: one option per :class:`~b2t_lib.train.TrainConfig` field and per settable
    :class:`~b2t_lib.config.ModelConfig` field, with help, group and choices from the fields'
    metadata and defaults from ``option_defaults(task, scale, recipe)``."""
    from .options import option_defaults, option_fields

    defaults = option_defaults(task, scale, recipe or None)
    parser = ArgumentParser(
        prog="python -m b2t_lib train",
        description=f"Train one model. Defaults shown are the '{task}' preset at scale '{scale}'"
        + (f" with recipe '{recipe}'" if recipe else "")
        + "; pass --task/--scale/--recipe to see another preset's defaults. Variants: "
        + _variant_list()
        + ".",
        usage="python -m b2t_lib train [--task T] [--scale S] [--recipe R] [options]  (--help lists all)",
        allow_abbrev=False,
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in option_fields():
        group = groups.get(f.metadata["group"])
        if group is None:
            group = groups[f.metadata["group"]] = parser.add_argument_group(f.metadata["group"])
        # Show the preset's value without making it "given": SUPPRESS keeps explicit options apart.
        add_field_option(group, f, argparse.SUPPRESS, f"default: {defaults[f.name]!r}")
    return parser


def add_field_option(parser, f, default, default_text: str) -> None:
    """The option of the config field ``f`` on ``parser``: its flag, help text, choices and type from the field
    (``--no-X`` for a bool), ``default`` as the parsed value when absent, ``default_text`` ending its help."""
    from .options import AT_LEAST_ONE

    kwargs = dict(dest=f.name, default=default, help=f"{f.metadata['help']} ({default_text})")
    choices = choices_of(f)
    if choices is not None:
        kwargs["choices"] = choices
    type_name = _type_name(f.type)
    if type_name == "bool":
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs["type"], metavar = _value_parser(type_name)
        if f.name in AT_LEAST_ONE:
            kwargs["type"] = _at_least_one(kwargs["type"])
        if choices is None:
            kwargs["metavar"] = metavar
    parser.add_argument(flag(f.name), **kwargs)


def add_run_options(parser: argparse.ArgumentParser, names: tuple[str, ...], defaults: dict | None = None) -> None:
    """Options of the training-option fields ``names`` for a command that reads a finished run (``evaluate``):
    each unset (None) unless given, so the run's own value applies; ``defaults`` names those that have their own."""
    from .options import option_fields

    by_name, defaults = {f.name: f for f in option_fields()}, defaults or {}
    for name in names:
        if name in defaults:
            add_field_option(parser, by_name[name], defaults[name], f"default: {defaults[name]}")
        else:
            add_field_option(parser, by_name[name], None, "default: the run's")


def parse_train_args(argv: list[str]) -> tuple[argparse.ArgumentParser, dict]:
    """The ``train`` parser for ``argv``'s task, scale and recipe, and the options ``argv`` gives."""
    stage = _first_stage(argv, get_scale(require_hardware=False))
    parser = build_train_parser(stage.task, stage.scale, stage.recipe)
    args = vars(parser.parse_args(argv))
    args.setdefault("task", stage.task)
    args.setdefault("scale", stage.scale)
    return parser, args


def config_from_args(args: dict):
    """The :class:`~b2t_lib.train.TrainConfig` of parsed ``train`` options: the preset of their task and
    scale, the recipe, then the options given (what ``python -m b2t_lib train`` trains)."""
    from .options import TrainConfig

    args = dict(args)
    task, scale, recipe = args.pop("task"), args.pop("scale"), args.pop("recipe", "")
    return TrainConfig.from_preset(task, scale, recipe or None, **args)
