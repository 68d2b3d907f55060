"""The documentation's code blocks, found and run on a tiny setting (used by tests/test_doc_examples.py).

Every fenced block of the README and of the pages a user reads (docs/guide, docs/methods, docs/DATA.md,
docs/contributing.md) is a `Block`. A page's blocks run in order in a `Sandbox`: a scratch folder shaped like the
repository (its own copies of examples/, BENCHMARKS.md and the comparing guide (where suites write their reports
and answer tables) and an empty benchmarks/results/, so nothing committed
is read or written), where shell commands run as written with these changes, each stated here: `train` gets
`--set` overrides that make it tiny (`tiny_settings`), a suite is rewritten tiny in the sandbox's copy
(`shrink_suite`), `pip install .` runs at the repository's root with `--dry-run`, port 8080 becomes a free port,
and `hf-langspec` is forked from a process that imported the package once (tests/command_server.py: the command's
own process, streams, folder and exit code, without the interpreter's start). Placeholders the documentation uses
for what a user has (`PLACEHOLDERS`) get local stand-ins.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import command_server
import yaml
from command_server import SOCKET_VARIABLE

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("guide/*.md")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("methods/*.md")),
         "docs/DATA.md", "docs/contributing.md"]  # fmt: skip
# the documentation's ways of naming what a user has: a stand-in for each is made by the test
PLACEHOLDERS = (
    "path/to/nllb-200-distilled-600M",
    "<you>/",
    "path/to/flores200_dataset",
    "path/to/flores200_spm.model",
)


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, the heading above it, its position under that heading, language and code."""

    page: str
    heading: str
    number: int
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"{self.page} > {self.heading} #{self.number}"


def blocks(page: str) -> list[Block]:
    """The fenced blocks of `page` (a path relative to the repository), in order."""
    text = (ROOT / page).read_text(encoding="utf-8")
    found, heading, counts = [], "(top)", {}
    for match in re.finditer(r"^(#+) ([^\n]+)$|^```(\w*)[^\n]*\n(.*?)^```", text, re.M | re.S):
        if match.group(1):
            heading = match.group(2).strip()
            continue
        counts[heading] = counts.get(heading, 0) + 1
        found.append(Block(page, heading, counts[heading], match.group(3) or "text", match.group(4)))
    return found


def commands(code: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments dropped, `a && b` split into two."""
    joined = re.sub(r"\\\n\s*", " ", code)
    found = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        command = shlex.join(words)
        found.extend(part.strip() for part in command.split(" '&&' ") if part.strip())
        # shlex.join quotes shell operators; put the pipe back
    return [c.replace(" '|' ", " | ") for c in found]


def program(command: str) -> tuple[list[str], list[str]]:
    """`(environment assignments, the command's words)` of the last stage of a pipe, `.venv/bin/` dropped."""
    words = shlex.split(command.split(" | ")[-1])
    env = []
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        env.append(words.pop(0))
    if words:
        words[0] = words[0].removeprefix(".venv/bin/")
    return env, words


def _set(config: dict[str, Any], key: str, value: Any) -> None:
    node = config
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def tiny_settings(config: dict[str, Any], steps: int = 2) -> dict[str, Any]:
    """Keys that make a config (or a suite's base) train and score in seconds, as it is otherwise written: the
    Bible's shortest multi-chapter book (1 John: 3 chapters to train on, 1 each to validate and test), a small
    tokenizer, `steps` steps (a staged run: one a stage, the last taking the rest), 2 sentences per direction scored,
    a data-size rule that every language of the slice passes, CPU number formats. Corpora that must be downloaded
    first become the tests' toy corpus (examples/suites/tiny)."""
    data, tokenizer = config.get("data", {}), config.get("tokenizer", {})
    model, training = config.get("model", {}), config.get("training", {})
    tiny: dict[str, Any] = {}
    if "bible" in data:
        tiny |= {"data.bible.books": [62], "data.bible.valid_chapters": 1, "data.bible.test_chapters": 1}
    elif data.get("train_files") and not all((ROOT / f).exists() for f in data["train_files"]):
        toy = "examples/suites/tiny"
        tiny |= {"data.train_files": [f"{toy}/train.jsonl"], "data.valid_files": [f"{toy}/valid.jsonl"],
                 "data.test_files": {"supervised": f"{toy}/test.jsonl"}, "data.language_codes": None}  # fmt: skip
    if "num_proc" in data:
        tiny["data.num_proc"] = 1
    if not (model.get("init_from_pretrained") or tokenizer.get("path")):
        languages = len(data.get("bible", {}).get("languages") or [1, 2, 3])
        tiny |= {"tokenizer.vocab_size": 300 + 50 * languages, "tokenizer.sample_size": 2000}  # room for each script
    stages = [
        dict(stage, training={**stage.get("training", {}), "max_steps": 1}) for stage in config.get("stages") or []
    ]
    steps = max(steps, len(stages))
    if stages:
        stages[-1]["training"]["max_steps"] = steps - len(stages) + 1  # the stages add up to the budget
    if isinstance(model.get("high_resource_languages"), dict):  # HLT-MT's rule by data size: every language passes
        tiny["model.high_resource_languages"] = {"min_examples": 1}
    tiny |= {"training.max_steps": steps, "training.warmup_steps": 0, "training.logging_steps": 1,
             "training.per_device_train_batch_size": 4, "training.gradient_accumulation_steps": 1}  # fmt: skip
    if stages:
        tiny["stages"] = stages
    if training.get("save_strategy") == "steps":
        tiny["training.save_steps"] = steps
    for precision in ("bf16", "fp16"):  # a GPU's number formats: this runs on the CPU
        if training.get(precision):
            tiny[f"training.{precision}"] = False
    tiny |= {"evaluation.max_sentences_per_direction": 2, "evaluation.max_new_tokens": 8, "evaluation.num_beams": 2}
    return {k: v for k, v in tiny.items() if v is not None or k.rsplit(".", 1)[-1] in data}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Sandbox:
    """A scratch folder shaped like the repository where a page's commands run as written (the module's docstring
    lists what is changed)."""

    def __init__(self, folder: Path, stand_ins: dict[str, str]):
        self.folder, self.stand_ins, self.port = folder, stand_ins, free_port()
        shutil.copytree(ROOT / "examples", folder / "examples")
        (folder / "benchmarks" / "results").mkdir(parents=True)  # a suite's results are the sandbox's own
        shutil.copy(ROOT / "BENCHMARKS.md", folder)  # where suites insert their reports
        (folder / "docs" / "guide").mkdir(parents=True)
        shutil.copy(ROOT / "docs" / "guide" / "comparing.md", folder / "docs" / "guide")  # and their answer tables
        (folder / "scripts").symlink_to(ROOT / "scripts")
        (folder / "requirements").symlink_to(ROOT / "requirements")
        bin_folder = self.environment_folder(folder / ".venv")
        for suite in (folder / "examples" / "suites").glob("*.yaml"):
            suite.write_text(yaml.safe_dump(shrink_suite(yaml.safe_load(suite.read_text()))))
        self.servers: list[subprocess.Popen] = []
        self.env = {"PATH": f"{bin_folder}:{Path(sys.executable).parent}:/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                    "HOME": str(Path.home()), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                    "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1",
                    SOCKET_VARIABLE: str(command_server.bin_folder())}  # fmt: skip
        command_server.start(self.env)  # the commands' interpreter, imported under their environment

    @staticmethod
    def environment_folder(venv: Path) -> Path:
        """`venv`: the tests' environment (links to its files), its `hf-langspec` the command server's; its bin/."""
        (venv / "bin").mkdir(parents=True)
        for entry in Path(sys.prefix).iterdir():
            if entry.name != "bin":
                (venv / entry.name).symlink_to(entry)  # pyvenv.cfg, lib/: `.venv/bin/python` is this environment
        for entry in (Path(sys.prefix) / "bin").iterdir():
            shim = entry.name == "hf-langspec"
            (venv / "bin" / entry.name).symlink_to(command_server.executable() if shim else entry)
        return venv / "bin"

    def text(self, code: str) -> str:
        """`code` with the placeholders' stand-ins and this sandbox's port."""
        for placeholder, stand_in in self.stand_ins.items():
            code = code.replace(placeholder, stand_in)
        return code.replace("8080", str(self.port))

    def run(self, command: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        """Run one documented command (already through `text`), `train` made tiny; `serve` is left running."""
        _env, words = program(command)
        if words[:2] == ["hf-langspec", "train"] and "--config" in words and "--help-config" not in words:
            command += " --set " + " ".join(
                shlex.quote(f"{k}={json.dumps(v)}") for k, v in self.train_settings(words).items()
            )
        if words[:2] == ["hf-langspec", "serve"]:
            return self.serve(command)
        where = ROOT if words[0] == "pip" else self.folder  # `pip install .` installs the repository (--dry-run)
        return subprocess.run(["bash", "-c", command], cwd=where, env=self.env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip

    def train_settings(self, words: list[str]) -> dict[str, Any]:
        """`tiny_settings` of the config a `train` command names, with the command's own `--set` applied first."""
        from hf_langspec.training.config import apply_overrides, load_config

        config = load_config(self.folder / words[words.index("--config") + 1])
        if "--set" in words:
            documented = words[words.index("--set") + 1 :]
            apply_overrides(config, [w for w in documented[: next((i for i, w in enumerate(documented)
                                                                   if w.startswith("--")), None)]])  # fmt: skip
        return tiny_settings(config)

    def serve(self, command: str) -> subprocess.CompletedProcess:
        """Start a documented `serve` in the background and wait until it answers (or ends)."""
        import urllib.request

        self.stop_servers()
        if "--port" not in shlex.split(command):
            command += f" --port {self.port}"  # serve's default, 8080, is this sandbox's port
        log = self.folder / f"serve-{len(self.servers)}.log"
        with open(log, "w") as out:
            server = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.folder, env=self.env, stdout=out,
                                      stderr=subprocess.STDOUT)  # fmt: skip
        self.servers.append(server)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ready", timeout=2):
                    return subprocess.CompletedProcess(command, 0, log.read_text(), "")
            except OSError:
                time.sleep(0.5)
        return subprocess.CompletedProcess(command, server.poll() or 1, log.read_text(), "the server did not start")

    def stop_servers(self) -> None:
        for server in self.servers:
            if server.poll() is None:
                server.terminate()
                server.wait(timeout=60)


def shrink_suite(suite: dict[str, Any]) -> dict[str, Any]:
    """A suite as written but tiny: its first seed only (a system's own seeds too), `tiny_settings` on its base and
    on what its systems set, and no claims judged on other suites' reports (the committed runs' budgets, not this
    one's)."""
    suite["seeds"] = suite.get("seeds", [1])[:1]
    for system in (suite.get("systems") or {}).values():
        if system and system.get("seeds"):
            system["seeds"] = system["seeds"][:1]
    suite.get("report", {}).pop("other_budgets", None)  # those are the committed runs' reports, not the sandbox's
    systems = [system.get("set", {}) for system in (suite.get("systems") or {}).values() if system]
    steps = max([2, *(len(settings.get("stages") or []) for settings in systems)])  # the budget every system shares
    for key, value in tiny_settings(suite.get("base", {}), steps).items():
        _set(suite.setdefault("base", {}), key, value)
    for settings in systems:
        own = {"stages": settings.get("stages"), "model": {"high_resource_languages":
               settings.get("model.high_resource_languages")}, "training": {}}  # fmt: skip
        for key, value in tiny_settings(own, steps).items():
            if key in settings:
                settings[key] = value
    return suite


def parses(words: list[str]) -> str | None:
    """Whether a script's command line parses with the script's own argparse parser, without running it: None when
    it does, else argparse's message. The script is executed up to its `parse_args`."""
    import argparse
    import contextlib
    import io
    import runpy
    import unittest.mock

    class Parsed(Exception):
        pass

    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        result = original(self, args, namespace)  # exits with argparse's message on a bad command line
        if self.prog == Path(words[0]).name:  # the script's top parser (subparsers are parsed inside it)
            raise Parsed
        return result

    errors = io.StringIO()
    with (unittest.mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop),
          unittest.mock.patch.object(sys, "argv", [words[0], *words[1:]]), contextlib.redirect_stderr(errors)):  # fmt: skip
        try:
            runpy.run_path(str(ROOT / words[0]), run_name="__main__")
        except Parsed:
            return None
        except SystemExit:
            return errors.getvalue().strip() or "exited before parsing"
    return "the script ran to its end without parsing arguments"
