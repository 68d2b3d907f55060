"""Running an `hf-langspec` command (its arguments are parsed by hf_langspec_cli, which loads no torch): SIGTERM
ends its worker processes and temporary folders, and an error is one line naming the fix, or a bug's traceback."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from ..data.cache import OPEN_WORK_FOLDERS
from ..environment import environment_problem

# the errors the package raises for bad input or an unreachable Hub, each with the fix in its message, and the
# system's for a path of the wrong kind or one this user may not write (its errno message names it)
KNOWN_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
                RuntimeError, ConnectionError)  # fmt: skip


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), read from Linux /proc; [] elsewhere."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parents.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        found.append(child := todo.pop())
        todo += parents.get(child, [])
    return found


def _stop_on_sigterm(pid: int, command: str) -> Any:
    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != pid:  # a forked worker (a `map` pool's) inherits the handler: it dies as it always did
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        _stop_now(command)

    return handler


def _stop_now(command: str) -> None:
    """SIGTERM in the main process: end every process below this one (tokenizing workers, the pool's manager,
    `compare`'s workers), remove the cache's open work folders, say so, and exit with 143.

    Done here rather than by raising an exception to unwind: Python drops an exception raised where it cannot
    propagate (a fork hook of a pool starting its workers, a finalizer), and a worker forked at that moment was left
    running, holding a lock, forever (tried: 1 run in 8). What unwinding would have done is small: checkpoints are
    verified before a resume and set aside when incomplete, the run lock of a process that is gone is taken over,
    and files are written through renames."""
    # SIGTERM first (a `compare` worker saves nothing half and releases its run's lock), then SIGKILL for what is
    # left after a few seconds (a worker forked while the signal came may be stuck on a lock it will never get)
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
        for child in _descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(child, sig)
        deadline = time.monotonic() + wait
        while _descendants(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)
    for folder in list(OPEN_WORK_FOLDERS):
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"\nhf-langspec {command}: terminated (SIGTERM); its worker processes ended and temporary files removed",
        file=sys.stderr,
        flush=True,
    )  # fmt: skip (a new line: a progress bar may be on this one)
    os._exit(128 + signal.SIGTERM)


@contextlib.contextmanager
def stop_cleanly_on_sigterm(command: str = "") -> Any:
    """Within the block, SIGTERM in this process ends its worker processes and removes its temporary folders before
    it exits (`_stop_now`; the previous handler is put back after); processes forked meanwhile die of it as before.
    Called from another thread (where no handler can be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm(os.getpid(), command))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(command: str, handler: Callable[[argparse.Namespace], None], args: argparse.Namespace) -> int:
    """Run `handler(args)` for `hf-langspec COMMAND`: 0 when it succeeds, 2 with one line for a bad input or the
    machine (a full disk, memory), 130 when interrupted, 1 with the traceback for a bug."""
    try:
        with stop_cleanly_on_sigterm(command):  # `serve` puts uvicorn's own handler in place while it serves
            handler(args)
    except KeyboardInterrupt:
        print(f"hf-langspec {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        # the machine (a full disk, a size limit, memory) before anything else: whatever library raised it, it is
        # not a bad input nor a bug
        problem = environment_problem(err)
        if problem is not None:
            print(f"hf-langspec {command}: error: {problem}", file=sys.stderr)
            return 2
        if isinstance(err, KNOWN_ERRORS):
            print(f"hf-langspec {command}: error: {err}", file=sys.stderr)
            return 2
        # anything else is a bug: its traceback, and where to report it
        traceback.print_exc()
        versions = ", ".join(f"{n} {metadata.version(n)}" for n in ("hf_langspec", "torch", "transformers"))
        print(f"hf-langspec {command}: this is a bug, not a bad input; please report it with the command "
              f"line and the traceback above ({versions}).", file=sys.stderr)  # fmt: skip
        return 1
    return 0
