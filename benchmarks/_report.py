"""Shared by the benchmark scripts: machine description and the BENCHMARKS.md section writer."""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable, Hashable
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, {device}; "
        f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}"
    )


def keep_freed_memory() -> str:
    """Make glibc's malloc keep freed memory in the process, as PyTorch's CUDA caching allocator does and as the
    package's CPU training does (`hf_langspec.training.cpu_allocator`, which says why). Returns how the allocator
    was set, for the report.
    """
    from hf_langspec.training.cpu_allocator import KEPT
    from hf_langspec.training.cpu_allocator import keep_freed_memory as keep

    state = keep()
    return f"{state}; `--glibc-defaults` to measure without" if state == KEPT else state


def commit() -> str:
    """The commit measured: `BENCH_COMMIT` where the copy's git is not the source's (a GPU machine's copy of the
    working tree carried a stale HEAD), else HEAD, marked when tracked files differ from it."""
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout
        return sha.strip() + ("+local changes" if dirty.strip() else "")
    except OSError:
        return "unknown"


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float:
    """The machine's fp32 matmul rate: best of `repeats` square matmuls of `size`."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def interleaved(jobs: dict[Hashable, Callable[[], float]], count: int) -> dict[Hashable, list[float]]:
    """`count` timings of every job, interleaved call by call in a rotating order after one uncounted warm-up pass.

    One call of A, B, C, then of B, C, A, ...: the machine's drift hits every job alike. On this shared
    2-core machine blocks of one model's steps gave two identical networks (the baseline backbone and
    MarianMTModel) ratios of 0.86-1.21x in one run; interleaved call by call, 0.93-1.05x. Each job runs
    one measurement and returns its seconds (so that it can leave out its set-up or wait for a device).
    """
    keys = list(jobs)
    times: dict[Hashable, list[float]] = {key: [] for key in keys}
    for index in range(count + 1):
        shift = index % len(keys)
        for key in keys[shift:] + keys[:shift]:
            seconds = jobs[key]()
            if index:
                times[key].append(seconds)
    return times


def publish(name: str, title: str, table: str, write: bool = True) -> None:
    """Print a benchmark's table and, unless `write` is False, put it in its section of BENCHMARKS.md."""
    print(table)
    if write:
        write_section(name, title, table)


def write_section(name: str, title: str, body: str, path: Path = ROOT / "BENCHMARKS.md") -> None:
    """Replace (or append) the section `name` of BENCHMARKS.md, stamped with machine, commit and command."""
    command = "python " + " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"<!-- bench:{name}:start -->\n## {title}\n\n"
        f"- Machine: {machine()}\n- Commit: `{commit()}`, {stamp}\n- Command: `{command}`\n\n"
        f"{body.strip()}\n<!-- bench:{name}:end -->"
    )
    text = (
        path.read_text()
        if path.exists()
        else "# Benchmarks\n\nWritten by the scripts under `benchmarks/`; each replaces its own section.\n"
    )
    pattern = re.compile(rf"<!-- bench:{name}:start -->.*?<!-- bench:{name}:end -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)
