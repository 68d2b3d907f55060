"""The comparison's statistics, on numbers and outputs alone (no files): what the report renders.

* `mean_interval`: a 95% Student-t interval of a mean over seeds (`t_quantile`: the 0.975 quantiles).
* `paired_bootstrap`: sacreBLEU's paired bootstrap (1,000 resamples) of BLEU and chrF++ between two systems'
  outputs on the same references; `paired_bootstrap_rate`: the same procedure on per-sentence flags (off-target).
* `group_statistics`: per system and group, over its seeds: mean, standard deviation (n - 1), interval, and
  against the baseline on the seeds both ran, the difference of the means and the per-seed difference's interval.
* `claim_verdict`: whether a paper's effect, stated in advance, holds: its direction, size and significance
  (the bootstrap over sentences, and the interval over seeds, since training noise can be as large as the effect).
"""

from __future__ import annotations

import math
from statistics import mean, stdev
from typing import Any

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

METRICS = ("bleu", "chrfpp", "off_target", "length_ratio", "degenerate", "distinct")
RATE_METRICS = ("off_target", "degenerate", "distinct")  # shares, printed in percent (points for differences)
BOOTSTRAP_SAMPLES = 1000
# Student-t 0.975 quantiles by degrees of freedom (beyond 30: the normal's 1.96 is within 4%)
T_975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
         10: 2.2281, 12: 2.1788, 15: 2.1314, 20: 2.0860, 30: 2.0423}  # fmt: skip


def t_quantile(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (the next tabulated df below)."""
    return T_975[max(k for k in T_975 if k <= df)] if df <= 30 else 1.96


def mean_interval(values: list[float]) -> tuple[float, float] | None:
    """95% Student-t interval of the mean; None for one value."""
    if len(values) < 2:
        return None
    half = t_quantile(len(values) - 1) * stdev(values) / math.sqrt(len(values))
    return mean(values) - half, mean(values) + half


def paired_bootstrap(
    baseline: list[str], system: list[str], references: list[str], samples: int = BOOTSTRAP_SAMPLES
) -> dict[str, float]:
    """sacreBLEU's paired bootstrap of `system` against `baseline`: p-values for BLEU and chrF++.

    Equal scores get p = 1: sacreBLEU counts resampled differences strictly above the observed one, so a
    zero difference (identical outputs, or both systems at BLEU 0 on every resample) would otherwise come
    out at p = 1 / (samples + 1), "significant".
    """
    names = {"bleu": "BLEU", "chrfpp": "chrF2++"}
    if list(baseline) == list(system):
        return dict.fromkeys(names, 1.0)
    test = PairedTest(
        [("baseline", baseline), ("system", system)],
        {"BLEU": BLEU(), "chrF2++": CHRF(word_order=2)},
        [references],
        test_type="bs",
        n_samples=samples,
    )
    _, scores = test()
    return {
        metric: 1.0 if scores[name][0].score == scores[name][1].score else float(scores[name][1].p_value)
        for metric, name in names.items()
    }


def paired_bootstrap_rate(
    baseline: list[bool], system: list[bool], samples: int = BOOTSTRAP_SAMPLES, seed: int = 12345
) -> float:
    """p-value of the difference of two rates on paired items (per-sentence off-target flags), by sacreBLEU's
    paired bootstrap procedure and seed: resample items, centre the absolute differences, count those above the
    observed one; equal rates get p = 1."""
    base, own = np.asarray(baseline, dtype=float), np.asarray(system, dtype=float)
    observed = abs(own.mean() - base.mean())
    if observed == 0:
        return 1.0
    idxs = np.random.default_rng(seed).choice(len(base), size=(samples, len(base)), replace=True)
    sample_diffs = np.abs(own[idxs].mean(axis=1) - base[idxs].mean(axis=1))
    stats = sample_diffs - sample_diffs.mean()
    return float((np.sum(stats > observed) + 1) / (samples + 1))


def group_statistics(
    per_run: dict, system: str, seeds: list[int], baseline: str, base_seeds: list[int]
) -> dict[str, dict[str, Any]]:
    """`{group: {metric: entry}}` of a system over its seeds: mean, std, values, 95% interval, and against the
    baseline on the seeds both ran, the difference of the means, those means and the per-seed difference's interval."""
    groups: dict[str, Any] = {}
    for group in per_run[(system, seeds[0])]:
        groups[group] = {}
        for metric in METRICS:
            values = [per_run[(system, s)][group].get(metric) for s in seeds if group in per_run[(system, s)]]
            if len(values) != len(seeds) or None in values:
                continue
            entry = {"mean": mean(values), "std": stdev(values) if len(values) > 1 else 0.0, "values": values}
            interval = mean_interval(values)
            entry["ci95"] = list(interval) if interval else None
            paired = [s for s in seeds if s in base_seeds and group in per_run[(baseline, s)]]
            if system != baseline and paired:
                base_values = [per_run[(baseline, s)][group][metric] for s in paired]
                own = [per_run[(system, s)][group][metric] for s in paired]
                entry["delta"] = mean(own) - mean(base_values)
                entry["paired_seeds"] = paired
                entry["paired_means"] = [mean(own), mean(base_values)]
                diff_interval = mean_interval([a - b for a, b in zip(own, base_values, strict=True)])
                entry["delta_ci95"] = list(diff_interval) if diff_interval else None
            groups[group][metric] = entry
    return groups


def differences(systems: dict[str, Any], system: str, against: str, baseline: str) -> dict[str, dict[str, Any]]:
    """{group: {metric: cell}} of `system` against the baseline (its own groups) or another row (a control: the
    system's `versus`); empty where runs are missing."""
    entry = systems.get(system, {})
    return entry.get("groups", {}) if against == baseline else entry.get("versus", {}).get(against, {})


def effect_evidence(entry: dict[str, Any], expect: str, metric: str) -> tuple[bool, bool, bool, str]:
    """(in the expected direction, significant, significant over sentences only, the test in words) of one cell's
    difference: the paired bootstrap over sentences where it ran, else the 95% t interval of the per-seed
    differences; "over sentences only" when the bootstrap says yes and the seeds' interval includes 0."""
    delta = entry["delta"]
    right_way = delta < 0 if expect == "down" else delta > 0
    scale, unit = (100, " points") if metric in RATE_METRICS else (1, "")
    interval = entry.get("delta_ci95")
    seeds_agree = interval is not None and (interval[0] > 0 or interval[1] < 0)
    where = f"[{interval[0] * scale:+.3g}, {interval[1] * scale:+.3g}]{unit}" if interval else ""
    if "p_value" in entry:
        significant, how = entry["p_value"] < 0.05, f"p = {entry['p_value']:.3f}, paired bootstrap over sentences"
        if interval:
            how += f"; 95% t interval of the per-seed difference {where}"
    elif interval:
        significant, how = seeds_agree, f"95% t interval of the per-seed difference {where}"
    else:
        significant, how = False, "one seed: no test"
    # the bootstrap sees sentence noise only; with few seeds, training noise can be as large as the effect
    return right_way, significant, significant and interval is not None and not seeds_agree, how


def effect_class(entry: dict[str, Any] | None, expect: str, metric: str) -> str:
    """The verdict class of one cell: "holds across seeds", "over sentences only", "not significant", "the opposite
    direction" (significant; "..., over sentences only" where the seeds' interval includes 0) or "not measured"."""
    if entry is None or "delta" not in entry:
        return "not measured"
    right_way, significant, only_sentences, _ = effect_evidence(entry, expect, metric)
    if not significant:
        return "not significant"
    if entry.get("delta_ci95") is None:
        return "one seed" if right_way else "the opposite direction, one seed"
    if right_way:
        return "over sentences only" if only_sentences else "holds across seeds"
    return "the opposite direction" + (", over sentences only" if only_sentences else "")


def claim_verdict(claim: dict[str, Any], systems: dict[str, Any], baseline: str) -> dict[str, Any]:
    """Does a paper's headline effect hold here? Direction, size and significance of the difference from the
    baseline, or from the claim's `against` system (a control: its differences are in the system's `versus`)."""
    against = claim.get("against", baseline)
    groups = differences(systems, claim["system"], against, baseline)
    entry = groups.get(claim["group"], {}).get(claim["metric"])
    base = systems.get(against, {}).get("groups", {}).get(claim["group"], {}).get(claim["metric"])
    out = {**claim}
    if entry is None or base is None or "delta" not in entry:
        return out | {"verdict": "not measured (runs missing)"}
    delta = entry["delta"]
    right_way, significant, only_sentences, how = effect_evidence(entry, claim["expect"], claim["metric"])
    interval = entry.get("delta_ci95")
    if right_way:
        verdict = "holds" if significant else "same direction, not significant"
    else:
        verdict = (
            "does not hold: the opposite direction, significant" if significant else "does not hold (not significant)"
        )
    if only_sentences:
        verdict += " over sentences, not across seeds (the per-seed interval includes 0)"
    elif significant and interval is None:
        verdict += " over sentences (one seed: no interval over seeds yet)"
    # the means of the seeds both ran, so that value - baseline = delta even where their seeds differ
    paired = entry["paired_seeds"]
    both = set(systems[claim["system"]]["planned_seeds"]) & set(systems[against]["planned_seeds"])
    if len(paired) < len(both):
        verdict += f" (on {len(paired)} of {len(both)} seeds so far)"
    value, base_value = entry["paired_means"]
    if len(paired) > 1:
        how = f"{len(paired)} seeds; {how}"
    return out | {"baseline": base_value, "value": value, "delta": delta, "test": how, "verdict": verdict}


__all__ = [
    "BOOTSTRAP_SAMPLES", "METRICS", "RATE_METRICS", "claim_verdict", "differences", "effect_class", "effect_evidence",
    "group_statistics", "mean_interval",
    "paired_bootstrap", "paired_bootstrap_rate", "t_quantile",
]  # fmt: skip
