"""The experiment config: its sections and keys, loading, `--set` overrides and validation, in one place.

`hf-langspec train`, `hf-langspec compare` (whose suites are sets of such configs) and the run guard read
it from here. A config (YAML or JSON) has these sections; every key is checked before any work starts, so a
typo fails in a second, not after an hour of training. `hf-langspec train --help-config` prints every key
with its type and default (:func:`schema_table`):

```yaml
output_dir: runs/bible-baseline
data:        # the Bible corpus, or canonical JSONL files
  bible: {languages: [en, de, fr, es], valid_chapters: 30, test_chapters: 30}
  # train_files: [...]; valid_files: [...]; test_files: {supervised: ..., zero-shot: ...}
  max_length: 100                     # the papers drop pairs longer than 100 subwords
  max_train_examples_per_direction: null   # or {en-fr: 1500, default: null}: subsample some directions
  # language_codes: {en: eng_Latn, de: deu_Latn}   # rename the data's codes (to a checkpoint's, e.g. NLLB's)
  num_proc: 8                         # processes that tokenize the training set (once: it is cached on disk)
  cache_dir: /data/hf_langspec        # the tokenized corpora (default $HF_LANGSPEC_CACHE or ~/.cache/hf_langspec)
tokenizer:   # a saved LangSpecTokenizer (path), or train_tokenizer arguments
  vocab_size: 8000
  lang_tag_style: source
model:       # `class` (baseline, xlp, clm, laa, cll, hlt, adapter) and its config's fields, or `init_from: <saved model>` (the tokenizer fixes vocabulary and languages)
  class: baseline
  # high_resource_languages: {min_examples: 100000}   # HLT-MT: split by data size (or a list of codes)
  # init_encoder_from: {path: runs/xlp/model, decoder_layers: true}   # start from a pretrained XLP/XLM encoder
  # init_from_pretrained: path/to/nllb-200-distilled-600M   # the method on an M2M-100 / NLLB / Marian checkpoint,
  # freeze_pretrained: true                 # its weights frozen (default: yes when the method adds modules)
  # train_pretrained: [layer_norm]          # pretrained parameters trained beside the modules, by name part
  # add_languages: [tgl_Latn]               # languages the checkpoint lacks: a new code token, row and modules
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

import contextlib
import dataclasses
import inspect
import os
from pathlib import Path
from typing import Any

from hf_langspec_cli.config_file import (
    TRANSLATE_KEYS,
    ConfigError,
    check_section_keys,
    parse_overrides,
    read_config_mapping,
    set_keys,
)

from ..config_types import check_section, type_hints
from ..data.bible import BibleCorpusConfig
from ..data.checks import check_language_codes
from ..evaluation.expected import check_expected_section
from ..evaluation.language_id import identifier_names
from ..evaluation.test_sets import find_test_set, parse_spec
from ..modeling import LangSpecConfig
from ..modeling.registry import model_classes
from ..tokenization import train_tokenizer
from ..tokenization.tags import tag_template_problem
from .model_check import check_model_settings, reads_target_language, run_directions, run_languages
from .run_guard import void_expectations
from .static_shapes import resolve_buckets
from .training_args import LangSpecTrainingArguments

TRANSLATE_TYPES = {"text": str, "src_lang": str, "tgt_lang": str}
BIBLE_TEST_FILES = {"supervised": "test", "zero-shot": "test.zeroshot"}  # a Bible corpus's test sets: name -> file
# what [evaluation] does when a key is not given (the run reads them from here)
# what [data] does when a key is not given (the run reads them from here), and what an absence means
DATA_DEFAULTS = {"max_length": 100, "valid_sentences_per_direction": 100}
DATA_ABSENT = {"max_train_examples_per_direction": "every example", "num_proc": "one process",
               "cache_dir": "$HF_LANGSPEC_CACHE, else ~/.cache/hf_langspec", "language_codes": "the data's codes",
               "train_files": "(or bible)", "valid_files": "none", "test_files": "(with train_files, required)"}  # fmt: skip
EVALUATION_DEFAULTS = {"num_beams": 4, "batch_size": 32, "max_new_tokens": 128, "off_target": "zero-shot"}
# and of the keys whose absence means something rather than a value
EVALUATION_ABSENT = {"max_sentences_per_direction": "all sentences", "language_identifier": "lingua",
                     "splits": "every test set", "test_sets": "none: standard sets as KIND:PATH, e.g. flores200:DIR",
                     "test_set_directions": "every direction of the test_sets between the model's languages",
                     "spm": "no spBLEU (a SentencePiece model file adds it)"}  # fmt: skip
SECTION_HELP = {
    "output_dir": "where the run writes data, checkpoints, the model and its evaluation (required)",
    "data": "the offline Bible corpus (`bible`) or canonical JSONL files, and filters",
    "tokenizer": "a saved LangSpecTokenizer (`path`), or the arguments of `train_tokenizer`",
    "model": "`class` and the fields of its config class (the tokenizer fixes vocabulary and languages)",
    "training": "every field of `LangSpecTrainingArguments` (Seq2SeqTrainingArguments and the papers' additions)",
    "stages": "optional list of stages: `name`, `directions` (a list or high_resource), `training` overrides",
    "evaluation": "the test sets' decoding and scoring",
    "translate": "one example translated at the end",
    "card": "the model card's fields",
    "expected": "ranges this config gives with the tested versions: {group or direction: {metric: [low, high]}}",
}


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`["model.clm_decoder=none", "training.max_steps=100"]` -> the config with those keys set (values are YAML).
    A config's `expected` ranges are dropped, with a printed line, when the overrides change what they measured."""

    parsed = parse_overrides(overrides)
    said = void_expectations(config, parsed)  # before set_keys: it compares with the values as written
    set_keys(config, parsed)
    validate_config(config, "the config with overrides")
    if said:
        print(said)
    return config


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read a YAML or JSON experiment config and check every key (see the module docstring)."""
    config = read_config_mapping(path)
    validate_config(config, str(path))
    return config


def validate_config(config: dict[str, Any], where: str = "config", build: bool = False) -> None:
    """Every section of an experiment config checked before any work: unknown keys (`check_section_keys`, what the
    CLI checks before the package loads), types, and settings that mean nothing together, each a ConfigError
    naming the key and the fix. With `build`, the model is built on the meta device too (`check_model_settings`)."""
    check_section_keys(config, where, class_keys())
    _check_types(config, where)
    _check_data(config.get("data", {}), where)
    model_class = _check_model(config, where)
    _check_stages(config, where)
    _check_schedule(config, where)
    _check_evaluation(config, where)
    # then what needs the run's languages and the model's class: model_check.py's first, then this module's
    bible = "bible" in config.get("data", {}) and "path" not in config.get("tokenizer", {})
    languages = run_languages(config) if bible else []
    check_model_settings(config, where, build=build)
    _check_tokenizer(config.get("tokenizer", {}), where, languages)
    check_combinations(config, model_class, where)
    translate = config.get("translate", {})
    if translate and (set(translate) != TRANSLATE_KEYS or not translate["text"].strip()):
        raise ConfigError(
            f"{where} [translate]: give text (not empty), src_lang and tgt_lang, e.g. {{text: Hello, src_lang: en, "
            f"tgt_lang: de}}; got {translate}."
        )
    if "expected" in config:
        problem = check_expected_section(config["expected"], f"{where} [expected]")
        if problem:
            raise ConfigError(problem)


def model_keys(config_class: type) -> set[str]:
    """The [model] keys of a model class besides MODEL_START_KEYS: its config's and LangSpecConfig's fields."""
    names = {name for cls in (config_class, LangSpecConfig) for name in inspect.signature(cls.__init__).parameters}
    return names - {"self", "kwargs"}


def training_keys() -> set[str]:
    """The [training] keys: LangSpecTrainingArguments' fields (the run sets output_dir)."""
    return {f.name for f in dataclasses.fields(LangSpecTrainingArguments)} - {"output_dir"}


def class_keys() -> dict[str, Any]:
    """The keys that come from the package's classes, as `hf_langspec_cli.config_file.check_section_keys` takes
    them: each model class's [model] fields, the [training] keys and the [data.bible] keys (a copy is in
    hf_langspec_cli/config_keys.json)."""
    model = {name: sorted(model_keys(config_class)) for name, (config_class, _) in model_classes().items()}
    bible = sorted(f.name for f in dataclasses.fields(BibleCorpusConfig))
    return {"model": model, "training": sorted(training_keys()), "bible": bible}


def _check_data(data: dict[str, Any], where: str) -> None:
    if ("bible" in data) == ("train_files" in data):
        raise ConfigError(
            f"{where} [data]: give either `bible` (the offline corpus) or `train_files`, not both or neither."
        )
    if "bible" in data:
        try:  # its own checks (known languages, a pivot among them, ...) before any work
            BibleCorpusConfig(**data["bible"])
        except ValueError as error:
            raise ConfigError(f"{where} [data.bible]: {error}") from None
    elif "test_files" not in data:
        raise ConfigError(f"{where} [data]: with train_files, give test_files too (e.g. {{supervised: test.jsonl}}).")
    if isinstance(data.get("language_codes"), dict):
        try:
            check_language_codes(data["language_codes"], f"{where} [data] language_codes")
        except ValueError as error:
            raise ConfigError(str(error)) from None


def _check_tokenizer(tokenizer_section: Any, where: str, languages: list[str]) -> None:
    """The [tokenizer]'s tag template with the run's `languages` where the config names them (a Bible corpus; data
    files name theirs when read, and the tokenizer's training checks them then, before it trains), and a saved
    tokenizer's few keys."""
    if "lang_tag_template" in tokenizer_section:
        problem = tag_template_problem(tokenizer_section["lang_tag_template"], languages)
        if problem:
            raise ConfigError(f"{where} [tokenizer] {problem}")
    if "path" in tokenizer_section and set(tokenizer_section) - {"path", "lang_tag_style"}:
        raise ConfigError(
            f"{where} [tokenizer]: a saved tokenizer (path) keeps its vocabulary; only lang_tag_style may be set "
            f"beside it, got {sorted(set(tokenizer_section) - {'path'})}."
        )


def _check_model(config: dict[str, Any], where: str) -> str:
    """The [model] section's starts (its keys and types are checked); returns the model class's name."""

    model = config.get("model", {})
    encoder_init = model.get("init_encoder_from")
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
    _check_pretrained_start(config, where)
    if "init_from" in model:
        extra = sorted(set(model) - {"init_from", "class"})
        if extra:
            raise ConfigError(
                f"{where} [model]: init_from continues a saved model with its own config; drop {extra} "
                "(and give the tokenizer saved with it as tokenizer.path)."
            )
        if "path" not in config.get("tokenizer", {}):
            raise ConfigError(f"{where} [tokenizer]: with model.init_from, give the model's tokenizer as `path`.")
    fixed = {"vocab_size", "languages", "lang_tag_token_ids", "lang_tag_style"} & set(model)
    if fixed:
        raise ConfigError(
            f"{where} [model]: {sorted(fixed)} come from the tokenizer; set them in [tokenizer] instead."
        )
    return model.get("class", "baseline")


def _check_stages(config: dict[str, Any], where: str) -> None:
    """Every [stages] entry (its keys are checked): a unique name, directions as a list."""

    stages = config.get("stages", [])
    for i, stage in enumerate(stages):
        if "name" not in stage:
            raise ConfigError(f"{where} [stages][{i}] needs a name (it names the stage's checkpoint folder).")
        directions = stage.get("directions", [])
        if directions != "high_resource" and not isinstance(directions, list):
            raise ConfigError(
                f"{where} [stages][{i}]: directions must be a list like [en-de, de-en] or `high_resource`, "
                f"got {directions!r}."
            )
    names = [stage.get("name") for stage in stages]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where} [stages]: names {names} must be unique.")


def _check_evaluation(config: dict[str, Any], where: str) -> None:
    identifier = config.get("evaluation", {}).get("language_identifier")
    if identifier is not None:
        try:
            identifier_names(identifier)
        except ValueError as error:
            raise ConfigError(f"{where} [evaluation]: {error}") from None
    _check_evaluation_sets(config, where)


# model fields that one class reads and every other class would accept and ignore
EVALUATION_TYPES = {"max_sentences_per_direction": int | dict | None, "num_beams": int, "batch_size": int,
                    "max_new_tokens": int, "off_target": bool | str, "language_identifier": str, "splits": list,
                    "test_sets": list[str], "test_set_directions": list[str], "spm": str}  # fmt: skip
# the element types too: a list of numbers or a test set given as a list reached Path() deep in the data loader
DATA_TYPES = {"max_length": int | None, "valid_sentences_per_direction": int, "num_proc": int | None,
              "cache_dir": str, "language_codes": dict[str, str],
              "max_train_examples_per_direction": int | dict[str, int | None] | None, "train_files": list[str] | str,
              "valid_files": list[str] | str, "test_files": dict[str, str] | str}  # fmt: skip


def _check_pretrained_start(config: dict[str, Any], where: str) -> None:
    """`model.init_from_pretrained` and its freezing keys: one start at a time, the checkpoint's own tokenizer, and
    something left to train."""
    model = config.get("model", {})
    if "init_from_pretrained" not in model:
        stray = sorted({"freeze_pretrained", "train_pretrained", "add_languages"} & set(model))
        if stray:
            raise ConfigError(f"{where} [model]: {stray} apply to a pretrained start; set model.init_from_pretrained "
                              "or drop them.")  # fmt: skip
        return
    others = sorted({"init_from", "init_encoder_from"} & set(model))
    if others:
        raise ConfigError(f"{where} [model]: init_from_pretrained and {others} are two starts; keep one.")
    tokenizer = set(config.get("tokenizer", {}))
    if tokenizer - {"path"}:
        raise ConfigError(
            f"{where} [tokenizer]: a pretrained start uses the checkpoint's own tokenizer; drop {sorted(tokenizer)} "
            "(or give `path`: a LangSpecTokenizer saved over the checkpoint's vocabulary)."
        )
    if (
        model.get("class", "baseline") == "baseline"
        and model.get("freeze_pretrained")
        and not model.get("train_pretrained")
        and not model.get("add_languages")
    ):
        raise ConfigError(
            f"{where} [model]: a baseline has no language modules, so freeze_pretrained leaves nothing to train; "
            "pick a method (class: lora, adapter, laa, ...), name parameters in train_pretrained, or unfreeze."
        )


def _check_types(config: dict[str, Any], where: str) -> None:
    """Every value of every section against the type and range of the field it sets (`config_types`)."""
    config_class = model_classes()[config.get("model", {}).get("class", "baseline")][0]

    training_hints = type_hints(LangSpecTrainingArguments, fields=True)
    check_section(config.get("training", {}), training_hints, f"{where} [training]", ConfigError)
    for i, stage in enumerate(config.get("stages", []) or []):
        check_section(stage.get("training", {}), training_hints, f"{where} [stages][{i}].training", ConfigError)
    model_hints = {**type_hints(LangSpecConfig), **type_hints(config_class)}
    # what the experiment resolves before the config class sees it: a data-size rule, saved models
    model_hints |= {"high_resource_languages": list | dict | None, "init_from": str, "init_encoder_from": str | dict,
                    "init_from_pretrained": str, "freeze_pretrained": bool, "train_pretrained": list[str],
                    "add_languages": list[str]}  # fmt: skip
    check_section(config.get("model", {}), model_hints, f"{where} [model]", ConfigError)
    check_section(config.get("tokenizer", {}), type_hints(train_tokenizer), f"{where} [tokenizer]", ConfigError)
    check_section(config.get("data", {}), DATA_TYPES, f"{where} [data]", ConfigError)
    check_section(config.get("evaluation", {}), EVALUATION_TYPES, f"{where} [evaluation]", ConfigError)
    if "bible" in config.get("data", {}):
        check_section(config["data"]["bible"], type_hints(BibleCorpusConfig, fields=True), f"{where} [data.bible]",
                      ConfigError)  # fmt: skip
    check_section(config.get("translate", {}), TRANSLATE_TYPES, f"{where} [translate]", ConfigError)


# settings valid one by one that mean nothing together: a method's field on a class that ignores it, a learning
# rate that never moves the weights, no tag for a model that never reads the target language, stage directions
# that train nothing or something else
CLASS_FIELDS = {"central_language": "cll", "high_resource_languages": "hlt"}


def check_combinations(config: dict[str, Any], model_class: str, where: str) -> None:
    """Settings valid one by one that mean nothing together: a method's field on a class that ignores it, a
    learning rate that never moves the weights."""
    model = config.get("model", {})
    for field_name, owner in CLASS_FIELDS.items():
        if model.get(field_name) is not None and model_class != owner:
            raise ConfigError(
                f"{where} [model]: {field_name} is read by class {owner!r} only, and class {model_class!r} would "
                f"ignore it; drop it or set model.class: {owner}."
            )
    style = config.get("tokenizer", {}).get("lang_tag_style", "source")
    if style == "none" and not {"init_from", "init_from_pretrained"} & set(model):
        tokenizer = config.get("tokenizer", {})
        try:
            blind = not reads_target_language(model, run_languages(config), tokenizer)
        except (ValueError, TypeError, KeyError):  # a value the model refuses: check_model_settings says it
            blind = False
        if blind:
            raise ConfigError(
                f"{where} [tokenizer] lang_tag_style: none leaves model class {model_class!r} no way to know the "
                "target language (no tag names it and none of its modules reads it), so every direction would "
                "come out in one language; keep a tag (lang_tag_style: source or target) or use a model that reads "
                "the target language (model.language_embedding: additive, LAA, CLL, adapters, ...)."
            )
    _stage_directions(config, model_class, where)
    sections = [("[training]", config.get("training", {}))]
    sections += [
        (f"[stages][{i}].training", stage.get("training", {})) for i, stage in enumerate(config.get("stages", []))
    ]
    for name, training in sections:
        if "static_shapes" in training:
            try:  # before the data is built: a malformed bucket list fails here, not after tokenizing
                resolve_buckets(training["static_shapes"], False, lambda: 1)
            except ValueError as error:
                raise ConfigError(f"{where} {name}: {error}") from None
        rate = training.get("learning_rate")
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate <= 0:
            raise ConfigError(
                f"{where} {name}: learning_rate={rate} never moves the weights, so nothing is trained; give a positive "
                "rate (the papers use 5e-4 to 1e-3 with warm-up)."
            )


def _stage_directions(config: dict[str, Any], model_class: str, where: str) -> None:
    """Stage directions that train nothing or something else than they say: an empty list, `high_resource` on a
    model without high-resource languages, and (a Bible corpus, whose directions the config decides) a direction
    the corpus does not train. Data files name theirs when read; the stage refuses an absent one then."""
    stages, trained = config.get("stages") or [], None
    if stages:
        with contextlib.suppress(TypeError, ValueError):  # a bad corpus setting: the data check says what is wrong
            trained = run_directions(config)
    for i, stage in enumerate(stages):
        directions, here = stage.get("directions"), f"{where} [stages][{i}] ({stage.get('name')})"
        if directions == []:
            raise ConfigError(f"{here}: directions is an empty list, so the stage trains nothing; list its directions "
                              "or leave directions out to train every direction.")  # fmt: skip
        if directions == "high_resource" and model_class != CLASS_FIELDS["high_resource_languages"]:
            raise ConfigError(
                f"{here}: directions: high_resource picks the directions between model.high_resource_languages, "
                f"which class {model_class!r} does not have; list the stage's directions or use model.class: hlt."
            )
        absent = [d for d in directions if d not in trained] if trained and isinstance(directions, list) else []
        if absent:
            raise ConfigError(f"{here}: the corpus trains no {absent}; its directions are {', '.join(trained)}.")


def named_test_files(data: dict[str, Any], corpus_files: dict[str, Any] | None = None) -> dict[str, Any]:
    """A [data] section's test sets by name: a Bible corpus's supervised and (where it has zero-shot directions)
    zero-shot files (from its `corpus_files` once built, None before), or `test_files` (a single file is the set named supervised)."""
    if "bible" in data:
        zero_shot = BibleCorpusConfig(**data["bible"]).zero_shot_directions()  # none for en/de alone
        names = BIBLE_TEST_FILES if zero_shot else {"supervised": BIBLE_TEST_FILES["supervised"]}
        return {name: corpus_files[key] if corpus_files else None for name, key in names.items()}
    tests = data["test_files"]
    return dict(tests) if isinstance(tests, dict) else {"supervised": tests}


def _check_evaluation_sets(config: dict[str, Any], where: str) -> None:
    """`evaluation.splits` and `evaluation.off_target` name test sets the config has: a name it lacked
    evaluated, or measured, nothing without a word, after the whole training."""
    evaluation = config.get("evaluation", {})
    names = list(named_test_files(config["data"])) + _standard_set_names(evaluation, where)
    splits = evaluation.get("splits")
    unknown = [name for name in splits or [] if name not in names]
    if unknown:
        raise ConfigError(
            f"{where} [evaluation]: splits {unknown} are not test sets of this config; use some of {names} "
            "([] evaluates none)."
        )
    off_target = evaluation.get("off_target")  # a set that splits leaves out is measured on nothing, as asked
    if isinstance(off_target, str) and off_target not in names:
        raise ConfigError(
            f"{where} [evaluation]: off_target = {off_target!r} is not a test set of this config ({names}); "
            "name one of them, or write true (every set) or false."
        )


def _standard_set_names(evaluation: dict[str, Any], where: str) -> list[str]:
    """`[evaluation] test_sets` (KIND:PATH, read after the tokenizer, in its codes) exist in their layout, and `spm`
    is a file: checked before any work. Their names (the kinds) join the config's test sets."""
    for spec in evaluation.get("test_sets", []):
        try:
            find_test_set(spec)
        except (ValueError, FileNotFoundError) as error:
            raise ConfigError(f"{where} [evaluation] test_sets: {error}") from None
    if "spm" in evaluation and not Path(evaluation["spm"]).is_file():
        raise ConfigError(f"{where} [evaluation] spm: {evaluation['spm']} is not a file; give a SentencePiece model.")
    return [parse_spec(spec)[0] for spec in evaluation.get("test_sets", [])]


def _check_schedule(config: dict[str, Any], where: str) -> None:
    """Steps as each Trainer sees them (a stage's training over the base's): `max_steps: 0` trained for
    num_train_epochs epochs without a word (the Trainer reads max_steps <= 0 as "train by epochs"; -1, its
    default, stays that). A warm-up longer than the run is said when the stage starts (a smoke test shrinks
    max_steps on purpose)."""
    base = config.get("training", {})
    stages = config.get("stages") or []
    sections = [(f"[stages][{i}].training", {**base, **stage.get("training", {})}) for i, stage in enumerate(stages)]
    for name, training in sections or [("[training]", base)]:
        if training.get("max_steps", -1) == 0:
            raise ConfigError(
                f"{where} {name}: max_steps = 0 would train num_train_epochs epochs instead of nothing; give the "
                "number of steps (or -1 to train by epochs)."
            )


def sentence_limit(evaluation: dict[str, Any], set_name: str) -> int | None:
    """`max_sentences_per_direction`: one number, or `{supervised: 50, zero-shot: 20, default: 50}` per test set."""
    limit = evaluation.get("max_sentences_per_direction")
    return limit.get(set_name, limit.get("default")) if isinstance(limit, dict) else limit


__all__ = [
    "apply_overrides", "class_keys", "load_config", "model_keys", "sentence_limit", "training_keys", "validate_config",
]  # fmt: skip
