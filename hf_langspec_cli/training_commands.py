"""The `training` commands' arguments (their handlers: hf_langspec/cli/training_commands.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .command import Command
from .config_file import first_check, package_keys
from .types import integers, parse_target, positive


class _HelpConfig(argparse.Action):
    """`train --help-config`: the experiment config's schema, printed like --help (no --config needed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(package_keys()["help_config"])  # the package's table, written out with the keys (no torch)
        parser.exit()


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="YAML or JSON (see examples/configs/)")
    p.add_argument(
        "--help-config", action=_HelpConfig, help="print every config section and key with its type and default"
    )
    p.add_argument("--output-dir", type=Path, help="overrides the config's output_dir")
    p.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    p.add_argument(
        "--set",
        nargs="+",
        action="extend",
        metavar="SECTION.KEY=VALUE",
        help="override config keys, e.g. model.clm_decoder=none (may be given more than once)",
    )


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", required=True, help="a suite YAML (see examples/suites/)")
    p.add_argument("--systems", help="comma-separated systems to run (the baseline always runs)")
    p.add_argument(
        "--seeds",
        type=integers,
        help="comma-separated seeds to train, for every chosen system (the report adds them to the suite's)",
    )
    p.add_argument("--workers", type=int, default=1, help="runs at a time; CPU cores are split between them")
    p.add_argument("--output-dir", type=Path, help="overrides the suite's output_dir")
    p.add_argument("--report-only", action="store_true", help="train nothing: report the results that exist")
    p.add_argument("--show-controls", action="store_true",
                   help="train nothing: print the matched controls the suite's systems ask for (solved on the meta "
                        "device) and exit")  # fmt: skip
    p.add_argument(
        "--eval-set", action="append", metavar="FILE", help="a multi-way JSONL to evaluate every run on as well"
    )
    p.add_argument(
        "--off-target-later",
        action="store_true",
        help="leave the off-target rates to a later compare where the suite's language identifier is "
        "installed (a GPU machine may lack it); it measures them from the saved outputs",
    )


def _curve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", required=True, help="a suite YAML (see examples/suites/)")
    p.add_argument("--max-steps", type=int, required=True, help="train this many steps")
    p.add_argument("--every", type=int, required=True, help="validate every this many steps")
    p.add_argument("--system", help="the system to train (default: the suite's baseline)")
    p.add_argument("--seed", type=int, help="its seed (default: the system's first)")
    p.add_argument("--sentences", type=positive, default=50, help="validation sentences per direction (default 50)")
    p.add_argument("--target", type=parse_target, action="append", metavar="GROUP=BLEU",
                   help="report the first step where a group (xx-en, en-xx) reaches this BLEU; repeatable")  # fmt: skip
    p.add_argument("--output-dir", type=Path, help="the run's directory (default: <suite output_dir>/curves/...)")


COMMANDS = [
    Command(
        "train",
        "hf_langspec.cli.training_commands:cmd_train",
        _train_arguments,
        check=lambda args: first_check(args.config, args.set),
        help="corpus, tokenizer, training, evaluation and card from one config",
    ),
    Command(
        "compare",
        "hf_langspec.cli.training_commands:cmd_compare",
        _compare_arguments,
        help="train every system of a suite over seeds at an equal budget and report the comparison",
    ),
    Command(
        "curve",
        "hf_langspec.cli.training_commands:cmd_curve",
        _curve_arguments,
        help="a system's learning curve on a suite (validation BLEU by direction group against steps), to choose its budget",
    ),
]
