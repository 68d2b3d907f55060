"""Ops per training step for every system of bible11_gpu, counted on a CPU: the GPU path before and after the sync-free step.

A GPU step's speed at the suites' sizes is set by the host (BENCHMARKS.md "loop-cuda-after": ~40 us of Python per
kernel, the GPU busy 14-32% of a step), so what a step costs there is, to first order, how many ops it issues and
whether it waits for the device. Both are counted here without a GPU, over the package's whole Trainer step as
`bench_loop.py` runs it (bible11_gpu's model and training settings, batch 128 of random tokens in the suite's 20
directions, the `loader` loop: two loader workers, so collation is not counted):

* **host ops/step**: top-level aten ops in the step (forward, loss, backward, clipping, optimizer, scheduler; the
  profiler, ops not called by another aten op), about one GPU kernel each (bf16 autocast adds casts on a GPU);
* **host reads/step** and **data-dependent shapes/step** (`hf_langspec.training.host_syncs`): each one a wait for
  the device on a GPU, and a bar to CUDA graphs.

Three columns per system:

* `before`: commit 2b88ecf (the loop the first GPU profile measured; its CPU and GPU took one path), counted by
  this script run over that commit's package (it has no accelerator's path, so it counts the one it has);
* `CPU path`: today's code on a CPU, which keeps the data-dependent paths (clear errors, grouped routing) and
  transformers' label smoothing, so published CPU runs compute what they computed;
* `GPU path`: today's code on the accelerator's path (`modeling.routing.accelerator_path()`), what a GPU step
  runs: no reads back, routing by one gathered matmul, the fused label-smoothed loss.

HLT-MT's split by data size is resolved on the random set, where every language has data into it (all high).

    git worktree add /tmp/before 2b88ecf
    PYTHONPATH=/tmp/before python benchmarks/bench_step_census.py --json /tmp/census_before.json --no-write
    python benchmarks/bench_step_census.py --before /tmp/census_before.json
    python benchmarks/bench_step_census.py --setting tiny --batch-size 16 --systems baseline,hlt --no-write  # quick
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from _report import publish
from bench_loop import SETTINGS, measure, random_dataset, suite_configs, tokenizer_for

SYSTEMS = "baseline,fcll,laa,xlp,hlt,sclm_dec,sclm,ls_mnmt,sclm_paper_lr"
COUNTS = ("host ops", "host reads", "data-dependent shapes")


def count(system: str, parts, args) -> dict[str, dict[str, float] | None]:
    """One system's counts per step on the CPU path and, stood in for on the CPU, the accelerator's (None where
    the package has no such path: before issue 47)."""
    from hf_langspec.modeling import routing

    def counts() -> dict[str, float]:
        return {key: value for key, value in measure(args.setting, system, "loader", parts, args).items()
                if key in COUNTS}  # fmt: skip

    cpu = counts()
    if not hasattr(routing, "accelerator_path"):
        return {"cpu": cpu, "gpu": None}
    with routing.accelerator_path():
        return {"cpu": cpu, "gpu": counts()}


def table(rows: list[dict], before: dict[str, dict], args) -> str:
    lines = [
        "Counted per training step on a CPU (no timing: the counts do not depend on the machine's load): the "
        f"package's Trainer with bible11_gpu's training settings and the `{args.setting}` model, batch "
        f"{args.batch_size} of random tokens (lengths 16-48) in the suite's 20 directions, two loader workers; "
        "host ops: top-level aten ops in the step (about one GPU kernel each); host reads and data-dependent "
        "shapes: each a wait for the device on a GPU. `before`: commit 2b88ecf (CPU and GPU took one path); "
        "`CPU path`: today on a CPU; `GPU path`: today on the accelerator's path (`routing.accelerator_path()`).",
        "",
        "| model | host ops/step: before | CPU path | GPU path | GPU path vs before | host reads/step: before "
        "| CPU path | GPU path | data-dependent shapes/step: before | CPU path | GPU path |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        old = before.get(row["system"])
        cells = []
        for key in COUNTS:
            then = f"{old[key]:.0f}" if old else "-"
            cells.append([then, f"{row['cpu'][key]:.0f}", f"{row['gpu'][key]:.0f}" if row["gpu"] else "-"])
        change = f"{row['gpu']['host ops'] / old['host ops'] - 1:+.0%}" if old and row["gpu"] else "-"
        cells[0].append(change)
        lines.append(f"| {row['system']} | " + " | ".join(" | ".join(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default=SYSTEMS, help="systems of bible11_gpu.yaml")
    parser.add_argument("--setting", default="bible11_gpu", choices=list(SETTINGS), help="the model (bench_loop.py)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--examples", type=int, default=2000, help="rows of the random training set")
    parser.add_argument("--before", type=Path, help="the --json of this script run over 2b88ecf's package (see above)")
    parser.add_argument("--json", type=Path, help="also write every count here")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    before = {}
    if args.before:
        if not args.before.is_file():
            parser.error(f"--before {args.before} does not exist; run this script over 2b88ecf's package (--help)")
        before = {row["system"]: row["cpu"] for row in json.loads(args.before.read_text())}
    systems = args.systems.split(",")
    parts = suite_configs(systems)
    # one step each for timing, profile and census: counts, not speed
    args.device, args.warmup, args.steps, args.profile_steps, args.census_steps = torch.device("cpu"), 1, 1, 1, 1
    tokenizer = tokenizer_for(parts[0])
    args.data = (tokenizer, *random_dataset(tokenizer, SETTINGS[args.setting]["vocab"], args.examples, (16, 48)))
    rows = []
    for system in systems:
        rows.append({"system": system, **count(system, parts, args)})
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
    name = "loop-census" + (f"-{args.setting}" if args.setting != "bible11_gpu" else "")
    publish(name, "Ops per training step, every system of bible11_gpu: before and after the sync-free step",
            table(rows, before, args), write=not args.no_write)  # fmt: skip


if __name__ == "__main__":
    main()
