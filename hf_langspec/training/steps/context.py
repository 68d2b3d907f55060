"""What a run's steps hand each other: the run's context and its data."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunContext:
    """What every step of one run shares: its output folder, this process's training arguments (seed, process
    index, `main_process_first`; each training stage builds its own from them), whether to resume, and `say`, which
    prints one line per step in the main process."""

    output_dir: Path
    args: Any
    resume: bool
    say: Callable[[str], None]

    @property
    def main(self) -> bool:
        """Whether this is the main process (the one that writes results, cards and the run's records)."""
        return self.args.process_index == 0


@dataclass
class RunData:
    """The data step's result: the training corpus (memory-mapped Arrow), its view capped per direction, the
    validation rows and the named test sets (small, in memory), and the corpus's language renames."""

    corpus: Any
    train: Any
    valid: list[dict[str, str]]
    tests: dict[str, list[dict[str, str]]]
    language_codes: dict[str, str]

    def held_out_languages(self) -> set[str]:
        """The languages of the validation and test rows."""
        rows = [row for part in [self.valid, *self.tests.values()] for row in part]
        return {row[side] for row in rows for side in ("src_lang", "tgt_lang")}


@dataclass
class TrainingSet:
    """The tokenized, filtered training examples (memory-mapped), what the filters removed, and the examples per
    direction `"src-tgt"` (counted once: language pairs, the high/low split, stage directions, the card)."""

    dataset: Any
    report: Any
    sizes: dict[str, int]
