"""One (system, seed) of a suite, in its own process: `python -m hf_langspec.compare.worker SPEC.json`, or (on
CPUs) a child forked by the runner's fork server, which calls `main` with the spec (compare/fork_server.py).

Training is the ordinary experiment (`run_experiment`: resumable from its checkpoints); evaluation
loads the saved model and scores it on the suite's shared evaluation sets. The results file is
written last and atomically, so a results file exists only for a finished run; a run that has one
but lacks an evaluation set asked for later is evaluated on that set only.
"""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM

from ..evaluation import evaluate_model
from ..evaluation.evaluate import direction_off_target
from ..evaluation.expected import library_versions
from ..evaluation.language_id import language_identifier
from ..files import read_json, write_atomic
from ..modeling.modeling_langspec import added_parameters
from ..stopping import stop_on_sigterm
from ..tokenization import LangSpecTokenizer
from ..training.cpu_allocator import allocator_setting
from ..training.experiment import run_experiment
from .shared import RUNNER_PID, read_run_file, results_paths, run_identity

RESULTS_FORMAT = 1
# the worker's last line at SIGTERM (its log is the run's compare.log)
STOPPED = "compare worker: terminated (SIGTERM); the run resumes from its last complete checkpoint"


def package_commit() -> str | None:
    """The git commit of the package's source tree, when it is a checkout (None for an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "hf_langspec"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() + ("+modified" if dirty else "")


# what a results file keeps of `evaluate_model`'s scores per direction
SCORE_KEYS = ("bleu", "chrf", "chrfpp", "length_ratio", "degenerate", "sentences", "off_target")


def training_device(config: dict[str, Any]) -> str:
    """Where the run trained: the GPU's name, or "cpu" (no GPU, or `training.use_cpu`)."""

    if config.get("training", {}).get("use_cpu") or not torch.cuda.is_available():
        return "cpu"
    return torch.cuda.get_device_name(0)


def count_parameters(model: Any) -> dict[str, int]:
    """Total parameters and those the method adds to the plain backbone (its modules at the insertion points, the
    languages' layers less the shared one at an LSL position)."""

    return {"total": sum(p.numel() for p in model.parameters()), "added": added_parameters(model)}


def decoding_device(config: dict[str, Any]) -> str:
    """Where the run's test sets are decoded: on the GPU it trained on (before, a GPU run's saved model was reloaded
    onto the CPU and decoded there, its 6,500 sentences of bible11_gpu beside 8 workers' training), else the CPU."""
    return "cuda" if training_device(config) != "cpu" else "cpu"


def evaluate_run(spec: dict[str, Any], sets: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Translate and score the given evaluation sets with the run's saved model (`evaluate_model`, one set at a
    time, so that a direction in two sets keeps both scores and decoding is timed per set)."""

    model_dir = Path(spec["run_dir"]) / "model"
    tokenizer = LangSpecTokenizer.from_pretrained(model_dir)
    device = decoding_device(
        spec.get("config", {})
    )  # the curve's spec has none: its run trained where torch found a GPU
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval().to(device)
    tokenizer.check_model(model)
    if tokenizer.vocabulary_fingerprint() != spec["tokenizer_fingerprint"]:
        raise RuntimeError(f"{model_dir} was saved with another vocabulary than the suite's shared tokenizer.")
    evaluation = spec["evaluation"]
    measure_off_target = evaluation.get("off_target", "zero-shot")
    later = measure_off_target and spec.get("off_target_later")  # measured from the saved outputs elsewhere
    identify = language_identifier(evaluation.get("language_identifier")) if measure_off_target and not later else None
    pending = []
    directions: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    signatures: dict[str, str] = {}
    sentences, seconds = 0, 0.0
    for set_name in sets:
        rows = [row for rows in spec["sets"][set_name].values() for row in rows]
        off_target = measure_off_target is True or measure_off_target == set_name or set_name.startswith("eval:")
        if off_target and later:
            pending.append(set_name)
            off_target = False
        start = time.perf_counter()
        with torch.inference_mode():
            results = evaluate_model(
                model, tokenizer, {set_name: rows}, batch_size=evaluation.get("batch_size", 32),
                num_beams=evaluation.get("num_beams", 4), max_new_tokens=evaluation.get("max_new_tokens", 128),
                off_target=set_name if off_target else False, identifier=identify, show_progress=False,
            )  # fmt: skip
        seconds += time.perf_counter() - start
        sentences += len(rows)
        directions[set_name] = {
            direction: {k: v for k, v in results["directions"][direction].items() if k in SCORE_KEYS}
            for direction in spec["sets"][set_name]
        }
        outputs[set_name] = {direction: results["hypotheses"][direction] for direction in spec["sets"][set_name]}
        signatures = {k: v for k, v in next(iter(results["directions"].values())).items() if k.endswith("_signature")}
    decoding = {
        "sentences": sentences,
        "seconds": seconds,
        "num_beams": evaluation.get("num_beams", 4),
        "device": device,
    }
    meta = {
        "signatures": signatures,
        "language_identifier": identify.name if identify else None,
        **({"off_target_pending": pending} if pending else {}),
        "parameters": count_parameters(model),
        # the shape trained, so a report names it without the checkpoint a pretrained start read it from
        "shape": {key: getattr(model.config, key) for key in ("d_model", "encoder_layers", "decoder_layers")},
        "decoding": decoding,
    }
    return directions, outputs, meta


def run(spec: dict[str, Any]) -> None:
    """Train (or resume, or skip when trained) and evaluate one run; write its results file last."""

    torch.set_num_threads(spec["threads"])
    commit = package_commit()  # the code this process runs: the checkout may move on while it trains
    scores_path, outputs_path = results_paths(Path(spec["results_dir"]), spec["system"], spec["seed"])
    previous = read_run_file(scores_path) if scores_path.exists() else None
    if previous is None or run_identity(previous["config"]) != run_identity(spec["config"]):
        print(f"training {spec['system']} seed {spec['seed']} in {spec['run_dir']}", flush=True)
        processes = training_commits(Path(spec["run_dir"]), commit)
        run_experiment(spec["config"])
        trained_here = read_json(Path(spec["run_dir"]) / "run_info.json")["trained"]
        processes[-1]["steps"] = sum(stage.get("steps_this_process", 0) for stage in trained_here)
        write_atomic(Path(spec["run_dir"]) / COMMITS_FILE, json.dumps(processes, indent=1).encode())
        previous = None
    run_info = read_json(Path(spec["run_dir"]) / "run_info.json")
    done = set(previous["sets"]) if previous else set()
    missing = [name for name in spec["sets"] if name not in done]
    directions, outputs, meta = evaluate_run(spec, missing) if missing else ({}, {}, {})
    if previous is not None:
        directions = {**previous["sets"], **directions}
        outputs = {**read_run_file(outputs_path, gzipped=True), **outputs}
        kept = ("signatures", "language_identifier", "parameters", "shape", "decoding")
        pending = previous.get("off_target_pending", []) + meta.get("off_target_pending", [])
        meta = {
            **{k: previous[k] for k in kept if k in previous},
            **meta,
            **({"off_target_pending": pending} if pending else {}),
        }
    trained = run_info["trained"]
    if "parameters" in meta and "trainable" in run_info.get("parameters", {}):  # a pretrained start freezes some
        meta["parameters"] = {**meta["parameters"], "trainable": run_info["parameters"]["trainable"]}
    result = {
        "format": RESULTS_FORMAT,
        "suite": spec["suite"],
        "system": spec["system"],
        "seed": spec["seed"],
        "config": spec["config"],
        "corpus_fingerprint": spec["corpus_fingerprint"],
        "tokenizer_fingerprint": spec["tokenizer_fingerprint"],
        "lang_tag_style": spec["config"].get("tokenizer", {}).get("lang_tag_style", "source"),
        "package_commit": previous["package_commit"] if previous else commit,
        # every training process's commit, in order, with the steps it trained (none: it was interrupted)
        "package_commits": previous.get("package_commits") if previous else _read_commits(Path(spec["run_dir"])),
        "versions": previous.get("versions") if previous else library_versions(),
        "train_sizes": spec["train_sizes"],
        "training": {
            "stages": trained,
            "steps": sum(stage.get("steps", 0) for stage in trained),
            "seconds": sum(stage.get("seconds", 0.0) for stage in trained),
            "steps_timed": sum(stage.get("steps_this_process", 0) for stage in trained),
            "input_tokens_timed": sum(stage.get("input_tokens_this_process", 0) for stage in trained),
            "threads": spec["threads"],
            "device": previous["training"].get("device", "cpu") if previous else training_device(spec["config"]),
            **_allocator(previous),
            "final_loss": trained[-1].get("final_loss") if trained else None,  # the last stage's last logged loss
        },
        **meta,
        "sets": directions,
    }
    write_atomic(outputs_path, gzip.compress(json.dumps(outputs, ensure_ascii=False).encode(), mtime=0))
    write_atomic(scores_path, (json.dumps(result, indent=1, ensure_ascii=False) + "\n").encode())


COMMITS_FILE = "package_commits.json"


def training_commits(run_dir: Path, commit: str | None) -> list[dict[str, Any]]:
    """The run's training processes so far with this one added: each the package commit it loaded (a run resumed
    from its checkpoints trains under several), recorded before training so an interrupted process is listed."""
    path = run_dir / COMMITS_FILE
    processes = [
        *_read_commits(run_dir),
        {"commit": commit, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(processes, indent=1).encode())
    return processes


def _read_commits(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / COMMITS_FILE
    return json.loads(path.read_text()) if path.exists() else []


def _allocator(previous: dict[str, Any] | None) -> dict[str, str]:
    """`{"allocator": ...}`: how the CPU's malloc was set where this process trained (a re-evaluation keeps the
    training process's record); empty for a GPU run and for results that predate the record."""
    setting = previous["training"].get("allocator") if previous else allocator_setting()
    return {"allocator": setting} if setting else {}


def fill_pending_off_target(results_dir: Path, evaluation: dict[str, Any]) -> None:
    """Measure the off-target rates that runs made with `--off-target-later` left pending (a GPU machine without
    the suite's language identifier), from their saved outputs, and rewrite their results files atomically; where
    the identifier is not installed here either, say so in a line and leave them pending."""

    waiting = sorted(p for p in results_dir.glob("*/seed*.json") if "off_target_pending" in read_run_file(p))
    if not waiting:
        return
    try:
        identify = language_identifier(evaluation.get("language_identifier"))
    except ImportError as err:
        print(f"{len(waiting)} run(s) await their off-target rates ({err}); the report leaves them out until then.")
        return
    for scores_path in waiting:
        result = read_run_file(scores_path)
        _, outputs_path = results_paths(results_dir, result["system"], result["seed"])
        outputs = read_run_file(outputs_path, gzipped=True)
        for set_name in result.pop("off_target_pending"):
            for direction, scores in result["sets"][set_name].items():
                measured = direction_off_target(outputs[set_name][direction], direction, identify)
                if measured is not None:
                    scores["off_target"] = measured[0]
        result["language_identifier"] = identify.name
        write_atomic(scores_path, (json.dumps(result, indent=1, ensure_ascii=False) + "\n").encode())
        print(f"off-target rates measured for {result['system']} seed {result['seed']} ({identify.name})")


def die_with_runner(runner_pid: int, stopped: str = STOPPED) -> None:
    """End this worker when its runner ends, however it ends (a SIGKILL of the runner alone included).

    Linux's parent-death signal sends SIGTERM on the runner's death, and SIGTERM ends the worker at once
    (`stopping.stop_now`: its own processes, its run's lock released, exit 143), so a resumed compare finds a clean
    state (the run resumes from its last complete checkpoint). Elsewhere the runner's own cleanup is all there is.
    """
    signal.signal(signal.SIGTERM, stop_on_sigterm(stopped))
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return
    pr_set_pdeathsig = 1
    prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != runner_pid:  # the runner died before the signal was asked for
        sys.exit(128 + signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if os.environ.get(RUNNER_PID):
        die_with_runner(int(os.environ[RUNNER_PID]))
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print(f"usage: python -m hf_langspec.compare.worker SPEC.json (got {argv}); `hf-langspec compare` writes "
              "the spec and starts the workers.", file=sys.stderr)  # fmt: skip
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    try:
        run(spec)
    except Exception as err:  # the runner reports this line and goes on with the other runs
        traceback.print_exc()
        print(f"RUN FAILED: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
