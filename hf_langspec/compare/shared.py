"""What every run of a suite shares: the corpus, the joint tokenizer and the evaluation sets, built once.

Each run is an ordinary experiment that reads the shared files (`data.train_files`, `tokenizer.path`),
so systems differ only where the suite says. The evaluation sets are fixed here too (the first
`max_sentences_per_direction` examples of every direction) and written with their references into
the results directory, so a report can be rebuilt from the results alone, anywhere.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from ..data.bible import BibleCorpusConfig, build_bible_corpus
from ..data.columns import direction_sizes
from ..data.corpus_store import canonical_rows, direction_order, read_corpus, renamed_languages, write_corpus
from ..data.local import load_local, read_multiway
from ..data.processing import multiway_pairs, per_direction
from ..files import read_json, write_atomic, write_jsonl
from ..pretrained import pretrained_tokenizer
from ..tokenization import LangSpecTokenizer, train_tokenizer
from ..training.config import named_test_files, sentence_limit
from ..training.run_guard import section_of
from .suite import Suite

logger = logging.getLogger(__name__)
REFERENCES_FILE = "references.json.gz"

# set by the runner for its workers: a worker ends when that process does (worker.die_with_runner); here, not in
# worker.py, so that the runner need not import the module `python -m` then runs (runpy warns of that)
RUNNER_PID = "HF_LANGSPEC_RUNNER_PID"


def results_paths(results_dir: Path, system: str, seed: int) -> tuple[Path, Path]:
    """The run's scores (small JSON, committed) and its outputs (gzip JSON, for the paired bootstrap)."""
    return results_dir / system / f"seed{seed}.json", results_dir / system / f"seed{seed}.outputs.json.gz"


RUN_FILE_FIX = (
    "delete it, and the run's other results file beside it, and rerun `hf-langspec compare` to evaluate that run again"
)


# where a run's files live, not what it trains: the shared corpus and vocabulary are compared by their
# fingerprints, so a suite folder moved or named another way keeps its runs
LOCATION_KEYS = ("output_dir", "data.train_files", "data.valid_files", "data.test_files", "data.cache_dir",
                 "data.num_proc", "tokenizer.path")  # fmt: skip


def run_identity(config: dict[str, Any]) -> dict[str, Any]:
    """A run config without its LOCATION_KEYS: what results files and resumed runs are matched by."""
    identity = copy.deepcopy(config)
    for key in LOCATION_KEYS:
        node, last = section_of(identity, key)
        if node is not None:
            node.pop(last, None)
    return identity


def read_run_file(path: Path, gzipped: bool = False) -> Any:
    """A run's scores or outputs (or the suite's references), with one line naming the file and the fix when it
    is damaged (`files.read_json`)."""
    return read_json(path, RUN_FILE_FIX, gzipped=gzipped)


def file_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def multiway_rows(path: str | os.PathLike, languages: list[str]) -> list[dict[str, str]]:
    """Canonical rows for every ordered pair of `languages` a multi-way JSONL file covers.

    A record is `{"texts": {code: text}}` (the Bible's `*.multiway.jsonl`) or has one field per code;
    a direction counts only where both sides are present and non-empty.
    """

    records = list(read_multiway(path))
    outside = sorted({code for texts in records for code in texts} - set(languages))
    if outside:  # said, not dropped silently
        print(f"--eval-set {path}: languages {outside} are not among the model's {languages}; they are left out.")
    wanted = set(languages)
    rows = multiway_pairs({"texts": {c: t for c, t in texts.items() if c in wanted}} for texts in records).to_list()
    if not rows:
        raise ConfigError(
            f"--eval-set {path}: no record has texts in two of the model's languages {languages}; give a multi-way "
            "JSONL with one field per language code (as the Bible's test.multiway.jsonl)."
        )
    return rows


def _first_per_direction(rows: list[dict[str, str]], limit: int | None) -> dict[str, list[dict[str, str]]]:
    return dict(sorted(per_direction(rows, limit).items()))


def prepare_shared(suite: Suite, eval_set_files: list[str] = ()) -> dict[str, Any]:
    """Build (or reuse) the shared corpus, tokenizer and evaluation sets; return their paths and fingerprints."""

    shared = suite.output_dir / "shared"
    data_dir = shared / "data"
    base_data = suite.base.get("data", {})
    evaluation = suite.base.get("evaluation", {})
    # the suite's training copy in the format of its corpus: Parquet for Parquet corpora (the papers' suites: a
    # 110M-example JSONL copy would be tens of GB), JSON lines otherwise (the Bible suites' committed fingerprints)
    listed = base_data.get("train_files", [])
    parquet = any(str(f).endswith(".parquet") for f in (listed if isinstance(listed, list) else [listed]))
    paths = {"train": data_dir / f"train.{'parquet' if parquet else 'jsonl'}", "valid": data_dir / "valid.jsonl"}
    # what the files in data_dir were made from: a complete, matching set is used as it is, without the corpus
    # (so a machine without it, a GPU machine given this folder, runs the suite)
    stamp = {"data": base_data, "max_sentences_per_direction": evaluation.get("max_sentences_per_direction")}
    recorded = read_json(shared / "data.json") if (shared / "data.json").exists() else None
    test_paths = {name: data_dir / f"test.{name}.jsonl" for name in (recorded or {}).get("test_sets", [])}
    if (
        recorded is not None
        and {k: recorded.get(k) for k in stamp} == stamp
        and test_paths
        and all(p.exists() for p in [*paths.values(), *test_paths.values()])
    ):
        sets = {name: _first_per_direction(load_local(path).to_list(), None) for name, path in test_paths.items()}
    else:
        sets, test_paths = _build_shared_data(suite, data_dir, paths, stamp)
    train = read_corpus([paths["train"]])  # memory-mapped; every run of the suite reuses it and its tokenized form
    train_sizes = direction_sizes(train)
    tested = {row[k] for by_direction in sets.values() for rows in by_direction.values() for row in rows
              for k in ("src_lang", "tgt_lang")}  # fmt: skip
    languages = sorted({code for direction in train_sizes for code in direction.split("-")} | tested)
    tokenizer_dir = _shared_tokenizer(suite, shared / "tokenizer", train, languages)
    tokenizer = LangSpecTokenizer.from_pretrained(tokenizer_dir)

    corpus_fingerprint = file_digest([paths["train"], paths["valid"], *test_paths.values()])
    for file in eval_set_files:
        name = f"eval:{Path(file).name.removesuffix('.jsonl')}"
        sets[name] = _first_per_direction(multiway_rows(file, tokenizer.languages), sentence_limit(evaluation, name))
    references = {
        name: {d: {"src": [r["src"] for r in rows], "ref": [r["tgt"] for r in rows]} for d, rows in by_dir.items()}
        for name, by_dir in sets.items()
    }
    _write_references(suite, corpus_fingerprint, references)
    return {
        "data": {
            "train_files": [str(paths["train"])],
            "valid_files": [str(paths["valid"])],
            "test_files": {name: str(path) for name, path in test_paths.items()},
        },
        "tokenizer": str(tokenizer_dir),
        "corpus_fingerprint": corpus_fingerprint,
        "tokenizer_fingerprint": tokenizer.vocabulary_fingerprint(),
        "train_sizes": dict(sorted(train_sizes.items())),
        "sets": {name: {d: rows for d, rows in by_dir.items()} for name, by_dir in sets.items()},
    }


def _build_shared_data(
    suite: Suite, data_dir: Path, paths: dict[str, Path], stamp: dict[str, Any]
) -> tuple[dict[str, dict[str, list]], dict[str, Path]]:
    """Write the suite's training, validation and test files into `data_dir` from its corpus (the Bible, built
    or reused, or its JSONL files); returns the test sets by direction and their paths."""

    base_data, evaluation = stamp["data"], suite.base.get("evaluation", {})
    if "bible" in base_data:
        print(f"[{suite.name}] data: the Bible corpus ({', '.join(base_data['bible'].get('languages', []))})")
        corpus = build_bible_corpus(data_dir.parent / "bible", BibleCorpusConfig(**base_data["bible"]))
        train_files, valid_files = [corpus.files["train"]], [corpus.files["valid"]]
    else:
        listed = base_data["train_files"]
        train_files = listed if isinstance(listed, list) else [listed]
        valid = base_data.get("valid_files", [])
        valid_files = valid if isinstance(valid, list) else [valid]
    tests = named_test_files(base_data, corpus.files if "bible" in base_data else None)
    # streamed from the corpus on disk (capped in place), never held as rows
    codes = base_data.get("language_codes")  # renamed here: the runs read the shared files as they are
    train = read_corpus(train_files, language_codes=codes)
    cap = base_data.get("max_train_examples_per_direction")
    try:
        view = train.select(direction_order(train, cap)) if cap else train
    except ValueError as error:
        raise ConfigError(str(error)) from None
    write_corpus(paths["train"], canonical_rows(view))
    write_jsonl(paths["valid"], list(renamed_languages((r for path in valid_files for r in load_local(path)), codes)))
    sets = {
        name: _first_per_direction(list(renamed_languages(load_local(path), codes)), sentence_limit(evaluation, name))
        for name, path in tests.items()
    }
    test_paths = {name: data_dir / f"test.{name}.jsonl" for name in sets}
    for name, by_direction in sets.items():
        write_jsonl(test_paths[name], [row for rows in by_direction.values() for row in rows])
    record = {**stamp, "test_sets": list(sets)}
    write_atomic(data_dir.parent / "data.json", json.dumps(record, sort_keys=True).encode())
    return sets, test_paths


def _shared_tokenizer(suite: Suite, tokenizer_dir: Path, train: Any, languages: list[str]) -> Path:
    """The suite's joint vocabulary: trained once, and kept beside the results as well, so that a suite can be
    continued elsewhere (another machine, a later version of the trainer) with exactly the same ids. From a
    pretrained checkpoint: its own vocabulary for `languages` (those of the training and test sets)."""

    settings = {k: v for k, v in suite.base.get("tokenizer", {}).items() if k != "lang_tag_style"}
    kept = suite.results_dir / "tokenizer"

    def trained_with(folder: Path) -> dict | None:
        recorded = folder / "hf_langspec_training.json"
        return read_json(recorded) if (folder / "tokenizer.json").exists() and recorded.exists() else None

    model = suite.base.get("model", {})
    if "init_from_pretrained" in model:  # the checkpoint's own vocabulary and codes (not copied beside the results)
        path, added = model["init_from_pretrained"], model.get("add_languages", [])
        settings = {"init_from_pretrained": os.path.realpath(path), "languages": languages, "add_languages": added}
        if trained_with(tokenizer_dir) != settings:
            print(f"[{suite.name}] tokenizer: the checkpoint's ({path})")
            pretrained_tokenizer(path, settings["languages"], added).save_pretrained(tokenizer_dir)
            write_atomic(tokenizer_dir / "hf_langspec_training.json", json.dumps(settings, sort_keys=True).encode())
        return tokenizer_dir

    if trained_with(tokenizer_dir) != settings:
        if trained_with(kept) == settings:
            print(f"[{suite.name}] tokenizer: the suite's vocabulary from {kept}")
            shutil.copytree(kept, tokenizer_dir, dirs_exist_ok=True)
        else:
            print(f"[{suite.name}] tokenizer: training the joint vocabulary ({settings.get('vocab_size', 8000)})")
            train_tokenizer(train, show_progress=False, **settings).save_pretrained(tokenizer_dir)
            write_atomic(tokenizer_dir / "hf_langspec_training.json", json.dumps(settings, sort_keys=True).encode())
    if trained_with(kept) != settings:
        shutil.copytree(tokenizer_dir, kept, dirs_exist_ok=True)
    return tokenizer_dir


def _write_references(suite: Suite, corpus_fingerprint: str, references: dict[str, Any]) -> None:
    """Keep the sources and references every run is scored on beside the results (merged with earlier sets)."""
    path = suite.results_dir / REFERENCES_FILE
    stored = load_references(path) if path.exists() else None
    if stored is not None and stored["corpus_fingerprint"] != corpus_fingerprint:
        raise ConfigError(
            f"{path} holds references of another corpus ({stored['corpus_fingerprint']}, now {corpus_fingerprint}); "
            f"the runs in {suite.results_dir} were trained on other data. Use a new results_dir."
        )
    merged = {**(stored["sets"] if stored else {}), **references}
    if stored is None or merged != stored["sets"]:
        data = {"corpus_fingerprint": corpus_fingerprint, "sets": merged}
        write_atomic(path, gzip.compress(json.dumps(data, ensure_ascii=False).encode(), mtime=0))


def load_references(path: Path) -> dict[str, Any]:
    return read_run_file(path, gzipped=True)


__all__ = ["load_references", "multiway_rows", "prepare_shared"]
