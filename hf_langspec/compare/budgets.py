"""A suite's claims judged at other budgets too: does a verdict change when the models translate?

bible11 trains 3,000 steps, where the baseline barely translates (xx->en 1.2 BLEU); bible6 trains 12,000, where
it does (10.8). A claim can hold at one budget and not at the other, and a reader should not have to put two
tables side by side to see it. `report.other_budgets` in a suite names other suites (their YAML files); the
report then judges each of its claims on every other suite's committed `report.json` as well, with the same
test (`claim_verdict`: the paired bootstrap over sentences and the interval over seeds) on the other suite's
system of the same name, and prints the verdicts side by side, marking where they differ. A claim that the
other suite did not state before its runs is judged there after the fact, and says so.

```yaml
report:
  other_budgets: [examples/suites/bible11.yaml]   # their report.json must exist (compare --report-only)
```
"""

from __future__ import annotations

import json
import re
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from .statistics import RATE_METRICS, claim_verdict
from .suite import Suite, load_suite

CLAIM_IDENTITY = ("system", "against", "group", "metric", "expect")  # what makes two suites' claims the same claim
PROGRESS = re.compile(r" \(on \d+ of \d+ seeds so far\)$")  # a verdict's note on missing seeds, not its content
ONE_SEED = " over sentences (one seed: no interval over seeds yet)"  # provisional too: the seeds' test is to come


def load_other_budgets(suite: Suite) -> list[tuple[Suite, dict[str, Any]]]:
    """(suite, its committed report) of each of `suite`'s `report.other_budgets`, refused before any work when a
    report is missing."""
    others = []
    for path in suite.report.get("other_budgets", []):
        other = load_suite(path, build_models=False)  # only its report is read
        report_path = other.results_dir / "report.json"
        if not report_path.is_file():
            raise ConfigError(
                f"{suite.path} [report.other_budgets]: {other.name} has no report ({report_path}); build it with "
                f"`hf-langspec compare --suite {path} --report-only`, or remove it from other_budgets."
            )
        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
            report["systems"], report["baseline"], report["setting"]["steps"]  # what the judging reads
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(
                f"{suite.path} [report.other_budgets]: {report_path} is not a readable report ({type(err).__name__}: "
                f"{err}); rebuild it with `hf-langspec compare --suite {path} --report-only`."
            ) from None
        others.append((other, report))
    return others


def judge_at_other_budgets(
    claims: list[dict[str, Any]], others: list[tuple[Suite, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per other suite: its setting, its baseline's group means, and each of `claims` judged on its systems."""
    judged = []
    for other, report in others:
        stated = {tuple(c.get(k) for k in CLAIM_IDENTITY) for c in other.report.get("claims", [])}
        verdicts = []
        for claim in claims:
            core = {
                k: claim[k]
                for k in ("paper", "system", "against", "group", "metric", "expect", "effect")
                if k in claim
            }
            absent = [s for s in (claim["system"], claim.get("against")) if s and s not in report["systems"]]
            if absent:
                verdicts.append(core | {"verdict": f"{' and '.join(absent)} not in {other.name}"})
                continue
            verdict = claim_verdict(core, report["systems"], report["baseline"])
            verdicts.append(verdict | {"stated_in_advance": tuple(claim.get(k) for k in CLAIM_IDENTITY) in stated})
        base_groups = report["systems"].get(report["baseline"], {}).get("groups", {})
        judged.append(
            {
                "suite": other.name,
                "path": str(other.path),
                "steps": report["setting"]["steps"],
                "batch": report["setting"]["batch"],
                "baseline_bleu": {g: base_groups[g]["bleu"]["mean"] for g in ("xx-en", "en-xx") if g in base_groups},
                "claims": verdicts,
            }
        )
    return judged


def same_verdict(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    """Whether two judgements of a claim agree; None when either was not measured (missing runs or system)."""
    if "delta" not in a or "delta" not in b:
        return None

    def core(verdict: str) -> str:
        return PROGRESS.sub("", verdict).replace(ONE_SEED, "")

    return core(a["verdict"]) == core(b["verdict"])


def _judgement(claim: dict[str, Any]) -> str:
    if "delta" not in claim:
        return claim["verdict"]
    scale, unit = (100, " points") if claim["metric"] in RATE_METRICS else (1, "")
    after = "" if claim.get("stated_in_advance", True) else " (judged after the fact)"
    return f"{claim['delta'] * scale:+.2f}{unit}: {claim['verdict']}{after}"


def _heading(name: str, steps: int, batch: int, baseline_bleu: dict[str, float]) -> str:
    levels = ", ".join(f"{g} {v:.2f}" for g, v in baseline_bleu.items())
    return f"{name}: {steps:,} steps x {batch}, baseline BLEU {levels}"


def markdown_lines(report: dict[str, Any]) -> list[str]:
    """The claims at this suite's budget and at each other budget, a row per claim (none without other budgets)."""
    if not report.get("other_budgets"):
        return []
    base = report["systems"].get(report["baseline"], {}).get("groups", {})
    own = {g: base[g]["bleu"]["mean"] for g in ("xx-en", "en-xx") if g in base}
    headings = [_heading(report["suite"], report["setting"]["steps"], report["setting"]["batch"], own)]
    headings += [_heading(o["suite"], o["steps"], o["batch"], o["baseline_bleu"]) for o in report["other_budgets"]]
    lines = [
        "",
        "The same claims at the other budget" + ("s" if len(headings) > 2 else "")
        + " (the same test on that suite's committed results, the system of the same name; the difference from "
        "its baseline (or the claim's `against` row), then the verdict; `judged after the fact`: a claim that suite did not state before its runs):",
        "",
        "| claim | " + " | ".join(headings) + " | verdicts |",
        "|---|" + "---|" * len(headings) + "---|",
    ]  # fmt: skip
    for i, claim in enumerate(report["claims"]):
        elsewhere = [o["claims"][i] for o in report["other_budgets"]]
        agreement = [same_verdict(claim, other) for other in elsewhere]
        if None in agreement:
            word = "-"
        else:
            word = "the same" if all(agreement) else "**differ**"
            if any(PROGRESS.search(c["verdict"]) or ONE_SEED in c["verdict"] for c in [claim, *elsewhere]):
                word += " so far"  # a suite still missing runs: its verdict may yet change
        cells = [_judgement(claim)] + [_judgement(other) for other in elsewhere]
        lines.append(f"| {claim.get('effect') or claim['system']} | " + " | ".join(cells) + f" | {word} |")
    return lines


__all__ = ["judge_at_other_budgets", "load_other_budgets", "markdown_lines", "same_verdict"]
