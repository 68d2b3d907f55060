"""`hf-langspec train`, `compare` and `curve`: one experiment, a suite of them over seeds, a learning curve."""

from __future__ import annotations

import argparse

from hf_langspec_cli.types import codes

from ..compare import compare
from ..compare.controls import control_lines
from ..compare.learning_curve import curve_markdown, learning_curve
from ..compare.report_markdown import markdown
from ..compare.suite import load_suite
from ..training.config import apply_overrides, load_config
from ..training.experiment import run_experiment
from ..training.processes import end_process_group


def cmd_train(args: argparse.Namespace) -> None:
    config = apply_overrides(load_config(args.config), args.set or [])
    if args.output_dir:
        config["output_dir"] = str(args.output_dir)
    outcome = run_experiment(config, resume=not args.no_resume)
    print(f"model: {outcome['model_dir']}")
    end_process_group()  # every rank together (accelerate's end_training); left to exit, a rank once aborted


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


def cmd_curve(args: argparse.Namespace) -> None:
    result = learning_curve(
        args.suite, args.max_steps, args.every, system=args.system, seed=args.seed, sentences=args.sentences,
        targets=dict(args.target or []), output_dir=args.output_dir,
    )  # fmt: skip
    print(curve_markdown(result))
