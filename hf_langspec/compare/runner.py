"""`hf-langspec compare`: train every (system, seed) of a suite at an equal budget, then report.

The runner only schedules: every run is an ordinary experiment directory (`<output_dir>/runs/<system>/
seed<N>`) trained by `run_experiment` in a worker process and resumable from its checkpoints; a run
whose results file matches its config is skipped; a run that fails is reported with its error and
the others go on. Workers split the machine: on CPUs each of N workers gets cores // N threads (two
PyTorch processes with all cores each run many times slower than one: OpenMP oversubscription), or the
OMP_NUM_THREADS the user set (other work beside the runner needs its cores too); on GPUs each worker
gets one device.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from hf_langspec_cli.config_file import ConfigError

from ..evaluation.language_id import identifier_names
from ..files import write_atomic
from ..training.checkpoints import CHECKPOINT
from ..training.run_guard import config_changes, describe_changes
from .budgets import load_other_budgets
from .forked import ForkServer
from .report import build_report, run_groups
from .shared import RUNNER_PID, prepare_shared, read_run_file, results_paths, run_identity
from .suite import Suite, load_suite


@dataclass
class Run:
    system: str
    seed: int
    run_dir: Path
    spec: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.system} seed {self.seed}"


def run_config(suite: Suite, system: str, seed: int, shared: dict[str, Any]) -> dict[str, Any]:
    """The experiment config of one run: the system's config on the shared data and tokenizer, with its seed."""
    config = suite.system_config(system)
    kept = ("max_length", "valid_sentences_per_direction", "num_proc", "cache_dir")  # the rest is the shared data
    data = {k: v for k, v in config.get("data", {}).items() if k in kept}
    style = config.get("tokenizer", {}).get("lang_tag_style")
    training = {**config.get("training", {}), "seed": seed, "include_num_input_tokens_seen": "non_padding"}
    if training.get("torch_compile") and not training.get("compile_cache_dir"):
        # one inductor cache per suite: every run and worker of a model shape after the first compiles from it
        training["compile_cache_dir"] = str(suite.output_dir / "compile_cache")
    return {
        **config,
        "output_dir": str(suite.output_dir / "runs" / system / f"seed{seed}"),
        "data": {**data, **copy.deepcopy(shared["data"])},
        "tokenizer": {"path": shared["tokenizer"], **({"lang_tag_style": style} if style else {})},
        "training": training,
        "evaluation": {"splits": []},  # the runner evaluates every run on the shared sets
    }


def plan_runs(suite: Suite, shared: dict[str, Any], threads: int, off_target_later: bool = False) -> list[Run]:
    """Every (system, seed) with its worker spec; refuses results files written by another config."""
    runs = []
    for system, seed in suite.runs:
        config = run_config(suite, system, seed, shared)
        spec = {
            "suite": suite.name, "system": system, "seed": seed, "config": config, "run_dir": config["output_dir"],
            "results_dir": str(suite.results_dir), "threads": threads, "sets": shared["sets"],
            "evaluation": suite.base.get("evaluation", {}), "train_sizes": shared["train_sizes"],
            "corpus_fingerprint": shared["corpus_fingerprint"], "tokenizer_fingerprint": shared["tokenizer_fingerprint"],
            "off_target_later": off_target_later,
        }  # fmt: skip
        scores_path, _ = results_paths(suite.results_dir, system, seed)
        if scores_path.exists():
            stored = read_run_file(scores_path)
            for key in ("config", "corpus_fingerprint", "tokenizer_fingerprint"):
                same = (run_identity(stored.get(key) or {}) == run_identity(spec[key]) if key == "config"
                        else stored.get(key) == spec[key])  # fmt: skip
                if not same:
                    raise ConfigError(
                        f"{scores_path} was produced with another {key.replace('_', ' ')} than {system} seed {seed} "
                        f"has now; move it away (or use another results_dir) to train the run anew."
                    )
        runs.append(Run(system, seed, Path(config["output_dir"]), spec))
    return runs


def check_results_settings(suite: Suite) -> None:
    """Refuse a report over results trained with other settings than the suite now gives their system: a suite
    edited after its runs (another `d_model`, beam, system setting) would head a table of runs it did not train.
    Compared without the runs' locations (`run_identity`), so a moved suite folder keeps its results; the shared
    corpus and vocabulary are compared by fingerprint when runs are planned (`plan_runs`)."""

    stale = []
    for system, seed in suite.runs:
        scores_path, _ = results_paths(suite.results_dir, system, seed)
        if not scores_path.exists():
            continue
        stored = run_identity(read_run_file(scores_path).get("config") or {})
        now = run_config(suite, system, seed, {"data": {}, "tokenizer": ""})  # the shared files: locations only
        changed = config_changes(stored, run_identity(now))
        if changed:
            first = dict(list(changed.items())[:3])
            stale.append(f"{scores_path} ({describe_changes(first)}{'; ...' if len(changed) > 3 else ''})")
    if stale:
        raise ConfigError(
            f"[{suite.name}] {len(stale)} results were trained with other settings than the suite gives their system "
            f"now: {stale[0]}{f' and {len(stale) - 1} more' if len(stale) > 1 else ''}. Restore the suite's settings, "
            "or give the changed system a new name (or the suite another results_dir) and train it."
        )


def is_finished(run: Run) -> bool:
    scores_path, outputs_path = results_paths(Path(run.spec["results_dir"]), run.system, run.seed)
    if not (scores_path.exists() and outputs_path.exists()):
        return False
    return set(run.spec["sets"]) <= set(read_run_file(scores_path)["sets"])


def steps_done(run: Run) -> int:
    """The step of the run's newest checkpoint folder (0: not started); not verified, only for ordering."""
    folder = run.run_dir / "checkpoints"
    if not folder.is_dir():
        return 0
    steps = (CHECKPOINT.match(path.name) for path in folder.iterdir())
    return max((int(match.group(1)) for match in steps if match), default=0)


def started_first(runs: list[Run]) -> list[Run]:
    """Runs an interrupted comparison left half done come first (furthest along first), then seed by seed in the
    suite's order: a resumed suite finishes what it has paid for before it starts new runs, so a stop loses
    less, and a suite stopped part way has its systems at equal seeds (every system's seed 2 before any seed 3:
    an interval over seeds for each, rather than three seeds of some and one of the others)."""
    return sorted(runs, key=lambda run: (-steps_done(run), run.seed))


def _summary(run: Run) -> str:
    scores_path, _ = results_paths(Path(run.spec["results_dir"]), run.system, run.seed)
    result = read_run_file(scores_path)
    parts = [f"{result['training']['steps']} steps"]

    groups = run_groups(result)
    for group in ("xx-en", "en-xx", "zero-shot"):
        if group in groups:
            parts.append(f"{group} BLEU {groups[group]['bleu']:.2f}")
    if "off_target" in groups.get("zero-shot", {}):
        parts.append(f"zero-shot off-target {groups['zero-shot']['off_target']:.1%}")
    return ", ".join(parts)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def worker_threads(workers: int, gpus: int, environ: Mapping[str, str]) -> int:
    """Threads per worker: the user's OMP_NUM_THREADS if set, else the cores split between the workers (also
    beside a GPU, where several runs share it and each needs CPU threads for its batches and decoding)."""
    setting = environ.get("OMP_NUM_THREADS", "").strip()
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise ValueError(f"OMP_NUM_THREADS={setting!r}: give a whole number of threads per worker, at least 1.")
        return int(setting)
    return max(1, _cpu_count() // workers)


def worker_environment(threads: int, slot: int, gpus: int) -> dict[str, str]:
    """A worker's environment: its threads, no tokenizer threads of its own, the runner to die with, its GPU."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    env["TOKENIZERS_PARALLELISM"] = "false"
    env[RUNNER_PID] = str(os.getpid())  # the worker dies with this process (compare/worker.py)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(slot % gpus)
    return env


def execute(runs: list[Run], workers: int, gpus: int) -> dict[str, str]:
    """Run the workers, at most `workers` at a time; returns the failed runs with their error lines. On CPUs they
    fork from one server that imported the package once (compare/fork_server.py); beside GPUs each is a process
    of its own (`python -m hf_langspec.compare.worker`)."""
    pending = list(runs)
    active: dict[int, tuple[Run, Any, float]] = {}
    failed: dict[str, str] = {}
    bar = tqdm(total=len(runs), desc="runs", unit="run", position=0, file=sys.stderr, dynamic_ncols=True)
    slots = list(range(workers))
    server = None
    if runs and not gpus:  # one identifier model load for every run (compare/fork_server.py)
        server = ForkServer(worker_environment(runs[0].spec["threads"], 0, 0), detects_with(runs))
    try:
        while pending or active:
            while pending and slots:
                slot, run = slots.pop(0), pending.pop(0)
                active[slot] = (run, start_worker(run, slot, gpus, server), time.monotonic())
                tqdm.write(f"started  {run.name} (log: {run.run_dir / 'compare.log'})", file=sys.stderr)
            time.sleep(0.5)
            for slot, (run, process, start) in list(active.items()):
                if process.poll() is None:
                    continue
                _said_ended(run, process.returncode, (time.monotonic() - start) / 60, failed)
                del active[slot]
                slots.append(slot)
                bar.update(1)
    finally:
        if server is not None:
            server.close()
        bar.close()
    return failed


def detects_with(runs: list[Run]) -> str | None:
    """The language identifier the runs will measure off-target rates with here (its names joined by "+"), or
    None where they measure none (the suite asks for none, or `--off-target-later`)."""
    evaluation = runs[0].spec["evaluation"]
    if not evaluation.get("off_target", "zero-shot") or runs[0].spec.get("off_target_later"):
        return None
    return "+".join(identifier_names(evaluation.get("language_identifier")))


def start_worker(run: Run, slot: int, gpus: int, server: ForkServer | None) -> Any:
    """Start one run's worker, its output appended to the run's compare.log; returns what `poll()`s its exit."""
    run.run_dir.mkdir(parents=True, exist_ok=True)
    spec_path, log_path = run.run_dir / "compare_spec.json", run.run_dir / "compare.log"
    write_atomic(spec_path, json.dumps(run.spec, ensure_ascii=False).encode())
    env = worker_environment(run.spec["threads"], slot, gpus)
    if server is not None:
        return server.start(run.name, spec_path, log_path, env)
    with open(log_path, "a") as log:  # the worker holds its own copy
        command = [sys.executable, "-m", "hf_langspec.compare.worker", str(spec_path)]
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


def _said_ended(run: Run, code: int, minutes: float, failed: dict[str, str]) -> None:
    """Say how a run ended; a failed one goes into `failed` with its error line (the log's `RUN FAILED` line)."""
    if code == 0 and is_finished(run):
        tqdm.write(f"finished {run.name} in {minutes:.1f} min: {_summary(run)}", file=sys.stderr)
        return
    log = run.run_dir / "compare.log"
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    error = next((line for line in reversed(lines) if line.startswith("RUN FAILED")), None)
    failed[run.name] = (error or (lines[-1] if lines else f"exit code {code}")).removeprefix("RUN FAILED: ")
    tqdm.write(f"FAILED   {run.name} after {minutes:.1f} min: {failed[run.name]}", file=sys.stderr)


def check_identifier_installed(name: str | None) -> None:
    """Refuse, before any training, a suite whose language identifier is not installed (each run would fail
    at its evaluation), naming the two fixes."""

    names = identifier_names(name)
    missing = [n for n in names if importlib.util.find_spec(n) is None]  # the modules are named as the identifiers
    if (name and missing) or len(missing) == len(names):
        raise ConfigError(
            f"The suite measures off-target rates with {name or ' or '.join(names)}, which is not installed here "
            f"(missing: {', '.join(missing)}): pip install 'hf_langspec[eval]', or run with --off-target-later and "
            "let a `compare --report-only` where it is installed measure them from the saved outputs."
        )


def compare(
    suite: str | os.PathLike | Suite,
    systems: list[str] | None = None,
    seeds: list[int] | None = None,
    workers: int = 1,
    output_dir: str | os.PathLike | None = None,
    report_only: bool = False,
    eval_sets: list[str] = (),
    off_target_later: bool = False,
) -> dict[str, Any]:
    """Train and evaluate every (system, seed) not yet done, then build the report; returns the report.

    Everything about the suite (systems, overrides, budgets, model configs) is checked before anything
    runs. `systems` and `seeds` choose what trains; the report is always the whole suite's (plus the
    seeds chosen), so a run of one system does not shrink the published table. `report_only` trains
    nothing and reports what exists, listing the runs that are missing. `off_target_later` leaves the
    off-target rates to a machine that has the suite's language identifier (a GPU machine may not): the
    next `compare` there, `--report-only` too, measures them from the saved outputs before reporting.
    """

    # a report reads results, not models: no start checkpoint needed to rebuild one
    whole = suite if isinstance(suite, Suite) else load_suite(suite, build_models=not report_only)
    suite = whole.select(systems, seeds)
    if output_dir is not None:  # results follow it unless the suite names its own results_dir
        suite.output_dir = Path(output_dir)
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}.")
    for file in eval_sets:
        if not Path(file).is_file():
            raise FileNotFoundError(f"--eval-set {file} does not exist.")
    load_other_budgets(whole)  # the report compares with them: refuse a missing one before hours of training
    failed: dict[str, str] = {}
    evaluation = suite.base.get("evaluation", {})
    if not report_only and not off_target_later and evaluation.get("off_target", "zero-shot"):
        check_identifier_installed(evaluation.get("language_identifier"))
    if not report_only:
        gpus = torch.cuda.device_count()
        threads = worker_threads(workers, gpus, os.environ)
        shared = prepare_shared(suite, list(eval_sets))
        runs = plan_runs(suite, shared, threads, off_target_later)
        todo = started_first([run for run in runs if not is_finished(run)])
        counts = sorted({len(suite.seeds_of(system)) for system in suite.systems})
        seeds_each = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        print(
            f"[{suite.name}] {len(runs)} runs ({len(suite.systems)} systems x {seeds_each} seeds): "
            f"{len(runs) - len(todo)} finished, {len(todo)} to run with {workers} worker(s) x "
            f"{'1 GPU' if gpus else f'{threads} thread(s)'}",
            flush=True,
        )
        failed = execute(todo, workers, gpus) if todo else {}
    check_results_settings(whole.including(suite))  # before any off-target rate is measured or report written
    from .worker import fill_pending_off_target  # run as `python -m`: not imported by its package first

    fill_pending_off_target(suite.results_dir, evaluation)
    # the report is the whole suite's, with whatever the selection added (extra seeds), never a part of it
    report = build_report(
        whole.including(suite), eval_sets=[f"eval:{Path(f).name.removesuffix('.jsonl')}" for f in eval_sets]
    )
    report["failed"] = failed
    return report


__all__ = [
    "check_identifier_installed",
    "check_results_settings",
    "compare",
    "execute",
    "plan_runs",
    "run_config",
    "start_worker",
    "started_first",
    "worker_environment",
]
