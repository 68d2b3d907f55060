"""A config's [model] values checked before the data is read: the model config built with the run's languages
where the config names them, stand-ins otherwise, so that a value its class refuses (`lms_rank: 0`, an LSL layer
that does not exist) is one line before any corpus is built or tokenizer trained, not after."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import torch

from hf_langspec_cli.config_file import MODEL_START_KEYS, ConfigError

from ..data.bible import BibleCorpusConfig
from ..modeling.configuration_langspec import LangSpecConfig, split_language_pair
from ..modeling.registry import model_classes
from ..modeling.routing import MissingLanguageIds
from ..pretrained import check_start

logger = logging.getLogger(__name__)

# stand-in languages where the data names them only when read (`train_files`)
STAND_IN_LANGUAGES = ("en", "de", "fr")
# [model] keys that say where the model starts, beside its config class's fields
# [model] fields resolved from the data at run time (absent from the checks made before it is read)
DATA_DEPENDENT_FIELDS = {"high_resource_languages", "language_pairs"}


def pretrained_start_fields(model: dict[str, Any]) -> dict[str, Any]:
    """The method's config fields of a [model] section, for `pretrained.check_start` before the data is read."""
    return {k: v for k, v in model.items() if k not in MODEL_START_KEYS | DATA_DEPENDENT_FIELDS}


def check_model_settings(config: dict[str, Any], where: str, build: bool = False) -> None:
    """The [model] section built into its config class (and, with `build`, the model on the `meta` device: no memory,
    no weights) with the run's languages (`run_languages`), before the data is read; what the class refuses is a
    ConfigError naming `where`. A start from a saved model takes that model's config, so there is nothing to build;
    a pretrained start is built from its checkpoint's config (with `build`: the checkpoint must be there)."""
    model = dict(config.get("model", {}))
    if "init_from_pretrained" in model and build:  # the checkpoint's shape with the method, on the meta device
        try:
            check_start(model["init_from_pretrained"], model.get("class", "baseline"), pretrained_start_fields(model))
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{where} [model] init_from_pretrained: {err}") from None
    if {"init_from", "init_from_pretrained"} & set(model):
        return
    try:
        build_model_config(model, run_languages(config), config.get("tokenizer", {}), build)
    except (ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"{where} [model] {err}") from None


def build_model_config(
    model: dict[str, Any], languages: list[str], tokenizer: dict[str, Any], build: bool = False
) -> LangSpecConfig:
    """A [model] section's config class with `languages` (every pair of them unless `language_pairs` is given) and
    stand-in tag ids; the model on the `meta` device too with `build`. Raises what the class raises."""
    config_class, model_class = model_classes()[model.get("class", "baseline")]
    fields = {k: v for k, v in model.items() if k not in MODEL_START_KEYS}
    if isinstance(fields.get("high_resource_languages"), dict):  # a data-size rule, resolved once data is read
        fields["high_resource_languages"] = languages[:1]
    fields.setdefault("language_pairs", [f"{a}-{b}" for a in languages for b in languages if a != b])
    model_config = config_class(
        vocab_size=int(tokenizer.get("vocab_size", 8000)), languages=languages,
        lang_tag_token_ids=list(range(4, 4 + len(languages))),
        lang_tag_style=tokenizer.get("lang_tag_style", "source"), **fields,
    )  # fmt: skip
    if build:
        with torch.device("meta"):
            model_class(model_config)
    return model_config


def reads_target_language(model: dict[str, Any], languages: list[str], tokenizer: dict[str, Any]) -> bool:
    """Whether the [model] section's model reads the target language's id when it translates: built on the `meta`
    device (no memory, no weights) and run once in evaluation mode with the source's ids alone. A model that does not, trained without a tag
    naming the target (`lang_tag_style: none`), has no way to know which language to write."""
    config = build_model_config(dict(model), languages, tokenizer)
    with torch.device("meta"):
        built = model_classes()[model.get("class", "baseline")][1](config)
    built.eval()  # as it translates (LMS with fuse distillation decodes through its shared matrices alone)
    tokens = torch.zeros((1, 4), dtype=torch.long, device="meta")
    try:
        built(input_ids=tokens, attention_mask=torch.ones_like(tokens), decoder_input_ids=tokens,
              src_lang_ids=torch.zeros(1, dtype=torch.long, device="meta"))  # fmt: skip
    except MissingLanguageIds as missing:
        return missing.side == "target"
    return False


def run_directions(config: dict[str, Any]) -> list[str] | None:
    """The directions a run trains where the config decides them (a Bible corpus, its codes renamed by
    `data.language_codes`), or None where the data files decide them when read."""
    data = config.get("data", {})
    if "bible" not in data:
        return None
    codes = data.get("language_codes") or {}
    return [f"{codes.get(s, s)}-{codes.get(t, t)}" for s, t in BibleCorpusConfig(**data["bible"]).trained_directions()]


def run_languages(config: dict[str, Any]) -> list[str]:
    """The model's languages where the config decides them: a Bible corpus's (renamed by `data.language_codes`)
    with a tokenizer trained on it. Where they are known only later (data files, read at run time; a saved
    tokenizer, whose languages the model takes), the Bible's or stand-ins plus every code the [model] section
    names, so that no membership check refuses what the run may accept."""
    data = config.get("data", {})
    codes = data.get("language_codes") or {}
    bible = [codes.get(code, code) for code in BibleCorpusConfig(**data["bible"]).languages] if "bible" in data else []
    if bible and "path" not in config.get("tokenizer", {}):
        return bible
    model = config.get("model", {})
    named = [model.get("central_language"), *(model.get("cll_frozen_languages") or [])]
    if isinstance(model.get("high_resource_languages"), list):
        named += model["high_resource_languages"]
    for pair in model.get("language_pairs") or []:
        named += split_language_pair(pair)
    languages = bible or list(STAND_IN_LANGUAGES)
    languages += [code for code in dict.fromkeys(named) if isinstance(code, str) and code not in languages]
    return languages


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


__all__ = [
    "DATA_DEPENDENT_FIELDS",
    "STAND_IN_LANGUAGES",
    "build_model_config",
    "check_model_settings",
    "pretrained_start_fields",
    "reads_target_language",
    "resolve_high_resource",
    "run_directions",
    "run_languages",
]
