"""The table of adapting a pretrained checkpoint (issue 45, item 7): each system of a suite against the checkpoint.

A suite that starts from a checkpoint (`model.init_from_pretrained`: bible_nllb_adapt.yaml, bible_nllb_add_tl.yaml)
compares its systems with each other; this script adds the checkpoint itself. It translates the suite's test sets
with the checkpoint (`pretrained.load_pretrained`, the plain baseline: exactly the checkpoint's function), with the
suite's decoding settings, once (kept as `checkpoint.json` / `checkpoint.outputs.json.gz` in the suite's
results folder), and prints, per system (mean over its seeds): trainable parameters, BLEU and chrF on the trained
directions (en->xx, xx->en) and their gain over the checkpoint, the off-target rate there, training seconds, and
the share of outputs in the untouched directions (both languages untrained) identical to the checkpoint's
(with `--redecode SYSTEM ...`: also decoded again from the runs' saved models with the package as it is now).

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


def identical_untouched(outputs: dict, checkpoint_outputs: dict, train_sizes: dict[str, int]) -> tuple[int, int]:
    """`(identical, total)`: one run's outputs in the untouched directions against the checkpoint's."""
    same = total = 0
    for set_name, by_direction in outputs.items():
        for direction, hypotheses in by_direction.items():
            reference = checkpoint_outputs.get(set_name, {}).get(direction)
            if reference is None or not untouched(direction, train_sizes):
                continue
            same += sum(a == b for a, b in zip(hypotheses, reference, strict=True))
            total += len(hypotheses)
    return same, total


def redecode_untouched(suite: Any, name: str, seed: int, checkpoint_outputs: dict, references: dict) -> list[int]:
    """`[identical, total]` for the untouched directions decoded again from the run's saved model
    (`<output_dir>/runs/<name>/seed<seed>/model`) with the package as it is now and the suite's decoding settings:
    for runs made before a change to decoding (bible_nllb_add_tl: the new code's scores renormalised after it is
    suppressed, which `adapt_pretrained` now sets and the models saved before lack), without training them again."""
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.compare.shared import read_run_file, results_paths
    from hf_langspec.evaluation import evaluate_model
    from hf_langspec.tokenization import LangSpecTokenizer

    train_sizes = read_run_file(results_paths(Path(suite.results_dir), name, seed)[0])["train_sizes"]
    sets = {
        set_name: [{"src_lang": d.split("-")[0], "tgt_lang": d.split("-")[1], "src": src, "tgt": ref}
                   for d, texts in by_direction.items()
                   if untouched(d, train_sizes) and d in checkpoint_outputs.get(set_name, {})
                   for src, ref in zip(texts["src"], texts["ref"], strict=True)]
        for set_name, by_direction in references["sets"].items()
    }  # fmt: skip
    folder = Path(suite.output_dir) / "runs" / name / f"seed{seed}" / "model"
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    if model.generation_config.suppress_tokens:  # a language was added: as adapt_pretrained now sets it
        model.generation_config.renormalize_logits = True
    evaluation = suite.base.get("evaluation", {})
    result = evaluate_model(
        model, LangSpecTokenizer.from_pretrained(folder), {k: v for k, v in sets.items() if v},
        batch_size=evaluation.get("batch_size", 32), num_beams=evaluation.get("num_beams", 4),
        max_new_tokens=evaluation.get("max_new_tokens", 128), off_target=False, show_progress=False,
    )  # fmt: skip
    outputs: dict[str, dict] = {}
    for direction, values in result["directions"].items():
        outputs.setdefault(values["set"], {})[direction] = result["hypotheses"][direction]
    return list(identical_untouched(outputs, checkpoint_outputs, train_sizes))


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
        agree, count = identical_untouched(out, checkpoint_outputs, train_sizes)
        same, total = same + agree, total + count
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
    from hf_langspec.pretrained import load_pretrained
    from hf_langspec.tokenization.checkpoint_tokenizer import CONVENTIONS, checkpoint_languages

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
    from hf_langspec.files import write_atomic

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", required=True, type=Path)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--redecode", nargs="+", default=[], metavar="SYSTEM",
                        help="decode these systems' untouched directions again from their saved models (the counts "
                             "go to untouched_redecoded.json beside the results; the table shows them)")  # fmt: skip
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
    redecoded_path = results_dir / "untouched_redecoded.json"
    redecoded = json.loads(redecoded_path.read_text()) if redecoded_path.exists() else {}
    if args.redecode:
        references = load_references(results_dir / "references.json.gz")
        for name in args.redecode:
            for seed in suite.systems[name].seeds or suite.seeds:
                counts = redecode_untouched(suite, name, seed, base_outputs, references)
                redecoded.setdefault(name, {})[str(seed)] = counts
                print(f"{name} seed {seed}: {counts[0]} of {counts[1]} untouched outputs identical, decoded again")
        write_atomic(redecoded_path, (json.dumps(redecoded, indent=1) + "\n").encode())
    pivot = suite.report.get("pivot", "en")
    rows = {}
    for name in suite.systems:
        found = [results_paths(results_dir, name, seed) for seed in suite.systems[name].seeds or suite.seeds]
        found = [(s, o) for s, o in found if s.exists()]
        if found:
            runs = [read_run_file(s) for s, _ in found]
            rows[name] = summarize(runs, [read_run_file(o, gzipped=True) for _, o in found], base, base_outputs, pivot)
            again = redecoded.get(name, {}).values()
            rows[name]["untouched identical, decoded again"] = (
                sum(c[0] for c in again) / sum(c[1] for c in again) if again else None
            )

    def number(value, fmt):
        return "-" if value is None else format(value, fmt)

    def again(row):
        share = row["untouched identical, decoded again"]
        return "" if share is None else f" ({share:.1%} decoded again)"

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
              f"| {number(r['untouched identical'], '.1%')} of {r['untouched sentences']}{again(r)} |")  # fmt: skip
    if args.json:
        write_atomic(args.json, (json.dumps(rows, indent=1) + "\n").encode())


if __name__ == "__main__":
    main()
