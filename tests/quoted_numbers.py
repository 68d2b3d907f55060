"""Numbers quoted in the pages, checked against the report they cite.

A page names its report with `<!-- report: PATH -->` (PATH from the repository root; the latest one before a number
applies, on its line too) and follows a number with `<!-- cite: WHAT -->`, invisible once rendered. WHAT is one of

- `SYSTEM GROUP METRIC FIELD`: the report's `systems[SYSTEM].groups[GROUP][METRIC]`, FIELD one of `mean`, `delta`
  (against the suite's baseline), `against` (the baseline's mean over the seeds that difference pairs), `p`,
  `lo` / `hi` (the per-seed 95% interval of the difference), `seedN` (the system's value on seed N), `dseedN`
  (its difference from the baseline's on seed N);
- `claim SYSTEM GROUP METRIC FIELD [against=ROW]`: the claim on SYSTEM, GROUP, METRIC (the one judged against
  ROW; without it, the suite's first claim on them), FIELD one of `value`, `baseline` (the mean it is judged against), `delta`,
  `p`, `lo`, `hi`.

A GROUP with a space (`en-xx High`) is written with `_` (`en-xx_High`).

A FIELD written `-delta` is negated (a page saying "below it by 0.30"). Off-target rates are quoted in percent.
The number must equal the report's value rounded to the number's decimals.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPORT = re.compile(r"<!-- report: (\S+) -->")
CITE = re.compile(r"(?P<number>[-+]?\d[\d,]*(?:\.\d+)?)%?<!-- cite: (?P<what>[^>]*?) -->")
PERCENT_METRICS = {"off_target"}


def _claim(report: dict, system: str, group: str, metric: str, against: str | None) -> dict:
    for claim in report["claims"]:
        if (claim["system"], claim["group"], claim["metric"]) == (system, group, metric) and against in (
            None,
            claim.get("against"),
        ):
            return claim
    raise KeyError(f"no claim on {system} {group} {metric}" + (f" against {against}" if against else ""))


def _test_field(test: str, field: str) -> float:
    """A claim's p-value and per-seed interval, from its `test` text (what the report prints)."""
    if field == "p":
        return float(re.search(r"p = ([\d.]+)", test).group(1))
    low, high = re.search(r"\[([-+\d.]+), ([-+\d.]+)\]", test).groups()
    return float(low if field == "lo" else high)


def cited_value(report: dict, what: str) -> float:
    """The report's value that `what` names, in the unit a page quotes it in."""
    words = what.split()
    against = words.pop().removeprefix("against=") if words[-1].startswith("against=") else None
    words[-3] = words[-3].replace("_", " ")  # the group
    negate = words[-1].startswith("-")
    field = words[-1].lstrip("-")
    if words[0] == "claim":
        _, system, group, metric, _ = words
        claim = _claim(report, system, group, metric, against)
        value = _test_field(claim["test"], field) if field in ("p", "lo", "hi") else claim[field]
    else:
        system, group, metric, _ = words
        cell = report["systems"][system]["groups"][group][metric]
        if field == "against":  # the baseline's mean on the seeds the delta pairs (it may have run more)
            value = cell["paired_means"][1]
        elif field.startswith(("seed", "dseed")):
            seed = int(field.removeprefix("d")[4:])
            value = cell["values"][report["systems"][system]["seeds"].index(seed)]
            if field.startswith("d"):
                baseline = report["systems"][report["baseline"]]
                value -= baseline["groups"][group][metric]["values"][baseline["seeds"].index(seed)]
        else:
            key = {"p": "p_value"}.get(field, field)
            value = cell["delta_ci95"][0 if field == "lo" else 1] if field in ("lo", "hi") else cell[key]
    if metric in PERCENT_METRICS and field != "p":
        value *= 100
    return -value if negate else value


def citation_problems(page: Path, root: Path) -> list[str]:
    """Every cited number of `page` that is not its report's value (one line each), and citations without a
    report or naming nothing in it."""
    problems, reports = [], {}
    text = page.read_text(encoding="utf-8")
    for number_line, line in enumerate(text.splitlines(), 1):
        # in the order they are written: a report named mid-line applies to the numbers after it
        cited_until = -1  # where the last citation ended: a dash right after it joins a range ("9.5-12.7%")
        for found in sorted([*REPORT.finditer(line), *CITE.finditer(line)], key=lambda match: match.start()):
            if found.re is REPORT:
                reports["current"] = found.group(1)
                continue
            where = f"{page}:{number_line}"
            if "current" not in reports:
                problems.append(f"{where}: a citation with no `<!-- report: PATH -->` above it")
                continue
            path = reports["current"]
            report = reports.setdefault(path, json.loads((root / path).read_text(encoding="utf-8")))
            quoted = found.group("number").replace(",", "")
            if found.start() == cited_until and quoted.startswith("-"):
                quoted = quoted[1:]
            cited_until = found.end()
            decimals = len(quoted.partition(".")[2])
            try:
                value = cited_value(report, found.group("what"))
            except (KeyError, ValueError, IndexError, AttributeError) as err:
                problems.append(f"{where}: `{found.group('what')}` names nothing in {path} ({err})")
                continue
            if round(value, decimals) != float(quoted) and f"{value:.{decimals}f}" != quoted.lstrip("+"):
                problems.append(f"{where}: quotes {quoted} where {path} has {value:.{decimals + 2}f} "
                                f"({found.group('what')})")  # fmt: skip
    return problems
