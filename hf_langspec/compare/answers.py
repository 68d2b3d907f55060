"""The answer table: per method, its effect against the baseline and against its matched controls, and what it costs.

Generated from a suite's report (never written by hand): for each system that has matched controls
(`controls:` in the suite, controls.py), one row against the baseline and one per control, with the difference in
BLEU, chrF++ and the off-target rate for xx->en, en->xx and zero-shot, each with its verdict class
(`statistics.effect_class`: holds across seeds / over sentences only / not significant / the opposite direction);
for BLEU, the share of human judges estimated to agree with the direction of the difference
(`mt_thresholds.accuracy`, Kocmi et al. 2024, "Navigating the Metrics Maze"; chrF++ and the off-target rate have
no such calibration); the parameters, training FLOPs per token, training and decoding speed against the
baseline's; and one line "when to use it" derived from those cells.

`hf-langspec compare --report-only` writes it between `<!-- answers:NAME -->` markers of the files a suite's
`report.answers_into` names.
"""

from __future__ import annotations

from typing import Any

import mt_thresholds

from .statistics import RATE_METRICS, differences, effect_class

GROUPS = {"xx-en": "xx->en", "en-xx": "en->xx", "zero-shot": "zero-shot"}
CELL_METRICS = {"bleu": ("BLEU", "up"), "chrfpp": ("chrF++", "up"), "off_target": ("off-target", "down")}
HOLDS = "holds across seeds"


def methods_with_controls(report: dict[str, Any]) -> dict[str, list[str]]:
    """{system: [its controls]} in the suite's order."""
    controls: dict[str, list[str]] = {}
    for name, control in report.get("controls", {}).items():
        for system in control["systems"]:
            controls.setdefault(system, []).append(name)
    return controls


def comparison(report: dict[str, Any], system: str, against: str) -> dict[str, dict[str, Any]]:
    """{group: {metric: cell}} of `system` against the baseline or a control (empty where runs are missing)."""
    return differences(report["systems"], system, against, report["baseline"])


def human_agreement(delta: float) -> float:
    """Percent of human judges estimated to agree with the direction of a BLEU difference (Kocmi et al. 2024)."""
    return mt_thresholds.accuracy(abs(delta), "bleu")


def _cell(groups: dict[str, Any], group: str) -> str:
    parts = []
    for metric, (name, expect) in CELL_METRICS.items():
        entry = groups.get(group, {}).get(metric)
        verdict = effect_class(entry, expect, metric)
        if verdict == "not measured":
            parts.append(f"{name} -")
            continue
        scale = 100 if metric in RATE_METRICS else 1
        agree = f", {human_agreement(entry['delta']):.0f}% agree" if metric == "bleu" else ""
        parts.append(f"{name} {entry['delta'] * scale:+.2f}{' pts' if scale == 100 else ''} ({verdict}{agree})")
    return "<br>".join(parts)


def _cost(report: dict[str, Any], name: str) -> str:
    entry, base = report["systems"].get(name), report["systems"].get(report["baseline"])
    if entry is None or base is None:
        return "not trained yet"
    params = entry["parameters"]["total"]
    flops, base_flops = entry.get("flops_per_target_token"), base.get("flops_per_target_token")
    parts = [f"{params / 1e6:.2f}M parameters ({params / base['parameters']['total']:.2f}x)"]
    if flops and base_flops:
        parts.append(f"{flops / base_flops:.2f}x FLOPs per token")
    parts.append(
        f"wall clock: training {entry['train_tokens_relative']:.2f}x, decoding {entry['decode_sentences_relative']:.2f}x"
    )
    return "<br>".join(parts)


def _spread(report: dict[str, Any]) -> str:
    """How far the machine moved the wall-clock speeds: the baseline's seeds' range."""
    seeds = report["systems"].get(report["baseline"], {}).get("train_tokens_per_second_seeds") or []
    if len(seeds) < 2:
        return "each from one run"
    return (
        f"which the machine the runs shared moves (the baseline's seeds trained at {min(seeds):,.0f}-"
        f"{max(seeds):,.0f} tokens/s)"
    )


def _wins(groups: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the cells that hold across seeds in the method's favour, those that hold against it)."""
    wins, losses = [], []
    for group, group_name in GROUPS.items():
        for metric, (name, expect) in CELL_METRICS.items():
            verdict = effect_class(groups.get(group, {}).get(metric), expect, metric)
            if verdict == HOLDS:
                wins.append(f"{group_name} {name}")
            elif verdict == "the opposite direction":
                losses.append(f"{group_name} {name}")
    return wins, losses


def when_to_use(report: dict[str, Any], system: str, controls: list[str]) -> str:
    """One line from the cells: whether the method's gains over the baseline survive its matched controls."""
    entry = report["systems"].get(system)
    if entry is None:
        return "Not trained yet."
    planned = len(entry["planned_seeds"])
    pending = [c for c in controls if c not in report["systems"] or len(report["systems"][c]["seeds"]) < planned]
    over_base, lost = _wins(comparison(report, system, report["baseline"]))
    against = {c: _wins(comparison(report, system, c)) for c in controls if c not in pending}
    kept = [cell for cell in over_base if all(cell in wins for wins, _ in against.values())] if against else []
    base = report["systems"].get(report["baseline"], {})
    size = f"{entry['parameters']['total'] / base['parameters']['total']:.2f}x the parameters" if base else ""
    flops, base_flops = entry.get("flops_per_target_token"), base.get("flops_per_target_token")
    compute = f", {flops / base_flops:.2f}x the FLOPs per token" if flops and base_flops else ""
    costs = f" Costs {size}{compute}." + (f" Loses {', '.join(lost)} to the baseline." if lost else "")
    if pending:
        done = [f"{c}: {len(report['systems'].get(c, {}).get('seeds', []))} of {planned} seeds" for c in pending]
        head = f"Gains over the baseline ({', '.join(over_base)})" if over_base else "No gain over the baseline"
        return f"{head} across seeds; not decided against its controls yet ({'; '.join(done)}).{costs}"
    if kept:
        return f"Use it for {', '.join(kept)}: it beats the baseline and every matched dense model there.{costs}"
    if over_base:
        return (
            f"Its gains over the baseline ({', '.join(over_base)}) do not hold against a dense Transformer of its "
            f"size or compute: widen the baseline instead.{costs}"
        )
    return f"No gain over the baseline holds across seeds at this budget.{costs}"


def answer_table(report: dict[str, Any]) -> str:
    """The answer table of one suite's report, as Markdown (see the module)."""
    methods = methods_with_controls(report)
    if not methods:
        return f"The suite {report['suite']} asks for no matched controls.\n"
    labels = {name: entry["label"] for name, entry in report["systems"].items()} | {
        name: f"{control['kind']}-matched Transformer (`{name}`)" for name, control in report["controls"].items()
    }
    lines = [
        f"Suite `{report['suite']}`: differences against the baseline and against each method's matched dense "
        "Transformer (the baseline widened to its parameters or its training FLOPs per token), means over the seeds "
        "both ran. Verdicts: paired bootstrap over sentences (p < 0.05) and the 95% t interval of the per-seed "
        'differences; "% agree": the share of human judges estimated to prefer the system with the higher BLEU '
        "at that difference (mt-thresholds, Kocmi et al. 2024). Size and speed against the baseline's: parameters, "
        "training FLOPs per target token (the like-for-like cost), and the runs' wall-clock training tokens/s and "
        f"decoding sentences/s, {_spread(report)}.",
        "",
        "| method | against | xx->en | en->xx | zero-shot | size and speed | when to use it |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, controls in methods.items():
        name = labels.get(system, system)
        advice = when_to_use(report, system, controls)
        for i, against in enumerate([report["baseline"], *controls]):
            groups = comparison(report, system, against)
            cells = " | ".join(_cell(groups, group) for group in GROUPS)
            lines.append(
                f"| {name if i == 0 else ''} | {labels.get(against, against)} | {cells} | "
                f"{_cost(report, system if i == 0 else against)} | {advice if i == 0 else ''} |"
            )
    return "\n".join(lines) + "\n"


__all__ = ["answer_table", "comparison", "human_agreement", "methods_with_controls", "when_to_use"]
