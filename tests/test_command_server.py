"""The tests' `hf-langspec` (tests/command_server.py) is the console script's command, forked: the same output,
exit code, working folder, environment and input, and a signal to it reaches the command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import command_server


def test_a_forked_command_prints_and_exits_as_the_console_script_does(tmp_path):
    (tmp_path / "bad.yaml").write_text("output_dir: x\nmodel: {class: nope}\n")
    for args in (
        ["--help"],
        ["train", "--bogus"],
        ["train", "--config", "bad.yaml"],
        ["train", "--config", "none.yaml"],
    ):
        direct = subprocess.run([sys.executable, "-m", "hf_langspec_cli", *args], cwd=tmp_path, capture_output=True,
                                text=True)  # fmt: skip
        forked = command_server.run(*args, cwd=tmp_path, capture_output=True, text=True)
        assert (forked.returncode, forked.stdout, forked.stderr) == (direct.returncode, direct.stdout, direct.stderr)


def test_a_forked_command_or_script_gets_its_input_folder_and_environment_and_a_signal_ends_it(tmp_path):
    missing = command_server.run("translate", "nope", "--src-lang", "en", "--tgt-lang", "de", input="a\n",
                                 cwd=tmp_path, capture_output=True, text=True, env={"NO_COLOR": "1"})  # fmt: skip
    assert missing.returncode == 2 and "nope does not exist" in missing.stderr
    script = tmp_path / "show.py"
    script.write_text("import os, sys, torch\nprint(os.getcwd(), os.environ['MARK'], torch.get_num_threads(), sys.argv[1:],"
                      " sys.path[0], sys.stdin.read().strip())\nsys.exit(3)\n")  # fmt: skip
    shown = command_server.run_script(script, "a b", cwd=tmp_path.parent, input="typed", capture_output=True,
                                      text=True, env={**os.environ, "MARK": "m", "OMP_NUM_THREADS": "2"})  # fmt: skip
    assert shown.returncode == 3 and shown.stdout.split(" ", 6) == [str(tmp_path.parent), "m", "2", "['a", "b']",
                                                                     str(tmp_path), "typed\n"]  # fmt: skip
    waiting = subprocess.Popen([command_server.executable(), "data", "local", "/dev/stdin", "--format", "tsv",
                                "--src-lang", "de", "--tgt-lang", "en", "--output", str(tmp_path / "o.jsonl")],
                               stdin=subprocess.PIPE, env=command_server.environment(), stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    time.sleep(2)  # the command waits for its input, which stays open
    waiting.send_signal(signal.SIGTERM)
    assert waiting.wait(timeout=60) == 128 + signal.SIGTERM
    assert "terminated (SIGTERM)" in waiting.stderr.read() and not (tmp_path / "o.jsonl").exists()


def test_a_command_whose_import_time_environment_differs_runs_in_a_new_interpreter(tmp_path):
    """What an import reads once (here the hub's offline switch) is never a server's where the command's differs."""
    script = tmp_path / "where.py"
    script.write_text("import os, huggingface_hub.constants as c\nprint(os.getppid(), c.HF_HUB_OFFLINE)\n")
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    for environ, forked in (({}, True), ({"HF_HUB_OFFLINE": "0" if offline else "1"}, False)):
        shown = command_server.run_script(script, env={**os.environ, **environ}, capture_output=True, text=True)
        parent, said = shown.stdout.split()
        assert (int(parent) != os.getpid()) == forked  # forked: the server's child; else the test's own child
        assert said == str(environ.get("HF_HUB_OFFLINE", "1" if offline else "0") == "1")
