"""A system's learning curve on a suite: validation BLEU per direction group against training steps.

How a suite's budget is chosen by measurement: train one system (the baseline) of the suite, on the
suite's own shared data and vocabulary, for `max_steps`, and translate the validation set every `every`
steps with the suite's decoding (beam size, length limit), through the Trainer's generation-based
evaluation (`predict_with_generate`, scored per direction by `TranslationMetrics`). The learning-rate
schedule does not depend on `max_steps` (inverse square root after warm-up), so the point at step N is
the model a suite run of N steps would train: the smallest budget that reaches a target can be read
off one curve. The run is resumable like any experiment; the curve is written atomically as JSON.

    hf-langspec curve --suite examples/suites/bible6.yaml --max-steps 12000 --every 1000 \\
        --target xx-en=10 --target en-xx=6
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import mean
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from ..evaluation.metrics import direction_groups
from ..files import read_json, write_atomic
from ..training.checkpoints import last_complete_checkpoint
from ..training.experiment import run_experiment
from .runner import run_config
from .shared import prepare_shared
from .suite import Suite, load_suite

CURVE_FORMAT = 1


def curve_points(log_history: list[dict[str, Any]], pivot: str) -> list[dict[str, Any]]:
    """The evaluation entries of a Trainer's `log_history` as points: step, BLEU per direction, group means."""
    points: dict[int, dict[str, float]] = {}
    for entry in log_history:
        for key, value in entry.items():
            if key.startswith("eval_") and key.endswith("_bleu"):
                points.setdefault(entry["step"], {})[key.removeprefix("eval_").removesuffix("_bleu")] = value
    curve = []
    for step, scores in sorted(points.items()):
        groups = direction_groups(sorted(scores), pivot=pivot)
        curve.append({
            "step": step,
            "groups": {name: mean(scores[d] for d in members) for name, members in sorted(groups.items())},
            "directions": dict(sorted(scores.items())),
        })  # fmt: skip
    return curve


def first_reaching(curve: list[dict[str, Any]], targets: dict[str, float]) -> int | None:
    """The first step at which every group reaches its target (None: no point does)."""
    for point in curve:
        if all(point["groups"].get(group, -math.inf) >= value for group, value in targets.items()):
            return point["step"]
    return None


def curve_file_name(system: str, seed: int, every: int) -> str:
    """The curve's results file: named by what tells its runs apart (system, seed, validation interval), so that
    another seed's curve or one validated at another interval is a file of its own rather than a replacement."""
    return f"learning_curve.{system}.seed{seed}.every{every}.json"


def curve_config(suite: Suite, shared: dict[str, Any], system: str, seed: int, max_steps: int, every: int,
                 sentences: int | None, output_dir: Path) -> dict[str, Any]:  # fmt: skip
    """The suite's run config of (system, seed), trained `max_steps` and validated every `every` steps."""

    config = run_config(suite, system, seed, shared)
    evaluation = suite.base.get("evaluation", {})
    training = config["training"]
    # decoded as the suite's evaluation decodes: its beams, its batch size, its new tokens (+ the start token)
    training.update(
        max_steps=max_steps, eval_strategy="steps", eval_steps=every, predict_with_generate=True,
        generation_num_beams=evaluation.get("num_beams", 4),
        generation_max_length=evaluation.get("max_new_tokens", 128) + 1,
        per_device_eval_batch_size=evaluation.get("batch_size", 32), save_strategy="steps",
        save_steps=every, save_total_limit=1,
    )  # fmt: skip
    if sentences is not None:
        config["data"]["valid_sentences_per_direction"] = sentences
    return {**config, "output_dir": str(output_dir)}


def learning_curve(
    suite: str | Path | Suite,
    max_steps: int,
    every: int,
    system: str | None = None,
    seed: int | None = None,
    sentences: int | None = 50,
    targets: dict[str, float] | None = None,
    output_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Train `system` (default: the suite's baseline) for `max_steps`, validating every `every` steps;
    returns the curve and writes it to `<results_dir>/` `curve_file_name(system, seed, every)`."""

    suite, system, seed = _checked(suite, system, seed, max_steps, every, targets)
    run_dir = Path(output_dir) if output_dir else suite.output_dir / "curves" / f"{system}-seed{seed}-every{every}"
    _check_interval(run_dir, every)
    shared = prepare_shared(suite)
    config = curve_config(suite, shared, system, seed, max_steps, every, sentences, run_dir)
    run_experiment(config)
    return _write_curve(suite, shared, system, seed, config, run_dir, targets, stopped=False)


def partial_learning_curve(
    suite: str | Path | Suite,
    max_steps: int,
    every: int,
    output_dir: str | Path,
    system: str | None = None,
    seed: int | None = None,
    sentences: int | None = 50,
    targets: dict[str, float] | None = None,
) -> dict[str, Any] | None:
    """The curve of a `learning_curve` run stopped before `max_steps` (a machine's time ran out), read from its
    last complete checkpoint and written like a finished one, marked `stopped_at` and without the test-set scores
    (they need the final model); None when the run has no complete checkpoint yet. Resuming the run completes it."""

    suite, system, seed = _checked(suite, system, seed, max_steps, every, targets)
    run_dir = Path(output_dir)
    if last_complete_checkpoint(run_dir / "checkpoints") is None:
        return None
    shared = prepare_shared(suite)
    config = curve_config(suite, shared, system, seed, max_steps, every, sentences, run_dir)
    return _write_curve(suite, shared, system, seed, config, run_dir, targets, stopped=True)


def _check_interval(run_dir: Path, every: int) -> None:
    """Refuse to resume a curve validated at another interval: its points so far would not be every `every`
    steps, while the file would say they are."""
    last = last_complete_checkpoint(run_dir / "checkpoints")
    if last is None:
        return
    before = read_json(Path(last) / "trainer_state.json").get("eval_steps")
    if before is not None and before != every:
        raise ConfigError(
            f"{run_dir} holds a curve validated every {before} steps; resume it with --every {before}, or give a new "
            f"--output-dir for --every {every}."
        )


def _checked(suite: str | Path | Suite, system: str | None, seed: int | None, max_steps: int, every: int,
             targets: dict[str, float] | None) -> tuple[Suite, str, int]:  # fmt: skip
    """The suite, system (default: its baseline) and seed (default: the system's first) of a curve, its arguments
    checked before any work."""
    suite = suite if isinstance(suite, Suite) else load_suite(suite)
    system = system or suite.baseline
    if system not in suite.systems:
        raise ConfigError(f"{suite.path}: no system {system!r}; the suite has {list(suite.systems)}.")
    if every < 1 or max_steps < every:
        raise ConfigError(f"--every must be between 1 and --max-steps ({max_steps}), got {every}.")
    if "stages" in suite.system_config(system):
        raise ConfigError(f"{system!r} trains in stages; a learning curve is drawn for a one-stage system.")
    unknown = sorted(set(targets or {}) - {"xx-en", "en-xx", "zero-shot"})
    if unknown:
        raise ConfigError(f"--target groups are xx-en, en-xx (and zero-shot), got {unknown}.")
    return suite, system, suite.seeds_of(system)[0] if seed is None else seed


def _write_curve(suite: Suite, shared: dict[str, Any], system: str, seed: int, config: dict[str, Any],
                 run_dir: Path, targets: dict[str, float] | None, stopped: bool) -> dict[str, Any]:  # fmt: skip
    """The curve of `run_dir`'s last complete checkpoint (its trainer state holds every validation), written
    atomically to `<results_dir>/` `curve_file_name(...)`."""
    last = last_complete_checkpoint(run_dir / "checkpoints")
    if last is None:
        raise RuntimeError(f"{run_dir}/checkpoints has no complete checkpoint: the run saved none.")
    state = read_json(Path(last) / "trainer_state.json")
    pivot = suite.report.get("pivot", "en")
    curve = curve_points(state["log_history"], pivot)
    training = config["training"]
    tested = {} if stopped else _test_scores(suite, shared, run_dir)
    result = {
        "format": CURVE_FORMAT,
        # the last point scored on the suite's test sets as well: a budget read off the validation set is checked
        # where the suite is judged (the Bible's validation chapters read about 1.4 BLEU higher than its test ones)
        "test_at_last_step": None if stopped else {"step": curve[-1]["step"] if curve else None, **tested},
        "suite": suite.name,
        "system": system,
        "seed": seed,
        "every": training["eval_steps"],
        "max_steps": training["max_steps"],
        **({"stopped_at": state["global_step"]} if stopped else {}),
        "batch_size": training.get("per_device_train_batch_size"),
        "valid_sentences_per_direction": config["data"].get("valid_sentences_per_direction"),
        "num_beams": training["generation_num_beams"],
        "targets": targets or {},
        "first_reaching": first_reaching(curve, targets) if targets else None,
        "points": curve,
    }
    suite.results_dir.mkdir(parents=True, exist_ok=True)
    name = curve_file_name(system, seed, training["eval_steps"])
    write_atomic(suite.results_dir / name, (json.dumps(result, indent=1) + "\n").encode())
    return result


def _test_scores(suite: Suite, shared: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """BLEU of the run's final model on the suite's supervised test set, per group and direction, decoded as the
    suite's runs are (`worker.evaluate_run`; no off-target rate: the curve is about BLEU)."""
    from .worker import evaluate_run  # run as `python -m`: not imported by its package first

    spec = {"run_dir": str(run_dir), "tokenizer_fingerprint": shared["tokenizer_fingerprint"], "sets": shared["sets"],
            "evaluation": {**suite.base.get("evaluation", {}), "off_target": False}}  # fmt: skip
    bleu = {direction: s["bleu"] for direction, s in evaluate_run(spec, ["supervised"])[0]["supervised"].items()}
    groups = direction_groups(sorted(bleu), pivot=suite.report.get("pivot", "en"))
    return {
        "groups": {
            name: mean(bleu[d] for d in members) for name, members in sorted(groups.items()) if name != "other"
        },
        "directions": bleu,
        "sentences_per_direction": max(len(rows) for rows in shared["sets"]["supervised"].values()),
    }


def curve_markdown(result: dict[str, Any]) -> str:
    """The curve as a Markdown table (steps x direction groups), with the first step reaching the targets."""
    groups = sorted({g for point in result["points"] for g in point["groups"]})
    lines = [
        f"| steps (x {result['batch_size']} examples) | " + " | ".join(f"{g} BLEU" for g in groups) + " |",
        "|---" * (len(groups) + 1) + "|",
    ]
    for point in result["points"]:
        lines.append(
            f"| {point['step']:,} | " + " | ".join(f"{point['groups'].get(g, math.nan):.2f}" for g in groups) + " |"
        )
    lines.append(
        f"\nValidation set: {result['valid_sentences_per_direction']} sentences per direction, beam {result['num_beams']}; "
        f"{result['system']} seed {result['seed']} of suite {result['suite']}."
    )
    if result.get("stopped_at") is not None:
        lines.append(
            f"Stopped at step {result['stopped_at']:,} of {result['max_steps']:,}; resuming the run completes it."
        )
    test = result.get("test_at_last_step")
    if test and test.get("groups"):
        scores = ", ".join(f"{g} {v:.2f}" for g, v in sorted(test["groups"].items()))
        lines.append(
            f"Test set at step {test['step']:,} ({test['sentences_per_direction']} sentences per direction): {scores} BLEU."
        )
    if result["targets"]:
        wanted = ", ".join(f"{g} >= {v:g}" for g, v in result["targets"].items())
        reached = result["first_reaching"]
        lines.append(f"First step with {wanted}: {f'{reached:,}' if reached else 'none within this curve'}.")
    return "\n".join(lines)


__all__ = ["curve_markdown", "curve_points", "first_reaching", "learning_curve", "partial_learning_curve"]
