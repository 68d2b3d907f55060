"""The comparison report written out: Markdown in the papers' layout (systems as rows) and a flat CSV.

Sections, in order: the budget and setting; BLEU per direction group with zero-shot chrF++ and off-target rate;
BLEU by training size (Low / Med / High) where the suite sets thresholds; cost and output diagnostics; extra
evaluation sets; how to read a cell; the claims' verdicts; other budgets; missing and failed runs; the plots.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterator
from statistics import stdev
from typing import Any

from .budgets import markdown_lines as other_budget_lines
from .controls import control_lines
from .statistics import BOOTSTRAP_SAMPLES, RATE_METRICS

PIVOT = "en"


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


def _table_header(header: str) -> list[str]:
    return [header, "|" + "---|" * (header.count("|") - 1)]


def _devices(report: dict[str, Any]) -> list[str]:
    return sorted({d for s in report["systems"].values() for d in s.get("devices", ["cpu"])})


def _setting_lines(report: dict[str, Any]) -> list[str]:
    setting = report["setting"]
    return [
        f"**{report['suite']}**: {report['description']}".rstrip(": "),
        "",
        f"Budget per run: {setting['steps']} steps x {setting['batch']} examples ({setting['shape']}); seeds "
        f"{report['seeds']}{_own_seeds(report['own_seeds'])}; test sentences per run: "
        + ", ".join(f"{n} {name}" for name, n in setting["sentences"].items())
        + f"; beam {setting['evaluation'].get('num_beams', 4)}; off-target by {setting['language_identifier']}; "
        + "trained on " + " and ".join(_devices(report)) + ".",
        "",
    ]  # fmt: skip


def _main_table(report: dict[str, Any]) -> list[str]:
    """BLEU per direction group, zero-shot chrF++ and off-target rate with its interval."""
    systems, baseline = report["systems"], report["baseline"]
    groups = [
        g for g in (f"{PIVOT}-xx", f"xx-{PIVOT}", "zero-shot") if any(g in s["groups"] for s in systems.values())
    ]
    lines = _table_header(
        "| system | tags | " + " | ".join(f"{g} BLEU" for g in groups)
        + " | zero-shot chrF++ | zero-shot off-target (95% CI) |"
    )  # fmt: skip
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
    return lines


def _resource_table(report: dict[str, Any]) -> list[str]:
    """BLEU by the training size of the direction, where the suite sets Low / Med / High thresholds."""
    systems = report["systems"]
    resource_groups = sorted(
        {g for s in systems.values() for g in s["groups"] if re.search(r" (Low|Med|High)$", g)},
        key=lambda g: (g.split()[0], ["Low", "Med", "High"].index(g.split()[1])),
    )
    if not resource_groups:
        return []
    lines = ["", "BLEU by training size of the direction (Low / Med / High):", ""]
    lines += _table_header("| system | " + " | ".join(resource_groups) + " |")
    for name, s in _rows(report):
        cells = [
            _cell(s["groups"].get(g, {}).get("bleu"), "bleu", name == report["baseline"]) for g in resource_groups
        ]
        lines.append(f"| {s['label']} | " + " | ".join(cells) + " |")
    return lines


def _cost_table(report: dict[str, Any]) -> list[str]:
    """Parameters, speeds relative to the baseline, zero-shot length and degeneracy, distinct outputs, final loss."""
    systems = report["systems"]
    with_loss = any(s.get("final_loss") is not None for s in systems.values())  # older results lack it
    lines = [
        "",
        "Cost and output diagnostics (speeds: each run's wall-clock tokens or sentences per second, mean ± standard "
        "deviation over seeds, and the mean relative to the baseline's; the runs shared their machine with other runs "
        "and work, so these differences are the machine's as much as the methods': BENCHMARKS.md measures each "
        "method's speed on a quiet machine; distinct outputs: the share of different translations among a "
        "direction's test outputs, whose sources all differ: a model that ignores its source repeats one translation"
        + ("; final training loss: the last logged loss, mean over seeds, `-` where a results file predates it"
           if with_loss else "") + "):",
        "",
    ]  # fmt: skip
    lines += _table_header(
        "| system | parameters | added by the method | training tokens/s | decoding sentences/s | zero-shot length ratio "
        "| zero-shot degenerate | distinct outputs en-xx | distinct outputs xx-en |"
        + (" final training loss |" if with_loss else "")
    )  # fmt: skip
    several_devices = len(_devices(report)) > 1
    for s in systems.values():
        zs = s["groups"].get("zero-shot", {})
        params = s["parameters"]
        distinct = [_cell(s["groups"].get(g, {}).get("distinct"), "distinct", True) for g in ("en-xx", "xx-en")]
        loss = s.get("final_loss")
        where = f" [{', '.join(s.get('devices', ['cpu']))}]" if several_devices else ""  # which device made which runs
        lines.append(
            f"| {s['label']}{where} | {params['total'] / 1e6:.2f}M | {params['added'] / 1e6:.3f}M "
            f"| {_speed_cell(s, 'train_tokens', 0)} | {_speed_cell(s, 'decode_sentences', 1)} "
            f"| {_cell(zs.get('length_ratio'), 'length_ratio', True)} | {_cell(zs.get('degenerate'), 'degenerate', True)} "
            f"| {distinct[0]} | {distinct[1]} |" + ((f" {loss:.3f} |" if loss is not None else " - |") if with_loss else "")
        )  # fmt: skip
    return lines


def _speed_cell(system: dict[str, Any], name: str, decimals: int) -> str:
    """`mean ± sd (relative x)` of a speed over the system's seeds (no spread for one seed)."""
    per_second, seeds = system[f"{name}_per_second"], system[f"{name}_per_second_seeds"]
    spread = f" ± {stdev(seeds):.{decimals}f}" if len(seeds) > 1 else ""
    return f"{per_second:.{decimals}f}{spread} ({system[f'{name}_relative'] or 0:.2f}x)"


def _eval_set_tables(report: dict[str, Any]) -> list[str]:
    """Supervised and zero-shot BLEU and off-target rate on each extra evaluation set."""
    systems, baseline = report["systems"], report["baseline"]
    lines: list[str] = []
    for set_name in report["eval_sets"]:
        names = [f"{set_name} supervised", f"{set_name} zero-shot"]
        lines += ["", f"Evaluation set `{set_name.removeprefix('eval:')}`:", ""]
        lines += _table_header(
            "| system | " + " | ".join(f"{n.split()[-1]} BLEU | {n.split()[-1]} off-target" for n in names) + " |"
        )
        for name, s in systems.items():
            cells = []
            for n in names:
                g = s["groups"].get(n, {})
                cells += [
                    _cell(g.get("bleu"), "bleu", name == baseline),
                    _cell(g.get("off_target"), "off_target", name == baseline),
                ]
            lines.append(f"| {s['label']} | " + " | ".join(cells) + " |")
    return lines


def _reading_notes(report: dict[str, Any]) -> list[str]:
    """How a cell is computed, the metrics' signatures and the package commits of the runs."""
    setting = report["setting"]
    lines = [
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
    uncertain = setting.get("uncertain_commits") or {}
    if uncertain:
        lines.append(
            f"Runs whose code is not one known commit ({len(uncertain)}): "
            + "; ".join(f"{name} ({why})" for name, why in uncertain.items())
            + "."
        )
    return lines


def _control_lines(report: dict[str, Any]) -> list[str]:
    """The matched controls the suite made (controls.py): what each matches and its measured size."""
    described = report.get("controls", {})
    if not described:
        return []
    return [
        "",
        "Matched controls (the baseline widened; sizes measured on the meta device):",
        "",
        *control_lines(described),
    ]


def _claim_lines(report: dict[str, Any]) -> list[str]:
    """Each claim stated in the suite with its numbers, its test and its verdict."""
    if not report["claims"]:
        return []
    systems, baseline = report["systems"], report["baseline"]

    def reference(claim: dict[str, Any]) -> str:
        against = claim.get("against", baseline)
        return "the baseline's" if against == baseline else f"{systems[against]['label']}:"

    lines = ["", "Do the papers' headline effects hold here?", ""]
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
    return lines


def markdown(report: dict[str, Any], image_prefix: str = "") -> str:
    """The report as Markdown: the papers' layout, systems as rows (`image_prefix`: where the plots are, relative to
    the file the Markdown goes into; None leaves them out)."""
    lines = _setting_lines(report)
    if not report["systems"]:
        lines.append("No run has finished yet.")
        if report["missing"]:
            lines += ["", f"Missing runs ({len(report['missing'])}): {', '.join(report['missing'])}."]
        return "\n".join(lines) + "\n"
    lines += _main_table(report) + _resource_table(report) + _cost_table(report) + _eval_set_tables(report)
    lines += _reading_notes(report) + _control_lines(report) + _claim_lines(report) + other_budget_lines(report)
    if report["missing"]:
        lines += ["", f"Missing runs ({len(report['missing'])}; not averaged in): {', '.join(report['missing'])}."]
    if report.get("failed"):
        lines += ["", "Failed runs: " + "; ".join(f"{k}: {v}" for k, v in report["failed"].items())]
    if image_prefix is not None:
        lines += ["", f"![group means]({image_prefix}bars.png) ![zero-shot off-target against supervised BLEU]"
                  f"({image_prefix}offtarget_vs_bleu.png)", "", f"![zero-shot BLEU per direction]({image_prefix}zeroshot_heatmaps.png)"]  # fmt: skip
    return "\n".join(lines) + "\n"


def csv_rows(report: dict[str, Any]) -> str:
    """One row per system, group and metric: seeds, mean, standard deviation, interval, difference, p-value."""
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


__all__ = ["csv_rows", "markdown"]
