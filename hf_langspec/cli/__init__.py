"""Running an `hf-langspec` command (its arguments are parsed by hf_langspec_cli, which loads no torch): SIGTERM
ends its worker processes and temporary folders, and an error is one line naming the fix, or a bug's traceback."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from importlib import metadata
from typing import Any

from ..environment import environment_problem
from ..stopping import stop_on_sigterm

# the errors the package raises for bad input or an unreachable Hub, each with the fix in its message, and the
# system's for a path of the wrong kind or one this user may not write (its errno message names it)
KNOWN_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
                RuntimeError, ConnectionError)  # fmt: skip


@contextlib.contextmanager
def stop_cleanly_on_sigterm(command: str = "") -> Any:
    """Within the block, SIGTERM in this process ends its worker processes and removes its temporary folders before
    it exits (`stopping.stop_now`; the previous handler is put back after); processes forked meanwhile die of it as
    before. Called from another thread (where no handler can be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    message = f"hf-langspec {command}: terminated (SIGTERM); its worker processes ended and temporary files removed"
    previous = signal.signal(signal.SIGTERM, stop_on_sigterm(message))
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
