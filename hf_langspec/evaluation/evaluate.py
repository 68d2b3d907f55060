"""Evaluate a model on canonical test sets: per-direction BLEU/chrF, off-target rates, group means,
and the results as JSON and as a Markdown table like the papers' tables."""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data.local import load_local
from ..files import write_atomic
from .language_id import LanguageIdentifier, language_identifier, off_target_rate
from .metrics import SentencePieceBLEU, corpus_scores, direction_groups, group_means
from .translate import translate


def direction_off_target(
    hypotheses: Sequence[str], direction: str, identifier: LanguageIdentifier
) -> tuple[float, str] | None:
    """(off-target rate, name of the identifier that measured it) of one direction's outputs, by the first of
    `identifier`'s members that covers the target language; None where none does (warned once)."""
    target = direction.split("-")[1]
    chosen = identifier.for_language(target)  # looked up once: it measures and it is named
    rate = off_target_rate(hypotheses, target, chosen or identifier)
    return None if rate is None else (rate, chosen.name)


def evaluate_model(
    model: Any,
    tokenizer: Any,
    test_sets: Mapping[str, Iterable[Mapping[str, str]]],
    batch_size: int = 32,
    num_beams: int = 4,
    max_new_tokens: int = 256,
    off_target: str | bool = "zero-shot",
    identifier: LanguageIdentifier | None = None,
    pivot: str = "en",
    show_progress: bool = True,
    spm: SentencePieceBLEU | None = None,
) -> dict[str, Any]:
    """Translate every test set (`{"supervised": rows, "zero-shot": rows}`, canonical rows) and score it (spBLEU
    too where `spm` is given).

    Returns `{"directions": {"en-de": {"bleu", "chrf", "bleu_signature", ..., "set"}}, "groups": {...},
    "hypotheses": {...}}`. The off-target rate is measured for the "zero-shot" set (`off_target="zero-shot"`),
    every set (`True`) or none (`False`).
    """
    rows_by_set = {name: list(rows) for name, rows in test_sets.items()}
    empty = [name for name, rows in rows_by_set.items() if not rows]
    if empty:
        raise ValueError(f"Test sets {empty} are empty; check the test files or the directions you selected.")
    for _name, rows in rows_by_set.items():
        for code in {r["src_lang"] for r in rows} | {r["tgt_lang"] for r in rows}:
            tokenizer.language_id(code)  # unknown languages fail before any translation
    check_one_set_per_direction(rows_by_set)
    results: dict[str, Any] = {"directions": {}, "hypotheses": {},
                               "settings": {"num_beams": num_beams, "max_new_tokens": max_new_tokens}}  # fmt: skip
    zero_shot, not_measured = [], []
    for set_name, rows in rows_by_set.items():
        hypotheses = translate(
            model, tokenizer, [r["src"] for r in rows], [r["src_lang"] for r in rows], [r["tgt_lang"] for r in rows],
            batch_size=batch_size, num_beams=num_beams, max_new_tokens=max_new_tokens, show_progress=show_progress,
        )  # fmt: skip
        by_direction: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        for row, hyp in zip(rows, hypotheses, strict=True):
            by_direction[f"{row['src_lang']}-{row['tgt_lang']}"].append((hyp, row["tgt"], row["src"]))
        measure_off_target = off_target is True or off_target == set_name
        for direction, triples in sorted(by_direction.items()):
            hyps, refs, sources = (list(side) for side in zip(*triples, strict=True))
            scores = corpus_scores(hyps, refs, spm=spm) | {
                "set": set_name,
                "test_fingerprint": test_fingerprint(sources, refs),
            }
            if measure_off_target:
                identifier = identifier or language_identifier()  # built once: it keeps the models it loads
                measured = direction_off_target(hyps, direction, identifier)
                if measured is None:  # no identifier covers the target language: not measured (warned)
                    not_measured.append(direction)
                else:
                    scores["off_target"], scores["language_identifier"] = measured
            results["directions"][direction] = scores
            results["hypotheses"][direction] = hyps
        if set_name == "zero-shot":
            zero_shot += list(by_direction)
    groups = direction_groups(list(results["directions"]), pivot=pivot, zero_shot=zero_shot)
    results["group_members"] = groups
    metrics = ("bleu", "chrf", "spbleu") if spm is not None else ("bleu", "chrf")
    results["groups"] = {metric: group_means(results["directions"], groups, metric) for metric in metrics}
    off = {d: s["off_target"] for d, s in results["directions"].items() if "off_target" in s}
    if off:
        results["groups"]["off_target"] = group_means({d: {"v": v} for d, v in off.items()}, groups, "v")
    if not_measured:
        results["off_target_not_measured"] = not_measured
    return results


def check_one_set_per_direction(test_sets: Mapping[str, Iterable[Mapping[str, str]]]) -> None:
    """Scores are kept per direction: a direction in two test sets (a run's supervised set and FLORES-200, say)
    would keep the second set's scores alone, without a word. Refused before any translation."""
    owners: dict[str, list[str]] = defaultdict(list)
    for name, rows in test_sets.items():
        for direction in sorted({f"{r['src_lang']}-{r['tgt_lang']}" for r in rows}):
            owners[direction].append(name)
    shared = {direction: names for direction, names in owners.items() if len(names) > 1}
    if shared:
        said = "; ".join(f"{d} in {' and '.join(names)}" for d, names in sorted(shared.items()))
        raise ValueError(f"A direction is in more than one test set ({said}): scores are kept per direction, so "
                         "score those sets in separate evaluations, or leave the direction out of one of them.")  # fmt: skip


def test_fingerprint(sources: Sequence[str], references: Sequence[str]) -> str:
    """A short hash of a direction's test sentences (sources and references, in order): two results compare a
    direction only where they scored the same sentences (`win_ratio`)."""
    digest = hashlib.sha256()
    for source, reference in zip(sources, references, strict=True):
        digest.update(source.encode() + b"\0" + reference.encode() + b"\0")
    return digest.hexdigest()[:16]


def copy_baseline(test_sets: Mapping[str, Iterable[Mapping[str, str]]]) -> dict[str, dict[str, float]]:
    """Scores of copying the source as the translation: the floor a trained model must clear."""
    scores = {}
    by_direction: dict[str, list[Mapping[str, str]]] = defaultdict(list)
    for rows in test_sets.values():
        for row in rows:
            by_direction[f"{row['src_lang']}-{row['tgt_lang']}"].append(row)
    for direction, rows in sorted(by_direction.items()):
        scores[direction] = corpus_scores([r["src"] for r in rows], [r["tgt"] for r in rows])
    return scores


def results_table(results: Mapping[str, Any], baseline: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """A Markdown table: one row per direction (BLEU, chrF, off-target), then the group means."""
    has_off = any("off_target" in s for s in results["directions"].values())
    has_spm = all("spbleu" in s for s in results["directions"].values())
    header = (
        "| direction | set | BLEU | chrF |"
        + (" spBLEU |" if has_spm else "")
        + (" off-target |" if has_off else "")
        + (" copy-source BLEU |" if baseline else "")
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for direction, s in results["directions"].items():
        row = f"| {direction} | {s['set']} | {s['bleu']:.2f} | {s['chrf']:.2f} |"
        if has_spm:
            row += f" {s['spbleu']:.2f} |"
        if has_off:
            row += f" {s['off_target']:.1%} |" if "off_target" in s else " - |"
        if baseline:
            row += f" {baseline[direction]['bleu']:.2f} |" if direction in baseline else " - |"
        lines.append(row)
    for group, bleu in results["groups"]["bleu"].items():
        row = f"| **{group} mean** | | {bleu:.2f} | {results['groups']['chrf'][group]:.2f} |"
        if has_spm:
            row += f" {results['groups']['spbleu'][group]:.2f} |"
        if has_off:
            off = results["groups"].get("off_target", {}).get(group)
            row += f" {off:.1%} |" if off is not None else " - |"
        if baseline:
            base = [baseline[d]["bleu"] for d in results["group_members"][group] if d in baseline]
            row += f" {sum(base) / len(base):.2f} |" if base else " - |"
        lines.append(row)
    signature = next(iter(results["directions"].values()))["bleu_signature"]
    lines.append("")
    lines.append(f"BLEU signature: `{signature}`")
    if has_spm:
        lines.append(f"spBLEU signature: `{next(iter(results['directions'].values()))['spbleu_signature']}`")
    return "\n".join(lines)


def save_results(
    results: Mapping[str, Any],
    output_dir: str | os.PathLike,
    baseline: Mapping[str, Any] | None = None,
    weights: str | None = None,
    files: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Write `results.json`, `results.md` and one `hypotheses.<direction>.txt` per direction; `weights` and
    `files` are the evaluated folder's `model_folder.weights_fingerprint` and `model_files_fingerprint`, recorded
    so that a card is never written from the results of other weights, or of the same weights with another
    generation setting or tokenizer."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = {k: v for k, v in results.items() if k != "hypotheses"}
    if weights is not None:
        summary["model_weights"] = weights
    if files is not None:
        summary["model_files"] = dict(files)
    if baseline is not None:
        summary["copy_source_baseline"] = {d: {"bleu": s["bleu"], "chrf": s["chrf"]} for d, s in baseline.items()}
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    for direction, hyps in results.get("hypotheses", {}).items():  # the outputs first, the summary of them last
        write_atomic(out / f"hypotheses.{direction}.txt", "\n".join(hyps) + "\n")
    write_atomic(paths["markdown"], results_table(results, baseline) + "\n")
    write_atomic(paths["json"], json.dumps(summary, indent=2, ensure_ascii=False))
    return paths


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """A `results.json` written by `save_results` (for win ratios against a reference run)."""
    hint = "give the results.json that `hf-langspec evaluate` or `train` wrote"
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} does not exist or is not a file; {hint}.")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path} is not a results file: not valid JSON ({err}); {hint}.") from None
    if not isinstance(data, dict) or not isinstance(data.get("directions"), dict):
        raise ValueError(f"{path} is not a results file: it has no 'directions' entry; {hint}.")
    return data


def test_sets_from_files(
    files: Mapping[str, str | os.PathLike], directions: Sequence[str] | None = None
) -> dict[str, list[dict]]:
    """Canonical test sets from JSONL files, optionally restricted to some directions: a set that holds none of
    them is left out, and a direction that no file holds is refused with the directions they do hold."""

    sets = {name: load_local(path).to_list() for name, path in files.items()}
    if directions is None:
        return sets
    held = {f"{r['src_lang']}-{r['tgt_lang']}" for rows in sets.values() for r in rows}
    absent = [direction for direction in directions if direction not in held]
    if absent:
        raise ValueError(
            f"Direction(s) {', '.join(absent)} are in none of the test files ({', '.join(map(str, files.values()))}); "
            f"they hold {', '.join(sorted(held)) or 'no rows'}: choose among those."
        )
    chosen = {
        name: [r for r in rows if f"{r['src_lang']}-{r['tgt_lang']}" in directions] for name, rows in sets.items()
    }
    return {name: rows for name, rows in chosen.items() if rows}


__all__ = [
    "check_one_set_per_direction",
    "copy_baseline",
    "direction_off_target",
    "evaluate_model",
    "load_results",
    "results_table",
    "save_results",
    "test_fingerprint",
    "test_sets_from_files",
]
