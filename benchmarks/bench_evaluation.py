"""Evaluation with generation through `LangSpecSeq2SeqTrainer.predict`: dataset order vs target-grouped order.

A multilingual dev set mixes target languages. In dataset order every batch mixes them and each decoding
step of LAA or CLL reads the weights of every target in the batch (bench_decoding_reads.py); the
trainer's evaluation order (by target language, longest first) gives batches of one target, where LAA
and CLL fold their weights into the backbone's. For each model, `predict(..., predict_with_generate)`
on the same random-token dev set, once in dataset order (transformers' `SequentialSampler`) and once in
the trainer's order, interleaved run by run (`_report.interleaved`); both return the same predictions
in dataset order (checked here).

    python benchmarks/bench_evaluation.py                      # writes BENCHMARKS.md
    python benchmarks/bench_evaluation.py --examples 128 --repeats 1 --no-write
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time

import numpy as np
import torch
from _report import interleaved, keep_freed_memory, publish
from bench_methods import NAMES, build
from bench_training import SHAPES, shape_arguments
from datasets import Dataset

from hf_langspec.training import LangSpecSeq2SeqTrainer, LangSpecTrainingArguments


def collate(features: list[dict]) -> dict[str, torch.Tensor]:
    """Right-padded `input_ids` (pad id 1) and `labels` (-100), and the language ids."""

    def pad(key: str, value: int) -> torch.Tensor:
        rows = torch.full((len(features), max(len(f[key]) for f in features)), value)
        for row, f in enumerate(features):
            rows[row, : len(f[key])] = torch.tensor(f[key])
        return rows

    input_ids = pad("input_ids", 1)
    return {
        "input_ids": input_ids,
        "attention_mask": input_ids.ne(1).long(),
        "labels": pad("labels", -100),
        "src_lang_ids": torch.tensor([f["src_lang_ids"] for f in features]),
        "tgt_lang_ids": torch.tensor([f["tgt_lang_ids"] for f in features]),
    }


def dev_set(examples: int, languages: int, targets: int, vocab: int, seed: int = 0) -> Dataset:
    """Random-token examples of 8-32 tokens; sources from all `languages`, targets from `targets` of them."""
    g = torch.Generator().manual_seed(seed)
    target_codes = torch.randperm(languages, generator=g)[:targets]
    lengths = torch.randint(8, 33, (examples,), generator=g).tolist()
    return Dataset.from_dict({
        "input_ids": [torch.randint(4, vocab, (n,), generator=g).tolist() for n in lengths],
        "labels": [torch.randint(4, vocab, (n,), generator=g).tolist() for n in lengths],
        "src_lang_ids": torch.randint(0, languages, (examples,), generator=g).tolist(),
        "tgt_lang_ids": target_codes[torch.randint(0, targets, (examples,), generator=g)].tolist(),
    })  # fmt: skip


def trainer_for(model, args, output_dir: str, dataset_order: bool) -> LangSpecSeq2SeqTrainer:
    training_args = LangSpecTrainingArguments(
        output_dir=output_dir, per_device_eval_batch_size=args.batch_size, predict_with_generate=True,
        generation_max_length=args.new_tokens + 1, report_to="none", use_cpu=True, disable_tqdm=True,
        train_sampling_strategy="sequential",
    )  # fmt: skip
    trainer = LangSpecSeq2SeqTrainer(model=model, args=training_args, data_collator=collate)
    if dataset_order:  # transformers' own evaluation order: SequentialSampler with "sequential"
        trainer._evaluation_order = lambda dataset: None
    return trainer


def predict_seconds(trainer, dataset, outputs: dict, key) -> float:
    start = time.perf_counter()
    predictions = trainer.predict(dataset, min_new_tokens=trainer.args.generation_max_length - 1).predictions
    seconds = time.perf_counter() - start
    outputs[key] = predictions
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.add_argument("--languages", type=int, default=50)
    parser.add_argument("--targets", type=int, default=8, help="target languages of the dev set")
    parser.add_argument("--examples", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--kinds", default="laa,cll", help="methods, of bench_methods.py's kinds")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    allocator = keep_freed_memory()
    dataset = dev_set(args.examples, args.languages, args.targets, args.vocab)
    kinds = ["baseline", *[k for k in args.kinds.split(",") if k]]
    output_dir = tempfile.mkdtemp(prefix="bench_evaluation_")
    jobs, outputs = {}, {}
    for kind in kinds:
        torch.manual_seed(0)
        model = build(kind, SHAPES[args.shape], args.vocab, args.languages).eval()
        for dataset_order in (True, False):
            trainer = trainer_for(model, args, output_dir, dataset_order)
            jobs[kind, dataset_order] = functools.partial(
                predict_seconds, trainer, dataset, outputs, (kind, dataset_order)
            )
    seconds = {key: statistics.median(times) for key, times in interleaved(jobs, args.repeats).items()}
    for kind in kinds:
        same, grouped = outputs[kind, True], outputs[kind, False]
        if not np.array_equal(same, grouped):
            raise AssertionError(
                f"{kind}: the target-grouped evaluation returned other predictions than dataset order"
            )
    present = len(set(dataset["tgt_lang_ids"]))
    rows = [
        f"d{SHAPES[args.shape]['d_model']}, {SHAPES[args.shape]['layers']}+{SHAPES[args.shape]['layers']} layers, "
        f"vocabulary {args.vocab}; a dev set of {args.examples} random-token examples (8-32 tokens) with random "
        f"source languages out of {args.languages} and {present} target languages; "
        f"`predict(predict_with_generate=True)`, batch {args.batch_size}, greedy, exactly {args.new_tokens} new "
        f"tokens; median of {args.repeats} runs, interleaved run by run; both orders return the same "
        f"predictions in dataset order (checked). Memory: {allocator}.",
        "",
        "| model | dataset order (s) | vs baseline | target-grouped order (s) | vs baseline | speed-up |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    base_same, base_grouped = seconds["baseline", True], seconds["baseline", False]
    for kind in kinds:
        same, grouped = seconds[kind, True], seconds[kind, False]
        rows.append(
            f"| {NAMES[kind]} | {same:.1f} | {base_same / same:.2f}x | {grouped:.1f} | {base_grouped / grouped:.2f}x "
            f"| {same / grouped:.2f}x |"
        )
    title = f"Evaluation through the trainer: dataset order vs target-grouped order ({args.shape} shape)"
    publish(f"evaluation-{args.shape}", title, "\n".join(rows), write=not args.no_write)


if __name__ == "__main__":
    main()
