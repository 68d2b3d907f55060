"""One experiment from one config: corpus -> tokenizer -> model -> training -> evaluation -> card.

`hf-langspec train --config CONFIG` and `examples/train_translation.py --config CONFIG` run
:func:`run_experiment`. The config's sections, keys and checks are `training/config.py`'s
(`hf-langspec train --help-config` prints them); this module only runs what a checked config says.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback

from ..data.schema import read_json, training_data_names, write_atomic
from ..evaluation.trainer_metrics import TranslationMetrics
from ..modeling.registry import model_classes
from .config import (
    DATA_DEFAULTS,
    EVALUATION_DEFAULTS,
    ConfigError,
    apply_overrides,
    check_keys,
    clm_collapse_risk,
    clm_map_start_risk,
    compiled_shapes_risk,
    load_config,
    named_test_files,
    pretrained_start_fields,
    sentence_limit,
    set_keys,
    validate_config,
)

logger = logging.getLogger(__name__)

GENERATION_MAX_NEW_TOKENS = 256  # in a saved model's generation_config: what `hf-langspec translate` allows


def _check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{os.getpid()}"  # one per process: ranks of a launch probe at once
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"Cannot write to output_dir {directory}: {err.strerror}. Choose a writable directory."
        ) from None


def _load_data(data: dict[str, Any], output_dir: Path, main_process_first) -> dict[str, Any]:
    """The training corpus, read into memory-mapped Arrow (`corpus_store.read_corpus`; the main process reads,
    the others map the same file), its capped view, and the validation and test rows (small, in memory)."""
    from ..data.bible import BibleCorpusConfig, build_bible_corpus
    from ..data.checks import check_stray_languages
    from ..data.corpus_store import direction_order, read_corpus, renamed_languages
    from ..data.local import load_local

    codes = data.get("language_codes")  # every file's codes renamed as it is read
    if "bible" in data:
        with main_process_first(desc="building the Bible corpus"):
            corpus = build_bible_corpus(output_dir / "data", BibleCorpusConfig(**data["bible"]))
        train_files, valid_files = [corpus.files["train"]], [corpus.files["valid"]]
    else:
        train_files = data["train_files"] if isinstance(data["train_files"], list) else [data["train_files"]]
        valid_files = data.get("valid_files", [])
        valid_files = valid_files if isinstance(valid_files, list) else [valid_files]
    test_paths = named_test_files(data, corpus.files if "bible" in data else None)
    with main_process_first(desc="reading the training files"):
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
    return {"corpus": train, "train": view, "valid": valid, "tests": tests, "language_codes": codes or {}}


def cap_directions(rows: list[dict], cap: int | dict[str, int]) -> list[dict]:
    """The first `cap` rows of every direction; a mapping caps the directions it names (`"default"`: the rest).

    A mapping turns an equal-sized corpus into high- and low-resource directions by subsampling, e.g.
    `{en-fr: 1500, fr-en: 1500}` for HLT-MT's split on the Bible corpus. Directions come in the order of their
    first row (`corpus_store.direction_order`, which a run applies to its corpus on disk).
    """
    from datasets import Dataset

    from ..data.corpus_store import direction_order

    languages = Dataset.from_dict({side: [r[side] for r in rows] for side in ("src_lang", "tgt_lang")})
    try:
        return [rows[i] for i in direction_order(languages, cap).tolist()]
    except ValueError as error:
        raise ConfigError(str(error)) from None


def resolve_high_resource(model_section: dict[str, Any], train_sizes: dict[str, int]) -> None:
    """`high_resource_languages: {min_examples: N}`: the languages with at least N training examples into them.

    HLT-MT's split of the languages by data size (section 3.5); English, the target of every xx-en
    direction, counts them all. An explicit list is kept as it is.
    """
    rule = model_section.get("high_resource_languages")
    if not isinstance(rule, dict):
        return
    if set(rule) != {"min_examples"}:
        raise ConfigError(
            f"[model] high_resource_languages must be a list of codes or {{min_examples: N}}, got {rule}."
        )
    into: Counter = Counter()
    for direction, size in train_sizes.items():
        into[direction.split("-")[1]] += size
    high = sorted(code for code, size in into.items() if size >= rule["min_examples"])
    if not high:
        raise ConfigError(
            f"[model] no language has {rule['min_examples']} training examples into it (the most: "
            f"{into.most_common(1)}); lower high_resource_languages.min_examples."
        )
    logger.info("High-resource languages (at least %d examples into them): %s", rule["min_examples"], high)
    model_section["high_resource_languages"] = high


def _stage_directions(stage: dict[str, Any], config: Any, available: list[str]) -> list[str] | None:
    """A stage's directions: a list, or `high_resource` (source and target both high-resource)."""
    directions = stage.get("directions")
    if directions != "high_resource":
        return directions
    high = set(getattr(config, "high_resource_languages", []) or [])
    chosen = [d for d in available if set(d.split("-")) <= high]
    if not chosen:
        raise ConfigError(
            f"Stage {stage['name']!r}: directions=high_resource, but no training direction joins two high-resource "
            f"languages ({sorted(high) or 'none set'}); set model.high_resource_languages."
        )
    return chosen


def _tokenizer(section: dict[str, Any], train_rows: list[dict], output_dir: Path, main_process_first, say=print,
               cached: Path | None = None):  # fmt: skip
    """The run's tokenizer: `[tokenizer] path`'s, the one in `output_dir/tokenizer` (a resumed run; its settings must
    be the section's), the one kept in `cached` (trained before on this corpus with these settings), or one trained
    on `train_rows` now (and kept in `cached`)."""
    from ..data.corpus_store import publish_copy
    from ..model_folder import load_tokenizer, tokenizer_problem
    from ..tokenization import LangSpecTokenizer, train_tokenizer

    if "path" in section:
        say(
            f"tokenizer: loading {section['path']}"
        )  # a saved vocabulary, used with its own tag style or the one given
        style = {"lang_tag_style": section["lang_tag_style"]} if "lang_tag_style" in section else {}
        return load_tokenizer(section["path"], "[tokenizer] path", **style)
    target = output_dir / "tokenizer"
    settings_file = target / "hf_langspec_training.json"  # what the reused tokenizer was trained with
    with main_process_first(desc="training the tokenizer"):
        if (target / "tokenizer.json").exists():
            say(f"tokenizer: reusing {target}")
            recorded = read_json(settings_file) if settings_file.exists() else None
            if recorded != section:
                raise ConfigError(
                    f"{target} holds a tokenizer trained with {recorded}, but [tokenizer] now says {section}. "
                    "Use a new output_dir, or delete that tokenizer (and the checkpoints trained with it)."
                )
        elif cached is not None and cached.is_dir() and tokenizer_problem(cached) is None:
            say(f"tokenizer: the one trained before on this corpus with these settings ({cached})")
            publish_copy(cached, target)
        else:
            say(f"tokenizer: training a {section.get('vocab_size', 8000):,}-piece {section.get('model_type', 'unigram')} vocabulary on "
                f"{len(train_rows):,} sentence pairs")  # fmt: skip
            tokenizer = train_tokenizer(train_rows, **section)
            tokenizer.save_pretrained(target)
            write_atomic(settings_file, json.dumps(section, sort_keys=True))
            if cached is not None:  # kept for the next run on this corpus (a damaged entry is replaced)
                shutil.rmtree(cached, ignore_errors=True)
                publish_copy(target, cached)
    return LangSpecTokenizer.from_pretrained(target)


def run_experiment(config: dict[str, Any], resume: bool = True) -> dict[str, Any]:
    """Run every step of the config; returns paths and the evaluation results. Resumes by default.

    A run resumed into its output_dir must have the config it was started with (`run_guard`), and one
    process at a time trains into an output_dir.
    """
    import contextlib

    from .run_guard import RunLock, check_resumed_config
    from .trainer import LangSpecTrainingArguments, check_processes_joined

    validate_config(config)
    _check_saved_models(config.get("model", {}), config.get("tokenizer", {}))
    output_dir = Path(config["output_dir"])
    _check_writable(output_dir)
    # the base arguments give the seed and the main-process-first guard; each stage builds its own
    base_args = LangSpecTrainingArguments(output_dir=str(output_dir / "checkpoints"), **config.get("training", {}))
    check_processes_joined(base_args.world_size)  # before the lock, which a lone process would take for itself
    main = base_args.process_index == 0
    with RunLock(output_dir) if main else contextlib.nullcontext():
        if main:
            check_resumed_config(output_dir, config, resume)
        return _run(config, resume, output_dir, base_args)


def _check_saved_models(model: dict[str, Any], tokenizer: dict[str, Any]) -> None:
    """The saved models a run starts from (`init_from`, `init_encoder_from`) and the saved tokenizer
    (`tokenizer.path`), checked before any data is built: a missing, damaged or foreign folder, or a config that
    does not fit its weights, is one line (model_folder.py lists the faults). Each is loaded to check it, and
    loaded again where the run builds its model."""
    from ..model_folder import ModelFolderError, load_model_folder, load_tokenizer, tokenizer_problem

    if "path" in tokenizer:
        folder = Path(tokenizer["path"])
        missing = "is a file, not a folder" if folder.exists() else "does not exist"
        problem = tokenizer_problem(folder) if folder.is_dir() else missing
        if problem:
            raise ModelFolderError(f"[tokenizer] path {folder}: {problem}; give the tokenizer folder a run saved.")
        load_tokenizer(folder, "[tokenizer] path", **{k: v for k, v in tokenizer.items() if k == "lang_tag_style"})
    if "init_from" in model:
        load_model_folder(model["init_from"])
    if "init_from_pretrained" in model:
        from ..pretrained import check_start

        try:
            check_start(model["init_from_pretrained"], model.get("class", "baseline"), pretrained_start_fields(model))
        except (ValueError, TypeError) as error:
            raise ConfigError(f"[model] init_from_pretrained: {error}") from None
    encoder = model.get("init_encoder_from")
    if encoder is not None:
        load_model_folder(encoder if isinstance(encoder, str) else encoder["path"], translation=False)


def _check_against_data(config: dict[str, Any], sizes: dict[str, int]) -> None:
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
    config_class = model_classes()[model.pop("class", "baseline")][0]
    model.pop("init_encoder_from", None)
    # a data-size rule, here on the unfiltered data: its languages include those of the filtered data
    resolve_high_resource(model, sizes)
    model.setdefault("language_pairs", sorted(sizes))
    tokenizer = {key: value for key, value in config.get("tokenizer", {}).items() if key == "lang_tag_style"}
    vocabulary = {"vocab_size": 8000, "languages": languages, "lang_tag_token_ids": list(range(4, 4 + len(languages)))}
    try:
        config_class(**vocabulary, **tokenizer, **model)
    except ValueError as error:
        raise ConfigError(f"[model] {error}") from None


LONG_WARNING_SHARE = 0.1  # max_length removing more of the corpus than this is said


def held_out_languages(data: dict[str, Any]) -> set[str]:
    """The languages of the validation and test rows of `_load_data`'s result."""
    rows = [row for part in [data["valid"], *data["tests"].values()] for row in part]
    return {row[side] for row in rows for side in ("src_lang", "tgt_lang")}


def setting_warnings(data: dict[str, Any], sizes: dict[str, int], report: Any, args: Any) -> list[str]:
    """What the settings mean for this data that each setting alone does not show, said before training:
    held-out sets that overlap the training data (one that is wholly inside it is refused), supervised test
    directions the training data lacks, `max_length` removing much of the corpus, a batch larger than the corpus."""
    from ..data.checks import held_out_overlap, untrained_test_directions

    messages = []
    held_out = {f"test set {name!r}": rows for name, rows in data["tests"].items()} | {
        "the validation set": data["valid"]
    }
    overlap = held_out_overlap(data["corpus"], held_out)  # one pass over the corpus for every set
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
    for name, rows in data["tests"].items():
        untrained = untrained_test_directions(sizes, rows)
        if untrained and name != "zero-shot":
            messages.append(
                f"test set {name!r} has directions the training data lacks ({', '.join(untrained[:6])}"
                f"{' ...' if len(untrained) > 6 else ''}): they are zero-shot, not {name}; give them as a test set "
                "named zero-shot (data.test_files: {zero-shot: FILE})."
            )
    present = {code for direction in sizes for code in direction.split("-")} | held_out_languages(data)
    unused = sorted(old for old, new in data.get("language_codes", {}).items() if new not in present)
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


def _run(config: dict[str, Any], resume: bool, output_dir: Path, base_args: Any) -> dict[str, Any]:
    import torch
    from datasets import Dataset

    from ..data.columns import direction_sizes, language_counts
    from ..data.corpus_store import prepare_training_set
    from ..data.processing import per_direction
    from ..evaluation import copy_baseline, evaluate_model, results_table, save_results, translate

    data_section = config.get("data", {})
    for risk in (clm_collapse_risk(config), clm_map_start_risk(config), compiled_shapes_risk(config)):
        if risk and base_args.process_index == 0:  # said first, before any data is read
            print(f"warning: {risk}")
            logger.warning(risk)
    data = _load_data(data_section, output_dir, base_args.main_process_first)
    _check_against_data(config, direction_sizes(data["train"]))
    say = _announcer(base_args.process_index == 0)
    pretrained = config.get("model", {}).get("init_from_pretrained")
    if pretrained and "path" not in config.get("tokenizer", {}):  # the checkpoint's own vocabulary and codes
        from ..pretrained import pretrained_tokenizer

        say(f"tokenizer: the checkpoint's, {pretrained}")
        try:
            added = config["model"].get("add_languages", [])
            # every language of the data, trained or only tested: a direction among untrained languages is the
            # checkpoint's own (the frozen base), and is evaluated as such
            languages = set(language_counts(data["train"])) | held_out_languages(data)
            tokenizer = pretrained_tokenizer(pretrained, sorted(languages), added)
        except ValueError as error:
            raise ConfigError(f"[model] init_from_pretrained: {error}") from None
    else:
        from ..data.corpus_store import cached_tokenizer_folder

        cap = data_section.get("max_train_examples_per_direction")
        tokenizer_section = config.get("tokenizer", {})
        kept = cached_tokenizer_folder(data["corpus"], {"tokenizer": tokenizer_section, "cap": cap},
                                       data_section.get("cache_dir"))  # fmt: skip
        tokenizer = _tokenizer(tokenizer_section, data["train"], output_dir, base_args.main_process_first, say, kept)
    say(f"tokenizer: {len(tokenizer):,} pieces, {len(tokenizer.languages)} language tags "
        f"(vocabulary {tokenizer.vocabulary_fingerprint()})")  # fmt: skip
    for code in sorted(language_counts(data["train"])):
        tokenizer.language_id(code)  # a language the tokenizer lacks fails before training
    for name, rows in data["tests"].items():
        if not rows:
            raise ConfigError(f"The {name} test set is empty; check data.test_files or the corpus settings.")

    # tokenized once, filtered over columns, cached on disk: the main process prepares, the others map its files
    with base_args.main_process_first(desc="tokenizing"):
        prepared = prepare_training_set(
            data["corpus"], tokenizer,
            max_length=data_section.get("max_length", DATA_DEFAULTS["max_length"]),
            cap=data_section.get("max_train_examples_per_direction"),
            num_proc=data_section.get("num_proc"), cache_dir=data_section.get("cache_dir"),
            show_progress=base_args.process_index == 0,
        )  # fmt: skip
    train_set, report = prepared.dataset, prepared.report
    say(f"data: {'reusing' if prepared.reused else 'wrote'} the tokenized training set {prepared.path}")
    logger.info("Training data after filtering:\n%s", report.table())
    if not len(train_set):
        raise ConfigError(
            f"No training example is left after filtering ({', '.join(f'{k}: {v}' for k, v in report.removed.items() if v)}"
            f" removed of {report.total}); raise data.max_length ({data_section.get('max_length', DATA_DEFAULTS['max_length'])} subwords) or "
            "check the data."
        )
    # examples per direction, counted once: language pairs, the high/low split, stage directions, the card
    train_sizes = _direction_sizes(train_set, tokenizer.languages)
    warnings = setting_warnings(data, train_sizes, report, base_args)  # every process: each refuses alike
    if base_args.process_index == 0:
        from ..data.checks import counts_table, warn_about_labels

        say(f"data: {counts_table(train_sizes)}")
        for message in warn_about_labels(data["train"]) + warnings:
            say(f"data: warning: {message}")
    model_section = dict(config.get("model", {}))
    torch.manual_seed(base_args.seed)
    if "init_from" in model_section:  # continue a saved model (e.g. one extended with a new language)
        from ..model_folder import load_model_folder

        model = load_model_folder(model_section["init_from"], folder_checked=True)  # its config must fit its weights
    else:
        # the trained directions: mCLM keys its gates by them (and every checkpoint records them)
        model_section.setdefault("language_pairs", sorted(train_sizes))
        resolve_high_resource(model_section, train_sizes)
        method = model_section.pop("class", "baseline")
        config_class, model_class = model_classes()[method]
        encoder_init = model_section.pop("init_encoder_from", None)
        if pretrained:
            model = _pretrained_model(pretrained, method, tokenizer, model_section, say)
        else:
            model = model_class(config_class(**tokenizer.model_config_kwargs(), **model_section))
        if encoder_init is not None:  # HLT-MT starts from XLM-R: here a saved XLP/XLM encoder (resuming overrides it)
            from .pretrained_encoder import init_encoder_from

            spec = {"path": encoder_init} if isinstance(encoder_init, str) else encoder_init
            copied = init_encoder_from(model, spec["path"], decoder_layers=spec.get("decoder_layers", False))
            logger.info("Initialised %d tensors from the encoder in %s", len(copied), spec["path"])
    if getattr(model.config, "cll_frozen_languages", None) and base_args.weight_decay:
        raise ConfigError(
            f"The model freezes the LSLs of {model.config.cll_frozen_languages}, but weight_decay="
            f"{base_args.weight_decay} would still shrink them; set training.weight_decay: 0."
        )
    tokenizer.check_model(model)
    from ..modeling.modeling_langspec import added_parameters

    added = added_parameters(model)
    from .trainer import ROWS_ONLY

    # a matrix trained in some rows only (a new language's code rows) counts those rows
    trainable = sum(getattr(p, ROWS_ONLY, 0) * p.shape[-1] or p.numel() for p in model.parameters() if p.requires_grad)
    parameters = {"total": model.num_parameters(), "trainable": trainable}
    frozen = f", {trainable:,} trainable ({trainable / model.num_parameters():.1%})" if pretrained else ""
    say(f"model: {type(model).__name__}, {model.num_parameters():,} parameters ({added:,} in language modules)"
        f"{frozen}")  # fmt: skip

    def encode(batch):
        return tokenizer(
            batch["src"], text_target=batch["tgt"], src_lang=batch["src_lang"], tgt_lang=batch["tgt_lang"]
        )

    columns = ["src_lang", "tgt_lang", "src", "tgt"]
    with base_args.main_process_first(desc="tokenizing"):
        valid_per_direction = per_direction(
            data["valid"],
            data_section.get("valid_sentences_per_direction", DATA_DEFAULTS["valid_sentences_per_direction"]),
        )
        eval_sets = {
            direction: Dataset.from_list(rows).map(encode, batched=True, remove_columns=columns)
            for direction, rows in valid_per_direction.items()
        }
    stages = config.get("stages") or [{"name": "main"}]
    stages = [
        {**stage, "directions": _stage_directions(stage, model.config, sorted(train_sizes))}
        if "directions" in stage
        else stage
        for stage in stages
    ]
    if base_args.process_index == 0:
        from .run_guard import record_config

        record_config(output_dir, config)  # what is trained from here on: a resumption must match it
    trained = []  # what each stage ran: steps, and the steps, seconds and source tokens of this process
    for stage in stages:
        stage_dir = output_dir / "checkpoints" / stage["name"] if len(stages) > 1 else output_dir / "checkpoints"
        stage_args = type(base_args)(
            output_dir=str(stage_dir), **{**config.get("training", {}), **stage.get("training", {})}
        )
        batch = stage_args.per_device_train_batch_size * stage_args.gradient_accumulation_steps * stage_args.world_size
        say(
            f"training: stage {stage['name']}, {stage_args.max_steps:,} steps x {batch} examples, checkpoints in {stage_dir}"
        )
        warmup = stage_args.get_warmup_steps(stage_args.max_steps) if stage_args.max_steps > 0 else 0
        if warmup >= stage_args.max_steps > 0:  # a shrunk smoke test does this on purpose; a real run by mistake
            say(
                f"training: the warm-up ({warmup:,} steps) is not shorter than the stage, so the learning rate "
                f"reaches at most {stage_args.max_steps / warmup:.0%} of {stage_args.learning_rate:g}"
            )
        model, trainer, record = _run_stage(stage, stage_args, model, tokenizer, train_set, eval_sets, resume)
        trained.append(record)
        if stage is not stages[-1] and hasattr(model, "end_of_stage"):
            # method-specific transitions, e.g. HLT-MT fixing each high-resource language's adapter
            logger.info("End of stage %s: %s", stage["name"], model.end_of_stage())
    model_dir = output_dir / "model"
    # transformers' default stops generation at 20 tokens; a shared model should translate whole sentences
    # (within the positions the decoder has: its start token and a target tag come before the new tokens)
    positions = getattr(model.config, "max_position_embeddings", None) or GENERATION_MAX_NEW_TOKENS + 2
    model.generation_config.max_new_tokens = min(GENERATION_MAX_NEW_TOKENS, positions - 2)
    trainer.save_loadable_model(model_dir)  # every process: under FSDP the weights are gathered from all
    if not trainer.is_world_process_zero():
        return {"model_dir": model_dir}
    (model_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle; the run's config is in run_info.json
    tokenizer.save_pretrained(model_dir)
    _write_run_info(output_dir, config, stage_args, report, trained, parameters)

    evaluation = config.get("evaluation", {})
    outcome: dict[str, Any] = {"model_dir": model_dir, "filter_report": report}
    settings = EVALUATION_DEFAULTS | evaluation
    if evaluation.get("splits") == []:  # evaluation switched off
        return outcome
    tests = {
        name: [row for rows in per_direction(rows, sentence_limit(evaluation, name)).values() for row in rows]
        for name, rows in data["tests"].items()
        if name in evaluation.get("splits", list(data["tests"]))
    }
    model = trainer.model_for_evaluation(model, model_dir).eval()
    say(f"evaluation: {sum(map(len, tests.values())):,} sentences of {', '.join(tests)}, beam {settings['num_beams']}")
    results = evaluate_model(
        model, tokenizer, tests,
        batch_size=settings["batch_size"], num_beams=settings["num_beams"],
        max_new_tokens=settings["max_new_tokens"], off_target=settings["off_target"],
        identifier=_identifier(evaluation),
    )  # fmt: skip
    baseline = copy_baseline(tests)
    from ..model_folder import weights_fingerprint

    weights = weights_fingerprint(model_dir)
    paths = save_results(results, output_dir / "evaluation", baseline, weights=weights)
    table = results_table(results, baseline)
    print(table)
    if config.get("expected"):
        from ..evaluation.expected import compare_with_expected

        outcome["expected"] = compare_with_expected(results, config["expected"])
        print("\n".join(outcome["expected"]))

    from ..export.card import write_model_card

    card_section = {"datasets": training_data_names(config["data"]), **config.get("card", {})}
    # the results as saved, with the weights they scored: the card checks them (a fresh run said they were unknown)
    scored = {**results, "model_weights": weights}
    write_model_card(model_dir, scored, force=True, train_sizes=train_sizes, **card_section)  # the run's own folder
    outcome |= {"results": results, "results_files": paths}
    example = config.get("translate")
    if example:
        outcome["example"] = translate(
            model, tokenizer, [example["text"]], example["src_lang"], example["tgt_lang"], show_progress=False,
            max_new_tokens=model.generation_config.max_new_tokens,
        )[0]  # fmt: skip
        print(f"{example['src_lang']} -> {example['tgt_lang']}: {example['text']}\n  {outcome['example']}")
    return outcome


def _pretrained_model(path: str, method: str, tokenizer: Any, fields: dict[str, Any], say) -> Any:
    """`method` on the checkpoint at `path`, started as it (`pretrained.adapt_pretrained`), its weights frozen unless
    `freeze_pretrained: false` (the default freezes them when the method adds language modules) but for the
    parameters named in `train_pretrained` and the code rows of `add_languages`."""
    from ..pretrained import adapt_pretrained, freeze_base, new_language_rows

    freeze = fields.pop("freeze_pretrained", method != "baseline")
    also = tuple(fields.pop("train_pretrained", ()))
    added = fields.pop("add_languages", [])
    say(f"model: {method} on {path}, started as the checkpoint" + (f", {added} added" if added else ""))
    try:
        model = adapt_pretrained(path, method, tokenizer, new_languages=added, **fields)
    except ValueError as error:
        raise ConfigError(f"[model] init_from_pretrained: {error}") from None
    if freeze:
        unmatched = [part for part in also if not any(part in name for name, _ in model.named_parameters())]
        if unmatched:
            raise ConfigError(f"[model] train_pretrained: {unmatched} name no parameter of the model (names look "
                              f"like {next(iter(model.state_dict()))}).")  # fmt: skip
        try:
            freeze_base(model, also, rows=new_language_rows(tokenizer, added))
        except ValueError as error:
            raise ConfigError(f"[model] {error}") from None
    return model


def _direction_sizes(train_set: Any, languages: list[str]) -> dict[str, int]:
    """Examples per direction `"src-tgt"` of a tokenized training set, counted over its id columns."""
    from .trainer import sampling_columns

    directions, _ = sampling_columns(train_set, with_lengths=False)
    keys, counts = np.unique(directions @ np.array([len(languages), 1]), return_counts=True)
    return {
        f"{languages[k // len(languages)]}-{languages[k % len(languages)]}": int(n)
        for k, n in zip(keys.tolist(), counts, strict=True)
    }


def _identifier(evaluation: dict[str, Any]):
    """`evaluation.language_identifier` (lingua, langid, py3langid), or None for the default."""
    from ..evaluation.language_id import language_identifier

    name = evaluation.get("language_identifier")
    return (
        language_identifier(name) if name and evaluation.get("off_target", EVALUATION_DEFAULTS["off_target"]) else None
    )


def _run_stage(
    stage: dict[str, Any], args: Any, model: Any, tokenizer: Any, train_set: Any, eval_sets: dict, resume: bool
):
    """Train one stage on its directions; a finished stage is loaded from its `final` folder instead."""
    from transformers import DataCollatorForSeq2Seq

    from .trainer import LangSpecSeq2SeqTrainer

    final = Path(args.output_dir) / "final"
    record: dict[str, Any] = {"stage": stage["name"], "max_steps": args.max_steps}
    if "directions" in stage:
        from .trainer import sampling_columns

        wanted = [[tokenizer.language_id(c) for c in d.split("-")] for d in stage["directions"]]
        directions, _ = sampling_columns(train_set, with_lengths=False)
        keys = directions @ np.array([1 << 20, 1])  # one integer per (source, target) pair
        keep = np.flatnonzero(np.isin(keys, np.array(wanted, dtype=np.int64) @ np.array([1 << 20, 1])))
        if not len(keep):
            raise ConfigError(f"Stage {stage['name']!r}: no training data for directions {stage['directions']}.")
        train_set = train_set.select(keep)
        eval_sets = {d: ds for d, ds in eval_sets.items() if d in stage["directions"]}
    trainer = LangSpecSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_sets or None,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, pad_to_multiple_of=args.pad_to_multiple_of),
        processing_class=tokenizer,
        compute_metrics=TranslationMetrics(tokenizer) if args.predict_with_generate else None,
    )
    complete = read_json(final / "stage_complete.json") if (final / "stage_complete.json").exists() else None
    if resume and complete and args.max_steps > 0 and complete["step"] < args.max_steps:  # a larger max_steps
        from .checkpoints import last_complete_checkpoint

        last = last_complete_checkpoint(args.output_dir)
        if last is None or not last.endswith(f"checkpoint-{complete['step']}"):
            raise ConfigError(
                f"Stage {stage['name']!r} finished at step {complete['step']} without a checkpoint there (the optimizer "
                f"state), so it cannot be extended to {args.max_steps} steps; use a new output_dir."
            )
        complete = None
    if resume and complete:
        logger.info("Stage %s is complete; loading its final weights from %s", stage["name"], final)
        model = type(model).from_pretrained(final)
        trainer.model = model
        return model, trainer, record | complete.get("trained", {})
    timing = _TrainingTime()
    trainer.add_callback(timing)
    trainer.train(resume_from_checkpoint=resume)
    record |= {"steps": trainer.state.global_step, **timing.record(trainer.state)}
    if trainer.static_capture:  # compiled over static shapes: what compiling and capturing the buckets took
        record["static_shapes"] = trainer.static_capture
    trainer.save_loadable_model(final)  # every process: under FSDP the weights are gathered from all
    if trainer.is_world_process_zero():
        write_atomic(
            final / "stage_complete.json",
            json.dumps({"stage": stage["name"], "step": trainer.state.global_step, "trained": record}),
        )
    return model, trainer, record


class _TrainingTime(TrainerCallback):
    """Times the training loop of this process (after a resume: the resumed part only)."""

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self._start = (time.perf_counter(), state.global_step, state.num_input_tokens_seen)

    def on_train_end(self, args, state, control, **kwargs) -> None:
        self._end = (time.perf_counter(), state.global_step, state.num_input_tokens_seen)

    def record(self, state) -> dict[str, Any]:
        """Steps, seconds and (with `include_num_input_tokens_seen`) source tokens trained in this process, and
        the last logged training loss (the mean over the last `logging_steps`; the history survives a resume)."""
        (t0, step0, tokens0), (t1, step1, tokens1) = self._start, self._end
        logged = [entry for entry in state.log_history if "loss" in entry]
        return {
            "steps_this_process": step1 - step0,
            "seconds": t1 - t0,
            "input_tokens_this_process": tokens1 - tokens0,
            "final_loss": logged[-1]["loss"] if logged else None,
        }


def _write_run_info(
    output_dir: Path, config: dict[str, Any], args: Any, report: Any, trained: list, parameters: dict[str, int]
) -> None:
    import torch
    import transformers

    from .. import __version__

    info = {
        "world_size": args.world_size,
        "global_train_batch_size": args.per_device_train_batch_size
        * args.world_size
        * args.gradient_accumulation_steps,
        "versions": {"hf_langspec": __version__, "torch": torch.__version__, "transformers": transformers.__version__},
        "train_filter_report": {"kept": report.kept, "removed": report.removed},
        "trained": trained,  # per stage: the steps reached, and what this process trained (steps, seconds, tokens)
        "parameters": parameters,  # total, and trainable (a pretrained start's frozen weights are not)
        "config": config,
    }
    write_atomic(output_dir / "run_info.json", json.dumps(info, indent=2, default=str))


def _announcer(main: bool):
    """One line per stage of a run (data, tokenizer, model, training, evaluation), printed by the main process."""

    def say(text: str) -> None:
        if main:
            print(text, flush=True)

    return say


# the schema's names stay importable from here, where they lived before training/config.py
__all__ = [
    "ConfigError", "TranslationMetrics", "apply_overrides", "cap_directions", "check_keys", "load_config",
    "run_experiment", "sentence_limit", "set_keys", "validate_config",
]  # fmt: skip
