"""How long everyday commands take to answer: `hf-langspec --help`, every command's `--help`, a usage error,
`train --help-config`, a config with a misspelt key, a config with a wrong value, and `import hf_langspec` (what
any command that works pays first).

Each is a fresh process, timed wall-clock from start to exit, the median of `--repeats` runs, interleaved so that
the machine's drift hits each alike. `--help` and a usage error are answered by hf_langspec_cli without loading
the package (no torch), and so is a config's unknown section or key (`hf_langspec_cli.config_file`); a config
whose keys are known is validated by the package, so it pays the import.

python benchmarks/bench_cli.py [--repeats 5] [--no-write]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import ROOT, write_section

COMMANDS = ["train", "compare", "curve", "translate", "evaluate", "export", "serve", "card", "push"]


def cases(bad_key: Path, bad_value: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "hf_langspec_cli"]
    found = {"hf-langspec --help": [*cli, "--help"]}
    found |= {f"hf-langspec {name} --help": [*cli, name, "--help"] for name in COMMANDS}
    found["hf-langspec data bible --help"] = [*cli, "data", "bible", "--help"]
    found["a usage error (`train` without --config)"] = [*cli, "train"]
    found["hf-langspec train --help-config"] = [*cli, "train", "--help-config"]
    found["a config with a misspelt key (`d_modle`)"] = [*cli, "train", "--config", str(bad_key)]
    found["a config with a wrong value (`d_model: -8`)"] = [*cli, "train", "--config", str(bad_value)]
    found["python -c 'import hf_langspec'"] = [sys.executable, "-c", "import hf_langspec"]
    return found


def loads_torch(command: list[str]) -> bool:
    """Whether the command imports torch, read from its interpreter's own import log (`-X importtime`)."""
    logged = subprocess.run([command[0], "-X", "importtime", *command[1:]], cwd=ROOT, capture_output=True, text=True)
    return re.search(r"\|\s+torch$", logged.stderr, re.M) is not None


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="print the table without writing BENCHMARKS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        bad_key, bad_value = Path(folder) / "bad_key.yaml", Path(folder) / "bad_value.yaml"
        bad_key.write_text("output_dir: out\nmodel:\n  d_modle: 128\n")
        bad_value.write_text("output_dir: out\ndata: {bible: {languages: [en, de]}}\nmodel:\n  d_model: -8\n")
        jobs = cases(bad_key, bad_value)
        times: dict[str, list[float]] = {name: [] for name in jobs}
        torch_loaded = {name: loads_torch(command) for name, command in jobs.items()}
        for round_ in range(args.repeats + 1):  # the first round warms the file cache and is not counted
            for name, command in jobs.items():
                elapsed = timed(command)
                if round_:
                    times[name].append(elapsed)
    rows = ["| command | median s | min s | loads torch |", "|---|---:|---:|---|"]
    for name, values in times.items():
        heavy = "yes" if torch_loaded[name] else "no"
        rows.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | {heavy} |")
    table = "\n".join(rows)
    body = (
        f"Each command a fresh process, wall-clock from start to exit, median and fastest of {args.repeats} runs "
        "interleaved with the others (after one uncounted round).\n\n" + table + "\n\n"
        "`--help`, a command's `--help`, a usage error, `--help-config` and a config's unknown section or key are "
        "answered by `hf_langspec_cli`, without importing the package (the keys of the package's classes are read "
        "from the generated `hf_langspec_cli/config_keys.json`); a config whose keys are all known is checked by the "
        "package (its checks build the model's config class), so a wrong value pays `import hf_langspec` (torch, "
        "transformers, the Auto classes' registration) first."
    )
    print(table)
    if not args.no_write:
        write_section("cli", "Commands that answer at once", body)


if __name__ == "__main__":
    main()
