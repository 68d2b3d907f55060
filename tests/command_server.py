"""`hf-langspec` for the tests, forked from one process that imported the package once.

Every `hf-langspec` command a test runs as a user would (the documentation's pages, the command-line tests) was
a new interpreter that spent about 5 s importing torch, transformers and datasets before it parsed its arguments.
Here one server per test process imports the command line and every command's handler once and forks a child per
command; `shim` (the `hf-langspec` executable the tests call, in `bin_folder`) hands the server its arguments,
working folder, environment and its own stdin, stdout and stderr (passed over a Unix socket), and exits with the
command's exit code. So a command is still its own process with its own streams, folder, environment and exit
code, run by `hf_langspec_cli.main` as the console script runs it; only the interpreter's start is shared. The
console script itself is tested apart (tests/test_cli.py runs `python -m hf_langspec_cli`). `run-script SCRIPT
ARGS` (`CommandServer.run_script`) runs a Python script the same way, as `python SCRIPT ARGS` would.

The server never runs an operation before forking (no thread pool to copy into a child). A signal the shim gets
(SIGTERM, SIGINT, SIGHUP) is passed to its command, and a shim that dies ends its command with SIGTERM, so a
timeout or a stopped server in a test leaves nothing running. What the environment decides at import time is the
server's (the tests' environment), but for torch's thread count, which a command's OMP_NUM_THREADS sets.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SOCKET_VARIABLE = "HF_LANGSPEC_TEST_COMMAND_SERVER"
SCRIPT_RUNNER = "run-script"
EXIT_BYTES = 4
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def shim() -> int:
    """The `hf-langspec` executable: run `sys.argv[1:]` through the server, with this process's streams."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.connect(os.environ[SOCKET_VARIABLE])
    script = Path(sys.argv[0]).name == SCRIPT_RUNNER  # `run-script SCRIPT ARGS`: a Python script, not hf-langspec
    request = {"argv": sys.argv[1:], "script": script, "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
    for number in FORWARDED:
        signal.signal(number, lambda signum, frame: server.send(bytes([signum])))
    try:
        answer = server.recv(EXIT_BYTES)  # a forwarded signal's handler runs and the wait goes on (PEP 475)
    except ConnectionResetError:
        answer = b""
    if not answer:
        print("hf-langspec (tests): the command server ended before the command", file=sys.stderr)
        return 1
    code = int.from_bytes(answer, "big", signed=True)
    return 128 - code if code < 0 else code  # killed by a signal: a shell's 128 + its number


def _run_child(request: dict, streams: list[int], inherited: list[socket.socket]) -> None:
    """In the forked child: the shim's streams, folder and environment, then `hf-langspec`; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's own handler is not the command's
        for sock in inherited:  # other commands' connections: their ends must close when theirs do
            sock.close()
        for number, fd in enumerate(streams):
            os.dup2(fd, number)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # the thread count the server's import fixed, as asked
            import torch

            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        if request["script"]:  # as `python SCRIPT ARGS` runs it
            sys.argv = list(request["argv"])
            sys.path.insert(0, str(Path(sys.argv[0]).resolve().parent))
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        else:
            from hf_langspec_cli import main

            code = main(request["argv"])
    except SystemExit as stop:  # argparse's exits, a handler's sys.exit
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:  # what the interpreter would print for an uncaught exception
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def preload() -> None:
    """Import what the commands import: the command line, the package and every command's handler."""
    import hf_langspec.cli  # noqa: F401  (the package's side: torch, transformers, the Auto classes)
    from hf_langspec_cli import COMMANDS

    for command in COMMANDS:
        command.load_handler()


def serve(path: str) -> int:
    """Fork a child per connection (one command each), answer each its exit code; end with the parent process."""
    preload()
    parent, stopping = os.getppid(), []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while os.getppid() == parent and not stopping:
        for key, _ in selector.select(timeout=0.05):
            if key.fileobj is listener:
                connection, _ = listener.accept()
                message, streams, _, _ = socket.recv_fds(connection, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    _run_child(json.loads(message), streams, [listener, connection, *children.values()])
                for fd in streams:
                    os.close(fd)
                children[pid] = connection
                selector.register(connection, selectors.EVENT_READ, pid)
            else:
                said = key.fileobj.recv(16)
                os.kill(key.data, said[0] if said else signal.SIGTERM)  # a signal to pass on, or the shim died
                if not said:
                    selector.unregister(key.fileobj)
        _reap(children, selector, block=False)
    for pid in children:
        os.kill(pid, signal.SIGTERM)
    _reap(children, selector, block=True)
    return 0


def _reap(children: dict[int, socket.socket], selector: selectors.BaseSelector, block: bool) -> None:
    """Answer each shim whose command ended its exit code; with `block`, wait for every command."""
    for pid, connection in list(children.items()):
        done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done:
            del children[pid]
            if connection in {key.fileobj for key in selector.get_map().values()}:
                selector.unregister(connection)
            with contextlib.suppress(OSError):  # the shim may be gone
                connection.send(os.waitstatus_to_exitcode(status).to_bytes(EXIT_BYTES, "big", signed=True))
            connection.close()


class CommandServer:
    """A started server and its `bin_folder`, whose `hf-langspec` is the shim."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.bin_folder = folder / "bin"
        self.bin_folder.mkdir(parents=True)
        self.socket_path = str(folder / "server.sock")
        for name in ("hf-langspec", SCRIPT_RUNNER):
            executable = self.bin_folder / name
            executable.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})"
                                  "\nfrom command_server import shim\nsys.exit(shim())\n")  # fmt: skip
            executable.chmod(0o755)
        self.executable = str(self.bin_folder / "hf-langspec")
        self.process = subprocess.Popen([sys.executable, __file__, self.socket_path], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, text=True)  # fmt: skip
        ready = self.process.stdout.readline()
        assert ready == "ready\n", f"the command server did not start (exit {self.process.poll()})"

    def environment(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """`environ` (default: this process's) with the shim first on PATH and the server's address."""
        environ = dict(os.environ if environ is None else environ)
        path = f"{self.bin_folder}:{environ.get('PATH', '')}"
        return {**environ, "PATH": path, SOCKET_VARIABLE: self.socket_path}

    def run(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """`hf-langspec ARGS` as `subprocess.run` runs it (`kwargs` are its own; `env` gets the server's address)."""
        kwargs["env"] = self.environment(kwargs.get("env"))
        return subprocess.run([self.executable, *map(str, args)], **kwargs)

    def run_script(self, script: str | Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """`python SCRIPT ARGS`, forked, as `subprocess.run` runs it."""
        kwargs["env"] = self.environment(kwargs.get("env"))
        return subprocess.run([str(self.bin_folder / SCRIPT_RUNNER), str(script), *map(str, args)], **kwargs)

    def close(self) -> None:
        """Stop the server: commands still running end with SIGTERM."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


_shared: list[CommandServer] = []


def shared() -> CommandServer:
    """This process's server, started at its first use and stopped at its exit."""
    if not _shared:
        _shared.append(CommandServer(Path(tempfile.mkdtemp(prefix="hf-langspec-commands-"))))
        atexit.register(_shared[0].close)
    return _shared[0]


def run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """`hf-langspec ARGS` through this process's server, as `subprocess.run` runs a command."""
    return shared().run(*args, **kwargs)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
