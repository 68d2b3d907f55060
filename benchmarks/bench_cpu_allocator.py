"""CPU training with glibc's default malloc vs malloc keeping freed memory (what the training stage sets on a CPU).

Each model trains in a fresh process per allocator setting (the setting is the process's), processes interleaved
round by round so that the machine's drift hits both settings alike; the step time is the median over every
measured step, and the page faults per step are the process's minor faults over its measured steps. A step is
forward + backward + AdamW (fused, `zero_grad(set_to_none=True)`) on a padded batch of random tokens with random
source and target languages per example (bible6's 6 languages). The default shape is bible6's (d 128, 2+2 layers,
FFN 512, vocabulary 6,000, batch 32 x 48 tokens: its `max_length`; the models of bench_methods.py, post-norm where
bible6 is pre-norm); MarianMTModel of the same shape and the baseline backbone are measured in the same run.

    python benchmarks/bench_cpu_allocator.py                        # writes BENCHMARKS.md
    python benchmarks/bench_cpu_allocator.py --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
from bench_methods import build, chosen_kinds, language_ids, name_of
from bench_training import SHAPES, make_batch, run_worker_process, shape_arguments

SETTINGS = ("default", "keep")


def worker(args) -> None:
    """One model, one allocator setting: `--steps` timed training steps after `--warmup`, as one JSON line."""
    from hf_langspec.training.cpu_allocator import keep_freed_memory

    setting = keep_freed_memory() if args.allocator == "keep" else "glibc's default malloc"
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = build(args.worker, SHAPES[args.shape], args.vocab, args.languages).train()
    batch = make_batch(args.batch_size, args.src_len, args.tgt_len, args.vocab)
    if args.worker != "marian":
        batch |= language_ids(args.batch_size, args.languages)[0]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    times, faults = [], 0
    for step in range(args.warmup + args.steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    print(json.dumps({"times": times, "faults": faults / args.steps, "setting": setting}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="marian,baseline,lsl,lms,lms_fd")
    shape_arguments(parser)
    parser.set_defaults(shape="cpu", vocab=6000)  # bible6's
    parser.add_argument("--languages", type=int, default=6)
    parser.add_argument("--src-len", type=int, default=48)
    parser.add_argument("--tgt-len", type=int, default=48)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3, help="steps before timing (the heap settles in a few)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (the compare runs' 1)")
    parser.add_argument("--no-write", action="store_true", help="print the table without updating BENCHMARKS.md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--allocator", choices=SETTINGS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    from _report import publish

    kinds = chosen_kinds(parser, args.kinds)
    load = os.getloadavg()[0]  # what else the machine runs: the table says it
    results: dict[tuple[str, str], dict] = {}
    for round_ in range(args.rounds):
        order = SETTINGS if round_ % 2 == 0 else SETTINGS[::-1]
        for kind in kinds:
            for setting in order:
                extra = ["--languages", str(args.languages), "--threads", str(args.threads)]
                out = run_worker_process(
                    __file__, ["--worker", kind, "--allocator", setting, "--shape", args.shape, *extra], args
                )
                entry = results.setdefault((kind, setting), {"times": [], "faults": [], "setting": out["setting"]})
                entry["times"] += out["times"]
                entry["faults"].append(out["faults"])
                print(
                    f"round {round_ + 1} {kind} {setting}: {statistics.median(out['times']) * 1000:.0f} ms",
                    file=sys.stderr,
                )
    base = {s: statistics.median(results[("baseline", s)]["times"]) for s in SETTINGS if ("baseline", s) in results}
    shape = SHAPES[args.shape]
    rows = [
        f"d {shape['d_model']}, {shape['layers']}+{shape['layers']} layers, FFN {shape['ffn']}, vocabulary "
        f"{args.vocab:,}, post-norm (bench_methods.py's models); batch {args.batch_size} x {args.src_len}/{args.tgt_len} "
        f"tokens (padded lengths between half and all), {args.languages} languages mixed per batch; fused AdamW; "
        f"{args.threads} torch thread(s); median of {args.steps} steps x {args.rounds} rounds after {args.warmup} "
        f"warm-up steps, each (model, setting) in a fresh process, interleaved round by round; the machine's load "
        f"average when it started: {load:.1f}. Kept: "
        f"{results[(kinds[0], 'keep')]['setting']}.",
        "",
        "| model | step, default (ms) | step, kept (ms) | kept vs default | faults/step default | faults/step kept "
        "| vs baseline, default | vs baseline, kept |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        step = {s: statistics.median(results[(kind, s)]["times"]) for s in SETTINGS}
        faults = {s: statistics.median(results[(kind, s)]["faults"]) for s in SETTINGS}
        relative = [f"{base[s] / step[s]:.2f}x" if s in base else "-" for s in SETTINGS]
        rows.append(
            f"| {name_of(kind)} | {step['default'] * 1000:.0f} | {step['keep'] * 1000:.0f} | "
            f"{step['default'] / step['keep']:.2f}x | {faults['default']:,.0f} | {faults['keep']:,.0f} | "
            f"{relative[0]} | {relative[1]} |"
        )
    publish("cpu_allocator", "CPU training: glibc's default malloc vs keeping freed memory", "\n".join(rows),
            write=not args.no_write)  # fmt: skip


if __name__ == "__main__":
    main()
