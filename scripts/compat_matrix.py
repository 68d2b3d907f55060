"""Run one cell of the compatibility matrix: the fast tests in a fresh virtual environment of given versions.

    python3 scripts/compat_matrix.py lock                  # the exact versions of requirements/lock.txt
    python3 scripts/compat_matrix.py newest --write-lock   # the newest releases the ranges allow; on a pass
                                                           # their exact versions become the lock
    python3 scripts/compat_matrix.py oldest                # every lower bound of pyproject.toml (uv lowest-direct)
    python3 scripts/compat_matrix.py gpu-image             # torch 2.11 + transformers 5.17 (the GPU machines)
    python3 scripts/compat_matrix.py newest-torch          # newest, torch too (the registry's CUDA build on the CPU)

Each cell is a venv under `.matrix/<cell>` made anew, the package installed editable with its `dev`, `eval`,
`export`, `serve` and `docs` extras, then `pytest -m "not slow"`. The versions it installed and the outcome go into
`docs/compat_matrix.json`, and the table between the `<!-- compat-matrix -->` markers of docs/guide/install.md is
rebuilt from that file. Standard library only: it runs before anything is installed.

PyTorch: the registry's linux wheels of torch are CUDA builds (several GB of nvidia packages); the only CPU
build this project's machines reach is the lock's (torch 2.13.0+cpu, a local file). So `newest` keeps the
lock's CPU torch (the table says so), and `oldest` / `gpu-image` install the registry's CUDA builds of their
torch, which run on the CPU as well.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
RESULTS = ROOT / "docs" / "compat_matrix.json"
README = ROOT / "docs" / "guide" / "install.md"  # the table of tested versions
EXTRA_NAMES = ("dev", "eval", "export", "serve", "docs")
EXTRAS = f".[{','.join(EXTRA_NAMES)}]"
# the packages whose versions the table shows (every installed version is kept in the results file)
SHOWN = ["torch", "transformers", "tokenizers", "datasets", "accelerate", "huggingface-hub", "safetensors",
         "evaluate", "sacrebleu", "ctranslate2", "numpy"]  # fmt: skip
# what the GPU machines' image holds (the device tool's KINDS.md, read 2026-11-17); the rest from the lock. Its
# numpy 2.5.2 has no build for this machine's Python 3.11 (the image has 3.12): the lock's numpy here.
GPU_IMAGE = ["torch==2.11.0", "transformers==5.17.0", "tokenizers==0.23.2", "safetensors==0.8.0",
             "huggingface-hub==1.33.0", "accelerate==1.15.0", "sentencepiece==0.2.2"]  # fmt: skip
CELLS = {
    "lock": "the exact versions of requirements/lock.txt (what scripts/setup.sh installs)",
    "newest": "the newest releases the pyproject ranges allow, torch kept at the lock's CPU build",
    "newest-torch": "the newest releases, torch too: the registry's newest (a CUDA build, run on the CPU; not lockable here)",
    "oldest": "every direct dependency at its pyproject.toml lower bound (uv's lowest-direct resolution; a bound that does not resolve fails the cell)",
    "gpu-image": "the GPU machines' torch 2.11 / transformers 5.17 and their image's versions, the rest from the lock",
}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins() -> dict[str, str]:
    """`{name: 'name==version'}` from the lock (comments and blank lines skipped)."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins[normalize(line.split("==", 1)[0])] = line
    return pins


def lower_bounds() -> list[str]:
    """Each dependency of pyproject.toml (and of the extras installed) pinned at its declared lower bound."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in EXTRA_NAMES:
        requirements += project["optional-dependencies"][extra]
    pins = []
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*>=\s*([^,\s]+).*", requirement)
        if not match:
            raise SystemExit(f"pyproject.toml: {requirement!r} has no lower bound (>=); every dependency needs one")
        pins.append(f"{match[1]}=={match[2]}")
    return pins


def version_key(version: str) -> tuple:
    """'2.0' and '2.0.0' compare equal; enough of PEP 440 for release numbers."""
    parts = [int(p) if p.isdigit() else p for p in re.split(r"[.+]", version)]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def lowest_resolution(python: Path, work: Path) -> str:
    """Pins for the oldest cell: uv's `lowest-direct` resolution of the ranges (every direct dependency at the
    lowest version that installs with the others). A declared lower bound that does not install with the others
    is an error naming it: the bound must be raised to what resolves."""
    run([str(python), "-m", "pip", "install", "-q", "uv"])
    compiled = subprocess.run(
        [str(work / "bin" / "uv"), "pip", "compile", "pyproject.toml",
         *(arg for extra in EXTRA_NAMES for arg in ("--extra", extra)), "--resolution", "lowest-direct",
         "--python", str(python), "--no-header", "--no-annotate", "--quiet"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    resolved = {normalize(line.split("==")[0]): line.split("==")[1] for line in compiled.split() if "==" in line}
    for pin in lower_bounds():
        name, declared = pin.split("==")
        if version_key(resolved.get(normalize(name), declared)) != version_key(declared):
            raise SystemExit(
                f"pyproject.toml declares {name}>={declared}, but the lowest version that installs with the other "
                f"bounds is {resolved[normalize(name)]}: raise the bound to it"
            )
    return compiled


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kwargs)


def install(cell: str, python: Path, work: Path) -> str:
    """Install the cell's versions into the venv of `python`; returns a note for the table ('' for none).

    TORCH_INDEX_URL, where set (CI on GitHub: PyTorch's CPU index), is where torch comes from.
    """
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    torch_index = ["--extra-index-url", os.environ["TORCH_INDEX_URL"]] if os.environ.get("TORCH_INDEX_URL") else []
    pins = lock_pins()
    constraints = work / "constraints.txt"
    note = ""
    if cell == "lock":
        constraints.write_text("\n".join(pins.values()) + "\n")
        torch = pins["torch"]
    elif cell == "newest":
        if torch_index:
            torch = "torch"
            constraints.write_text("")
        else:
            torch = pins["torch"]  # the one CPU build reachable here; the constraint keeps the upgrade off it
            constraints.write_text(torch + "\n")
            note = f"torch kept at the lock's CPU build ({torch}): the registry has no CPU build of newer ones"
    elif cell == "newest-torch":
        torch = "torch"
        constraints.write_text("")
        if not torch_index:
            note = "torch from the registry (a CUDA build, run on the CPU); the lock keeps the newest CPU build"
        if cap := machine_cap(python, "torch"):  # pip reads it whatever our constraints say
            note += ("; " if note else "") + f"this machine's pip configuration caps it ({cap})"
    elif cell == "oldest":
        constraints.write_text(lowest_resolution(python, work))
        torch = next(p for p in lower_bounds() if normalize(p.split("==")[0]) == "torch")
        note = "" if torch_index else "torch from the registry (a CUDA build, run on the CPU)"
    elif cell == "gpu-image":
        image = {normalize(p.split("==")[0]): p for p in GPU_IMAGE}
        # the image's versions where it has one, the lock's for the rest
        constraints.write_text("\n".join({**pins, **image}.values()) + "\n")
        torch = image["torch"]
        note = "Python 3.11 here, 3.12 on the GPU image" + (
            "" if torch_index else "; torch a CUDA build, run on the CPU"
        )
    else:
        raise SystemExit(f"unknown cell {cell!r}: use one of {', '.join(CELLS)}")
    # torch first, alone: a torch requirement met by the registry's default pulls its CUDA build
    run([*pip, "-c", str(constraints), *torch_index, torch])
    upgrade = ["--upgrade", "--upgrade-strategy", "eager"] if cell.startswith("newest") else []
    run([*pip, "-c", str(constraints), *upgrade, "-e", EXTRAS], cwd=ROOT)
    return note


def machine_cap(python: Path, package: str) -> str:
    """The `package` line of a constraint file that pip's own configuration applies to every install on this
    machine (`pip config list`: a pip.conf's or PIP_CONSTRAINT's `constraint`), with the file: why a cell's
    "newest" may not be the registry's; '' where none applies."""
    listed = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    paths = [p for value in re.findall(r"^\S*\.constraint='(.*)'$", listed, flags=re.M) for p in value.split()]
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if re.match(rf"{re.escape(package)}\s*[<>=!~]", line.strip()):
                return f"{path}: {line.strip()}"
    return ""


def installed(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json", "--exclude-editable", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {normalize(p["name"]): p["version"] for p in json.loads(out)}


def summary_line(output: str) -> str:
    """pytest's closing line ('412 passed, 2 skipped in 96.1s'), without the '=' rule."""
    lines = [line.strip("= ").strip() for line in output.splitlines() if re.search(r"\b(passed|failed|error)", line)]
    return lines[-1] if lines else "no pytest summary line"


def write_lock(versions: dict[str, str]) -> None:
    """The lock: every installed distribution at its exact version (torch without its local '+cpu' label)."""
    lines = [
        "# The exact versions scripts/setup.sh installs: every distribution of a venv in which the fast tests passed.",
        "# Refresh: python3 scripts/compat_matrix.py newest --write-lock  (then run the whole test suite).",
        f"# Written {datetime.date.today().isoformat()} by scripts/compat_matrix.py with Python {sys.version.split()[0]}.",
    ]
    skip = {"hf-langspec", "pip", "setuptools", "wheel"}
    for name in sorted(versions):
        if name not in skip:
            lines.append(f"{name}=={versions[name].split('+')[0]}")
    LOCK.parent.mkdir(exist_ok=True)
    tmp = LOCK.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(LOCK)
    print(f"wrote {LOCK.relative_to(ROOT)} ({len(lines) - 3} pins)")


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def render_table(results: dict) -> str:
    header = "| cell | " + " | ".join(SHOWN) + " | fast tests | run |\n"
    header += "|---" * (len(SHOWN) + 3) + "|\n"
    rows, notes = [], []
    for cell in CELLS:
        entry = results.get(cell)
        if entry is None:
            rows.append(f"| {cell} | " + " | ".join("" for _ in SHOWN) + " | not run yet | |")
            continue
        versions = [entry["versions"].get(name, "-") for name in SHOWN]
        outcome = ("**passed**: " if entry["passed"] else "**FAILED**: ") + entry["summary"]
        rows.append(f"| {cell} | " + " | ".join(versions) + f" | {outcome} | {entry['date']}, {entry['commit']} |")
        if entry.get("note"):
            notes.append(f"- {cell}: {entry['note']}.")
    cells = "\n".join(f"- `{cell}`: {text}." for cell, text in CELLS.items())
    return header + "\n".join(rows) + "\n\n" + cells + "\n" + ("\n".join(notes) + "\n" if notes else "")


def update_readme(results: dict) -> None:
    start, end = "<!-- compat-matrix -->", "<!-- /compat-matrix -->"
    content = README.read_text()
    if start not in content or end not in content:
        raise SystemExit(f"{README.relative_to(ROOT)} has no {start} ... {end} markers")
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    tmp = README.with_suffix(".tmp")
    tmp.write_text(f"{head}{start}\n{render_table(results)}{end}{tail}")
    tmp.replace(README)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", choices=list(CELLS))
    parser.add_argument("--write-lock", action="store_true", help="on a pass, write the cell's versions as the lock")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers (default 2)")
    parser.add_argument(
        "--table-only", action="store_true", help="rebuild the install page's table from the results file"
    )
    args = parser.parse_args(argv)
    if args.write_lock and args.cell != "newest":
        parser.error("--write-lock goes with the newest cell: the lock is the newest releases with the CPU torch")
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.table_only:
        update_readme(results)
        return 0
    work = ROOT / ".matrix" / args.cell
    shutil.rmtree(work, ignore_errors=True)
    work.parent.mkdir(exist_ok=True)
    run([sys.executable, "-m", "venv", str(work)])
    python = work / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    try:
        note = install(args.cell, python, work)
    except (subprocess.CalledProcessError, SystemExit) as error:
        reason = str(error) if isinstance(error, SystemExit) else "pip found no versions that install together"
        print(f"{args.cell}: does not install: {reason}", file=sys.stderr)
        note, versions, passed, summary = "", installed(python), False, f"does not install: {reason}"
    else:
        versions = installed(python)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        test = subprocess.run(
            [str(python), "-m", "pytest", "-m", "not slow", "-q", "-n", args.workers, "-p", "no:cacheprovider"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        (work / "pytest.log").write_text(test.stdout + test.stderr)
        passed = test.returncode == 0
        summary = summary_line(test.stdout)
        print(test.stdout[-3000:])
    results[args.cell] = {
        "passed": passed,
        "summary": summary,
        "versions": versions,
        "note": note,
        "python": sys.version.split()[0],
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    tmp.replace(RESULTS)
    update_readme(results)
    print(f"{args.cell}: {'passed' if passed else 'FAILED'} ({summary}); log in {work / 'pytest.log'}")
    if passed and args.write_lock:
        write_lock(versions)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
