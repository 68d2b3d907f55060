"""Interrupted work leaves nothing behind (issue 59, item 2): SIGTERM while the training set is tokenized by several
processes ends those processes and removes the cache's temporary folder; a folder left by a process killed outright
is removed by the next build in its place."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_langspec.data.cache import remove_abandoned, work_folder


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended while listed
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def temporary_folders(cache: Path) -> list[Path]:
    return [p for part in ("corpora", "prepared") if (cache / part).is_dir() for p in (cache / part).glob(".*")]


@pytest.mark.slow
@pytest.mark.reliability
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")
def test_sigterm_while_tokenizing_ends_the_workers_and_removes_the_temporary_folder(tmp_path):
    """Before: the process ended at SIGTERM with its two `map` workers left running (0.8 GB each at OPUS-100's
    size, forever) and the half-written entry left in the cache."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    with open(tmp_path / "train.jsonl", "w") as handle:
        for _ in range(150_000):
            src, tgt = " ".join(rng.choices(words, k=12)), " ".join(rng.choices(words, k=12))
            handle.write(json.dumps({"src_lang": "en", "tgt_lang": "de", "src": src, "tgt": tgt}) + "\n")
    (tmp_path / "test.jsonl").write_text(
        json.dumps({"src_lang": "en", "tgt_lang": "de", "src": "w1", "tgt": "w2"}) + "\n"
    )
    cache = tmp_path / "cache"
    config = tmp_path / "run.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'run'}\n"
        f"data: {{train_files: [{tmp_path / 'train.jsonl'}], test_files: {{supervised: {tmp_path / 'test.jsonl'}}}, "
        f"num_proc: 2, cache_dir: {cache}}}\n"
        "tokenizer: {vocab_size: 400, sample_size: 2000}\n"
        "model: {d_model: 32, encoder_layers: 1, decoder_layers: 1, encoder_attention_heads: 2, "
        "decoder_attention_heads: 2, encoder_ffn_dim: 64, decoder_ffn_dim: 64}\n"
        "training: {max_steps: 1, use_cpu: true, report_to: none}\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "hf_langspec.cli", "train", "--config", str(config)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    deadline, workers = time.monotonic() + 300, []
    try:
        while time.monotonic() < deadline and process.poll() is None:  # the map's workers, in the cache's work folder
            building = list((cache / "prepared").glob(".*-pid*")) if (cache / "prepared").is_dir() else []
            if building:
                workers = children(process.pid)
                if workers:
                    break
            time.sleep(0.02)
        assert workers, "the tokenizing workers were not seen (the map ended first?)"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM, (building, workers, stderr[-2000:])
    assert stderr.strip().splitlines()[-1] == (
        "hf-langspec train: terminated (SIGTERM); its worker processes ended and temporary files removed"
    )
    assert [pid for pid in workers if alive(pid)] == []
    assert temporary_folders(cache) == []


def test_a_temporary_folder_of_a_killed_process_is_removed_by_the_next_build(tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(finished.stdout)  # a process that has ended: its folder is abandoned
    abandoned = tmp_path / f".entry-pid{dead}-x1"
    live = tmp_path / f".entry-pid{os.getpid()}-x2"  # this process's own build, still running
    for folder in (abandoned, live):
        (folder / "part").mkdir(parents=True)
    (tmp_path / "published-entry").mkdir()
    work = work_folder(tmp_path, "entry")
    assert not abandoned.exists() and live.is_dir() and work.is_dir() and (tmp_path / "published-entry").is_dir()
    assert f"-pid{os.getpid()}-" in work.name
    assert remove_abandoned(tmp_path) == []


_FINALIZER_STOPPED = r"""
import contextlib, os, signal, sys, time
from pathlib import Path

from hf_langspec.training.run_guard import RunLock

if sys.argv[2] == "worker":
    from hf_langspec.compare.worker import die_with_runner

    die_with_runner(os.getppid())
    stopping = contextlib.nullcontext()
else:
    from hf_langspec.cli import stop_cleanly_on_sigterm

    stopping = stop_cleanly_on_sigterm("train")


class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10_000):  # the handler runs within these lines: inside a finalizer, which drops exceptions
            pass


with stopping, RunLock(Path(sys.argv[1])):
    import subprocess

    print(subprocess.Popen(["sleep", "60"]).pid, flush=True)  # a process of its own: the stop ends it too
    Finalized()
    time.sleep(3)
print("went on after SIGTERM")
"""


@pytest.mark.reliability
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")
@pytest.mark.parametrize("handler", ["worker", "command"])
def test_sigterm_inside_a_finalizer_ends_the_process_and_releases_its_run_lock(tmp_path, handler):
    """Before: the compare worker's SIGTERM raised SystemExit to unwind, and one that landed in a finalizer was
    dropped ("Exception ignored in ..."): the worker trained its run to the end and exited 0 after its runner had
    asked it to stop. A `compare` worker and an `hf-langspec` command both end at SIGTERM wherever it lands: exit
    143, their run lock released, the processes they started ended, nothing after the signal run."""
    from hf_langspec.training.run_guard import LOCK_FILE

    done = subprocess.run([sys.executable, "-c", _FINALIZER_STOPPED, str(tmp_path), handler], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert "went on" not in done.stdout and "Exception ignored" not in done.stderr, done.stderr[-2000:]
    assert "terminated (SIGTERM)" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the lock and its private file are gone
    assert not (tmp_path / LOCK_FILE).exists()
    child, deadline = int(done.stdout.split()[0]), time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:  # init reaps it once it has ended
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists()
