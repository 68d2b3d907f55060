"""The CPU runner's workers, forked from one process that imported the package once.

A worker started as `python -m hf_langspec.compare.worker` spends about 6 s importing torch, transformers and
datasets on two cores before its run starts: most of a short run (a suite's tiny check, a curve's points), and
every run pays it again. On CPUs `compare` starts one fork server instead (`python -m hf_langspec.compare.
fork_server`), which imports the worker once and forks a child per run: the child takes the run's environment,
working folder and log, and runs the worker's `main`, as the separate process did. The server never runs an
operation but one, so no thread pool, CUDA context or tokenizer state exists to be copied into a child (on GPUs
the runner keeps separate processes: a fork must not follow a CUDA initialisation). The one: where the runs will
measure off-target rates, it loads the language identifier's models first (lingua's take about 14 CPU seconds
in each process that detects; loaded one after another, they start no thread), and every child has them.

The runner (its side is `forked.ForkServer`) writes one JSON line per run to the server's input (`id`, `spec`,
`log`, `env`, `cwd`) and reads one per ended run (`id`, `exit`). The server ends with the runner however it ends
(its parent-death signal), and every child with the server (the worker's), so a killed runner leaves no run
training on; when its input closes, the server ends the children still running and exits. In `ps` a child shows
the server's command line.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import traceback
from typing import Any

from ..evaluation.language_id import load_models
from .shared import RUNNER_PID
from .worker import die_with_runner
from .worker import main as worker_main


def _run_child(request: dict[str, Any], server: int) -> None:
    """In the forked child: the run's folder, environment and log, then the worker; never returns."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"], **{RUNNER_PID: str(server)})  # the worker dies with the server
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # the server's input is the runner's pipe: not the run's
        os.close(null)
        code = worker_main([request["spec"]])
    except SystemExit as stop:  # the worker's own exits (its runner gone before it started among them)
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # anything else is the run's failure, said in its log
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(identifier: str | None = None) -> int:
    """The server's loop: fork a child per request line and report each child's exit code, until the input closes;
    then end the children still running (each releases its run and exits 143) and report them too. With
    `identifier` (the runs' language identifier, as `language_identifier` takes it), its models are loaded first,
    once for every child (`language_id.load_models`: no thread is started)."""
    server = os.getpid()
    if os.environ.get(RUNNER_PID):
        die_with_runner(int(os.environ[RUNNER_PID]), "compare: the fork server ended with its runner, and its runs")
    if identifier is not None:
        load_models(identifier)
    children: dict[int, str] = {}
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending, reading = b"", True
    while reading:
        if selector.select(timeout=0.2):
            data = os.read(0, 65536)
            reading = bool(data)
            *lines, pending = (pending + data).split(b"\n")
            for line in filter(None, lines):
                request = json.loads(line)
                sys.stdout.flush()  # nothing buffered here may be written again by a child
                pid = os.fork()
                if pid == 0:
                    _run_child(request, server)
                children[pid] = request["id"]
        _reap(children, block=False)
    for pid in children:
        os.kill(pid, signal.SIGTERM)
    _reap(children, block=True)
    return 0


def _reap(children: dict[int, str], block: bool) -> None:
    """Report (one JSON line each) the children that ended; with `block`, wait for every one."""
    for pid, name in list(children.items()):
        done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done:
            del children[pid]
            print(json.dumps({"id": name, "exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    sys.exit(serve(*sys.argv[1:2]))
