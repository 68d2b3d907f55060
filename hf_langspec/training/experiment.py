"""One experiment from one config file: corpus -> tokenizer -> model -> training -> evaluation -> card.

`hf-langspec train --config CONFIG` and `examples/train_translation.py --config CONFIG` run
:func:`run_experiment`. The config (YAML or JSON) has these sections; every key is checked before any
work starts, so a typo fails in a second, not after an hour of training:

```yaml
output_dir: runs/bible-baseline
data:        # the Bible corpus, or canonical JSONL files
  bible: {languages: [en, de, fr, es], valid_chapters: 30, test_chapters: 30}
  # train_files: [...]; valid_files: [...]; test_files: {supervised: ..., zero-shot: ...}
  max_length: 100                     # the papers drop pairs longer than 100 subwords
  max_train_examples_per_direction: null   # or {en-fr: 1500, default: null}: subsample some directions
tokenizer:   # a saved LangSpecTokenizer (path), or train_tokenizer arguments
  vocab_size: 8000
  lang_tag_style: source
model:       # `class` (baseline, xlp, clm, laa, cll, hlt, adapter) and its config's fields, or `init_from: <saved model>` (the tokenizer fixes vocabulary and languages)
  class: baseline
  # high_resource_languages: {min_examples: 100000}   # HLT-MT: split by data size (or a list of codes)
  # init_encoder_from: {path: runs/xlp/model, decoder_layers: true}   # start from a pretrained XLP/XLM encoder
  d_model: 256
training:    # LangSpecTrainingArguments fields
  max_steps: 2000
evaluation:
  max_sentences_per_direction: 200
  num_beams: 4
translate:   # an example printed at the end
  {text: "In the beginning God created the heavens and the earth.", src_lang: en, tgt_lang: de}
stages:      # optional: train on some directions (a list, or high_resource), then on all (each stage resumable)
  - {name: high, directions: [en-de, de-en], training: {max_steps: 1000}}
  - {name: all, training: {max_steps: 2000}}
expected:    # optional: ranges this config gives with the tested versions; a far-off result is reported
  xx-en: {bleu: [11.3, 11.7]}
```
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainerCallback

logger = logging.getLogger(__name__)

SECTIONS = {
    "output_dir", "data", "tokenizer", "model", "training", "stages", "evaluation", "translate", "card", "expected"
}  # fmt: skip
STAGE_KEYS = {"name", "directions", "training"}
DATA_KEYS = {
    "bible",
    "train_files",
    "valid_files",
    "test_files",
    "max_length",
    "max_train_examples_per_direction",
    "valid_sentences_per_direction",
    "num_proc",
}
TOKENIZER_KEYS = {
    "path",
    "vocab_size",
    "model_type",
    "character_coverage",
    "temperature",
    "sample_size",
    "seed",
    "lang_tag_style",
    "lang_tag_template",
}
EVALUATION_KEYS = {
    "max_sentences_per_direction",
    "num_beams",
    "batch_size",
    "max_new_tokens",
    "off_target",
    "language_identifier",
    "splits",
}
TRANSLATE_KEYS = {"text", "src_lang", "tgt_lang"}
CARD_KEYS = {"model_name", "license", "datasets", "paper"}
GENERATION_MAX_NEW_TOKENS = 256  # in a saved model's generation_config: what `hf-langspec translate` allows


def model_classes() -> dict[str, tuple[type, type]]:
    """`[model] class` values: (config class, translation model class) of every variant."""
    from ..modeling import (
        AdapterConfig,
        AdapterForConditionalGeneration,
        CLLConfig,
        CLLForConditionalGeneration,
        CLMConfig,
        CLMForConditionalGeneration,
        HLTConfig,
        HLTForConditionalGeneration,
        LAAConfig,
        LAAForConditionalGeneration,
        LangSpecConfig,
        LangSpecForConditionalGeneration,
        XLPForConditionalGeneration,
        XLPMTConfig,
    )

    return {
        "baseline": (LangSpecConfig, LangSpecForConditionalGeneration),
        "xlp": (XLPMTConfig, XLPForConditionalGeneration),
        "clm": (CLMConfig, CLMForConditionalGeneration),
        "laa": (LAAConfig, LAAForConditionalGeneration),
        "cll": (CLLConfig, CLLForConditionalGeneration),
        "hlt": (HLTConfig, HLTForConditionalGeneration),
        "adapter": (AdapterConfig, AdapterForConditionalGeneration),
    }


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`["model.clm_decoder=none", "training.max_steps=100"]` -> the config with those keys set (values are YAML)."""
    parsed = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"Override {item!r} must look like section.key=value, e.g. model.clm_num_features=94.")
        try:
            parsed[key] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ConfigError(f"Override {item!r}: the value is not valid YAML ({err.problem}).") from None
    set_keys(config, parsed)
    validate_config(config, "the config with overrides")
    return config


def set_keys(config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys in place: `{"model.class": "cll", "stages": [...]}` (values already parsed)."""
    for key, value in values.items():
        path = key.split(".")
        if not all(path):
            raise ConfigError(f"Override key {key!r} must look like section.key, e.g. model.clm_num_features.")
        node = config
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"Override {key!r}: {part!r} is not a section.")
        node[path[-1]] = value
    return config


class ConfigError(ValueError):
    """A config that names an unknown key or an impossible value."""


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML or JSON experiment config and check every key (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Config {path} does not exist.")
    try:
        text = path.read_text()
        config = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{at}: {getattr(err, 'problem', None) or err}.") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}.") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; save the config as UTF-8.") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the config must be a mapping of sections, got {type(config).__name__}.")
    validate_config(config, str(path))
    return config


def check_keys(section: Any, allowed: set[str], where: str) -> dict[str, Any]:
    """`section` when it is a mapping whose keys are all `allowed`; otherwise a ConfigError naming them."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(section).__name__}.")
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; known keys are {sorted(allowed)}.")
    return section


def validate_config(config: dict[str, Any], where: str = "config") -> None:
    from ..data.bible import BibleCorpusConfig
    from ..modeling import LangSpecConfig
    from .trainer import LangSpecTrainingArguments

    check_keys(config, SECTIONS, where)
    if "output_dir" not in config:
        raise ConfigError(f"{where}: output_dir is required.")
    data = config.get("data", {})
    check_keys(data, DATA_KEYS, f"{where} [data]")
    if ("bible" in data) == ("train_files" in data):
        raise ConfigError(
            f"{where} [data]: give either `bible` (the offline corpus) or `train_files`, not both or neither."
        )
    if "bible" in data:
        check_keys(data["bible"], {f.name for f in dataclasses.fields(BibleCorpusConfig)}, f"{where} [data.bible]")
        from .config_types import check_section, type_hints

        check_section(data["bible"], type_hints(BibleCorpusConfig, fields=True), f"{where} [data.bible]", ConfigError)
        try:  # its own checks (known languages, a pivot among them, ...) before any work
            BibleCorpusConfig(**data["bible"])
        except ValueError as error:
            raise ConfigError(f"{where} [data.bible]: {error}") from None
    elif "test_files" not in data:
        raise ConfigError(f"{where} [data]: with train_files, give test_files too (e.g. {{supervised: test.jsonl}}).")
    tokenizer_section = config.get("tokenizer", {})
    check_keys(tokenizer_section, TOKENIZER_KEYS, f"{where} [tokenizer]")
    if "path" in tokenizer_section and set(tokenizer_section) - {"path", "lang_tag_style"}:
        raise ConfigError(
            f"{where} [tokenizer]: a saved tokenizer (path) keeps its vocabulary; only lang_tag_style may be set "
            f"beside it, got {sorted(set(tokenizer_section) - {'path'})}."
        )
    variants = model_classes()
    model_class = config.get("model", {}).get("class", "baseline")
    if model_class not in variants:
        raise ConfigError(f"{where} [model]: class={model_class!r} is unknown; use one of {sorted(variants)}.")
    config_class = variants[model_class][0]
    model_keys = {
        name for cls in (config_class, LangSpecConfig) for name in inspect.signature(cls.__init__).parameters
    } - {"self", "kwargs"}
    check_keys(config.get("model", {}), model_keys | {"class", "init_from", "init_encoder_from"}, f"{where} [model]")
    encoder_init = config.get("model", {}).get("init_encoder_from")
    if encoder_init is not None and not (
        isinstance(encoder_init, str)
        or (
            isinstance(encoder_init, dict)
            and set(encoder_init) <= {"path", "decoder_layers"}
            and "path" in encoder_init
        )
    ):
        raise ConfigError(
            f"{where} [model]: init_encoder_from must be a saved encoder's directory or {{path: DIR, decoder_layers: "
            f"true}}, got {encoder_init!r}."
        )
    if "init_from" in config.get("model", {}):
        extra = sorted(set(config["model"]) - {"init_from", "class"})
        if extra:
            raise ConfigError(
                f"{where} [model]: init_from continues a saved model with its own config; drop {extra} "
                "(and give the tokenizer saved with it as tokenizer.path)."
            )
        if "path" not in config.get("tokenizer", {}):
            raise ConfigError(f"{where} [tokenizer]: with model.init_from, give the model's tokenizer as `path`.")
    fixed = {"vocab_size", "languages", "lang_tag_token_ids", "lang_tag_style"} & set(config.get("model", {}))
    if fixed:
        raise ConfigError(
            f"{where} [model]: {sorted(fixed)} come from the tokenizer; set them in [tokenizer] instead."
        )
    training_keys = {f.name for f in dataclasses.fields(LangSpecTrainingArguments)}
    check_keys(config.get("training", {}), training_keys - {"output_dir"}, f"{where} [training]")
    stages = config.get("stages", [])
    if not isinstance(stages, list):
        raise ConfigError(f"{where} [stages] must be a list of stages, got {type(stages).__name__}.")
    for i, stage in enumerate(stages):
        check_keys(stage, STAGE_KEYS, f"{where} [stages][{i}]")
        if "name" not in stage:
            raise ConfigError(f"{where} [stages][{i}] needs a name (it names the stage's checkpoint folder).")
        check_keys(stage.get("training", {}), training_keys - {"output_dir"}, f"{where} [stages][{i}].training")
        directions = stage.get("directions", [])
        if directions != "high_resource" and not isinstance(directions, list):
            raise ConfigError(
                f"{where} [stages][{i}]: directions must be a list like [en-de, de-en] or `high_resource`, "
                f"got {directions!r}."
            )
    names = [stage.get("name") for stage in stages]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where} [stages]: names {names} must be unique.")
    check_keys(config.get("evaluation", {}), EVALUATION_KEYS, f"{where} [evaluation]")
    _check_types(config, config_class, where)
    identifier = config.get("evaluation", {}).get("language_identifier")
    if identifier is not None:
        from ..evaluation.language_id import identifier_names

        try:
            identifier_names(identifier)
        except ValueError as error:
            raise ConfigError(f"{where} [evaluation]: {error}") from None
    check_keys(config.get("translate", {}), TRANSLATE_KEYS, f"{where} [translate]")
    check_keys(config.get("card", {}), CARD_KEYS, f"{where} [card]")
    if "expected" in config:
        from ..evaluation.expected import check_expected_section

        problem = check_expected_section(config["expected"], f"{where} [expected]")
        if problem:
            raise ConfigError(problem)


EVALUATION_TYPES = {"max_sentences_per_direction": int | dict | None, "num_beams": int, "batch_size": int,
                    "max_new_tokens": int, "off_target": bool | str, "language_identifier": str, "splits": list}  # fmt: skip
DATA_TYPES = {"max_length": int | None, "valid_sentences_per_direction": int, "num_proc": int | None,
              "max_train_examples_per_direction": int | dict | None, "train_files": list | str,
              "valid_files": list | str, "test_files": dict | str}  # fmt: skip


def _check_types(config: dict[str, Any], config_class: type, where: str) -> None:
    """Every value of every section against the type and range of the field it sets (`config_types`)."""
    from ..modeling import LangSpecConfig
    from ..tokenization import train_tokenizer
    from .config_types import check_section, type_hints
    from .trainer import LangSpecTrainingArguments

    training_hints = type_hints(LangSpecTrainingArguments, fields=True)
    check_section(config.get("training", {}), training_hints, f"{where} [training]", ConfigError)
    for i, stage in enumerate(config.get("stages", []) or []):
        check_section(stage.get("training", {}), training_hints, f"{where} [stages][{i}].training", ConfigError)
    model_hints = {**type_hints(LangSpecConfig), **type_hints(config_class)}
    # what the experiment resolves before the config class sees it: a data-size rule, saved models
    model_hints |= {"high_resource_languages": list | dict | None, "init_from": str, "init_encoder_from": str | dict}
    check_section(config.get("model", {}), model_hints, f"{where} [model]", ConfigError)
    check_section(config.get("tokenizer", {}), type_hints(train_tokenizer), f"{where} [tokenizer]", ConfigError)
    check_section(config.get("data", {}), DATA_TYPES, f"{where} [data]", ConfigError)
    check_section(config.get("evaluation", {}), EVALUATION_TYPES, f"{where} [evaluation]", ConfigError)


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
    from ..data.bible import BibleCorpusConfig, build_bible_corpus
    from ..data.checks import check_stray_languages
    from ..data.local import load_local

    if "bible" in data:
        with main_process_first(desc="building the Bible corpus"):
            corpus = build_bible_corpus(output_dir / "data", BibleCorpusConfig(**data["bible"]))
        files = corpus.files
        train_files, valid_files = [files["train"]], [files["valid"]]
        test_files = {"supervised": files["test"], "zero-shot": files["test.zeroshot"]}
    else:
        train_files = data["train_files"] if isinstance(data["train_files"], list) else [data["train_files"]]
        valid_files = data.get("valid_files", [])
        valid_files = valid_files if isinstance(valid_files, list) else [valid_files]
        test_files = data["test_files"] if isinstance(data["test_files"], dict) else {"supervised": data["test_files"]}
    train = [row for path in train_files for row in load_local(path)]
    if not train:
        raise ConfigError(f"[data] the training files {[str(p) for p in train_files]} hold no examples.")
    check_stray_languages(train, "[data] training files")
    valid = [row for path in valid_files for row in load_local(path)]
    tests = {name: load_local(path).to_list() for name, path in test_files.items()}
    cap = data.get("max_train_examples_per_direction")
    if cap:
        train = cap_directions(train, cap)
    return {"train": train, "valid": valid, "tests": tests}


def cap_directions(rows: list[dict], cap: int | dict[str, int]) -> list[dict]:
    """The first `cap` rows of every direction; a mapping caps the directions it names (`"default"`: the rest).

    A mapping turns an equal-sized corpus into high- and low-resource directions by subsampling, e.g.
    `{en-fr: 1500, fr-en: 1500}` for HLT-MT's split on the Bible corpus.
    """
    from ..data.processing import per_direction

    groups = per_direction(rows)
    limits = cap if isinstance(cap, dict) else {"default": cap}
    unknown = sorted(set(limits) - set(groups) - {"default"})
    if unknown:
        raise ConfigError(
            f"[data] max_train_examples_per_direction names {unknown}, which have no training data; the directions "
            f"are {sorted(groups)}."
        )
    kept = []
    for direction, group in groups.items():
        limit = limits.get(direction, limits.get("default"))
        kept += group if limit is None else group[: int(limit)]
        if limit is not None and len(group) > int(limit):
            logger.info("Capped %s at %d of %d training examples", direction, int(limit), len(group))
    return kept


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


def _tokenizer(section: dict[str, Any], train_rows: list[dict], output_dir: Path, main_process_first, say=print):
    from ..tokenization import LangSpecTokenizer, train_tokenizer

    if "path" in section:
        say(
            f"tokenizer: loading {section['path']}"
        )  # a saved vocabulary, used with its own tag style or the one given
        style = {"lang_tag_style": section["lang_tag_style"]} if "lang_tag_style" in section else {}
        return LangSpecTokenizer.from_pretrained(section["path"], **style)
    target = output_dir / "tokenizer"
    settings_file = target / "hf_langspec_training.json"  # what the reused tokenizer was trained with
    with main_process_first(desc="training the tokenizer"):
        if (target / "tokenizer.json").exists():
            say(f"tokenizer: reusing {target}")
            recorded = json.loads(settings_file.read_text()) if settings_file.exists() else None
            if recorded != section:
                raise ConfigError(
                    f"{target} holds a tokenizer trained with {recorded}, but [tokenizer] now says {section}. "
                    "Use a new output_dir, or delete that tokenizer (and the checkpoints trained with it)."
                )
        else:
            say(f"tokenizer: training a {section.get('vocab_size', 8000):,}-piece {section.get('model_type', 'unigram')} vocabulary on "
                f"{len(train_rows):,} sentence pairs")  # fmt: skip
            tokenizer = train_tokenizer(train_rows, **section)
            tokenizer.save_pretrained(target)
            settings_file.write_text(json.dumps(section, sort_keys=True))
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


def _run(config: dict[str, Any], resume: bool, output_dir: Path, base_args: Any) -> dict[str, Any]:
    import torch
    from datasets import Dataset

    from ..data.processing import filter_pairs, per_direction
    from ..evaluation import copy_baseline, evaluate_model, results_table, save_results, translate

    data_section = config.get("data", {})
    data = _load_data(data_section, output_dir, base_args.main_process_first)
    say = _announcer(base_args.process_index == 0)
    tokenizer = _tokenizer(config.get("tokenizer", {}), data["train"], output_dir, base_args.main_process_first, say)
    say(f"tokenizer: {len(tokenizer):,} pieces, {len(tokenizer.languages)} language tags "
        f"(vocabulary {tokenizer.vocabulary_fingerprint()})")  # fmt: skip
    languages_used = {r["src_lang"] for r in data["train"]} | {r["tgt_lang"] for r in data["train"]}
    for code in sorted(languages_used):
        tokenizer.language_id(code)  # a language the tokenizer lacks fails before training
    for name, rows in data["tests"].items():
        if not rows:
            raise ConfigError(f"The {name} test set is empty; check data.test_files or the corpus settings.")

    train, report = filter_pairs(data["train"], tokenizer=tokenizer, max_length=data_section.get("max_length", 100))
    logger.info("Training data after filtering:\n%s", report.table())
    if not len(train):
        raise ConfigError(
            f"No training example is left after filtering ({', '.join(f'{k}: {v}' for k, v in report.removed.items() if v)}"
            f" removed of {report.total}); raise data.max_length ({data_section.get('max_length', 100)} subwords) or "
            "check the data."
        )
    # examples per direction, counted once: language pairs, the high/low split, stage directions, the card
    train_sizes = Counter(f"{s}-{t}" for s, t in zip(train["src_lang"], train["tgt_lang"], strict=True))
    if base_args.process_index == 0:
        from ..data.checks import counts_table, warn_about_labels

        say(f"data: {counts_table(train_sizes)}")
        for message in warn_about_labels(data["train"]):
            say(f"data: warning: {message}")
    model_section = dict(config.get("model", {}))
    torch.manual_seed(base_args.seed)
    if "init_from" in model_section:  # continue a saved model (e.g. one extended with a new language)
        from transformers import AutoModelForSeq2SeqLM

        model = AutoModelForSeq2SeqLM.from_pretrained(model_section["init_from"])
    else:
        # the trained directions: mCLM keys its gates by them (and every checkpoint records them)
        model_section.setdefault("language_pairs", sorted(train_sizes))
        resolve_high_resource(model_section, train_sizes)
        config_class, model_class = model_classes()[model_section.pop("class", "baseline")]
        encoder_init = model_section.pop("init_encoder_from", None)
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
    added = sum(p.numel() for name, p in model.named_parameters() if ".insertions." in f".{name}")
    say(f"model: {type(model).__name__}, {model.num_parameters():,} parameters ({added:,} in language modules)")

    def encode(batch):
        return tokenizer(
            batch["src"], text_target=batch["tgt"], src_lang=batch["src_lang"], tgt_lang=batch["tgt_lang"]
        )

    columns = ["src_lang", "tgt_lang", "src", "tgt"]
    num_proc = data_section.get("num_proc")
    with base_args.main_process_first(desc="tokenizing"):
        train_set = train.map(encode, batched=True, remove_columns=columns, num_proc=num_proc, desc="tokenizing train")
        valid_per_direction = per_direction(data["valid"], data_section.get("valid_sentences_per_direction", 100))
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
        model, trainer, record = _run_stage(stage, stage_args, model, tokenizer, train_set, eval_sets, resume)
        trained.append(record)
        if stage is not stages[-1] and hasattr(model, "end_of_stage"):
            # method-specific transitions, e.g. HLT-MT fixing each high-resource language's adapter
            logger.info("End of stage %s: %s", stage["name"], model.end_of_stage())
    model_dir = output_dir / "model"
    if not trainer.is_world_process_zero():
        return {"model_dir": model_dir}
    # transformers' default stops generation at 20 tokens; a shared model should translate whole sentences
    model.generation_config.max_new_tokens = GENERATION_MAX_NEW_TOKENS
    trainer.save_model(str(model_dir))
    (model_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle; the run's config is in run_info.json
    tokenizer.save_pretrained(model_dir)
    _write_run_info(output_dir, config, stage_args, report, trained)

    evaluation = config.get("evaluation", {})
    outcome: dict[str, Any] = {"model_dir": model_dir, "filter_report": report}
    if evaluation.get("splits") == []:  # evaluation switched off
        return outcome
    tests = {
        name: [row for rows in per_direction(rows, sentence_limit(evaluation, name)).values() for row in rows]
        for name, rows in data["tests"].items()
        if name in evaluation.get("splits", list(data["tests"]))
    }
    model.eval()
    say(
        f"evaluation: {sum(map(len, tests.values())):,} sentences of {', '.join(tests)}, beam {evaluation.get('num_beams', 4)}"
    )
    results = evaluate_model(
        model, tokenizer, tests,
        batch_size=evaluation.get("batch_size", 32), num_beams=evaluation.get("num_beams", 4),
        max_new_tokens=evaluation.get("max_new_tokens", 128), off_target=evaluation.get("off_target", "zero-shot"),
        identifier=_identifier(evaluation),
    )  # fmt: skip
    baseline = copy_baseline(tests)
    paths = save_results(results, output_dir / "evaluation", baseline)
    table = results_table(results, baseline)
    print(table)
    if config.get("expected"):
        from ..evaluation.expected import compare_with_expected

        outcome["expected"] = compare_with_expected(results, config["expected"])
        print("\n".join(outcome["expected"]))

    from ..export.card import write_model_card

    card_section = config.get("card", {})
    write_model_card(model_dir, results, train_sizes=train_sizes, **card_section)
    outcome |= {"results": results, "results_files": paths}
    example = config.get("translate")
    if example:
        outcome["example"] = translate(
            model, tokenizer, [example["text"]], example["src_lang"], example["tgt_lang"], show_progress=False
        )[0]
        print(f"{example['src_lang']} -> {example['tgt_lang']}: {example['text']}\n  {outcome['example']}")
    return outcome


def sentence_limit(evaluation: dict[str, Any], set_name: str) -> int | None:
    """`max_sentences_per_direction`: one number, or `{supervised: 50, zero-shot: 20, default: 50}` per test set."""
    limit = evaluation.get("max_sentences_per_direction")
    return limit.get(set_name, limit.get("default")) if isinstance(limit, dict) else limit


def _identifier(evaluation: dict[str, Any]):
    """`evaluation.language_identifier` (lingua, langid, py3langid), or None for the default."""
    from ..evaluation.language_id import language_identifier

    name = evaluation.get("language_identifier")
    return language_identifier(name) if name and evaluation.get("off_target", "zero-shot") else None


def _run_stage(
    stage: dict[str, Any], args: Any, model: Any, tokenizer: Any, train_set: Any, eval_sets: dict, resume: bool
):
    """Train one stage on its directions; a finished stage is loaded from its `final` folder instead."""
    from transformers import DataCollatorForSeq2Seq

    from .trainer import LangSpecSeq2SeqTrainer

    final = Path(args.output_dir) / "final"
    record: dict[str, Any] = {"stage": stage["name"], "max_steps": args.max_steps}
    if "directions" in stage:
        wanted = {tuple(tokenizer.language_id(c) for c in d.split("-")) for d in stage["directions"]}
        pairs = zip(train_set["src_lang_ids"], train_set["tgt_lang_ids"], strict=True)
        keep = [i for i, pair in enumerate(pairs) if pair in wanted]
        if not keep:
            raise ConfigError(f"Stage {stage['name']!r}: no training data for directions {stage['directions']}.")
        train_set = train_set.select(keep)
        eval_sets = {d: ds for d, ds in eval_sets.items() if d in stage["directions"]}
    trainer = LangSpecSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_sets or None,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        compute_metrics=TranslationMetrics(tokenizer) if args.predict_with_generate else None,
    )
    complete = (
        json.loads((final / "stage_complete.json").read_text()) if (final / "stage_complete.json").exists() else None
    )
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
    if trainer.is_world_process_zero():
        trainer.save_model(str(final))
        (final / "stage_complete.json").write_text(
            json.dumps({"stage": stage["name"], "step": trainer.state.global_step, "trained": record})
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


def _write_run_info(output_dir: Path, config: dict[str, Any], args: Any, report: Any, trained: list) -> None:
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
        "config": config,
    }
    (output_dir / "run_info.json").write_text(json.dumps(info, indent=2, default=str))


def _announcer(main: bool):
    """One line per stage of a run (data, tokenizer, model, training, evaluation), printed by the main process."""

    def say(text: str) -> None:
        if main:
            print(text, flush=True)

    return say


class TranslationMetrics:
    """`compute_metrics` for generation-based validation through the `langspec_mt` evaluate module.

    `LangSpecSeq2SeqTrainer` passes each example's language codes (`takes_languages`), so a set mixing
    directions is scored per direction: `bleu`, `chrf` and `chrfpp` are means over its directions (the
    papers' way), plus `bleu_<group>` for each group (en-xx, xx-en, zero-shot) when the set has more than
    one, and `off_target` (zero-shot directions) when `off_target=True`. Called without codes (another
    trainer), it scores the set as one corpus.
    """

    takes_languages = True

    def __init__(self, tokenizer: Any, off_target: bool = False):
        self.tokenizer, self.off_target = tokenizer, off_target
        self._module = None

    def __call__(self, prediction: Any, src_lang: list[str] | None = None, tgt_lang: list[str] | None = None):
        import numpy as np

        from ..evaluation.metrics import corpus_scores

        pad = self.tokenizer.pad_token_id
        hyps = self.tokenizer.batch_decode(np.where(prediction.predictions < 0, pad, prediction.predictions),
                                           skip_special_tokens=True)  # fmt: skip
        refs = self.tokenizer.batch_decode(np.where(prediction.label_ids < 0, pad, prediction.label_ids),
                                           skip_special_tokens=True)  # fmt: skip
        hyps, refs = [h.strip() for h in hyps], [r.strip() for r in refs]
        if src_lang is None or tgt_lang is None:
            scores = corpus_scores(hyps, refs)
            return {"bleu": scores["bleu"], "chrf": scores["chrf"], "chrfpp": scores["chrfpp"]}
        if self._module is None:
            import evaluate

            from .. import metrics

            self._module = evaluate.load(metrics.path("langspec_mt"))
        result = self._module.compute(predictions=hyps, references=refs, src_lang=src_lang, tgt_lang=tgt_lang,
                                      off_target="zero-shot" if self.off_target else False)  # fmt: skip
        flat = {name: result[name] for name in ("bleu", "chrf", "chrfpp")}
        if len(result["groups"]["bleu"]) > 1:
            flat |= {f"bleu_{group}": value for group, value in result["groups"]["bleu"].items()}
        if "off_target" in result["groups"]:
            flat["off_target"] = result["groups"]["off_target"]["zero-shot"]
        return flat


__all__ = ["ConfigError", "TranslationMetrics", "check_keys", "load_config", "run_experiment", "validate_config"]
