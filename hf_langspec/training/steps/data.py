"""The data step: the corpus read once into memory-mapped Arrow (with its validation and test rows), what only the
data can refute in the config, the tokenized and filtered training set, and the validation sets.

In: the config's `[data]` section (and the model section it must fit), the `RunContext`. Out: `RunData` (the
corpus and the held-out rows), a `TrainingSet` (the tokenized examples, what the filters removed, examples per direction), the validation sets.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from datasets import Dataset

from hf_langspec_cli.config_file import ConfigError

from ...data.bible import BibleCorpusConfig, build_bible_corpus
from ...data.checks import (
    check_stray_languages,
    counts_table,
    held_out_overlap,
    untrained_test_directions,
    warn_about_labels,
)
from ...data.corpus_store import direction_order, prepare_training_set, read_corpus, renamed_languages
from ...data.local import load_local
from ...data.processing import per_direction
from ...evaluation.evaluate import check_one_set_per_direction
from ...evaluation.test_sets import read_test_sets
from ..batches import sampling_columns
from ..config import DATA_DEFAULTS, named_test_files
from ..model_check import build_model_config, resolve_high_resource
from .context import RunContext, RunData, TrainingSet

logger = logging.getLogger(__name__)


def load_data(data: dict[str, Any], run: RunContext) -> RunData:
    """The training corpus, read into memory-mapped Arrow (`corpus_store.read_corpus`; the main process reads,
    the others map the same file), its capped view, and the validation and test rows (small, in memory)."""

    codes = data.get("language_codes")  # every file's codes renamed as it is read
    if "bible" in data:
        with run.args.main_process_first(desc="building the Bible corpus"):
            corpus = build_bible_corpus(run.output_dir / "data", BibleCorpusConfig(**data["bible"]))
        train_files, valid_files = [corpus.files["train"]], [corpus.files["valid"]]
    else:
        train_files = data["train_files"] if isinstance(data["train_files"], list) else [data["train_files"]]
        valid_files = data.get("valid_files", [])
        valid_files = valid_files if isinstance(valid_files, list) else [valid_files]
    test_paths = named_test_files(data, corpus.files if "bible" in data else None)
    with run.args.main_process_first(desc="reading the training files"):
        train = read_corpus(train_files, data.get("cache_dir"), language_codes=codes)
    if not len(train):
        raise ConfigError(f"[data] the training files {[str(p) for p in train_files]} hold no examples.")
    check_stray_languages(train, "[data] training files")
    valid = list(renamed_languages((row for path in valid_files for row in load_local(path)), codes))
    tests = {name: list(renamed_languages(load_local(path).to_list(), codes)) for name, path in test_paths.items()}
    cap = data.get("max_train_examples_per_direction")
    try:
        view = train.select(direction_order(train, cap)) if cap else train
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return RunData(corpus=train, train=view, valid=valid, tests=tests, language_codes=codes or {})


def cap_directions(rows: list[dict], cap: int | dict[str, int]) -> list[dict]:
    """The first `cap` rows of every direction; a mapping caps the directions it names (`"default"`: the rest).

    A mapping turns an equal-sized corpus into high- and low-resource directions by subsampling, e.g.
    `{en-fr: 1500, fr-en: 1500}` for HLT-MT's split on the Bible corpus. Directions come in the order of their
    first row (`corpus_store.direction_order`, which a run applies to its corpus on disk).
    """

    languages = Dataset.from_dict({side: [r[side] for r in rows] for side in ("src_lang", "tgt_lang")})
    try:
        return [rows[i] for i in direction_order(languages, cap).tolist()]
    except ValueError as error:
        raise ConfigError(str(error)) from None


def check_against_data(config: dict[str, Any], sizes: dict[str, int]) -> None:
    """What the config says that only the data can refute, before the tokenizer is trained: the example
    translation's languages (once checked after training and evaluation), and the model config, built with
    the data's languages (`sizes`: examples per direction) and a stand-in for the vocabulary (heads that do not divide d_model, unknown
    insertion points, high-resource languages outside the data)."""
    languages = sorted({code for direction in sizes for code in direction.split("-")})
    example = config.get("translate") or {}
    unknown = [code for code in (example.get("src_lang"), example.get("tgt_lang")) if code and code not in languages]
    if unknown:
        raise ConfigError(
            f"[translate] {example['src_lang']} -> {example['tgt_lang']}: {unknown} not among the training "
            f"languages {languages}; translate between two of them."
        )
    model = dict(config.get("model", {}))
    if {"init_from", "init_from_pretrained"} & set(model) or "path" in config.get("tokenizer", {}):
        return  # its own config, the checkpoint's shape (checked before), or the tokenizer's languages
    # a data-size rule, here on the unfiltered data: its languages include those of the filtered data
    resolve_high_resource(model, sizes)
    model.setdefault("language_pairs", sorted(sizes))
    try:
        build_model_config(model, languages, config.get("tokenizer", {}))
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(f"[model] {error}") from None


LONG_WARNING_SHARE = 0.1  # max_length removing more of the corpus than this is said


def setting_warnings(data: RunData, sizes: dict[str, int], report: Any, args: Any) -> list[str]:
    """What the settings mean for this data that each setting alone does not show, said before training:
    held-out sets that overlap the training data (one that is wholly inside it is refused), supervised test
    directions the training data lacks, `max_length` removing much of the corpus, a batch larger than the corpus."""

    messages = []
    held_out = {f"test set {name!r}": rows for name, rows in data.tests.items()} | {"the validation set": data.valid}
    overlap = held_out_overlap(data.corpus, held_out)  # one pass over the corpus for every set
    for name, rows in held_out.items():
        seen = overlap[name]
        if seen and seen == len(rows):
            raise ConfigError(
                f"{name}: all {seen} of its source sentences occur in the training data, so its scores measure "
                "memorisation; give held-out text (data.test_files / valid_files)."
            )
        if seen:
            messages.append(
                f"{name}: {seen} of its {len(rows)} source sentences occur in the training data; its scores overstate "
                "the model on unseen text (remove them from the training files or the set)."
            )
    for name, rows in data.tests.items():
        untrained = untrained_test_directions(sizes, rows)
        if untrained and name != "zero-shot":
            messages.append(
                f"test set {name!r} has directions the training data lacks ({', '.join(untrained[:6])}"
                f"{' ...' if len(untrained) > 6 else ''}): they are zero-shot, not {name}; give them as a test set "
                "named zero-shot (data.test_files: {zero-shot: FILE})."
            )
    present = {code for direction in sizes for code in direction.split("-")} | data.held_out_languages()
    unused = sorted(old for old, new in data.language_codes.items() if new not in present)
    if unused:
        messages.append(
            f"data.language_codes renames {unused}, which the data does not have (it has {sorted(present)}); check "
            "the codes."
        )
    too_long = sum(n for reason, n in report.removed.items() if reason.startswith("longer than"))
    if report.total and too_long / report.total > LONG_WARNING_SHARE:
        messages.append(
            f"data.max_length removed {too_long:,} of {report.total:,} training examples ({too_long / report.total:.0%}) "
            "as too long; raise data.max_length to keep them."
        )
    batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
    if batch > report.kept:
        messages.append(
            f"a batch of {batch} examples is larger than the {report.kept} training examples: every batch repeats "
            "examples; lower per_device_train_batch_size or give more data."
        )
    return messages


def direction_sizes_of(train_set: Any, languages: list[str]) -> dict[str, int]:
    """Examples per direction `"src-tgt"` of a tokenized training set, counted over its id columns."""

    directions, _ = sampling_columns(train_set, with_lengths=False)
    keys, counts = np.unique(directions @ np.array([len(languages), 1]), return_counts=True)
    return {
        f"{languages[k // len(languages)]}-{languages[k % len(languages)]}": int(n)
        for k, n in zip(keys.tolist(), counts, strict=True)
    }


def prepare_training(data_section: dict[str, Any], data: RunData, tokenizer: Any, run: RunContext) -> TrainingSet:
    """Tokenize and filter the corpus once (cached on disk: the main process prepares, the others map its files),
    say what was kept, and refuse a training set the filters emptied; the settings' warnings are said here."""

    with run.args.main_process_first(desc="tokenizing"):
        prepared = prepare_training_set(
            data.corpus, tokenizer,
            max_length=data_section.get("max_length", DATA_DEFAULTS["max_length"]),
            cap=data_section.get("max_train_examples_per_direction"),
            num_proc=data_section.get("num_proc"), cache_dir=data_section.get("cache_dir"),
            show_progress=run.main,
        )  # fmt: skip
    train_set, report = prepared.dataset, prepared.report
    run.say(f"data: {'reusing' if prepared.reused else 'wrote'} the tokenized training set {prepared.path}")
    logger.info("Training data after filtering:\n%s", report.table())
    if not len(train_set):
        raise ConfigError(
            f"No training example is left after filtering ({', '.join(f'{k}: {v}' for k, v in report.removed.items() if v)}"
            f" removed of {report.total}); raise data.max_length ({data_section.get('max_length', DATA_DEFAULTS['max_length'])} subwords) or "
            "check the data."
        )
    sizes = direction_sizes_of(train_set, tokenizer.languages)
    warnings = setting_warnings(data, sizes, report, run.args)  # every process: each refuses alike
    if run.main:
        run.say(f"data: {counts_table(sizes)}")
        for message in warn_about_labels(data.train) + warnings:
            run.say(f"data: warning: {message}")
    return TrainingSet(train_set, report, sizes)


def validation_sets(data_section: dict[str, Any], data: RunData, tokenizer: Any, run: RunContext) -> dict[str, Any]:
    """The validation rows, at most `valid_sentences_per_direction` of each direction, tokenized: `{direction:
    Dataset}` for the Trainer's evaluation during training."""

    def encode(batch):
        return tokenizer(
            batch["src"], text_target=batch["tgt"], src_lang=batch["src_lang"], tgt_lang=batch["tgt_lang"]
        )

    limit = data_section.get("valid_sentences_per_direction", DATA_DEFAULTS["valid_sentences_per_direction"])
    columns = ["src_lang", "tgt_lang", "src", "tgt"]
    with run.args.main_process_first(desc="tokenizing"):
        return {
            direction: Dataset.from_list(rows).map(encode, batched=True, remove_columns=columns)
            for direction, rows in per_direction(data.valid, limit).items()
        }


def add_standard_test_sets(evaluation: dict[str, Any], data: RunData, languages: list[str]) -> None:
    """`[evaluation] test_sets` (FLORES-200, NTREX-128, TICO-19, WMT from their local files) read in the tokenizer's
    codes and added to the run's test sets, before training: a direction the files lack, or one that another of the
    evaluated sets has too (scores are kept per direction), is refused here."""
    specs = evaluation.get("test_sets", [])
    if not specs:
        return
    try:
        added = read_test_sets(specs, languages, evaluation.get("test_set_directions"), set(data.tests),
                               "[evaluation] test_sets")  # fmt: skip
        data.tests |= added
        evaluated = evaluation.get("splits", list(data.tests))
        check_one_set_per_direction({name: rows for name, rows in data.tests.items() if name in evaluated})
    except ValueError as error:
        raise ConfigError(str(error)) from None


__all__ = [
    "LONG_WARNING_SHARE",
    "add_standard_test_sets",
    "cap_directions",
    "check_against_data",
    "direction_sizes_of",
    "load_data",
    "prepare_training",
    "setting_warnings",
    "validation_sets",
]  # fmt: skip
