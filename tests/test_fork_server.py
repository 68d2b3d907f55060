"""The CPU runner's fork server (hf_langspec/compare/fork_server.py): a run forked from it computes what a run in a
process of its own computes, byte for byte, and a runner that closes it ends the runs still going cleanly."""

from __future__ import annotations

import gzip
import json
import time

import yaml
from conftest import tiny_suite

from hf_langspec.compare import load_suite
from hf_langspec.compare.forked import ForkedWorker, ForkServer
from hf_langspec.compare.runner import Run, detects_with, plan_runs, start_worker, worker_environment
from hf_langspec.compare.shared import prepare_shared, results_paths


def _baseline_run(tmp_path, max_steps: int = 200):
    """The tiny suite's baseline, seed 1, planned (its shared data and vocabulary made) under `tmp_path`."""
    tmp_path.mkdir()
    path = tiny_suite(tmp_path, seeds=[1])
    suite = yaml.safe_load(path.read_text())
    suite["base"]["training"]["max_steps"] = max_steps
    path.write_text(yaml.safe_dump(suite))
    suite = load_suite(path).select(["baseline"], None)
    (run,) = plan_runs(suite, prepare_shared(suite), threads=1)
    return suite, run


def _wait(worker, seconds: float = 600) -> int | None:
    deadline = time.monotonic() + seconds
    while worker.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return worker.returncode


def test_a_forked_run_computes_what_a_process_of_its_own_computes(tmp_path):
    forked_suite, forked = _baseline_run(tmp_path / "forked")
    alone_suite, alone = _baseline_run(tmp_path / "alone")
    server = ForkServer(worker_environment(1, 0, 0), detects_with([forked]))  # as the runner starts it
    try:
        worker = start_worker(forked, 0, 0, server)
        assert isinstance(worker, ForkedWorker)
        assert _wait(worker) == 0, (forked.run_dir / "compare.log").read_text()[-3000:]
    finally:
        server.close()
    process = start_worker(alone, 0, 0, None)  # `python -m hf_langspec.compare.worker`, as beside GPUs
    assert process.wait(timeout=600) == 0, (alone.run_dir / "compare.log").read_text()[-3000:]
    (forked_scores, forked_outputs), (alone_scores, alone_outputs) = (
        results_paths(suite.results_dir, "baseline", 1) for suite in (forked_suite, alone_suite)
    )
    assert gzip.decompress(forked_outputs.read_bytes()) == gzip.decompress(alone_outputs.read_bytes())
    scores = [json.loads(path.read_text()) for path in (forked_scores, alone_scores)]
    assert scores[0]["sets"] == scores[1]["sets"] and scores[0]["sets"]
    assert scores[0]["training"]["final_loss"] == scores[1]["training"]["final_loss"]


def test_the_server_loads_the_identifier_the_runs_will_detect_with_and_none_where_they_detect_nothing(tmp_path):
    def runs(evaluation: dict, later: bool = False) -> list[Run]:
        return [Run("baseline", 1, tmp_path, {"evaluation": evaluation, "off_target_later": later})]

    assert detects_with(runs({"language_identifier": "lingua"})) == "lingua"  # off_target: zero-shot by default
    assert detects_with(runs({"off_target": True})) == "lingua+py3langid+langid"  # the default order
    assert detects_with(runs({"off_target": False, "language_identifier": "lingua"})) is None
    assert detects_with(runs({"language_identifier": "lingua"}, later=True)) is None  # measured elsewhere


def test_closing_the_server_ends_a_run_still_training_and_releases_it(tmp_path):
    """A runner stopped by an error or ^C closes the server: the run still training gets SIGTERM, releases its lock
    on the way out (a resumed compare takes it over), and its exit is reported."""
    _suite, run = _baseline_run(tmp_path / "long", max_steps=100_000)
    server = ForkServer(worker_environment(1, 0, 0))
    worker = start_worker(run, 0, 0, server)
    lock = run.run_dir / ".hf_langspec.lock"
    deadline = time.monotonic() + 600
    while not lock.exists() and time.monotonic() < deadline and worker.poll() is None:
        time.sleep(0.05)
    assert lock.exists(), (run.run_dir / "compare.log").read_text()[-3000:]
    server.close()
    assert _wait(worker, 60) == 128 + 15  # the worker's SIGTERM: SystemExit(143)
    assert not lock.exists()


def test_a_run_asked_of_a_server_that_has_ended_fails_with_its_exit_code(tmp_path):
    """A server that ended (killed, or failing at its import) fails the runs asked of it, each reported with the
    server's exit code, instead of ending the runner with a broken pipe."""
    _suite, run = _baseline_run(tmp_path / "ended")
    server = ForkServer(worker_environment(1, 0, 0))
    server.process.kill()
    server.process.wait()
    try:
        worker = start_worker(run, 0, 0, server)
        assert _wait(worker, 30) == -9
    finally:
        server.close()
