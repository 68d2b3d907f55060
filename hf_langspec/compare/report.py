"""The comparison report, built only from the results files: the papers' table with seeds, significance and cost.

Per run, group means over directions (en->xx, xx->en, zero-shot; Low/Med/High by training examples when
the suite sets thresholds): BLEU, chrF++, off-target rate, length ratio, share of degenerate outputs, and
share of distinct outputs (the test sources are distinct sentences, so a model that ignores its source,
an encoder collapsed to one output, repeats one translation: a failure BLEU alone does not name).
Per system, over its seeds: mean, standard deviation (n - 1), and for the off-target rate a 95%
Student-t interval over seeds (the seed is the largest source of variance here: one baseline config
gave 45%, 57% and 74% zero-shot off-target). Against the baseline: the difference of the means, and for
BLEU and chrF++ sacreBLEU's paired bootstrap (1,000 resamples) on the group's outputs of all seeds
concatenated, seed i of the system paired with seed i of the baseline, and the same procedure on the
per-sentence off-target flags; `*` marks p < 0.05.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from statistics import mean
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from ..files import write_atomic
from .answers import answer_table
from .budgets import judge_at_other_budgets, load_other_budgets
from .controls import measure_kind
from .flag_cache import ReportFlags, run_off_target_flags
from .groups import direction_group_names
from .markers import insert_markdown
from .plots import write_plots
from .report_markdown import csv_rows, markdown
from .shared import REFERENCES_FILE, load_references, read_run_file, results_paths
from .statistics import (
    METRICS,
    claim_verdict,
    group_statistics,
    paired_bootstrap,
    paired_bootstrap_rate,
)
from .suite import Suite

SIGNIFICANCE_METRICS = {"bleu": "BLEU", "chrfpp": "chrF2++"}


def group_members(result: dict[str, Any], pivot: str = "en", resource: dict[str, int] | None = None) -> dict:
    """`{group: [(set, direction), ...]}` of a run."""
    members: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for set_name, directions in result["sets"].items():
        for direction in directions:
            for group in direction_group_names(set_name, direction, result["train_sizes"], pivot, resource):
                members[group].append((set_name, direction))
    return dict(members)


def run_groups(result: dict[str, Any], pivot: str = "en", resource: dict[str, int] | None = None) -> dict:
    """`{group: {metric: mean over the group's directions}}` of one results file."""
    groups = {}
    for group, members in group_members(result, pivot, resource).items():
        scores = [result["sets"][s][d] for s, d in members]
        groups[group] = {m: mean(x[m] for x in scores) for m in METRICS if all(m in x for x in scores)}
    return groups


def _load_runs(suite: Suite) -> tuple[dict[tuple[str, int], dict[str, Any]], list[str]]:
    runs, missing = {}, []
    for system, seed in suite.runs:
        scores_path, outputs_path = results_paths(suite.results_dir, system, seed)
        if scores_path.exists() and outputs_path.exists():
            runs[(system, seed)] = read_run_file(scores_path)
        else:
            missing.append(f"{system} seed {seed}")
    fingerprints = defaultdict(list)
    for (system, seed), result in runs.items():
        fingerprints[(result["corpus_fingerprint"], result["tokenizer_fingerprint"])].append(f"{system} seed {seed}")
    if len(fingerprints) > 1:
        listing = "; ".join(f"corpus {c}, tokenizer {t}: {', '.join(names)}" for (c, t), names in fingerprints.items())
        raise ConfigError(
            f"{suite.results_dir}: the runs were trained on different data or vocabularies and cannot share one "
            f"table ({listing}). Keep one set of runs per results_dir."
        )
    for (system, seed), result in runs.items():  # only once the runs may share a table: it reads every output
        _add_distinct(result, _outputs(suite, system, seed))
    return runs, missing


def _add_distinct(result: dict[str, Any], outputs: dict[str, dict[str, list[str]]]) -> None:
    """Each direction's share of distinct translations, from the run's outputs (so older results get it too)."""
    for set_name, directions in result["sets"].items():
        for direction, scores in directions.items():
            texts = outputs.get(set_name, {}).get(direction)
            if texts:
                scores["distinct"] = len(set(texts)) / len(texts)


def _outputs(suite: Suite, system: str, seed: int) -> dict[str, dict[str, list[str]]]:
    """A run's translations (read once per report: the baseline's are paired with every system's)."""
    path = results_paths(suite.results_dir, system, seed)[1]
    return _read_outputs(path, path.stat().st_mtime_ns)


@lru_cache(maxsize=128)
def _read_outputs(path: Path, modified: int) -> dict[str, dict[str, list[str]]]:
    return read_run_file(path, gzipped=True)


def _off_target_flags(suite: Suite, runs: dict, system: str, seed: int, pairs: list, cache: ReportFlags) -> list[bool]:
    """Per sentence, whether the run's output is not in the target language (the run's own identifier; kept in the
    run's flags file, `flag_cache`, so that a later report does not identify it again)."""

    key = (system, seed)
    if key not in cache:
        result = runs[key]
        measured = [(set_name, direction) for set_name, directions in result["sets"].items()
                    for direction, scores in directions.items() if "off_target" in scores]  # fmt: skip
        outputs = _outputs(suite, system, seed)
        cache[key] = run_off_target_flags(
            suite.results_dir, system, seed, result["language_identifier"], outputs, measured, store=cache.store
        )
    return [flag for pair in pairs for flag in cache[key][pair]]


SPEEDS = ("train_tokens_per_second", "decode_sentences_per_second")


def _speeds(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each run's wall-clock training tokens/s and decoding sentences/s: their mean over seeds, and the seeds' values
    (`..._seeds`), whose spread shows how much the machine the runs shared moved them."""
    training = [r["training"]["input_tokens_timed"] / r["training"]["seconds"] for r in results]
    decoding = [r["decoding"]["sentences"] / r["decoding"]["seconds"] for r in results]
    runs = dict(zip(SPEEDS, (training, decoding), strict=True))
    return {key: mean(values) for key, values in runs.items()} | {f"{key}_seeds": v for key, v in runs.items()}


def build_report(suite: Suite, eval_sets: list[str] = (), write: bool = True) -> dict[str, Any]:
    """Aggregate the results files of `suite` into the report (and write report.md/json/csv and the plots)."""
    others = load_other_budgets(suite)  # before the bootstrap: a missing report is refused at once
    runs, missing = _load_runs(suite)
    pivot = suite.report.get("pivot", "en")
    resource = suite.report.get("resource_groups")
    references_path = suite.results_dir / REFERENCES_FILE
    references = load_references(references_path)["sets"] if references_path.exists() else {}
    per_run = {key: run_groups(result, pivot, resource) for key, result in runs.items()}
    systems: dict[str, Any] = {}
    base_seeds = [seed for seed in suite.seeds_of(suite.baseline) if (suite.baseline, seed) in runs]
    flags = ReportFlags(store=write)  # per-sentence off-target flags of each run, read or identified once
    for system in suite.systems:
        seeds = [seed for seed in suite.seeds_of(system) if (system, seed) in runs]
        if not seeds:
            continue
        groups = group_statistics(per_run, system, seeds, suite.baseline, base_seeds)
        if system != suite.baseline:
            _significance(suite, system, groups, runs, references, pivot, resource, flags)
        results = [runs[(system, s)] for s in seeds]
        systems[system] = {
            "label": suite.systems[system].label,
            "paper": suite.systems[system].paper,
            "seeds": seeds,
            "planned_seeds": suite.seeds_of(system),
            "lang_tag_style": results[0]["lang_tag_style"],
            "parameters": results[0]["parameters"],
            **_speeds(results),
            "final_loss": _final_loss(results),
            "devices": sorted({r["training"].get("device", "cpu") for r in results}),  # older results: the CPU
            "flops_per_target_token": _flops(suite, system),
            "groups": groups,
        }
    # each system against its matched controls (all groups: the answer table's), and against a claim's control
    comparisons = [(name, control) for name in suite.systems for control, entry in suite.systems.items()
                  if entry.control is not None and name in entry.control.systems]  # fmt: skip
    comparisons += [
        (claim["system"], claim.get("against", suite.baseline)) for claim in suite.report.get("claims", [])
    ]
    for system, against in comparisons:
        if against == suite.baseline or system not in systems or against not in systems:
            continue
        versus = systems[system].setdefault("versus", {})
        if against not in versus:
            versus[against] = group_statistics(
                per_run, system, systems[system]["seeds"], against, systems[against]["seeds"]
            )
            _significance(suite, system, versus[against], runs, references, pivot, resource, flags, reference=against)
    base = systems.get(suite.baseline)
    for entry in systems.values():
        for key in SPEEDS:
            entry[key.replace("per_second", "relative")] = entry[key] / base[key] if base else None
    report = {
        "suite": suite.name,
        "description": suite.description,
        "baseline": suite.baseline,
        "seeds": suite.seeds,
        "own_seeds": {name: suite.seeds_of(name) for name in suite.systems if suite.seeds_of(name) != suite.seeds},
        "missing": missing,
        "systems": systems,
        "controls": {name: entry.control.describe() for name, entry in suite.systems.items() if entry.control},
        "baseline_on_suite_seeds": _baseline_on_suite_seeds(suite, per_run, base_seeds),
        "runs": {f"{s} seed {seed}": groups for (s, seed), groups in per_run.items()},
        "claims": [claim_verdict(claim, systems, suite.baseline) for claim in suite.report.get("claims", [])],
        "other_budgets": judge_at_other_budgets(suite.report.get("claims", []), others),
        "setting": _setting(suite, runs),
        "eval_sets": list(eval_sets),
    }
    if write:
        write_report(suite, report, runs)
    return report


def _flops(suite: Suite, system: str) -> float | None:
    """Training FLOPs per target token of the system's model (controls.py), None where it has no plain shape to
    build (a start from a checkpoint)."""
    try:
        return measure_kind(suite.system_config(system), "compute")
    except (ConfigError, ValueError, TypeError, KeyError):
        return None


def _baseline_on_suite_seeds(suite: Suite, per_run: dict, base_seeds: list[int]) -> dict[str, Any] | None:
    """The baseline over the suite's seeds alone, when it has more of its own: what the systems with the suite's
    seeds are compared with (their differences are against these means, not the baseline row's)."""
    subset = [seed for seed in base_seeds if seed in suite.seeds]
    if not subset or subset == base_seeds:  # also when the baseline has no seeds of its own
        return None
    return {"seeds": subset, "groups": group_statistics(per_run, suite.baseline, subset, suite.baseline, [])}


def _final_loss(results: list[dict[str, Any]]) -> float | None:
    """The mean over seeds of the last logged training loss; None unless every seed recorded it (results files
    written before it was recorded lack it)."""
    losses = [r["training"].get("final_loss") for r in results]
    return None if None in losses else mean(losses)


def _significance(
    suite, system, groups, runs, references, pivot, resource, flags: ReportFlags, reference: str | None = None
) -> None:
    """p-values of the paired bootstrap per group against `reference` (default: the baseline), on the concatenated
    outputs of the shared seeds (BLEU and chrF++ by sacreBLEU; the off-target rate on per-sentence flags by the
    same procedure)."""
    reference = reference or suite.baseline
    metrics = [m for m in SIGNIFICANCE_METRICS if any(m in g for g in groups.values())]
    seeds = [s for s in suite.seeds_of(system) if (system, s) in runs and (reference, s) in runs]
    if not seeds or not references or not metrics:
        return
    outputs = {(name, s): _outputs(suite, name, s) for name in (system, reference) for s in seeds}
    members = group_members(runs[(system, seeds[0])], pivot, resource)
    for group, pairs in members.items():
        if group not in groups or "bleu" not in groups[group]:
            continue
        hyps, base, refs = [], [], []
        for seed in seeds:
            for set_name, direction in pairs:
                hyps += outputs[(system, seed)][set_name][direction]
                base += outputs[(reference, seed)][set_name][direction]
                refs += references[set_name][direction]["ref"]
        for metric, p_value in paired_bootstrap(base, hyps, refs).items():
            if metric in groups[group]:
                groups[group][metric]["p_value"] = p_value
        if "off_target" in groups[group]:
            own = [f for seed in seeds for f in _off_target_flags(suite, runs, system, seed, pairs, flags)]
            other = [f for seed in seeds for f in _off_target_flags(suite, runs, reference, seed, pairs, flags)]
            groups[group]["off_target"]["p_value"] = paired_bootstrap_rate(other, own)


def budget_shape(model: dict[str, Any], runs: dict) -> str:
    """`d 128, 2+2 layers`; for a pretrained start, the shape its runs recorded (else the checkpoint's config.json,
    for results that predate the record) and its path."""
    start = model.get("init_from_pretrained")
    if start:
        config_file = Path(start) / "config.json"
        recorded = next((result["shape"] for result in runs.values() if "shape" in result), None)
        model = recorded or (json.loads(config_file.read_text()) if config_file.is_file() else {})
        if not model:
            return f"started from {start}"
    shape = f"d {model.get('d_model')}, {model.get('encoder_layers')}+{model.get('decoder_layers')} layers"
    return f"{shape}, started from {start}" if start else shape


def _setting(suite: Suite, runs: dict) -> dict[str, Any]:
    base = suite.base
    first = next(iter(runs.values()), None)
    model = base.get("model", {})
    training = base.get("training", {})
    return {
        "steps": training.get("max_steps"),
        "batch": training.get("per_device_train_batch_size"),
        "shape": budget_shape(model, runs),
        "evaluation": base.get("evaluation", {}),
        "signatures": first["signatures"] if first else {},
        "language_identifier": first["language_identifier"] if first else None,
        "package_commits": sorted({r["package_commit"] or "unknown" for r in runs.values()}),
        "uncertain_commits": _uncertain_commits(runs),
        "sentences": {
            name: sum(scores["sentences"] for scores in first_set.values())
            for name, first_set in (first["sets"] if first else {}).items()
        },
    }


def _uncertain_commits(runs: dict) -> dict[str, str]:
    """Runs whose code is not one known commit: trained by several processes under several commits, or resumed
    from checkpoints before each process's commit was recorded (the file names the last process's alone)."""
    uncertain = {}
    for (system, seed), result in runs.items():
        training, name = result["training"], f"{system} seed {seed}"
        processes = result.get("package_commits")
        if processes:
            commits = list(dict.fromkeys(p["commit"] or "unknown" for p in processes))
            recorded = sum(p.get("steps", 0) for p in processes)
            if len(commits) > 1:
                uncertain[name] = f"trained under {len(commits)} commits: {', '.join(c[:12] for c in commits)}"
            elif all("steps" in p for p in processes) and recorded < training["steps"]:
                uncertain[name] = f"{training['steps'] - recorded:,} steps by a process whose commit is not recorded"
        elif training.get("steps_timed", training["steps"]) < training["steps"]:
            uncertain[name] = (
                f"resumed: {training['steps_timed']:,} of {training['steps']:,} steps in the process whose commit "
                f"({(result.get('package_commit') or 'unknown')[:12]}) it records; the earlier steps' is not known"
            )
    return uncertain


def write_report(suite: Suite, report: dict[str, Any], runs: dict) -> None:
    """report.md / .json / .csv and the plots into the results directory; the Markdown into `insert_into` files, the
    answer table (answers.md) into `answers_into` files."""

    out = suite.results_dir
    write_atomic(out / "report.json", (json.dumps(report, indent=1) + "\n").encode())
    write_atomic(out / "report.csv", csv_rows(report).encode())
    write_atomic(out / "report.md", markdown(report).encode())
    if report["systems"]:
        write_plots(suite, report, runs, out)
    for target in suite.report.get("insert_into", []):
        insert_markdown(Path(target), suite.name, markdown(report, image_prefix=_relative(out, Path(target).parent)))
    if suite.report.get("answers_into"):
        table = answer_table(report)
        write_atomic(out / "answers.md", table.encode())
        for target in suite.report["answers_into"]:
            insert_markdown(Path(target), suite.name, table, kind="answers")


def _relative(path: Path, start: Path) -> str:
    return os.path.relpath(path, start) + "/"


__all__ = ["build_report", "run_groups"]
