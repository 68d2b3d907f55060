"""`hf-langspec` for the tests, forked from one process that imported the package once.

Every `hf-langspec` command a test runs as a user would (the documentation's pages, the command-line tests) was
a new interpreter that spent about 5 s importing torch, transformers and datasets before it parsed its arguments.
Here a server imports the command line and every command's handler once and forks a child per command; `shim`
(the `hf-langspec` executable the tests call, in `bin_folder()`) hands the server its arguments, working folder,
environment and its own stdin, stdout and stderr (passed over a Unix socket), and exits with the command's exit
code. So a command is still its own process with its own streams, folder, environment and exit
code, run by `hf_langspec_cli.main` as the console script runs it; only the interpreter's start is shared. The
console script itself is tested apart (tests/test_cli.py runs `python -m hf_langspec_cli`). `run-script SCRIPT
ARGS` (`run_script`) runs a Python script the same way, as `python SCRIPT ARGS` would.

The server never runs an operation before forking (no thread pool to copy into a child). A signal the shim gets
(SIGTERM, SIGINT, SIGHUP) is passed to its command, and a shim that dies ends its command with SIGTERM, so a
timeout or a stopped server in a test leaves nothing running. What an import reads from the environment and keeps
(`IMPORT_TIME`: the libraries' caches, the hub's settings, `PYTHONPATH`, `HOME`...) is the server's, so a server
serves only the commands whose values are its own (`import_key`): one for the tests' environment as collected
(`run`), one for each documentation sandbox's (`start`); another command runs in a new interpreter, as it did.
Torch's thread count, fixed by the server's import, is set from each command's OMP_NUM_THREADS.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

SOCKET_VARIABLE = "HF_LANGSPEC_TEST_COMMAND_SERVERS"
# variables an import may read once and keep: a command whose values differ from every server's runs in a new
# interpreter (the shim's fallback), never in a process imported under other settings
IMPORT_TIME = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "DATASETS_", "TOKENIZERS_", "TORCH", "PYTORCH_", "CUDA_",
               "MKL_", "KMP_", "XDG_", "PYTHON", "HOME", "LANG", "LC_")  # fmt: skip
STARTING_ENVIRONMENT = dict(os.environ)  # the tests' environment as collected, before any test changes it
SCRIPT_RUNNER = "run-script"
EXIT_BYTES = 4
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def import_key(environ: Mapping[str, str]) -> str:
    """What of `environ` an import may read and keep (the libraries' caches, hub settings, devices, paths)."""
    decided = sorted((k, v) for k, v in environ.items() if k.startswith(IMPORT_TIME) and k != SOCKET_VARIABLE)
    return hashlib.sha256(json.dumps(decided).encode()).hexdigest()[:16]


def shim() -> int:
    """The `hf-langspec` executable: run `sys.argv[1:]` through the server imported under this environment, with
    this process's streams; without such a server, in a new interpreter as before."""
    script = Path(sys.argv[0]).name == SCRIPT_RUNNER  # `run-script SCRIPT ARGS`: a Python script, not hf-langspec
    path = os.path.join(os.environ[SOCKET_VARIABLE], f"{import_key(os.environ)}.sock")
    if not os.path.exists(path):  # no interpreter imported under this environment
        program = sys.argv[1:] if script else ["-m", "hf_langspec_cli", *sys.argv[1:]]
        os.execv(sys.executable, [sys.executable, *program])
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        server.connect(path)
    except OSError:  # the server has ended: its socket goes, and the command runs in a new interpreter
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return shim()
    request = {"argv": sys.argv, "script": script, "cwd": os.getcwd(), "env": dict(os.environ)}
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


def _run_child(request: dict, added: dict[str, str], streams: list[int], inherited: list[socket.socket]) -> None:
    """In the forked child: the shim's streams, folder and environment (with what the imports `added` to theirs,
    as in a new interpreter), then `hf-langspec`; never returns."""
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
        for name, value in added.items():
            os.environ.setdefault(name, value)
        if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # the thread count the server's import fixed, as asked
            import torch

            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        sys.argv = request["argv"][1:] if request["script"] else request["argv"]  # as the interpreter sets it
        if request["script"]:  # as `python SCRIPT ARGS` runs it
            sys.path.insert(0, str(Path(sys.argv[0]).resolve().parent))
            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        else:
            from hf_langspec_cli import main

            code = main(sys.argv[1:])
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
    # no Python thread to copy half-done into a child (torch's and arrow's native threads are fork-safe: a
    # DataLoader forks its workers after them)
    assert threading.active_count() == 1, f"importing the commands started threads: {threading.enumerate()}"


def serve(folder: str) -> int:
    """Fork a child per connection (one command each), answer each its exit code; end with the parent process.
    The socket is named by the environment as this interpreter sees it (Python may add LC_CTYPE: PEP 538), as the
    shim, another interpreter, sees its own."""
    path, before = os.path.join(folder, f"{import_key(os.environ)}.sock"), dict(os.environ)
    preload()
    added = {name: value for name, value in os.environ.items() if before.get(name) != value}  # e.g. inductor's cache
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
                    _run_child(json.loads(message), added, streams, [listener, connection, *children.values()])
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
    os.unlink(path)  # new commands run in new interpreters
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


_servers: dict[str, subprocess.Popen] = {}


@functools.cache
def bin_folder() -> Path:
    """This process's folder of servers' sockets and of the two shims (`hf-langspec`, `run-script`), made once."""
    folder = Path(tempfile.mkdtemp(prefix="hf-langspec-commands-")) / "bin"
    folder.mkdir()
    for name in ("hf-langspec", SCRIPT_RUNNER):
        executable = folder / name
        executable.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                              "from command_server import shim\nsys.exit(shim())\n")  # fmt: skip
        executable.chmod(0o755)
    atexit.register(stop)
    return folder


def start(environ: dict[str, str]) -> None:
    """A server imported under `environ`, for the commands whose import-time environment is the same (once)."""
    key = import_key(environ)
    if key in _servers:
        return
    process = subprocess.Popen([sys.executable, __file__, str(bin_folder())], env=environ, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    ready = process.stdout.readline()
    assert ready == "ready\n", f"the command server did not start (exit {process.poll()})"
    _servers[key] = process


def environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: this process's) with the shims first on PATH and the servers' folder."""
    environ = dict(os.environ if environ is None else environ)
    return {**environ, "PATH": f"{bin_folder()}:{environ.get('PATH', '')}", SOCKET_VARIABLE: str(bin_folder())}


def executable() -> str:
    """The `hf-langspec` shim."""
    return str(bin_folder() / "hf-langspec")


def _through_shim(shim_name: str, args: tuple, kwargs: dict) -> subprocess.CompletedProcess:
    start(STARTING_ENVIRONMENT)
    kwargs["env"] = environment(kwargs.get("env"))
    return subprocess.run([str(bin_folder() / shim_name), *map(str, args)], **kwargs)


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    """`hf-langspec ARGS` as `subprocess.run` runs it (`kwargs` are its own; `env` gets the servers' folder)."""
    return _through_shim("hf-langspec", args, kwargs)


def run_script(script: str | Path, *args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS` as `subprocess.run` runs it, forked as `run` forks a command."""
    return _through_shim(SCRIPT_RUNNER, (script, *args), kwargs)


def stop() -> None:
    """Stop every server: commands still running end with SIGTERM."""
    for process in _servers.values():
        process.terminate()
    for process in _servers.values():
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    _servers.clear()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
