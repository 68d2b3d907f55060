"""SIGTERM ends a process of the package at once: the processes below it, then what it registered to undo (its run
locks, its temporary folders), then exit 143.

Done inside the signal handler rather than by raising an exception to unwind the stack: Python drops an exception
raised where it cannot propagate (a finalizer, a fork hook of a pool starting its workers, a weakref callback) and
the process goes on as if no signal had come. Seen: a `compare` worker asked to stop trained its run to the end and
exited 0; a worker forked at that moment was left running, holding a lock, forever. What unwinding would have done is
small: checkpoints are verified before a resume and set aside when incomplete, results are written through renames,
and what must not outlive the process registers itself here (`AT_STOP`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

# what SIGTERM undoes before the process exits (a held run lock's release, the open work folders' removal);
# each registers itself while it holds something and leaves when it is done
AT_STOP: set[Callable[[], None]] = set()


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, their children, ...), read from Linux /proc; [] elsewhere. A zombie
    (ended, not yet reaped: a handler does not reap) is left out, so waiting for the list to empty ends when they end."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
            if state != "Z":
                parents.setdefault(int(parent), []).append(int(stat.parent.name))
    found, todo = [], list(parents.get(pid, []))
    while todo:
        found.append(child := todo.pop())
        todo += parents.get(child, [])
    return found


def stop_now(message: str) -> NoReturn:
    """End the processes below this one (SIGTERM, then SIGKILL for what is left after 3 s: one forked while the
    signal came may wait on a lock it will never get), run `AT_STOP`, write `message` and exit with 143."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0)):
        for child in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(child, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and descendants(os.getpid()):  # after SIGKILL: no wait, no scan
            time.sleep(0.05)
    for undo in list(AT_STOP):
        with contextlib.suppress(Exception):
            undo()
    for stream in (sys.stdout, sys.stderr):  # what the process printed before; a write it interrupted may refuse
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):  # unbuffered: the interrupted code may hold the stream's buffer
        os.write(2, f"\n{message}\n".encode())  # a new line first: a progress bar may be on this one
    os._exit(128 + signal.SIGTERM)


def stop_on_sigterm(message: str) -> Callable[[int, Any], None]:
    """A SIGTERM handler: `stop_now(message)` in this process; a process forked from it later (a pool's or a data
    loader's worker) that inherits the handler dies of the signal as it would without one."""
    pid = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        stop_now(message)

    return handler


__all__ = ["AT_STOP", "descendants", "stop_now", "stop_on_sigterm"]
