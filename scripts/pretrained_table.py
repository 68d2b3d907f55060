"""The table of adapting a pretrained checkpoint (issue 45, item 7): each system of a suite against the checkpoint.

A suite that starts from a checkpoint (`model.init_from_pretrained`: bible_nllb_adapt.yaml, bible_nllb_add_tl.yaml)
compares its systems with each other; this script adds the checkpoint itself. It translates the suite's test sets
with the checkpoint (`pretrained.load_pretrained`, the plain baseline: exactly the checkpoint's function), with the
suite's decoding settings, once (kept as `checkpoint.json` / `checkpoint.outputs.json.gz` in the suite's
results folder), and prints, per system (mean over its seeds): trainable parameters, BLEU and chrF on the trained
directions (en->xx, xx->en) and their gain over the checkpoint, the off-target rate there, training seconds, and
the share of outputs in the untouched directions (both languages untrained) identical to the checkpoint's.

    .venv/bin/python scripts/pretrained_table.py --suite examples/suites/bible_nllb_adapt.yaml
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
from pathlib import Path
from typing import Any


def untouched(direction: str, train_sizes: dict[str, int]) -> bool:
    """Neither language of `direction` is in any trained direction: no module of it was trained."""
    trained = {code for d in train_sizes for code in d.split("-")}
    return not set(direction.split("-")) & trained


def summarize(runs: list[dict], outputs: list[dict], checkpoint: dict, checkpoint_outputs: dict, pivot: str) -> dict:
    """One system's row from its runs' results files (`runs`, `outputs`: one per seed) and the checkpoint's."""
    train_sizes = runs[0]["train_sizes"]
    groups = {"en-xx": lambda d: d.startswith(f"{pivot}-"), "xx-en": lambda d: d.endswith(f"-{pivot}")}
    row: dict[str, Any] = {"seeds": len(runs)}
    for group, member in groups.items():
        for metric in ("bleu", "chrf", "off_target"):
            per_seed, base = [], []
            for run in runs:
                values = [scores[metric] for s in run["sets"].values() for d, scores in s.items()
                          if d in train_sizes and member(d) and scores.get(metric) is not None]  # fmt: skip
                per_seed.append(statistics.mean(values) if values else None)
            for s in checkpoint["sets"].values():
                base += [scores[metric] for d, scores in s.items()
                         if d in train_sizes and member(d) and scores.get(metric) is not None]  # fmt: skip
            kept = [v for v in per_seed if v is not None]
            row[f"{group} {metric}"] = statistics.mean(kept) if kept else None
            row[f"{group} {metric} checkpoint"] = statistics.mean(base) if base else None
    same = total = 0
    for out in outputs:
        for set_name, by_direction in out.items():
            for direction, hypotheses in by_direction.items():
                reference = checkpoint_outputs.get(set_name, {}).get(direction)
                if reference is None or not untouched(direction, train_sizes):
                    continue
                same += sum(a == b for a, b in zip(hypotheses, reference, strict=True))
                total += len(hypotheses)
    row["untouched identical"] = same / total if total else None
    row["untouched sentences"] = total // max(len(outputs), 1)
    row["trainable"] = statistics.mean(r["parameters"].get("trainable", r["parameters"]["total"]) for r in runs)
    row["total"] = runs[0]["parameters"]["total"]
    row["seconds"] = statistics.mean(r["training"]["seconds"] for r in runs)
    return row


def evaluate_checkpoint(suite: Any, checkpoint: str, references: dict) -> tuple[dict, dict]:
    """The checkpoint's scores and outputs on the suite's test sets, for the directions whose languages it knows."""
    from transformers import AutoTokenizer

    from hf_langspec.evaluation import evaluate_model
    from hf_langspec.evaluation.language_id import language_identifier
    from hf_langspec.pretrained import CONVENTIONS, checkpoint_languages, load_pretrained

    original = AutoTokenizer.from_pretrained(checkpoint)
    known = set(checkpoint_languages(original, CONVENTIONS[type(original).__name__][0]))
    sets = {
        name: [
            {"src_lang": d.split("-")[0], "tgt_lang": d.split("-")[1], "src": src, "tgt": ref}
            for d, texts in by_direction.items()
            if set(d.split("-")) <= known
            for src, ref in zip(texts["src"], texts["ref"], strict=True)
        ]
        for name, by_direction in references["sets"].items()
    }
    languages = sorted({r[k] for rows in sets.values() for r in rows for k in ("src_lang", "tgt_lang")})
    model, tokenizer = load_pretrained(checkpoint, "baseline", languages=languages)
    evaluation = suite.base.get("evaluation", {})
    results = evaluate_model(
        model.eval(), tokenizer, sets, batch_size=evaluation.get("batch_size", 32),
        num_beams=evaluation.get("num_beams", 4), max_new_tokens=evaluation.get("max_new_tokens", 128),
        off_target=evaluation.get("off_target", "zero-shot"),
        identifier=language_identifier(evaluation.get("language_identifier")), show_progress=True,
    )  # fmt: skip
    scores = {name: {} for name in sets}
    outputs = {name: {} for name in sets}
    for direction, values in results["directions"].items():
        name = values["set"]
        scores[name][direction] = {k: values.get(k) for k in ("bleu", "chrf", "off_target", "sentences")}
        outputs[name][direction] = results["hypotheses"][direction]
    return {"checkpoint": checkpoint, "sets": scores}, outputs


def main() -> None:
    from hf_langspec.compare import load_suite
    from hf_langspec.compare.shared import load_references, read_run_file, results_paths
    from hf_langspec.data.schema import write_atomic

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", required=True, type=Path)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    suite = load_suite(args.suite)
    checkpoint = suite.base["model"]["init_from_pretrained"]
    results_dir = Path(suite.results_dir)
    scores_path, outputs_path = results_dir / "checkpoint.json", results_dir / "checkpoint.outputs.json.gz"
    if not scores_path.exists():
        references = load_references(results_dir / "references.json.gz")
        scores, outputs = evaluate_checkpoint(suite, checkpoint, references)
        write_atomic(outputs_path, gzip.compress(json.dumps(outputs, ensure_ascii=False).encode(), mtime=0))
        write_atomic(scores_path, (json.dumps(scores, indent=1) + "\n").encode())
    base, base_outputs = read_run_file(scores_path), read_run_file(outputs_path, gzipped=True)
    pivot = suite.report.get("pivot", "en")
    rows = {}
    for name in suite.systems:
        found = [results_paths(results_dir, name, seed) for seed in suite.systems[name].seeds or suite.seeds]
        found = [(s, o) for s, o in found if s.exists()]
        if found:
            runs = [read_run_file(s) for s, _ in found]
            rows[name] = summarize(runs, [read_run_file(o, gzipped=True) for _, o in found], base, base_outputs, pivot)

    def number(value, fmt):
        return "-" if value is None else format(value, fmt)

    print(f"{suite.name}: mean over seeds; the checkpoint: en->xx {number(next(iter(rows.values()))['en-xx bleu checkpoint'], '.2f')} "
          f"/ xx->en {number(next(iter(rows.values()))['xx-en bleu checkpoint'], '.2f')} BLEU" if rows else "no runs yet")  # fmt: skip
    print("| system | seeds | trainable | en->xx BLEU (gain) | xx->en BLEU (gain) | chrF en->xx / xx->en | off-target "
          "| training s | untouched outputs identical |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        gains = [None if r[f"{g} bleu"] is None or r[f"{g} bleu checkpoint"] is None
                 else r[f"{g} bleu"] - r[f"{g} bleu checkpoint"] for g in ("en-xx", "xx-en")]  # fmt: skip
        off = [r[f"{g} off_target"] for g in ("en-xx", "xx-en") if r[f"{g} off_target"] is not None]
        print(f"| {suite.systems[name].label} | {r['seeds']} | {r['trainable'] / 1e3:,.0f}k of {r['total'] / 1e3:,.0f}k "
              f"| {number(r['en-xx bleu'], '.2f')} ({number(gains[0], '+.2f')}) | {number(r['xx-en bleu'], '.2f')} "
              f"({number(gains[1], '+.2f')}) | {number(r['en-xx chrf'], '.1f')} / {number(r['xx-en chrf'], '.1f')} "
              f"| {number(statistics.mean(off) if off else None, '.1%')} | {r['seconds']:,.0f} "
              f"| {number(r['untouched identical'], '.1%')} of {r['untouched sentences']} |")  # fmt: skip
    if args.json:
        write_atomic(args.json, (json.dumps(rows, indent=1) + "\n").encode())


if __name__ == "__main__":
    main()
