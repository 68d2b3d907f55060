"""How far a reader walks to follow a config through a run: the package files that `run_experiment` hands the
config (or one of its sections) to, in the order they receive it.

The README's main job (examples/configs/bible_baseline_cpu.yaml, or `--config`) runs made tiny (the Bible's 1 John,
2 steps, 2 sentences scored per direction, greedy), traced with `sys.setprofile`: every call of a package function that
receives the config, one of its sections or a section's nested mapping or list (the same object) is a step of the
walk; consecutive steps in one file are one visit. *Files entered* counts the distinct files, *re-entries* the
visits to a file the walk had already left (a reader climbing back up to it), *visits* both.

python benchmarks/bench_walk.py [--config examples/configs/bible_baseline_cpu.yaml] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from _report import ROOT, write_section

import hf_langspec
from hf_langspec.training.config import apply_overrides, load_config
from hf_langspec.training.experiment import run_experiment

PACKAGE = Path(hf_langspec.__file__).parent
PACKAGES = (str(PACKAGE) + "/", str(PACKAGE) + "_cli/")  # the package and its torch-free config reader
TINY = ["data.bible.books=[62]", "data.bible.valid_chapters=1", "data.bible.test_chapters=1",
        "tokenizer.vocab_size=400", "tokenizer.sample_size=2000", "training.max_steps=2", "training.warmup_steps=0",
        "training.per_device_train_batch_size=4", "evaluation.max_sentences_per_direction=2",
        "evaluation.num_beams=1", "evaluation.max_new_tokens=8"]  # fmt: skip


def _parts(value: Any) -> set[int]:
    """The ids of a config's mappings and lists, nested ones included (what the walk follows)."""
    found = {id(value)}
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        if isinstance(child, dict | list):
            found |= _parts(child)
    return found


def walk(config: dict[str, Any]) -> list[str]:
    """The package files, relative to the repository, that receive the config, one entry per visit."""
    followed, visits = _parts(config), []

    def profile(frame, event, _arg):
        if event != "call" or not frame.f_code.co_filename.startswith(PACKAGES):
            return
        code = frame.f_code
        arguments = [frame.f_locals.get(n) for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
        if any(id(a) in followed for a in arguments if isinstance(a, dict | list)):
            where = str(Path(code.co_filename).relative_to(PACKAGE.parent))
            if not visits or visits[-1] != where:
                visits.append(where)

    sys.setprofile(profile)  # the walk starts at run_experiment (a config given to the Python API)
    try:
        run_experiment(config, resume=False)
    finally:
        sys.setprofile(None)
    return visits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/configs/bible_baseline_cpu.yaml")
    parser.add_argument("--no-write", action="store_true", help="print the table without writing BENCHMARKS.md")
    args = parser.parse_args()
    config = apply_overrides(load_config(ROOT / args.config), TINY)
    with tempfile.TemporaryDirectory() as folder:
        config["output_dir"] = str(Path(folder) / "run")
        config["data"]["cache_dir"] = str(Path(folder) / "cache")
        visits = walk(config)
    per_file = Counter(visits)
    rows = ["| file | visits |", "|---|---:|"] + [f"| {name} | {count} |" for name, count in per_file.most_common()]
    summary = (
        f"`{args.config}` (made tiny): {len(per_file)} files entered, {len(visits) - len(per_file)} re-entries, "
        f"{len(visits)} visits."
    )
    body = (
        "The package files `run_experiment` hands the config or one of its sections to (the same object), "
        "consecutive calls in one file counted as one visit; re-entries are visits to a file already left.\n\n"
        + summary
        + "\n\n"
        + "\n".join(rows)
        + "\n\nThe walk in order: "
        + " -> ".join(Path(v).name for v in visits)
        + "."
    )
    print(summary)
    print(" -> ".join(Path(v).name for v in visits))
    print("\n".join(rows))
    if not args.no_write:
        write_section("walk", "Following a config through a run", body)


if __name__ == "__main__":
    main()
