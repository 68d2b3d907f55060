"""The GPU plan's commands (scripts/gpu_plan.py) on the CPU, with a tiny budget: the code path a GPU machine
runs, checked here so that nothing waits for a GPU to find its first bug; and the comparison's off-target
rates left for later (a GPU machine lacks the language identifiers) and measured from the saved outputs."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import command_server
import pytest

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "scripts" / "gpu_plan.py"


def plan(step: str, out: Path, *extra: str) -> dict:
    done = command_server.run_script(PLAN, step, "--device", "cpu", "--out", out, *extra, cwd=ROOT,
                                              capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / f"{step}.json").read_text())


@pytest.mark.slow
def test_the_tests_step_runs_the_device_tests_and_reports_them(tmp_path):
    result = plan("tests", tmp_path)
    assert result["exit"] == 0 and result["device"] == "cpu"
    report = (tmp_path / "tests.xml").read_text()
    assert 'failures="0"' in report and 'errors="0"' in report and "test_device" in report


@pytest.mark.slow
def test_the_fsdp_step_trains_under_the_fsdp_config_and_the_model_reloads(tmp_path):
    result = plan("fsdp", tmp_path)
    assert result["reloads"] and result["parameters"] > 0
    assert result["fsdp_applied"] is False  # accelerate applies FSDP on GPUs only, and the log says so here
    assert "applies FSDP only on GPUs" in (tmp_path / "fsdp.log").read_text()


@pytest.mark.slow
def test_the_speed_step_measures_every_method_against_the_backbone_and_marian(tmp_path):
    result = plan("speed", tmp_path)
    assert result["shape"] == "tiny"
    log = (tmp_path / "speed.log").read_text()
    for row in ("MarianMTModel", "baseline backbone", "LAA dec.self", "FCLL", "monolingual adapters"):
        assert f"| {row}" in log


@pytest.mark.slow
def test_the_compile_step_measures_compiled_against_eager_training(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_COMMIT", "abc1234")  # a GPU machine's copy of the tree has a stale git HEAD
    result = plan("compile", tmp_path, "--kinds", "baseline,cll")
    log = (tmp_path / "compile.log").read_text()
    assert "| baseline backbone |" in log and "| FCLL (central l0, LSL inner 2d) |" in log and "speed-up" in log
    assert "LAA" not in log and "cll: first compiled step" in log
    assert result["commit"] == "abc1234"


@pytest.mark.slow
def test_the_profile_step_profiles_the_trainer_loop_and_counts_its_host_syncs(tmp_path):
    """GPU plan step 1: the package's Trainer loop per setting, model and loop; on a CPU the census sees the
    CPU path's reads (a CPU keeps them; tests/test_gpu_loop.py requires none on the accelerator's path)."""
    result = plan("profile", tmp_path, "--systems", "baseline,fcll")
    assert result["exit"] == 0
    rows = json.loads((tmp_path / "profile-loop.json").read_text())
    assert {(r["system"], r["loop"]) for r in rows} == {
        (s, lp) for s in ("baseline", "fcll") for lp in ("as is", "loader")
    }
    for row in rows:
        assert row["steps/s"] > 0 and row["host ops"] > 100 and row["host reads"] > 0 and row["sync sites"]
    assert "| tiny | fcll | loader |" in (tmp_path / "profile.log").read_text()


@pytest.mark.slow
def test_the_processes_step_trains_runs_side_by_side_and_sums_them(tmp_path):
    """Issue 47, item 4: N processes of the Trainer loop at once (their own seeds), each one's rate and the sum,
    set against one process alone."""
    result = plan("processes", tmp_path)
    assert result["exit"] == 0
    rows = json.loads((tmp_path / "processes-loop.json").read_text())
    assert [row["processes"] for row in rows] == [1, 2]
    for row in rows:
        assert len(row["steps/s each"]) == row["processes"] and all(rate > 0 for rate in row["steps/s each"])
        assert row["steps/s together"] == pytest.approx(sum(row["steps/s each"]))
    assert rows[0]["x one alone"] == 1.0
    assert rows[1]["x one alone"] == pytest.approx(rows[1]["steps/s together"] / rows[0]["steps/s together"])
    assert "| tiny | baseline | loader | 2 |" in (tmp_path / "processes.log").read_text()


@pytest.mark.slow
def test_the_static_step_measures_the_static_loop_against_eager_with_its_compile_seconds(tmp_path):
    """Issue 57: the static loop (static shapes, compiled once per bucket before the first step) beside the eager
    loader loop; on a CPU with dynamo's aot_eager backend: one graph per bucket, none during the timed steps."""
    result = plan("static", tmp_path)
    assert result["exit"] == 0 and result["finished_parts"] == ["tiny"]
    rows = {row["loop"]: row for row in json.loads((tmp_path / "static-tiny.json").read_text())}
    assert set(rows) == {"loader", "static", "graph step"}  # graph step: the recorded step's path, run eagerly
    static = rows["static"]
    assert static["buckets"] == [[16, 16], [24, 24], [40, 40], [48, 48]]  # auto, from the lengths 16-48
    assert static["graphs compiled"] == 4 and static["compile s"] > 0
    assert rows["loader"]["graphs compiled"] == 0 and rows["loader"]["compile s"] is None
    assert rows["graph step"]["buckets"] is None  # nothing recorded on a CPU
    assert all(row["steps/s"] > 0 for row in rows.values())


@pytest.mark.slow
def test_the_graph_step_runs_the_recorded_steps_tests_then_measures_it(tmp_path):
    result = plan("graph", tmp_path)
    assert result["exit"] == 0 and result["finished_parts"] == ["tiny"]
    assert " passed" in (tmp_path / "graph.log").read_text()
    assert {row["loop"] for row in json.loads((tmp_path / "static-tiny.json").read_text())} >= {"graph step"}


@pytest.mark.slow
def test_the_decoding_step_times_static_cache_decoding_eager_and_compiled(tmp_path):
    """Issue 47, item 3's decoding half: beam search with the growing cache, the static cache, and the static cache
    under torch.compile, for the backbone beside MarianMTModel."""
    result = plan("decoding", tmp_path)
    assert result["exit"] == 0
    log = (tmp_path / "decoding.log").read_text()
    for name in ("baseline backbone", "MarianMTModel"):
        row = next(line for line in log.splitlines() if line.startswith(f"| {name} |"))
        assert len(row.split("|")) == 7 and "x)" in row, row


@pytest.mark.slow
def test_the_routing_step_measures_each_strategy_of_a_routed_method(tmp_path):
    plan("routing", tmp_path)
    log = (tmp_path / "routing.log").read_text()
    for row in ("| FCLL (central l0, LSL inner 2d) |", "[routing gather] |", "[routing group] |", "| MarianMTModel |"):
        assert row in log


@pytest.mark.slow
def test_the_compare_step_archives_the_finished_runs_with_their_off_target_pending(tmp_path):
    import tarfile

    common = ("--suite", "examples/suites/tiny.yaml", "--workers", "2", "--output-dir", str(tmp_path / "suite"))
    stopped = plan("compare", tmp_path / "first", *common, "--minutes", "0.02")  # the machine's time is up
    assert stopped["stopped_after_minutes"] and stopped["exit"] == -15
    assert all(v == "no checkpoint yet" or "checkpoint-" in v for v in stopped["unfinished_runs"].values())
    result = plan("compare", tmp_path / "out", *common)  # the next call resumes and finishes every run
    assert result["exit"] == 0 and not result["stopped_after_minutes"] and result["unfinished_runs"] == {}
    assert (tmp_path / "out" / "compare.log").read_text().count("started ") == 4 - len(stopped["finished_runs"])
    assert result["finished_runs"] == [f"{system} seed{seed}" for system in ("baseline", "fcll") for seed in (1, 2)]
    with tarfile.open(tmp_path / "out" / result["archive"]) as tar:
        names = sorted(tar.getnames())
    assert names == [f"{system}/seed{seed}.{kind}" for system in ("baseline", "fcll") for seed in (1, 2)
                     for kind in ("json", "off_target.json.gz", "outputs.json.gz")]  # fmt: skip


def test_the_compare_step_reports_how_far_each_unfinished_run_got(tmp_path):
    """The runs a stopped call leaves: the newest checkpoint of each (per stage for a staged run), so the next
    session knows the GPU's speed; finished runs and set-aside leftovers are not counted."""
    sys.path.insert(0, str(PLAN.parent))
    from gpu_plan import unfinished_progress

    written = time.time() - 3600
    for folder in ("baseline/seed1/checkpoints/checkpoint-500", "hlt/seed2/checkpoints/high/checkpoint-4000",
                   "hlt/seed2/checkpoints/all/checkpoint-1500", "fcll/seed1/checkpoints/incomplete-checkpoint-1000",
                   "fcll/seed1/checkpoints/checkpoint-500", "xlp/seed3", "laa/seed1/checkpoints/checkpoint-12000"):  # fmt: skip
        (tmp_path / folder).mkdir(parents=True)
        written += 60  # the newest stage is the one written last
        os.utime(tmp_path / folder, (written, written))
    assert unfinished_progress(tmp_path, finished=["laa seed1"]) == {
        "baseline seed1": "checkpoint-500", "fcll seed1": "checkpoint-500", "hlt seed2": "all/checkpoint-1500",
        "xlp seed3": "no checkpoint yet"}  # fmt: skip


def test_off_target_rates_left_for_later_are_measured_from_the_saved_outputs(tmp_path, monkeypatch):
    """A run made where the identifier is missing records its sets as pending; a later compare where it is
    installed measures them from the outputs: the same rates as a run that measured them itself."""
    from hf_langspec.compare import compare
    from hf_langspec.compare import runner as runner_module
    from hf_langspec.compare import worker as worker_module
    from hf_langspec.compare.suite import load_suite

    suite = load_suite(ROOT / "examples" / "suites" / "tiny.yaml").select(seeds=[1])
    suite.output_dir = tmp_path / "measured"
    compare(suite, systems=None)
    measured = json.loads((tmp_path / "measured" / "results" / "baseline" / "seed1.json").read_text())

    suite.output_dir = tmp_path / "later"
    real = worker_module.language_identifier  # the name the worker calls

    def missing(prefer=None):
        raise ImportError("py3langid is not installed")

    monkeypatch.setattr(worker_module, "language_identifier", missing)
    monkeypatch.setattr(runner_module, "check_identifier_installed", lambda name: pytest.fail("checked"))
    compare(suite, off_target_later=True)
    path = tmp_path / "later" / "results" / "baseline" / "seed1.json"
    pending = json.loads(path.read_text())
    assert pending["off_target_pending"] == ["zero-shot"]
    assert all("off_target" not in s for s in pending["sets"]["zero-shot"].values())

    monkeypatch.setattr(worker_module, "language_identifier", real)
    compare(suite, report_only=True)
    filled = json.loads(path.read_text())
    assert "off_target_pending" not in filled and filled["language_identifier"] == measured["language_identifier"]
    outputs = json.loads(gzip.decompress(path.with_name("seed1.outputs.json.gz").read_bytes()))
    assert outputs["zero-shot"] == json.loads(gzip.decompress(
        (tmp_path / "measured" / "results" / "baseline" / "seed1.outputs.json.gz").read_bytes()))["zero-shot"]  # fmt: skip
    for direction, scores in measured["sets"]["zero-shot"].items():
        assert filled["sets"]["zero-shot"][direction]["off_target"] == scores["off_target"]


def test_a_suite_whose_identifier_is_missing_is_refused_before_training_with_both_fixes(monkeypatch):
    import importlib.util

    from hf_langspec.compare.runner import check_identifier_installed
    from hf_langspec_cli.config_file import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "lingua" else real(name, *a))
    with pytest.raises(ConfigError, match=r"lingua, which is not installed here .*--off-target-later"):
        check_identifier_installed("lingua")
    check_identifier_installed(None)  # any installed one will do when the suite names none


def test_a_packed_suite_unpacks_into_shared_data_that_needs_no_corpus(tmp_path, monkeypatch):
    import argparse
    import importlib.util
    import shutil

    import yaml

    from hf_langspec.compare.shared import prepare_shared
    from hf_langspec.compare.suite import load_suite

    spec = importlib.util.spec_from_file_location("gpu_plan", PLAN)
    gpu_plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_plan)
    monkeypatch.setattr(gpu_plan, "BUNDLE", tmp_path / "bundle")
    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "examples/suites/tiny", corpus)
    config = yaml.safe_load((ROOT / "examples/suites/tiny.yaml").read_text())
    data = config["base"]["data"]
    data["train_files"], data["valid_files"] = [str(corpus / "train.jsonl")], [str(corpus / "valid.jsonl")]
    data["test_files"] = {k: str(corpus / Path(p).name) for k, p in data["test_files"].items()}
    config["output_dir"], config["results_dir"] = str(tmp_path / "here"), str(tmp_path / "results")
    suite_file = tmp_path / "tiny.yaml"
    suite_file.write_text(yaml.safe_dump(config))
    gpu_plan.pack(argparse.Namespace(suite=str(suite_file)))
    here = prepare_shared(load_suite(suite_file))
    shutil.rmtree(corpus)  # the GPU machine has neither the corpus nor the shared folder, only the archive
    gpu_plan.unpack(str(suite_file), str(tmp_path / "there"))
    suite = load_suite(suite_file)
    suite.output_dir = tmp_path / "there"
    there = prepare_shared(suite)
    assert there["corpus_fingerprint"] == here["corpus_fingerprint"] and there["sets"] == here["sets"]
    assert there["train_sizes"] == here["train_sizes"]


@pytest.mark.slow
def test_the_curve_step_resumes_a_stopped_curve_and_a_stopped_run_gives_its_points_so_far(tmp_path):
    from conftest import tiny_suite

    from hf_langspec.compare.learning_curve import partial_learning_curve

    suite_file = tiny_suite(tmp_path)
    common = ("--suite", str(suite_file), "--max-steps", "20", "--every", "10", "--output-dir", str(tmp_path / "run"))
    stopped = plan("curve", tmp_path / "first", *common, "--minutes", "0.02")  # the machine's time is up at once
    assert stopped["exit"] == -15 and not stopped["finished"] and stopped["points"] == []
    result = plan("curve", tmp_path / "out", *common, "--target", "xx-en=0")  # the next call finishes the curve
    assert result["exit"] == 0 and result["finished"] and [p[0] for p in result["points"]] == [10, 20]
    finished = json.loads((tmp_path / "out" / "learning_curve.baseline.seed1.every10.json").read_text())
    assert finished["test_at_last_step"]["step"] == 20 and finished["first_reaching"] == 10
    assert "stopped_at" not in finished

    # the same run read as a curve of 40 steps stopped at 20: its points so far, without the test-set scores
    partial = partial_learning_curve(suite_file, 40, 10, tmp_path / "run", targets={"xx-en": 0.0})
    assert partial["stopped_at"] == 20 and partial["max_steps"] == 40 and partial["test_at_last_step"] is None
    assert partial["points"] == finished["points"]
    assert partial_learning_curve(suite_file, 40, 10, tmp_path / "no-run") is None


def test_a_step_stopped_by_the_calls_timeout_keeps_the_lines_it_logged(tmp_path):
    """A device call ends its steps with `timeout` (SIGTERM to gpu_plan.py): what the step printed before must be in
    its log, which is all that comes back of a stopped measurement. The step's command is still running when the
    log is read and when gpu_plan is stopped: a block-buffered log holds the line in memory and loses it."""
    log = tmp_path / "step.log"
    child = "import time; print('measured 24.5 steps/s', flush=True); time.sleep(40)"
    driver = (
        f"import sys; sys.path.insert(0, {str(PLAN.parent)!r}); import gpu_plan; from pathlib import Path; "
        f"gpu_plan.run([sys.executable, '-c', {child!r}], log=Path({str(log)!r}))"
    )
    process = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline and "measured" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    assert process.poll() is None, "the step ended before it was stopped: the test checks nothing"
    process.terminate()
    process.wait(timeout=30)
    assert "measured 24.5 steps/s" in log.read_text()


def test_a_warm_compile_cache_travels_from_one_gpu_machine_to_the_next(tmp_path, monkeypatch, capsys):
    """Issue 57, item 3: what a GPU call compiled comes back as one archive (if it fits the 16 MB a file may have),
    `pack --cache` puts it into the bundle, and the next machine's steps start from it; a cache already there wins."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_plan", PLAN)
    gpu_plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_plan)
    monkeypatch.setattr(gpu_plan, "BUNDLE", tmp_path / "bundle")
    first, out = tmp_path / "first-machine", tmp_path / "out"
    (first / "fxgraph" / "ab").mkdir(parents=True)
    (first / "fxgraph" / "ab" / "entry").write_bytes(b"compiled graph")
    out.mkdir()
    gpu_plan.save_cache(first, out)
    gpu_plan.pack(argparse.Namespace(cache=out / gpu_plan.CACHE_ARCHIVE, suite=None))
    second = tmp_path / "second-machine"
    gpu_plan.restore_cache(second)
    assert (second / "fxgraph" / "ab" / "entry").read_bytes() == b"compiled graph"
    (second / "fxgraph" / "ab" / "entry").write_bytes(b"newer")
    gpu_plan.restore_cache(second)  # a machine's own cache is not overwritten
    assert (second / "fxgraph" / "ab" / "entry").read_bytes() == b"newer"
    monkeypatch.setattr(gpu_plan, "CACHE_LIMIT", 10)
    gpu_plan.save_cache(first, out)
    assert not (out / gpu_plan.CACHE_ARCHIVE).exists() and "more than comes back" in capsys.readouterr().out


def test_a_run_records_the_commit_of_the_code_it_started_with(tmp_path, monkeypatch):
    """A run took its commit from the checkout when it ended: a commit made during its hours of training (its code
    already loaded) was recorded as the code that trained it."""
    from hf_langspec.compare import compare
    from hf_langspec.compare import worker as worker_module
    from hf_langspec.compare.suite import load_suite

    suite = load_suite(ROOT / "examples" / "suites" / "tiny.yaml").select(seeds=[1])
    suite.output_dir = tmp_path / "suite"
    compare(suite, systems=None)
    results = tmp_path / "suite" / "results" / "baseline"
    for path in results.glob("seed1.*"):
        path.unlink()  # evaluated again in this process, through its training step (resumed: nothing left to train)
    checkout = {"commit": "the commit at the start"}
    real = worker_module.run_experiment

    def training(config, *args, **kwargs):
        outcome = real(config, *args, **kwargs)
        checkout["commit"] = "a commit made while it trained"
        return outcome

    monkeypatch.setattr(worker_module, "package_commit", lambda: checkout["commit"])
    monkeypatch.setattr(worker_module, "run_experiment", training)
    worker_module.run(
        json.loads((tmp_path / "suite" / "runs" / "baseline" / "seed1" / "compare_spec.json").read_text())
    )
    assert checkout["commit"] == "a commit made while it trained"
    assert json.loads((results / "seed1.json").read_text())["package_commit"] == "the commit at the start"
