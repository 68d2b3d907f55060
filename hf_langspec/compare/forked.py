"""The runner's side of the CPU workers' fork server (compare/fork_server.py, which says why): start it, ask it
for a run, learn each run's exit code. This module does not import the worker: the server does, once."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path


class ForkServer:
    """The runner's side: start the server, ask it for a run, learn each run's exit code (`ForkedWorker.poll`)."""

    def __init__(self, env: dict[str, str], identifier: str | None = None):
        """`identifier`: the language identifier the runs will detect with (its names joined by "+"), whose models
        the server loads once for all of them; None when they detect nothing."""
        command = [sys.executable, "-m", "hf_langspec.compare.fork_server", *([identifier] if identifier else [])]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1
        )
        self.exits: dict[str, int] = {}
        self._reader = threading.Thread(target=self._read_exits, daemon=True)
        self._reader.start()

    def _read_exits(self) -> None:
        for line in self.process.stdout:
            ended = json.loads(line)
            self.exits[ended["id"]] = ended["exit"]

    def start(self, name: str, spec: Path, log: Path, env: dict[str, str]) -> ForkedWorker:
        request = {"id": name, "spec": str(spec), "log": str(log), "env": env, "cwd": os.getcwd()}
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError:  # the server has ended (its error is on the runner's stderr): this run fails, said as such
            self.exits[name] = self.process.wait() or 1
        return ForkedWorker(self, name)

    def exit_code(self, name: str) -> int | None:
        """The run's exit code once it has ended; 1 for a run the server ended without reporting (it died first)."""
        if name not in self.exits and self.process.poll() is not None:  # its children ended with it
            self._reader.join(timeout=5)  # the lines it wrote before it ended
            return self.exits.get(name, 1)
        return self.exits.get(name)

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            self.process.wait()
        self._reader.join(timeout=5)


class ForkedWorker:
    """One run's child of the fork server, polled as a `subprocess.Popen` is."""

    def __init__(self, server: ForkServer, name: str):
        self.server, self.name, self.returncode = server, name, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.name)
        return self.returncode


__all__ = ["ForkServer", "ForkedWorker"]
