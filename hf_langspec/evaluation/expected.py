"""A run's results against the ranges a config expects (the README's main job states its own).

A config's optional `expected` section maps a direction group (`xx-en`, `en-xx`, `zero-shot`) or a
direction (`de-en`) to metric ranges measured with the lock's versions, e.g.
`expected: {xx-en: {bleu: [11.38, 11.64]}}`. After evaluation the run prints one line per range, and a
warning naming the installed versions when a number is far outside it: under half the range's low end or
over twice its high end. That is how a user finds out that an install decodes garbage (transformers 5.24
without the cache fix gave xx->en 0.57 BLEU where 11.6 was expected) rather than from a worse paper.

The ranges hold for the config as written: a `--set` that changes what is trained or scored (steps, shape,
data, decoding) drops them with a line saying so (`training.run_guard.void_expectations`, where the keys that
change nothing are listed), instead of a warning that blames the install for a model trained 40 steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import Any

METRICS = {"bleu": "BLEU", "chrf": "chrF", "off_target": "off-target"}
# the versions a warning names: what decides how a model trains and decodes
VERSIONED = ("torch", "transformers", "tokenizers", "sacrebleu")
FAR = 2.0  # "far outside": under low / FAR or over high * FAR


def check_expected_section(section: Any, where: str) -> str | None:
    """The problem with a config's `expected` section, or None: `{group: {metric: [low, high]}}`."""
    if not isinstance(section, Mapping):
        return f"{where}: expected must map a group or direction to {{metric: [low, high]}}, got {section!r}."
    for name, ranges in section.items():
        if not isinstance(ranges, Mapping) or not ranges:
            return (
                f"{where} [{name}]: give {{metric: [low, high]}} with metric one of {sorted(METRICS)}, got {ranges!r}."
            )
        for metric, bounds in ranges.items():
            if metric not in METRICS:
                return f"{where} [{name}]: unknown metric {metric!r}; use one of {sorted(METRICS)}."
            if (
                not isinstance(bounds, list | tuple)
                or len(bounds) != 2
                or not all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
                or bounds[0] > bounds[1]
                or bounds[0] < 0
            ):
                return (
                    f"{where} [{name}].{metric}: give a range [low, high] of two numbers, low <= high, got {bounds!r}."
                )
    return None


def _observed(results: Mapping[str, Any], name: str, metric: str) -> float | None:
    if name in results.get("directions", {}):
        return results["directions"][name].get(metric)
    return results.get("groups", {}).get(metric, {}).get(name)


def library_versions() -> dict[str, str]:
    """The installed versions of `VERSIONED` (also recorded in every comparison results file)."""
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def installed_versions() -> str:
    return ", ".join(f"{name} {version}" for name, version in library_versions().items())


def compare_with_expected(results: Mapping[str, Any], expected: Mapping[str, Mapping[str, list]]) -> list[str]:
    """Lines that set each expected range beside the run's number; a far-off number gets a warning line.

    `results` is `evaluate_model`'s. A range whose group or direction the run did not score is said so.
    """
    lines, far = [], []
    for name, ranges in expected.items():
        for metric, (low, high) in ranges.items():
            value = _observed(results, name, metric)
            label = f"{name} {METRICS[metric]}"
            if value is None:
                lines.append(f"expected {label} {low:g}-{high:g}: not measured in this run")
                continue
            shown = f"{value:.1%}" if metric == "off_target" else f"{value:.2f}"
            span = f"{low:.0%}-{high:.0%}" if metric == "off_target" else f"{low:g}-{high:g}"
            if value < low / FAR or value > high * FAR:
                verdict = "FAR OUTSIDE"
                far.append(f"{label} {shown} (expected {span})")
            elif low <= value <= high:
                verdict = "within"
            else:
                verdict = "outside, not far"
            lines.append(f"expected {label} {span}: got {shown}, {verdict}")
    if far:
        lines.append(
            f"WARNING: {'; '.join(far)}: far from what this config gives with the tested versions. Installed: "
            f"{installed_versions()}. `bash scripts/setup.sh` installs the tested ones (requirements/lock.txt)."
        )
    return lines


__all__ = [
    "check_expected_section",
    "compare_with_expected",
    "installed_versions",
    "library_versions",
]
