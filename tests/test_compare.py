"""`hf-langspec compare`: the tiny suite trains and reports, skips finished runs, resumes a killed run, and its
statistics equal sacreBLEU's paired bootstrap and an independent numpy computation."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import command_server
import numpy as np
import pytest
import yaml
from conftest import nllb_checkpoint, tiny_suite

from hf_langspec.compare import compare, load_suite
from hf_langspec.compare.report import build_report
from hf_langspec.compare.report_markdown import markdown
from hf_langspec.compare.shared import results_paths
from hf_langspec.compare.statistics import mean_interval, paired_bootstrap, t_quantile
from hf_langspec_cli.config_file import ConfigError

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The tiny suite (2 systems x 2 seeds) run once with two workers, plus an eval set."""
    tmp = tmp_path_factory.mktemp("compare")
    eval_set = tmp / "extra.multiway.jsonl"
    records = [
        json.loads(line) for line in (ROOT / "examples/suites/tiny/test.multiway.jsonl").read_text().splitlines()
    ]
    records[0]["texts"].pop("fr")  # one record without French, one field the model does not know
    records[1]["texts"]["es"] = "no es una lengua del modelo"
    eval_set.write_text("".join(json.dumps(r) + "\n" for r in records))
    path = tiny_suite(tmp)
    report = compare(path, workers=2, eval_sets=[str(eval_set)])
    return {"path": path, "suite": load_suite(path), "report": report, "eval_set": eval_set, "records": records}


def test_results_files_record_the_versions_and_the_shape_they_were_made_with(finished):
    from importlib import metadata

    stored = json.loads(results_paths(finished["suite"].results_dir, "baseline", 1)[0].read_text())
    assert stored["versions"] == {
        name: metadata.version(name) for name in ("torch", "transformers", "tokenizers", "sacrebleu")
    }
    model = finished["suite"].base["model"]  # what a report names for a pretrained start, whose suite has no shape
    assert stored["shape"] == {key: model[key] for key in ("d_model", "encoder_layers", "decoder_layers")}


def test_a_run_records_the_commit_each_of_its_training_processes_loaded(finished, tmp_path):
    """Recorded before training starts (an interrupted process is listed too) with the steps each trained; the report
    names runs trained under several commits, or resumed before the processes were recorded, as uncertain."""
    stored = json.loads(results_paths(finished["suite"].results_dir, "fcll", 2)[0].read_text())
    assert [p["steps"] for p in stored["package_commits"]] == [stored["training"]["steps"]]
    assert stored["package_commits"][0]["commit"] == stored["package_commit"]
    results = tmp_path / "results"
    shutil.copytree(finished["suite"].results_dir, results)
    edits = {
        ("fcll", 1): lambda r: r.update(package_commits=[{"commit": "a" * 40, "steps": 100}, {"commit": "b" * 40}]),
        ("fcll", 2): lambda r: (r.pop("package_commits"), r["training"].update(steps_timed=50)),
        ("baseline", 1): lambda r: r.update(package_commits=[{"commit": "a" * 40, "steps": 150}]),
    }
    for (system, seed), edit in edits.items():
        path = results_paths(results, system, seed)[0]
        result = json.loads(path.read_text())
        edit(result)
        path.write_text(json.dumps(result))
    suite = replace(finished["suite"], results_dir_setting=results)
    uncertain = build_report(suite, write=False)["setting"]["uncertain_commits"]
    assert uncertain == {
        "baseline seed 1": "50 steps by a process whose commit is not recorded",
        "fcll seed 1": f"trained under 2 commits: {'a' * 12}, {'b' * 12}",
        "fcll seed 2": f"resumed: 50 of 200 steps in the process whose commit ({stored['package_commit'][:12]}) "
        "it records; the earlier steps' is not known",
    }
    assert "Runs whose code is not one known commit (3): baseline seed 1" in markdown(build_report(suite, write=False))


def test_the_report_marks_which_device_made_which_runs(finished, tmp_path):
    from hf_langspec.compare.report import build_report
    from hf_langspec.compare.report_markdown import markdown

    suite = finished["suite"]
    stored = json.loads(results_paths(suite.results_dir, "fcll", 1)[0].read_text())
    assert stored["training"]["device"] == "cpu"
    # the CPU training process kept freed memory (hf_langspec.training.cpu_allocator), and said so in the record
    assert stored["training"]["allocator"] == "glibc malloc keeping freed memory (mallopt: no mmap, no trimming)"
    copy = tmp_path / "results"
    shutil.copytree(suite.results_dir, copy)
    for seed in (1, 2):  # as if FCLL had run on a GPU machine
        path = results_paths(copy, "fcll", seed)[0]
        result = json.loads(path.read_text())
        result["training"]["device"] = "NVIDIA H100 80GB HBM3"
        path.write_text(json.dumps(result))
    report = build_report(replace(suite, results_dir_setting=copy), write=False)
    text = markdown(report, image_prefix=None)
    assert "trained on NVIDIA H100 80GB HBM3 and cpu." in text
    assert "| FCLL [NVIDIA H100 80GB HBM3] |" in text and "| Transformer (source tags) [cpu] |" in text
    assert "trained on cpu." in markdown(finished["report"], image_prefix=None)


def test_the_tiny_suite_trains_every_run_and_reports(finished):
    suite, report = finished["suite"], finished["report"]
    assert report["failed"] == {} and report["missing"] == []
    assert set(report["systems"]) == {"baseline", "fcll"}
    for system, seed in suite.runs:
        scores, outputs = results_paths(suite.results_dir, system, seed)
        result = json.loads(scores.read_text())
        assert result["system"] == system and result["seed"] == seed
        assert result["config"]["training"]["seed"] == seed
        assert result["training"]["steps"] == 200  # the budget that was asked for, as trained
        assert len(result["corpus_fingerprint"]) == 16 and len(result["tokenizer_fingerprint"]) == 16
        assert result["package_commit"]
        state = json.loads(
            (suite.output_dir / f"runs/{system}/seed{seed}/checkpoints/checkpoint-200/trainer_state.json").read_text()
        )
        logged = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
        assert result["training"]["final_loss"] == logged[-1] and len(logged) == 4  # logging_steps 50 of 200
        assert set(json.loads(gzip.decompress(outputs.read_bytes()))) == {
            "supervised",
            "zero-shot",
            "eval:extra.multiway",
        }
    fcll = report["systems"]["fcll"]
    training = [json.loads(results_paths(suite.results_dir, "fcll", seed)[0].read_text())["training"]
                for seed in (1, 2)]  # fmt: skip
    assert fcll["final_loss"] == pytest.approx(np.mean([t["final_loss"] for t in training]))
    speeds = [t["input_tokens_timed"] / t["seconds"] for t in training]
    assert fcll["train_tokens_per_second_seeds"] == pytest.approx(speeds)
    assert fcll["train_tokens_per_second"] == pytest.approx(np.mean(speeds))
    speed_cell = f"| {np.mean(speeds):.0f} ± {np.std(speeds, ddof=1):.0f} ({fcll['train_tokens_relative']:.2f}x) |"
    assert fcll["parameters"]["added"] > 0 == report["systems"]["baseline"]["parameters"]["added"]
    log = (suite.output_dir / "runs/fcll/seed2/compare.log").read_text()
    assert (
        "training fcll seed 2" in log and "found in sys.modules" not in log
    )  # runpy's warning: worker imported early
    for name in (
        "report.md",
        "report.json",
        "report.csv",
        "bars.png",
        "offtarget_vs_bleu.png",
        "zeroshot_heatmaps.png",
    ):
        assert (suite.results_dir / name).stat().st_size > 0
    markdown = (suite.results_dir / "report.md").read_text()
    assert "| FCLL | source |" in markdown and "Do the papers' headline effects hold here?" in markdown
    assert "final training loss |" in markdown and f"| {fcll['final_loss']:.3f} |" in markdown
    assert speed_cell in markdown and "the machine's as much as the methods'" in markdown  # the seeds' spread shown
    assert re.search(r"- \*\*CLL\*\* \(zero-shot off-target down\): .*\*\*\. Here: a 200-step model", markdown)


def test_runs_differ_by_seed_and_share_data_and_vocabulary(finished):
    suite = finished["suite"]
    results = {run: json.loads(results_paths(suite.results_dir, *run)[0].read_text()) for run in suite.runs}
    assert len({(r["corpus_fingerprint"], r["tokenizer_fingerprint"]) for r in results.values()}) == 1
    outputs = {run: results_paths(suite.results_dir, *run)[1].read_bytes() for run in suite.runs}
    assert outputs[("baseline", 1)] != outputs[("baseline", 2)]


def test_a_second_call_trains_nothing(finished):
    suite = finished["suite"]
    before = {run: results_paths(suite.results_dir, *run)[0].stat().st_mtime_ns for run in suite.runs}
    start = time.monotonic()
    report = compare(finished["path"], workers=2, eval_sets=[str(finished["eval_set"])])
    assert time.monotonic() - start < 30
    assert report["failed"] == {}
    assert before == {run: results_paths(suite.results_dir, *run)[0].stat().st_mtime_ns for run in suite.runs}


def test_the_eval_set_is_evaluated_on_exactly_the_directions_it_shares_with_the_model(finished):
    suite = finished["suite"]
    result = json.loads(results_paths(suite.results_dir, "fcll", 1)[0].read_text())
    expected = {f"{a}-{b}" for r in finished["records"] for a in r["texts"] for b in r["texts"]}
    expected = {d for d in expected if len(set(d.split("-"))) == 2 and set(d.split("-")) <= {"en", "de", "fr"}}
    assert set(result["sets"]["eval:extra.multiway"]) == expected
    counts = {d: s["sentences"] for d, s in result["sets"]["eval:extra.multiway"].items()}
    assert counts["en-fr"] == 5 and counts["en-de"] == 6  # the record without French has no en-fr
    groups = finished["report"]["systems"]["fcll"]["groups"]
    assert {"eval:extra.multiway supervised", "eval:extra.multiway zero-shot"} <= set(groups)


def test_means_and_intervals_equal_numpy(finished):
    suite, report = finished["suite"], finished["report"]
    references = json.loads(gzip.decompress((suite.results_dir / "references.json.gz").read_bytes()))["sets"]
    for system in ("baseline", "fcll"):
        per_seed = []
        for seed in suite.seeds:
            result = json.loads(results_paths(suite.results_dir, system, seed)[0].read_text())
            zero_shot = result["sets"]["zero-shot"]
            assert set(zero_shot) == set(references["zero-shot"])
            per_seed.append([np.mean([s[m] for s in zero_shot.values()]) for m in ("bleu", "off_target")])
        per_seed = np.array(per_seed)
        entry = report["systems"][system]["groups"]["zero-shot"]
        np.testing.assert_allclose(entry["bleu"]["mean"], per_seed[:, 0].mean())
        np.testing.assert_allclose(entry["bleu"]["std"], per_seed[:, 0].std(ddof=1))
        distinct = []  # the share of different translations per direction, from the outputs file
        for seed in suite.seeds:
            outputs = json.loads(gzip.decompress(results_paths(suite.results_dir, system, seed)[1].read_bytes()))
            distinct.append(np.mean([len(set(texts)) / len(texts) for texts in outputs["zero-shot"].values()]))
        np.testing.assert_allclose(entry["distinct"]["values"], distinct)
        half = 12.7062 * per_seed[:, 1].std(ddof=1) / np.sqrt(2)  # Student t, 1 degree of freedom, 97.5%
        np.testing.assert_allclose(
            entry["off_target"]["ci95"], [per_seed[:, 1].mean() - half, per_seed[:, 1].mean() + half]
        )
    base = report["systems"]["baseline"]["groups"]["xx-en"]["bleu"]["mean"]
    np.testing.assert_allclose(report["systems"]["fcll"]["groups"]["xx-en"]["bleu"]["delta"],
                               report["systems"]["fcll"]["groups"]["xx-en"]["bleu"]["mean"] - base)  # fmt: skip


def test_t_quantiles_and_intervals():
    assert t_quantile(2) == pytest.approx(4.3027) and t_quantile(1000) == 1.96
    values = [0.45, 0.74, 0.57]
    low, high = mean_interval(values)
    half = 4.3027 * np.std(values, ddof=1) / math.sqrt(3)
    assert (low, high) == pytest.approx((np.mean(values) - half, np.mean(values) + half))
    assert mean_interval([0.5]) is None


def test_significance_equals_sacrebleus_own_paired_bootstrap(finished, tmp_path):
    """The report's p-values are sacreBLEU's CLI `--paired-bs` on the seeds' concatenated outputs."""
    suite, report = finished["suite"], finished["report"]
    references = json.loads(gzip.decompress((suite.results_dir / "references.json.gz").read_bytes()))["sets"]
    files = {}
    for system in ("baseline", "fcll"):
        lines = []
        for seed in suite.seeds:
            outputs = json.loads(gzip.decompress(results_paths(suite.results_dir, system, seed)[1].read_bytes()))
            for direction in references["zero-shot"]:
                lines += outputs["zero-shot"][direction]
        files[system] = tmp_path / f"{system}.txt"
        files[system].write_text("\n".join(lines) + "\n")
    refs = [r for _ in suite.seeds for d in references["zero-shot"] for r in references["zero-shot"][d]["ref"]]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    command = [sys.executable, "-m", "sacrebleu", str(tmp_path / "ref.txt"), "-i", str(files["baseline"]),
               str(files["fcll"]), "-m", "bleu", "chrf", "--chrf-word-order", "2", "--paired-bs", "--format", "text"]  # fmt: skip
    table = subprocess.run(command, capture_output=True, text=True, check=True).stdout  # (its JSON output is broken)
    bleu_p, chrf_p = (float(p) for p in re.findall(r"\(p = ([0-9.]+)\)", table))
    groups = report["systems"]["fcll"]["groups"]["zero-shot"]
    assert groups["bleu"]["mean"] != report["systems"]["baseline"]["groups"]["zero-shot"]["bleu"]["mean"]
    assert groups["bleu"]["p_value"] == pytest.approx(bleu_p, abs=5e-5)
    assert groups["chrfpp"]["p_value"] == pytest.approx(chrf_p, abs=5e-5)


@pytest.mark.reliability
def test_identical_outputs_are_not_significant():
    outputs = ["a b c d", "e f g h", "i j k"]
    assert paired_bootstrap(outputs, outputs, ["a b c d", "e f x h", "i j k l"]) == {"bleu": 1.0, "chrfpp": 1.0}


@pytest.mark.reliability
def test_a_report_with_missing_runs_lists_them(finished, tmp_path):
    suite = load_suite(finished["path"])
    suite.results_dir_setting = tmp_path / "results"
    (tmp_path / "results").mkdir()
    for system, seed in suite.runs:
        if (system, seed) != ("fcll", 2):
            for path in results_paths(finished["suite"].results_dir, system, seed):
                target = tmp_path / "results" / system / path.name
                target.parent.mkdir(exist_ok=True)
                target.write_bytes(path.read_bytes())
    (tmp_path / "results" / "references.json.gz").write_bytes(
        (finished["suite"].results_dir / "references.json.gz").read_bytes()
    )
    report = build_report(suite)
    assert report["missing"] == ["fcll seed 2"]
    assert report["systems"]["fcll"]["seeds"] == [1]
    assert "| FCLL (1 of 2 seeds) |" in (tmp_path / "results" / "report.md").read_text()
    assert "Missing runs (1; not averaged in): fcll seed 2." in (tmp_path / "results" / "report.md").read_text()
    assert report["claims"][0]["verdict"].endswith("(on 1 of 2 seeds so far)")


def _own_seeds_suite(finished, tmp_path, seeds: list[int]) -> Path:
    """The finished tiny suite with FCLL given seeds of its own, reading the same results."""
    raw = yaml.safe_load(finished["path"].read_text())
    raw["systems"]["fcll"]["seeds"] = seeds
    path = tmp_path / "own_seeds.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.reliability
def test_a_system_with_seeds_of_its_own_is_compared_on_the_seeds_both_ran(finished, tmp_path):
    """FCLL with seeds [2, 3] against the baseline's [1, 2]: its numbers are seed 2's alone (3 is listed as
    missing), and the claim's two means are those of the paired seed, so that they differ by the delta."""
    suite = load_suite(_own_seeds_suite(finished, tmp_path, [2, 3]))
    assert suite.runs == [("baseline", 1), ("baseline", 2), ("fcll", 2), ("fcll", 3)]
    suite.results_dir_setting = finished["suite"].results_dir
    report = build_report(suite, write=False)
    assert report["missing"] == ["fcll seed 3"]
    fcll = report["systems"]["fcll"]
    assert (
        fcll["final_loss"]
        == json.loads(results_paths(suite.results_dir, "fcll", 2)[0].read_text())["training"]["final_loss"]
    )
    assert fcll["seeds"] == [2] and fcll["planned_seeds"] == [2, 3]
    own, base = (report["runs"][f"{s} seed 2"]["zero-shot"]["off_target"] for s in ("fcll", "baseline"))
    entry = fcll["groups"]["zero-shot"]["off_target"]
    assert entry["paired_seeds"] == [2] and entry["delta"] == pytest.approx(own - base)
    claim = report["claims"][0]
    assert (claim["value"], claim["baseline"]) == (pytest.approx(own), pytest.approx(base))
    assert "so far" not in claim["verdict"]  # the baseline has no seed 3 to pair with
    text = markdown(report)
    assert "seeds [1, 2] (fcll: [2, 3])" in text and "| FCLL (1 of 2 seeds) |" in text


def test_a_claim_against_a_control_is_judged_on_that_row_not_the_baseline(finished, tmp_path):
    """`against: fcll` on a claim of the baseline: its difference is the mirror of FCLL's against the baseline, its
    p-value sacreBLEU's paired bootstrap with FCLL's outputs as the reference system, and the report names FCLL."""
    raw = yaml.safe_load(finished["path"].read_text())
    mirrored = {"paper": "control", "system": "baseline", "against": "fcll", "group": "zero-shot", "metric": "bleu",
                "expect": "up", "effect": "the baseline against FCLL"}  # fmt: skip
    raw["report"]["claims"].append(mirrored)
    path = tmp_path / "against.yaml"
    path.write_text(yaml.safe_dump(raw))
    suite = load_suite(path)
    suite.results_dir_setting = finished["suite"].results_dir
    report = build_report(suite, write=False)
    claim = report["claims"][-1]
    fcll = report["systems"]["fcll"]["groups"]["zero-shot"]["bleu"]
    assert claim["delta"] == pytest.approx(-fcll["delta"]) and claim["value"] == pytest.approx(fcll["paired_means"][1])
    assert claim["baseline"] == pytest.approx(fcll["paired_means"][0])
    references = json.loads(gzip.decompress((suite.results_dir / "references.json.gz").read_bytes()))["sets"]
    lines = {}
    for system in ("baseline", "fcll"):
        lines[system] = []
        for seed in suite.seeds:
            outputs = json.loads(gzip.decompress(results_paths(suite.results_dir, system, seed)[1].read_bytes()))
            lines[system] += [line for d in references["zero-shot"] for line in outputs["zero-shot"][d]]
    refs = [r for _ in suite.seeds for d in references["zero-shot"] for r in references["zero-shot"][d]["ref"]]
    expected = paired_bootstrap(lines["fcll"], lines["baseline"], refs)["bleu"]
    assert report["systems"]["baseline"]["versus"]["fcll"]["zero-shot"]["bleu"]["p_value"] == expected
    assert f"p = {expected:.3f}" in claim["test"]
    assert "versus" not in report["systems"]["fcll"]  # the claims against the baseline read the groups as before
    assert f"against {report['systems']['fcll']['label']}: " in markdown(report)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("against", "message"),
    [
        ("fcl", r"against 'fcl' must be another system of the suite \(\['baseline', 'fcll'\]\); leave it out"),
        ("fcll", r"against 'fcll' must be another system of the suite"),
    ],
)
def test_a_claim_against_an_unknown_row_or_itself_is_refused(tmp_path, against, message):
    _refused_before_any_run(tmp_path, lambda raw: raw["report"]["claims"][0].update(against=against), message)


def _refused_before_any_run(tmp_path, edit, message: str) -> None:
    """The tiny suite edited by `edit` is refused with `message`, and nothing is written."""
    raw = yaml.safe_load(tiny_suite(tmp_path).read_text())
    edit(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=message):
        compare(path)
    assert not (tmp_path / "out").exists()


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # each was met by the report once every run had trained: a claim "not measured", or a crash
        (lambda raw: raw["report"]["claims"][0].update(group="zero shot"),
         r"group 'zero shot' is not a group of the report; use one of \['en-xx', 'xx-en', 'zero-shot'"),
        (lambda raw: raw["report"]["claims"][0].update(group="en-xx High"), r"group 'en-xx High' is not a group"),
        (lambda raw: raw["report"].update(resource_groups={"low_below": "5k", "high_from": 20}),
         r"resource_groups needs whole numbers \{low_below: N, high_from: M\}"),
        (lambda raw: raw["report"].update(resource_groups={"low_below": 50, "high_from": 20}),
         r"resource_groups low_below=50 exceeds high_from=20"),
        (lambda raw: raw["report"].update(insert_into="README.md"), r"insert_into must be a list of files"),
        (lambda raw: raw["report"].update(insert_into=["nowhere.md"]),
         r"insert_into: nowhere.md has no `<!-- compare:tiny -->` ... `<!-- /compare:tiny -->` markers"),
        (lambda raw: raw["report"].update(pivot=1), r"pivot must be a language code like en, got 1"),
        # a negative seed failed every run once the shared corpus and tokenizer were built
        (lambda raw: raw.update(seeds=[-1, 2]), r"seeds must be a non-empty list of integers from 0 to 2\*\*32 - 1"),
    ],
)  # fmt: skip
def test_report_settings_the_report_reads_last_are_refused_first(tmp_path, edit, message):
    _refused_before_any_run(tmp_path, edit, message)


@pytest.mark.reliability
@pytest.mark.parametrize(("seeds", "message"), [([-1], r"--seeds: seeds must be a non-empty list of integers from 0"),
                                               ([2, 2], r"--seeds: seeds \[2, 2\] repeat a seed")])  # fmt: skip
def test_command_line_seeds_follow_the_suite_files_rule(tmp_path, seeds, message):
    """`compare --seeds -1` trained nothing and reported every run failed, after the shared corpus was built."""
    with pytest.raises(ConfigError, match=message):
        load_suite(tiny_suite(tmp_path)).select(seeds=seeds)


def test_a_claim_on_a_resource_group_is_accepted_when_the_suite_defines_the_groups(tmp_path):
    raw = yaml.safe_load(tiny_suite(tmp_path).read_text())
    raw["report"]["claims"][0].update(group="en-xx High")
    raw["report"]["resource_groups"] = {"low_below": 10, "high_from": 20}
    path = tmp_path / "groups.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert load_suite(path).report["claims"][0]["group"] == "en-xx High"


def test_a_baseline_with_more_seeds_also_shows_its_row_on_the_suites_seeds(finished, tmp_path):
    """Suite seeds [1], baseline [1, 2]: the baseline row is over both seeds, and a second row over seed 1 alone
    gives the numbers FCLL's differences are taken against."""
    raw = yaml.safe_load(finished["path"].read_text())
    raw["seeds"], raw["systems"]["baseline"]["seeds"] = [1], [1, 2]
    path = tmp_path / "baseline_seeds.yaml"
    path.write_text(yaml.safe_dump(raw))
    suite = load_suite(path)
    suite.results_dir_setting = finished["suite"].results_dir
    report = build_report(suite, write=False)
    subset = report["baseline_on_suite_seeds"]
    assert report["systems"]["baseline"]["seeds"] == [1, 2] and subset["seeds"] == [1]
    for group, metrics in subset["groups"].items():
        for metric, entry in metrics.items():
            assert entry["mean"] == pytest.approx(report["runs"]["baseline seed 1"][group][metric])
    delta = report["systems"]["fcll"]["groups"]["zero-shot"]["bleu"]["delta"]
    assert delta == pytest.approx(
        report["runs"]["fcll seed 1"]["zero-shot"]["bleu"] - subset["groups"]["zero-shot"]["bleu"]["mean"]
    )
    text = markdown(report)
    bleu = subset["groups"]["zero-shot"]["bleu"]["mean"]
    assert re.search(
        rf"\| Transformer \(source tags\), seeds 1 \(what the 1-seed systems are compared with\) \| source \|.* {bleu:.2f} \|",
        text,
    )
    assert "| Transformer (source tags) (2 seeds) |" in text
    plain = build_report(load_suite(finished["path"]), write=False)
    assert plain["baseline_on_suite_seeds"] is None and "compared with)" not in markdown(plain)


def test_the_runner_counts_each_systems_own_seeds(finished, tmp_path, capsys):
    shutil.copytree(finished["suite"].results_dir, tmp_path / "results")  # the report goes there, not the fixture's
    raw = yaml.safe_load(_own_seeds_suite(finished, tmp_path, [1]).read_text())
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump({**raw, "results_dir": str(tmp_path / "results")}))
    compare(path, eval_sets=[str(finished["eval_set"])])
    assert "[tiny] 3 runs (2 systems x 1-2 seeds): 3 finished, 0 to run" in capsys.readouterr().out


@pytest.mark.reliability
def test_seeds_given_to_compare_train_those_but_the_report_is_the_whole_suites(finished, tmp_path):
    """`--systems baseline --seeds 3` trains baseline seed 3; the report still has FCLL and seeds 1-2."""
    path = _own_seeds_suite(finished, tmp_path, [1, 2, 5])
    suite = load_suite(path)
    chosen = suite.select(["baseline"], [3])
    assert chosen.runs == [("baseline", 3)]
    assert suite.including(chosen).runs == [("baseline", s) for s in (1, 2, 3)] + [("fcll", s) for s in (1, 2, 5)]
    shutil.copytree(finished["suite"].results_dir, tmp_path / "out" / "results")
    report = compare(path, systems=["baseline"], seeds=[3], report_only=True, output_dir=tmp_path / "out")
    assert report["missing"] == ["baseline seed 3", "fcll seed 5"]
    assert report["systems"]["fcll"]["seeds"] == [1, 2] and report["systems"]["baseline"]["seeds"] == [1, 2]


@pytest.mark.reliability
def test_runs_of_another_corpus_are_refused_in_one_table(finished, tmp_path):
    suite = load_suite(finished["path"])
    suite.results_dir_setting = tmp_path / "results"
    for system, seed in suite.runs:
        for path in results_paths(finished["suite"].results_dir, system, seed):
            target = tmp_path / "results" / system / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes()
            if path.suffix == ".json" and (system, seed) == ("fcll", 1):
                data = json.dumps({**json.loads(data), "corpus_fingerprint": "0" * 16}).encode()
            target.write_bytes(data)
    with pytest.raises(ConfigError, match=r"different data or vocabularies.*fcll seed 1"):
        build_report(suite)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("system", "message"),
    [
        ({"set": {"model.bogus_key": 1}}, r"system 'broken'.*unknown keys \['bogus_key'\]"),
        ({"set": {"modell.class": "cll"}}, r"system 'broken'.*unknown keys \['modell'\]"),
        (
            {"set": {"model.class": "cll", "model.cll_layers": "bogus"}},
            r"system 'broken'.*\[model\] .*bogus",
        ),
        ({"set": {"training.max_steps": 400}}, r"system 'broken'.*training.max_steps.*every system shares"),
        ({"set": {"stages": [{"name": "a", "training": {"max_steps": 300}}]}}, r"system 'broken'.*300 steps.*200"),
        ({"seeds": [1, 1]}, r"systems.broken\]: seeds \[1, 1\] repeat a seed"),
        ({"seeds": []}, r"systems.broken\]: seeds must be a non-empty list of integers"),
    ],
)
def test_a_bad_system_is_refused_before_anything_runs(tmp_path, system, message):
    suite = yaml.safe_load(tiny_suite(tmp_path).read_text())
    suite["systems"]["broken"] = system
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(suite))
    with pytest.raises(ConfigError, match=message):
        compare(path)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("path", sorted((ROOT / "examples/suites").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_suite_loads_and_each_system_builds_its_model(path, tmp_path, monkeypatch):
    start = (yaml.safe_load(path.read_text())["base"].get("model") or {}).get("init_from_pretrained")
    if start:  # a pretrained start is checked against its checkpoint: here a tiny one with NLLB's fields
        monkeypatch.chdir(tmp_path)
        Path(start).mkdir(parents=True)
        nllb_checkpoint(Path(start))
    suite = load_suite(path)  # checks every system's overrides, budget and model (built on the meta device)
    assert suite.baseline in suite.systems and len(suite.seeds) >= 2
    assert {claim["system"] for claim in suite.report.get("claims", [])} <= set(suite.systems)


@pytest.mark.reliability
def test_a_pretrained_suites_report_is_rebuilt_where_its_start_checkpoint_is_not(tmp_path, monkeypatch):
    """A report reads results, not models: `compare --report-only` over bible_nllb_add_tl's committed results, run
    where its start checkpoint is not, reports (it refused: "runs/bible-nllb-standin/nllb does not exist here"),
    while training there is still refused before anything runs."""
    from hf_langspec.compare import runner

    raw = yaml.safe_load((ROOT / "examples/suites/bible_nllb_add_tl.yaml").read_text())
    raw["results_dir"], raw["output_dir"] = str(ROOT / raw["results_dir"]), str(tmp_path / "runs")
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(tmp_path)  # the suite's relative start path names nothing here
    reported = []
    monkeypatch.setattr(runner, "build_report", lambda suite, **_: reported.append(suite) or {})  # nothing written
    assert compare(path, report_only=True) == {"failed": {}} and reported[0].name == "bible_nllb_add_tl"
    with pytest.raises(ConfigError, match=r"init_from_pretrained: runs/bible-nllb-standin/nllb does not exist here"):
        compare(path)
    assert not (tmp_path / "runs").exists()


@pytest.mark.reliability
def test_an_unknown_system_name_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown systems \['fcl'\]; the suite has \['baseline', 'fcll'\]"):
        compare(tiny_suite(tmp_path), systems=["fcl"])
    assert not (tmp_path / "out").exists()


@pytest.mark.reliability
def test_the_cli_reports_a_bad_suite_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nseeds: [1\n")
    result = command_server.run("compare", "--suite", bad, capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "not valid YAML at line" in result.stderr


@pytest.mark.reliability
def test_a_killed_run_resumes_and_ends_as_an_uninterrupted_run(finished, tmp_path):
    """SIGKILL the runner and its worker after the first checkpoint; the same command finishes the run and its
    outputs equal those of the run that was never interrupted."""
    path = tiny_suite(tmp_path, seeds=[1])
    # --workers 2 as `finished` ran: the runner gives each worker its share of the cores, and another thread count
    # sums the floats in another order
    command = [sys.executable, "-m", "hf_langspec.cli", "compare", "--suite", str(path), "--systems", "baseline",
               "--workers", "2"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    checkpoint = tmp_path / "out/runs/baseline/seed1/checkpoints/checkpoint-100"
    deadline = time.monotonic() + 600  # a busy machine (other trainings beside the tests) is slow to get there
    while not (checkpoint / "trainer_state.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert checkpoint.exists(), "no checkpoint within 10 minutes"
    assert not (tmp_path / "out/runs/baseline/seed1/model").exists()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "1 runs (1 systems x 1 seeds): 0 finished, 1 to run" in result.stdout
    log = (tmp_path / "out/runs/baseline/seed1/compare.log").read_text()
    assert log.count("training baseline seed 1") == 2
    resumed = results_paths(tmp_path / "out/results", "baseline", 1)[1].read_bytes()
    uninterrupted = results_paths(finished["suite"].results_dir, "baseline", 1)[1].read_bytes()
    assert json.loads(gzip.decompress(resumed))["zero-shot"] == json.loads(gzip.decompress(uninterrupted))["zero-shot"]


@pytest.mark.reliability
def test_a_worker_dies_with_its_runner_and_leaves_a_clean_state(finished, tmp_path):
    """SIGKILL the runner alone: its worker ends too (no orphan training on, holding the run lock), and the same
    command then resumes the run."""
    path = tiny_suite(tmp_path, seeds=[1])
    command = [sys.executable, "-m", "hf_langspec.cli", "compare", "--suite", str(path), "--systems", "baseline"]
    runner = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    lock = tmp_path / "out/runs/baseline/seed1/.hf_langspec.lock"
    deadline = time.monotonic() + 600
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock.exists(), "the worker took no lock within 10 minutes"
    worker = json.loads(lock.read_text())["pid"]
    os.kill(runner.pid, signal.SIGKILL)  # the runner alone, not its process group
    runner.wait()
    deadline = time.monotonic() + 60
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the worker trains on without its runner"
    assert not lock.exists()  # released on the way out: nothing stale for the next run to take over
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "1 runs (1 systems x 1 seeds): 0 finished, 1 to run" in result.stdout
    assert results_paths(tmp_path / "out/results", "baseline", 1)[0].exists()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended


def test_a_suite_continued_elsewhere_reuses_its_vocabulary_from_the_results(finished, tmp_path, monkeypatch, capsys):
    """The results directory keeps the suite's tokenizer: a fresh output_dir (another machine, a later version)
    gets the same vocabulary instead of training one, so its runs join the same table."""
    from hf_langspec.compare import shared as shared_module
    from hf_langspec.compare.shared import prepare_shared

    suite = load_suite(finished["path"])
    suite.results_dir_setting = finished["suite"].results_dir
    suite.output_dir = tmp_path / "elsewhere"
    # the name prepare_shared calls
    monkeypatch.setattr(shared_module, "train_tokenizer", lambda *a, **k: pytest.fail("trained a new vocabulary"))
    shared = prepare_shared(suite)
    assert "the suite's vocabulary from" in capsys.readouterr().out
    stored = json.loads(results_paths(finished["suite"].results_dir, "baseline", 1)[0].read_text())
    assert shared["tokenizer_fingerprint"] == stored["tokenizer_fingerprint"]
    assert shared["corpus_fingerprint"] == stored["corpus_fingerprint"]


def test_the_off_target_significance_is_sacrebleus_procedure_on_sentence_flags(finished):
    """An independent numpy run of the paired bootstrap on the flags (sacreBLEU's seed and p-value rule)."""
    from hf_langspec.compare.statistics import paired_bootstrap_rate

    rng = np.random.default_rng(0)
    base = rng.random(300) < 0.6
    own = rng.random(300) < 0.3
    idxs = np.random.default_rng(12345).choice(300, size=(1000, 300), replace=True)
    diffs = np.abs(own[idxs].mean(1) - base[idxs].mean(1))
    expected = (np.sum(diffs - diffs.mean() > abs(own.mean() - base.mean())) + 1) / 1001
    assert paired_bootstrap_rate(list(base), list(own)) == pytest.approx(expected)
    assert paired_bootstrap_rate(list(base), list(base)) == 1.0
    entry = finished["report"]["systems"]["fcll"]["groups"]["zero-shot"]["off_target"]
    assert 0 < entry["p_value"] <= 1


@pytest.mark.parametrize(
    ("p_value", "interval", "verdict"),
    [
        (0.001, (-0.7, -0.5), "holds"),
        (0.001, (-1.23, 0.03), "holds over sentences, not across seeds (the per-seed interval includes 0)"),
        (0.4, (-1.23, 0.03), "same direction, not significant"),
        (0.001, (0.1, 0.3), "does not hold: the opposite direction, significant"),
        (
            0.001,
            (-0.1, 0.3),
            "does not hold: the opposite direction, significant over sentences, not across seeds "
            "(the per-seed interval includes 0)",
        ),
    ],
)
def test_a_claim_holds_only_when_the_sentences_and_the_seeds_agree(p_value, interval, verdict):
    from hf_langspec.compare.statistics import claim_verdict as _claim

    delta = sum(interval) / 2
    claim = {"system": "m", "group": "zero-shot", "metric": "off_target", "expect": "down"}
    systems = {
        "base": {"planned_seeds": [1, 2, 3],
                 "groups": {"zero-shot": {"off_target": {"mean": 0.6, "values": [0.4, 0.6, 0.8]}}}},
        "m": {"planned_seeds": [1, 2, 3],
              "groups": {"zero-shot": {"off_target": {"mean": 0.6 + delta, "values": [0.1, 0.1, 0.1], "delta": delta,
                                                      "paired_seeds": [1, 2, 3], "paired_means": [0.6 + delta, 0.6],
                                                      "p_value": p_value, "delta_ci95": list(interval)}}}},
    }  # fmt: skip
    result = _claim(claim, systems, "base")
    assert result["verdict"] == verdict
    low, high = interval
    assert f"[{low * 100:+.3g}, {high * 100:+.3g}] points" in result["test"]  # the interval in the delta's units
    del systems["m"]["groups"]["zero-shot"]["off_target"]["delta_ci95"]  # one seed: no interval over seeds
    if verdict == "holds":
        assert (
            _claim(claim, systems, "base")["verdict"] == "holds over sentences (one seed: no interval over seeds yet)"
        )


def test_workers_take_the_users_omp_num_threads_or_split_the_cores(monkeypatch):
    from hf_langspec.compare import runner

    monkeypatch.setattr(runner, "_cpu_count", lambda: 16)
    assert runner.worker_threads(4, 0, {}) == 4
    assert runner.worker_threads(4, 0, {"OMP_NUM_THREADS": "1"}) == 1  # the user's setting, not 16 // 4
    assert runner.worker_threads(4, 1, {}) == 4  # beside a GPU too: the 16 cores split between the 4 runs
    assert runner.worker_threads(4, 1, {"OMP_NUM_THREADS": "3"}) == 3
    with pytest.raises(ValueError, match=r"OMP_NUM_THREADS='two'"):
        runner.worker_threads(2, 0, {"OMP_NUM_THREADS": "two"})


@pytest.mark.slow
def test_a_learning_curve_point_is_the_bleu_of_that_steps_model_on_the_validation_set(tmp_path, capsys):
    """`hf-langspec curve`: the last point's per-direction BLEU equals sacreBLEU on the saved model's own
    translations of the validation sentences, decoded as the suite's evaluation decodes."""
    import sacrebleu
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec import LangSpecTokenizer
    from hf_langspec.data.local import load_local
    from hf_langspec.data.processing import per_direction
    from hf_langspec.evaluation.translate import translate
    from hf_langspec_cli import main

    suite = yaml.safe_load((ROOT / "examples" / "suites" / "tiny.yaml").read_text())
    suite["output_dir"], suite["results_dir"] = str(tmp_path / "suite"), str(tmp_path / "results")
    for key in ("train_files", "valid_files"):
        suite["base"]["data"][key] = [str(ROOT / p) for p in suite["base"]["data"][key]]
    suite["base"]["data"]["test_files"] = {k: str(ROOT / p) for k, p in suite["base"]["data"]["test_files"].items()}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(suite))
    code = main(["curve", "--suite", str(tmp_path / "tiny.yaml"), "--max-steps", "150", "--every", "50",
                 "--sentences", "6", "--target", "xx-en=1", "--output-dir", str(tmp_path / "run")])  # fmt: skip
    assert code == 0
    curve = json.loads((tmp_path / "results" / "learning_curve.baseline.seed1.every50.json").read_text())
    # the same run resumed at another interval would mix intervals under one claim: refused before any work
    again = ["curve", "--suite", str(tmp_path / "tiny.yaml"), "--max-steps", "300", "--every", "30",
             "--output-dir", str(tmp_path / "run")]  # fmt: skip
    assert main(again) == 2 and "validated every 50 steps; resume it with --every 50" in capsys.readouterr().err
    assert [p["step"] for p in curve["points"]] == [50, 100, 150]
    last = curve["points"][-1]
    assert sum(last["directions"].values()) > 1  # scores that can differ: the tiny task is being learnt
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "run" / "model").eval()
    tokenizer = LangSpecTokenizer.from_pretrained(tmp_path / "run" / "model")
    valid = per_direction(load_local(tmp_path / "suite" / "shared" / "data" / "valid.jsonl").to_list(), 6)
    evaluation = suite["base"]["evaluation"]
    for direction, rows in valid.items():
        hyps = translate(model, tokenizer, [r["src"] for r in rows], rows[0]["src_lang"], rows[0]["tgt_lang"],
                         num_beams=evaluation["num_beams"], batch_size=evaluation["batch_size"],
                         max_new_tokens=evaluation["max_new_tokens"], show_progress=False)  # fmt: skip
        bleu = sacrebleu.corpus_bleu(hyps, [[r["tgt"] for r in rows]]).score
        assert last["directions"][direction] == pytest.approx(bleu, abs=1e-6), direction
    xx_en = [last["directions"][d] for d in valid if d.endswith("-en")]
    assert last["groups"]["xx-en"] == pytest.approx(sum(xx_en) / len(xx_en))
    reached = [p["step"] for p in curve["points"] if p["groups"]["xx-en"] >= 1]
    assert curve["first_reaching"] == (reached[0] if reached else None)
    # the last point on the suite's test set too: sacreBLEU of the same model's translations of those sentences
    test = curve["test_at_last_step"]
    rows = json.loads(gzip.decompress((tmp_path / "results" / "references.json.gz").read_bytes()))["sets"][
        "supervised"
    ]
    assert test["step"] == 150 and set(test["directions"]) == set(rows)
    for direction, pair in rows.items():
        src, tgt = direction.split("-")
        hyps = translate(model, tokenizer, pair["src"], src, tgt, num_beams=evaluation["num_beams"],
                         batch_size=evaluation["batch_size"], max_new_tokens=evaluation["max_new_tokens"],
                         show_progress=False)  # fmt: skip
        assert test["directions"][direction] == pytest.approx(sacrebleu.corpus_bleu(hyps, [pair["ref"]]).score)


def test_a_resumed_suite_finishes_its_half_done_runs_before_starting_new_ones(tmp_path):
    """Runs a stopped session left with checkpoints go first, the furthest along first; the others go seed by
    seed in the suite's order (a new session used to start fresh runs while two half-trained ones waited at the
    end, and to train a system's seeds 2 and 3 before another's seed 2)."""
    from hf_langspec.compare.runner import Run, started_first

    runs = [Run(name, seed, tmp_path / f"{name}{seed}", {}) for name in ("a", "b", "c", "d", "e") for seed in (2, 3)]
    for name, steps in {"c3": [500], "e2": [1000, 1500], "d2": []}.items():
        (tmp_path / name / "checkpoints").mkdir(parents=True)
        for step in steps:
            (tmp_path / name / "checkpoints" / f"checkpoint-{step}").mkdir()
    (tmp_path / "a2" / "checkpoints" / "incomplete-checkpoint-9000-1").mkdir(parents=True)  # set aside: not progress
    order = [f"{run.system}{run.seed}" for run in started_first(runs)]
    assert order == ["e2", "c3", "a2", "b2", "c2", "d2", "a3", "b3", "d3", "e3"]


@pytest.mark.parametrize("path", sorted((ROOT / "examples/suites/papers").glob("*.yaml")), ids=lambda p: p.name)
def test_the_papers_suites_plan_every_run_at_one_budget(path):
    """The papers' settings cannot run here (their corpora are on the Hub): each loads and plans its runs, every
    system at the same steps x batch, on the shared data a machine with the corpus would prepare."""
    from hf_langspec.compare.runner import plan_runs
    from hf_langspec.compare.suite import training_budget

    suite = load_suite(path)
    shared = {"data": {"train_files": ["train.jsonl"], "valid_files": ["valid.jsonl"]}, "tokenizer": "tokenizer",
              "sets": {}, "train_sizes": {}, "corpus_fingerprint": "-", "tokenizer_fingerprint": "-"}  # fmt: skip
    runs = plan_runs(suite, shared, threads=1)
    assert [(r.system, r.seed) for r in runs] == suite.runs and len(runs) == len(suite.systems) * len(suite.seeds)
    budgets = {training_budget(r.spec["config"]) for r in runs}
    assert len(budgets) == 1, budgets
    steps, batch = budgets.pop()
    assert steps >= 100_000 and batch >= 512  # the papers' budgets, not a CPU's


def test_a_prepared_shared_folder_runs_the_suite_without_its_corpus(tmp_path):
    """What a GPU machine gets (scripts/gpu_plan.py pack): the shared folder alone, the corpus files gone, gives
    the same data, sets and fingerprints; a changed sentence limit rebuilds the sets from the corpus."""
    from hf_langspec.compare.shared import prepare_shared

    corpus = tmp_path / "corpus"
    shutil.copytree(ROOT / "examples/suites/tiny", corpus)
    suite_file = tiny_suite(tmp_path)
    config = yaml.safe_load(suite_file.read_text())
    data = config["base"]["data"]
    data["train_files"], data["valid_files"] = [str(corpus / "train.jsonl")], [str(corpus / "valid.jsonl")]
    data["test_files"] = {k: str(corpus / Path(p).name) for k, p in data["test_files"].items()}
    suite_file.write_text(yaml.safe_dump(config))
    first = prepare_shared(load_suite(suite_file))
    shutil.rmtree(corpus)
    again = prepare_shared(load_suite(suite_file))
    assert again == first
    config["base"]["evaluation"]["max_sentences_per_direction"] = 3
    suite_file.write_text(yaml.safe_dump(config))
    with pytest.raises(FileNotFoundError):  # the sets must be cut anew, from the corpus
        prepare_shared(load_suite(suite_file))


def test_claims_are_judged_at_other_budgets_by_the_same_test(finished, tmp_path):
    """A suite reading seed 1 alone, with the finished two-seed suite as its other budget: at the other budget
    each claim carries exactly the other suite's own verdict and numbers (a claim it stated) or is marked as
    judged after the fact (one it did not), and the table says where the two verdicts differ."""
    raw = yaml.safe_load(finished["path"].read_text())
    raw["seeds"] = [1]
    extra = {"paper": "CLL", "system": "fcll", "group": "zero-shot", "metric": "bleu", "expect": "up",
             "effect": "zero-shot BLEU up"}  # fmt: skip
    raw["report"] = {"claims": [*raw["report"]["claims"], extra], "other_budgets": [str(finished["path"])]}
    path = tmp_path / "one_seed.yaml"
    path.write_text(yaml.safe_dump(raw))
    suite = load_suite(path)
    suite.results_dir_setting = finished["suite"].results_dir
    report = build_report(suite, write=False)
    [other] = report["other_budgets"]
    assert other["suite"] == finished["suite"].name and other["steps"] == finished["report"]["setting"]["steps"]
    stated, after = other["claims"]
    own = finished["report"]["claims"][0]  # what the finished suite's own report says of its claim
    assert (stated["verdict"], stated["delta"], stated["test"]) == (own["verdict"], own["delta"], own["test"])
    assert stated["stated_in_advance"] and not after["stated_in_advance"]
    base = finished["report"]["systems"]["baseline"]["groups"]
    assert other["baseline_bleu"]["xx-en"] == base["xx-en"]["bleu"]["mean"]
    assert after["delta"] == pytest.approx(
        finished["report"]["systems"]["fcll"]["groups"]["zero-shot"]["bleu"]["delta"]
    )
    text = markdown(report)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| zero-shot ")}
    for claim, there in zip(report["claims"], other["claims"], strict=True):
        row = rows[f"| {claim['effect']}"]
        assert f"{there['verdict']}" in row and claim["verdict"] in row
        assert row.endswith("| the same |" if claim["verdict"] == there["verdict"] else "| **differ** |")
    assert "(judged after the fact)" in rows["| zero-shot BLEU up"]


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("other_budgets", "message"),
    [
        ("bible11.yaml", r"\[report.other_budgets\]: a list of suite files, got 'bible11.yaml'"),
        (["nowhere.yaml"], r"\[report.other_budgets\]: nowhere.yaml is not a file \(a suite.s paths are relative"),
        (["SELF"], r"\[report.other_budgets\]: .*bad.yaml is this suite"),
        (["OTHER"], r"\[report.other_budgets\]: tiny has no report .*report.json.*--report-only"),
        (
            ["BROKEN"],
            r"\[report.other_budgets\]: \S+report.json is not a readable report \(JSONDecodeError.*--report-only",
        ),
    ],
)
def test_other_budgets_that_cannot_be_read_are_refused_before_anything_runs(tmp_path, other_budgets, message):
    other = tiny_suite(tmp_path, name="other.yaml", results_dir=str(tmp_path / "no_results"))
    suite = yaml.safe_load(tiny_suite(tmp_path).read_text())
    path = tmp_path / "bad.yaml"
    broken = tiny_suite(tmp_path, name="broken.yaml", results_dir=str(tmp_path / "broken_results"))
    (tmp_path / "broken_results").mkdir()
    (tmp_path / "broken_results" / "report.json").write_text('{"systems": ')
    named = {"SELF": str(path), "OTHER": str(other), "BROKEN": str(broken)}
    if isinstance(other_budgets, list):
        other_budgets = [named.get(p, p) for p in other_budgets]
    suite["report"]["other_budgets"] = other_budgets
    path.write_text(yaml.safe_dump(suite))
    with pytest.raises(ConfigError, match=message):
        compare(path, workers=2)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("here", "there", "same"),
    [
        ("holds", "holds", True),
        ("holds over sentences (one seed: no interval over seeds yet) (on 1 of 3 seeds so far)", "holds", True),
        ("holds (on 2 of 3 seeds so far)", "holds over sentences, not across seeds (the per-seed interval includes 0)",
         False),
        ("does not hold: the opposite direction, significant over sentences (one seed: no interval over seeds yet)",
         "does not hold (not significant)", False),
        ("same direction, not significant", "same direction, not significant", True),
    ],
)  # fmt: skip
def test_verdicts_at_two_budgets_agree_on_what_they_say_not_on_how_many_seeds_are_in(here, there, same):
    """A verdict still missing seeds is compared on what it says (holds, not significant, the opposite, over
    sentences only); the note on seeds still to come does not make two verdicts differ, and marks them "so far"."""
    from hf_langspec.compare.budgets import markdown_lines, same_verdict

    claim = {"system": "m", "group": "zero-shot", "metric": "bleu", "expect": "up", "effect": "m: up", "delta": 0.5}
    assert same_verdict(claim | {"verdict": here}, claim | {"verdict": there}) is same
    assert same_verdict(claim | {"verdict": here}, {"verdict": "not measured (runs missing)"}) is None
    base = {"groups": {"xx-en": {"bleu": {"mean": 10.0}}}}
    report = {"suite": "a", "baseline": "b", "systems": {"b": base}, "setting": {"steps": 12000, "batch": 32},
              "claims": [claim | {"verdict": here}],
              "other_budgets": [{"suite": "c", "steps": 3000, "batch": 32, "baseline_bleu": {"xx-en": 1.2},
                                 "claims": [claim | {"verdict": there, "stated_in_advance": False}]}]}  # fmt: skip
    row = markdown_lines(report)[-1]
    assert row.startswith("| m: up | +0.50: " + here) and "(judged after the fact)" in row
    provisional = "so far" in here or "one seed" in here  # seeds still to come
    assert row.endswith(("| the same" if same else "| **differ**") + (" so far |" if provisional else " |"))
    assert "a: 12,000 steps x 32, baseline BLEU xx-en 10.00 | c: 3,000 steps x 32" in markdown_lines(report)[3]


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("damaged", "content", "reason"),
    [("seed1.json", b'{"sets": {"supervised"', "not valid JSON"), ("seed1.outputs.json.gz", b"\x1f\x8b\x08garbage",
      "not a complete gzip file")],
)  # fmt: skip
def test_a_damaged_results_file_stops_the_report_with_one_line_naming_it(finished, tmp_path, damaged, content, reason):
    """`compare --report-only` over a results folder with a file cut short: the file and the fix, not a raw
    JSON or zlib error."""
    results = tmp_path / "results"
    shutil.copytree(finished["suite"].results_dir, results)
    (results / "baseline" / damaged).write_bytes(content)
    raw = yaml.safe_load(finished["path"].read_text())
    path = tmp_path / "copy.yaml"
    path.write_text(yaml.safe_dump({**raw, "results_dir": str(results)}))
    result = command_server.run("compare", "--suite", path, "--report-only", capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    line = [line for line in result.stderr.splitlines() if line.startswith("hf-langspec")][-1]
    assert f"baseline/{damaged} is damaged: {reason}" in line and "rerun `hf-langspec compare`" in line, line


def test_a_gpu_runs_test_sets_are_decoded_on_the_gpu(monkeypatch):
    """A run trained on a GPU decodes its test sets there (its saved model was reloaded onto the CPU before); a CPU
    run, or one with training.use_cpu, decodes on the CPU as it always did."""
    import torch

    from hf_langspec.compare.worker import decoding_device

    assert decoding_device({"training": {}}) == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "NVIDIA H200")
    assert decoding_device({"training": {}}) == "cuda"
    assert decoding_device({"training": {"use_cpu": True}}) == "cpu"


def test_a_report_reads_each_runs_off_target_flags_from_its_flags_file(finished, tmp_path, monkeypatch):
    """The compare stored every run's per-sentence flags (equal to the identifier's on the run's outputs); a report
    reads them instead of identifying again, and identifies again where the outputs changed."""
    from hf_langspec.compare import flag_cache
    from hf_langspec.evaluation.language_id import language_identifier, off_target_flags

    suite = finished["suite"]
    copy = tmp_path / "results"
    shutil.copytree(suite.results_dir, copy)
    moved = replace(suite, results_dir_setting=copy)
    for system, seed in suite.runs:
        stored = json.loads(gzip.decompress(flag_cache.flags_path(copy, system, seed).read_bytes()))
        outputs = json.loads(gzip.decompress(results_paths(copy, system, seed)[1].read_bytes()))
        identify = language_identifier(stored["stamp"]["identifier"])
        scores = json.loads(results_paths(copy, system, seed)[0].read_text())["sets"]
        measured = {(s, d) for s, directions in scores.items() for d, v in directions.items() if "off_target" in v}
        assert {(s, d) for s, directions in stored["flags"].items() for d in directions} == measured
        assert {s for s, _ in measured} == {"zero-shot", "eval:extra.multiway"}
        for set_name, direction in measured:
            hyps, text = outputs[set_name][direction], stored["flags"][set_name][direction]
            assert [c == "1" for c in text] == off_target_flags(hyps, direction.split("-")[1], identify)
    before = build_report(moved, write=False)
    assert any("p_value" in g.get("off_target", {}) for g in before["systems"]["fcll"]["groups"].values())

    def identified(*args, **kwargs):
        raise AssertionError("identified again")

    monkeypatch.setattr(flag_cache, "off_target_flags", identified)
    assert build_report(moved, write=False) == before
    path = results_paths(copy, "fcll", 1)[1]
    outputs = json.loads(gzip.decompress(path.read_bytes()))
    direction = next(iter(outputs["zero-shot"]))
    outputs["zero-shot"][direction][0] += " changed"
    path.write_bytes(gzip.compress(json.dumps(outputs).encode()))
    with pytest.raises(AssertionError, match="identified again"):
        build_report(moved, write=False)
    monkeypatch.undo()
    stale = flag_cache.flags_path(copy, "fcll", 1).read_bytes()
    build_report(moved, write=False)  # identifies, writes nothing
    assert flag_cache.flags_path(copy, "fcll", 1).read_bytes() == stale
    build_report(moved)
    stamp = json.loads(gzip.decompress(flag_cache.flags_path(copy, "fcll", 1).read_bytes()))["stamp"]
    assert stamp["outputs_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
