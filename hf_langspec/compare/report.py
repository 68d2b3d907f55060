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

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from statistics import mean
from typing import Any

from ..data.schema import write_atomic
from ..training.config import ConfigError
from .budgets import judge_at_other_budgets, load_other_budgets
from .budgets import markdown_lines as other_budget_lines
from .groups import direction_group_names
from .markers import insert_markdown
from .shared import REFERENCES_FILE, load_references, read_run_file, results_paths
from .statistics import (
    BOOTSTRAP_SAMPLES,
    METRICS,
    RATE_METRICS,
    claim_verdict,
    group_statistics,
    mean_interval,
    paired_bootstrap,
    paired_bootstrap_rate,
    t_quantile,
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


def _off_target_flags(suite: Suite, runs: dict, system: str, seed: int, pairs: list, cache: dict) -> list[bool]:
    """Per sentence, whether the run's output is not in the target language (the run's own identifier)."""
    from ..evaluation.language_id import language_identifier, off_target_flags

    key = (system, seed)
    if key not in cache:
        identify = language_identifier(runs[key]["language_identifier"])
        outputs = _outputs(suite, system, seed)
        cache[key] = {
            (set_name, direction): off_target_flags(hyps, direction.split("-")[1], identify)
            for set_name, directions in outputs.items()
            for direction, hyps in directions.items()
            if "off_target" in runs[key]["sets"][set_name][direction]
        }
    return [flag for set_name, direction in pairs for flag in cache[key][(set_name, direction)]]


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
    flags: dict = {}  # per-sentence off-target flags of each run, computed once
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
            "train_tokens_per_second": mean(
                r["training"]["input_tokens_timed"] / r["training"]["seconds"] for r in results
            ),
            "decode_sentences_per_second": mean(
                r["decoding"]["sentences"] / r["decoding"]["seconds"] for r in results
            ),
            "final_loss": _final_loss(results),
            "devices": sorted({r["training"].get("device", "cpu") for r in results}),  # older results: the CPU
            "groups": groups,
        }
    for claim in suite.report.get("claims", []):  # a claim against a control: the system's differences from it
        system, against = claim["system"], claim.get("against", suite.baseline)
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
        for key in ("train_tokens_per_second", "decode_sentences_per_second"):
            entry[key.replace("per_second", "relative")] = entry[key] / base[key] if base else None
    report = {
        "suite": suite.name,
        "description": suite.description,
        "baseline": suite.baseline,
        "seeds": suite.seeds,
        "own_seeds": {name: suite.seeds_of(name) for name in suite.systems if suite.seeds_of(name) != suite.seeds},
        "missing": missing,
        "systems": systems,
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
    suite, system, groups, runs, references, pivot, resource, flags: dict, reference: str | None = None
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


def _shape(model: dict[str, Any]) -> str:
    """`d 128, 2+2 layers`; for a pretrained start, the checkpoint's shape (its config.json) and its path."""
    start = model.get("init_from_pretrained")
    if start:
        config_file = Path(start) / "config.json"
        model = json.loads(config_file.read_text()) if config_file.is_file() else {}
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
        "shape": _shape(model),
        "evaluation": base.get("evaluation", {}),
        "signatures": first["signatures"] if first else {},
        "language_identifier": first["language_identifier"] if first else None,
        "package_commits": sorted({r["package_commit"] or "unknown" for r in runs.values()}),
        "sentences": {
            name: sum(scores["sentences"] for scores in first_set.values())
            for name, first_set in (first["sets"] if first else {}).items()
        },
    }


# ---------------------------------------------------------------- writing


def _cell(entry: dict[str, Any] | None, metric: str, baseline: bool) -> str:
    if entry is None:
        return "-"
    scale, unit = (100, "%") if metric in RATE_METRICS else (1, "")
    text = f"{entry['mean'] * scale:.1f}{unit}" if unit else f"{entry['mean']:.2f}"
    if len(entry["values"]) > 1:
        text += f" ± {entry['std'] * scale:.1f}" if unit else f" ± {entry['std']:.2f}"
    if not baseline and "delta" in entry:
        mark = "*" if entry.get("p_value", 1.0) < 0.05 else ""
        text += f" ({entry['delta'] * scale:+.1f}{mark})" if unit else f" ({entry['delta']:+.2f}{mark})"
    return text


def _seed_count(done: int, planned: int, suite: int) -> str:
    """' (2 of 3 seeds)' for a system still missing runs, ' (5 seeds)' for one with more than the suite's."""
    if done < planned:
        return f" ({done} of {planned} seeds)"
    return "" if done == suite else f" ({done} seed{'s' if done != 1 else ''})"


def _own_seeds(own: dict[str, list[int]]) -> str:
    """' (baseline, fcll: [1, 2, 3, 4, 5])' for the systems with seeds of their own."""
    by_seeds: dict[str, list[str]] = defaultdict(list)
    for name, seeds in own.items():
        by_seeds[str(seeds)].append(name)
    return "".join(f" ({', '.join(names)}: {seeds})" for seeds, names in by_seeds.items())


def _rows(report: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, system) per table row: the systems, and after the baseline, the baseline over the suite's seeds
    when it has more seeds of its own (the row the other systems' differences are taken against)."""
    subset = report.get("baseline_on_suite_seeds")
    for name, entry in report["systems"].items():
        yield name, entry
        if name == report["baseline"] and subset:
            seeds = ", ".join(map(str, subset["seeds"]))
            label = f"{entry['label']}, seeds {seeds} (what the {len(subset['seeds'])}-seed systems are compared with)"
            yield name, {**entry, "label": label, "seeds": subset["seeds"], "planned_seeds": subset["seeds"],
                         "groups": subset["groups"]}  # fmt: skip


def markdown(report: dict[str, Any], image_prefix: str = "") -> str:
    """The report as Markdown: the papers' layout, systems as rows."""
    systems, baseline = report["systems"], report["baseline"]
    setting = report["setting"]
    evaluation = setting["evaluation"]
    pivot = "en"
    groups = [
        g for g in (f"{pivot}-xx", f"xx-{pivot}", "zero-shot") if any(g in s["groups"] for s in systems.values())
    ]
    lines = [
        f"**{report['suite']}**: {report['description']}".rstrip(": "),
        "",
        f"Budget per run: {setting['steps']} steps x {setting['batch']} examples ({setting['shape']}); seeds "
        f"{report['seeds']}{_own_seeds(report['own_seeds'])}; test sentences per run: "
        + ", ".join(f"{n} {name}" for name, n in setting["sentences"].items())
        + f"; beam {evaluation.get('num_beams', 4)}; off-target by {setting['language_identifier']}; trained on "
        + " and ".join(devices := sorted({d for s in systems.values() for d in s.get("devices", ["cpu"])}))
        + ".",
        "",
    ]
    if not systems:
        lines.append("No run has finished yet.")
        if report["missing"]:
            lines += ["", f"Missing runs ({len(report['missing'])}): {', '.join(report['missing'])}."]
        return "\n".join(lines) + "\n"
    header = (
        "| system | tags | "
        + " | ".join(f"{g} BLEU" for g in groups)
        + " | zero-shot chrF++ | zero-shot off-target (95% CI) |"
    )
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for name, s in _rows(report):
        is_base = name == baseline
        cells = [_cell(s["groups"].get(g, {}).get("bleu"), "bleu", is_base) for g in groups]
        zs = s["groups"].get("zero-shot", {})
        off = zs.get("off_target")
        off_text = _cell(off, "off_target", is_base)
        if off and off.get("ci95"):  # shown within [0, 100%]; report.json keeps the interval as computed
            off_text += f" [{max(off['ci95'][0], 0):.0%}, {min(off['ci95'][1], 1):.0%}]"
        label = s["label"] + _seed_count(len(s["seeds"]), len(s["planned_seeds"]), len(report["seeds"]))
        lines.append(
            f"| {label} | {s['lang_tag_style']} | " + " | ".join(cells)
            + f" | {_cell(zs.get('chrfpp'), 'chrfpp', is_base)} | {off_text} |"
        )  # fmt: skip
    resource_groups = sorted(
        {g for s in systems.values() for g in s["groups"] if re.search(r" (Low|Med|High)$", g)},
        key=lambda g: (g.split()[0], ["Low", "Med", "High"].index(g.split()[1])),
    )
    if resource_groups:
        lines += ["", "BLEU by training size of the direction (Low / Med / High):", ""]
        header = "| system | " + " | ".join(resource_groups) + " |"
        lines += [header, "|" + "---|" * (header.count("|") - 1)]
        for name, s in _rows(report):
            cells = [_cell(s["groups"].get(g, {}).get("bleu"), "bleu", name == baseline) for g in resource_groups]
            lines.append(f"| {s['label']} | " + " | ".join(cells) + " |")
    with_loss = any(s.get("final_loss") is not None for s in systems.values())  # older results lack it
    lines += [
        "",
        "Cost and output diagnostics (speeds relative to the baseline, measured while the runs shared the machine; "
        "distinct outputs: the share of different translations among a direction's test outputs, whose sources all "
        "differ: a model that ignores its source repeats one translation"
        + ("; final training loss: the last logged loss, mean over seeds, `-` where a results file predates it"
           if with_loss else "") + "):",
        "",
    ]  # fmt: skip
    header = ("| system | parameters | added by the method | training tokens/s | decoding sentences/s | zero-shot length ratio "
              "| zero-shot degenerate | distinct outputs en-xx | distinct outputs xx-en |"
              + (" final training loss |" if with_loss else ""))  # fmt: skip
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for s in systems.values():
        zs = s["groups"].get("zero-shot", {})
        params = s["parameters"]
        distinct = [_cell(s["groups"].get(g, {}).get("distinct"), "distinct", True) for g in ("en-xx", "xx-en")]
        loss = s.get("final_loss")
        where = (
            f" [{', '.join(s.get('devices', ['cpu']))}]" if len(devices) > 1 else ""
        )  # which device made which runs
        lines.append(
            f"| {s['label']}{where} | {params['total'] / 1e6:.2f}M | {params['added'] / 1e6:.3f}M "
            f"| {s['train_tokens_per_second']:.0f} ({s['train_tokens_relative'] or 0:.2f}x) "
            f"| {s['decode_sentences_per_second']:.1f} ({s['decode_sentences_relative'] or 0:.2f}x) "
            f"| {_cell(zs.get('length_ratio'), 'length_ratio', True)} | {_cell(zs.get('degenerate'), 'degenerate', True)} "
            f"| {distinct[0]} | {distinct[1]} |" + ((f" {loss:.3f} |" if loss is not None else " - |") if with_loss else "")
        )  # fmt: skip
    for set_name in report["eval_sets"]:
        names = [f"{set_name} supervised", f"{set_name} zero-shot"]
        lines += ["", f"Evaluation set `{set_name.removeprefix('eval:')}`:", ""]
        header = "| system | " + " | ".join(f"{n.split()[-1]} BLEU | {n.split()[-1]} off-target" for n in names) + " |"
        lines += [header, "|" + "---|" * (header.count("|") - 1)]
        for name, s in systems.items():
            cells = []
            for n in names:
                g = s["groups"].get(n, {})
                cells += [
                    _cell(g.get("bleu"), "bleu", name == baseline),
                    _cell(g.get("off_target"), "off_target", name == baseline),
                ]
            lines.append(f"| {s['label']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Cells: mean ± standard deviation over seeds (difference from the baseline, on the seeds both ran). `*`: p < 0.05 in sacreBLEU's "
        f"paired bootstrap ({BOOTSTRAP_SAMPLES} resamples) of the system against the baseline on the group's outputs "
        "of all seeds concatenated, seed i paired with the baseline's seed i (the off-target rate: the same "
        "procedure on per-sentence flags); each cell is its own test, not corrected for the number of cells (the "
        "claims below are the tests stated in advance). Off-target [interval]: 95% Student-t interval over seeds. Tags: where the language tag goes (`source`: Johnson et al.; `target`: decoder's first token; "
        "`none`: no tag, the method's modules alone steer).",
    ]
    signatures = setting["signatures"]
    if signatures:
        lines.append(
            f"Signatures: BLEU `{signatures.get('bleu_signature')}`, chrF++ `{signatures.get('chrfpp_signature')}`."
        )
    lines.append(f"Package commits of the runs: {', '.join(c[:12] for c in setting['package_commits'])}.")
    if report["claims"]:

        def reference(claim: dict[str, Any]) -> str:
            against = claim.get("against", baseline)
            return "the baseline's" if against == baseline else f"{systems[against]['label']}:"

        lines += ["", "Do the papers' headline effects hold here?", ""]
        for c in report["claims"]:
            if "delta" not in c:
                lines.append(f"- **{c['paper']}** ({c.get('effect', '')}): {c['verdict']}.")
                continue
            pct = c["metric"] == "off_target"
            value = (lambda v: f"{v:.1%}") if pct else (lambda v: f"{v:.2f}")
            lines.append(
                f"- **{c['paper']}** ({c.get('effect') or c['group'] + ' ' + c['metric'] + ' ' + c['expect']}): "
                f"{systems[c['system']]['label']} {value(c['value'])} against {reference(c)} {value(c['baseline'])} "
                f"({c['delta'] * (100 if pct else 1):+.2f}{' points' if pct else ''}; {c['test']}): **{c['verdict']}**."
                + (f" {c['note']}" if c.get("note") else "")
            )
    lines += other_budget_lines(report)
    if report["missing"]:
        lines += ["", f"Missing runs ({len(report['missing'])}; not averaged in): {', '.join(report['missing'])}."]
    if report.get("failed"):
        lines += ["", "Failed runs: " + "; ".join(f"{k}: {v}" for k, v in report["failed"].items())]
    if image_prefix is not None:
        lines += ["", f"![group means]({image_prefix}bars.png) ![zero-shot off-target against supervised BLEU]"
                  f"({image_prefix}offtarget_vs_bleu.png)", "", f"![zero-shot BLEU per direction]({image_prefix}zeroshot_heatmaps.png)"]  # fmt: skip
    return "\n".join(lines) + "\n"


def csv_rows(report: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["system", "group", "metric", "seeds", "mean", "std", "ci95_low", "ci95_high", "delta", "p_value"])
    for name, s in report["systems"].items():
        for group, metrics in s["groups"].items():
            for metric, e in metrics.items():
                ci = e.get("ci95") or [None, None]
                writer.writerow(
                    [name, group, metric, len(e["values"]), e["mean"], e["std"], *ci, e.get("delta"), e.get("p_value")]
                )
    return out.getvalue()


def write_report(suite: Suite, report: dict[str, Any], runs: dict) -> None:
    """report.md / .json / .csv and the plots into the results directory; the Markdown into `insert_into` files."""
    from .plots import write_plots

    out = suite.results_dir
    write_atomic(out / "report.json", (json.dumps(report, indent=1) + "\n").encode())
    write_atomic(out / "report.csv", csv_rows(report).encode())
    write_atomic(out / "report.md", markdown(report).encode())
    if report["systems"]:
        write_plots(suite, report, runs, out)
    for target in suite.report.get("insert_into", []):
        insert_markdown(Path(target), suite.name, markdown(report, image_prefix=_relative(out, Path(target).parent)))


def _relative(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path, start) + "/"


# the statistics' names stay importable from here, where they lived before compare/statistics.py
__all__ = [
    "build_report", "claim_verdict", "markdown", "mean_interval", "paired_bootstrap", "paired_bootstrap_rate",
    "run_groups", "t_quantile",
]  # fmt: skip
