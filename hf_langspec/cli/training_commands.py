"""`hf-langspec train`, `compare` and `curve`: one experiment, a suite of them over seeds, a learning curve."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch.distributed as dist

from ..compare import compare
from ..compare.controls import control_lines
from ..compare.learning_curve import curve_markdown, learning_curve
from ..compare.report_markdown import markdown
from ..compare.suite import load_suite
from ..training.config import apply_overrides, load_config
from ..training.config_schema import schema_table
from ..training.experiment import run_experiment
from .arguments import codes, integers, parse_target, positive
from .registry import command


class _HelpConfig(argparse.Action):
    """`train --help-config`: the experiment config's schema, printed like --help (no --config needed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(schema_table())
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


@command("train", _train_arguments, help="corpus, tokenizer, training, evaluation and card from one config")
def cmd_train(args: argparse.Namespace) -> None:
    config = apply_overrides(load_config(args.config), args.set or [])
    if args.output_dir:
        config["output_dir"] = str(args.output_dir)
    outcome = run_experiment(config, resume=not args.no_resume)
    print(f"model: {outcome['model_dir']}")

    if dist.is_available() and dist.is_initialized():  # a launched process ends its group (accelerate's end_training)
        dist.destroy_process_group()  # left to interpreter exit, a rank once aborted ("terminate called ...")


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
    p.add_argument("--off-target-later", action="store_true",
                   help="leave the off-target rates to a later compare where the suite's language identifier is "
                        "installed (a GPU machine may lack it); it measures them from the saved outputs")  # fmt: skip


@command(
    "compare",
    _compare_arguments,
    help="train every system of a suite over seeds at an equal budget and report the comparison",
)
def cmd_compare(args: argparse.Namespace) -> None:
    if args.show_controls:
        suite = load_suite(args.suite, build_models=False)
        described = {name: s.control.describe() for name, s in suite.systems.items() if s.control is not None}
        print("\n".join(control_lines(described)) if described else f"{args.suite} asks for no matched controls.")
        return
    report = compare(
        args.suite, systems=codes(args.systems) if args.systems else None, seeds=args.seeds, workers=args.workers,
        output_dir=args.output_dir, report_only=args.report_only, eval_sets=args.eval_set or [],
        off_target_later=args.off_target_later,
    )  # fmt: skip
    print(markdown(report, image_prefix=None))
    if report["failed"]:
        raise RuntimeError(
            f"{len(report['failed'])} run(s) failed: {', '.join(report['failed'])}; see their compare.log."
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


@command(
    "curve",
    _curve_arguments,
    help="a system's learning curve on a suite (validation BLEU by direction group against steps), to choose its budget",
)
def cmd_curve(args: argparse.Namespace) -> None:
    result = learning_curve(
        args.suite, args.max_steps, args.every, system=args.system, seed=args.seed, sentences=args.sentences,
        targets=dict(args.target or []), output_dir=args.output_dir,
    )  # fmt: skip
    print(curve_markdown(result))
