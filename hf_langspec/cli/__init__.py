"""`hf-langspec`: the command line.

hf-langspec data bible --output-dir data/bible --languages en,de,fr
hf-langspec data hub opus100 --directions en-de,de-en --split train --output data/opus/train.jsonl
hf-langspec data local corpus.de --tgt-path corpus.en --src-lang de --tgt-lang en --output data/local.jsonl
hf-langspec train-tokenizer --train data/bible/train.jsonl --output-dir tok --vocab-size 8000
hf-langspec export --model runs/bible-baseline/model --src-lang en --tgt-lang de --output-dir serve/en-de
hf-langspec export --model runs/bible-baseline/model --directions en-de,de-en --output-dir serve/bible
hf-langspec serve --export serve/bible --port 8080
hf-langspec compare --suite examples/suites/bible3.yaml --workers 2
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from ..data.cache import OPEN_WORK_FOLDERS
from ..environment import environment_problem
from . import data_commands, model_commands, sharing_commands, training_commands
from .registry import COMMANDS, GROUP_HELP

# the order --help lists the commands in: corpora, training, using a model, sharing it
COMMAND_MODULES = (data_commands, training_commands, model_commands, sharing_commands)


# the errors the package raises for bad input or an unreachable Hub, each with the fix in its message, and the
# system's for a path of the wrong kind or one this user may not write (its errno message names it)
KNOWN_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
                RuntimeError, ConnectionError)  # fmt: skip


class OneLineErrors(argparse.ArgumentParser):
    """argparse, with a usage error as one line that points at --help instead of the whole usage text, and list
    options that accumulate: `--set a=1 --set b=2` keeps both (argparse's default for `nargs="+"` keeps the last
    list alone, without a word)."""

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        if kwargs.get("nargs") == "+" and "action" not in kwargs and names and names[0].startswith("-"):
            kwargs["action"] = "extend"
        return super().add_argument(*names, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `hf-langspec` parser: every command registered with `@command`, module by module (COMMAND_MODULES)."""
    parser = OneLineErrors(
        prog="hf-langspec", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, Any] = {}
    modules = [module.__name__ for module in COMMAND_MODULES]
    for name, parser_kwargs, arguments, handler in sorted(COMMANDS, key=lambda c: modules.index(c[3].__module__)):
        group, _, source = name.partition(" ")
        if source:  # `data bible`: a source of the `data` command
            if group not in groups:
                groups[group] = commands.add_parser(group, help=GROUP_HELP[group]).add_subparsers(
                    dest="source", required=True
                )
            sub = groups[group].add_parser(source, **parser_kwargs)
        else:
            sub = commands.add_parser(name, **parser_kwargs)
        arguments(sub)
        sub.set_defaults(func=handler)
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        with stop_cleanly_on_sigterm(args.command):  # `serve` puts uvicorn's own handler in place while it serves
            args.func(args)
    except KeyboardInterrupt:
        print(f"hf-langspec {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        # the machine (a full disk, a size limit, memory) before anything else: whatever library raised it, it is
        # not a bad input nor a bug
        problem = environment_problem(err)
        if problem is not None:
            print(f"hf-langspec {args.command}: error: {problem}", file=sys.stderr)
            return 2
        if isinstance(err, KNOWN_ERRORS):
            print(f"hf-langspec {args.command}: error: {err}", file=sys.stderr)
            return 2
        # anything else is a bug: its traceback, and where to report it
        traceback.print_exc()
        versions = ", ".join(f"{n} {metadata.version(n)}" for n in ("hf_langspec", "torch", "transformers"))
        print(f"hf-langspec {args.command}: this is a bug, not a bad input; please report it with the command "
              f"line and the traceback above ({versions}).", file=sys.stderr)  # fmt: skip
        return 1
    return 0
