"""The groups a comparison reports a direction in (`en-xx`, `xx-en`, their Low / Med / High levels, zero-shot):
read by the report, and by the suite's checks to refuse a claim on a group the report does not make."""

from __future__ import annotations

from ..evaluation.metrics import direction_groups, resource_groups


def direction_group_names(
    set_name: str, direction: str, train_sizes: dict[str, int], pivot: str, resource: dict[str, int] | None
) -> list[str]:
    """The groups a direction of an evaluation set counts in (the groups of `evaluation.metrics`)."""

    supervised = direction in train_sizes
    if set_name.startswith("eval:"):
        return [f"{set_name} {'supervised' if supervised else 'zero-shot'}"]
    if not supervised:
        return ["zero-shot"]
    group = next(name for name, members in direction_groups([direction], pivot=pivot).items() if members)
    if group == "other":
        return ["supervised, other"]
    if not resource:
        return [group]
    level = resource_groups({direction: train_sizes[direction]}, resource["low_below"], resource["high_from"], pivot)
    return [group, f"{group} {next(iter(level.values()))}"]


def group_names(pivot: str, resource: dict[str, int] | None) -> list[str]:
    """Every group `direction_group_names` can give a direction of a suite's own test sets (a claim names one)."""
    sides = [f"{pivot}-xx", f"xx-{pivot}"]
    levels = [f"{side} {level}" for side in sides for level in ("Low", "Med", "High")] if resource else []
    return [*sides, *levels, "zero-shot", "supervised, other"]


__all__ = ["direction_group_names", "group_names"]
