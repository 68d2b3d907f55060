"""Settings valid one by one that mean nothing together, refused as the config is read with the fix: a method's
field on a class that ignores it, a learning rate that never moves the weights, no tag for a model that never
reads the target language, stage directions that train nothing or something else."""

from __future__ import annotations

import contextlib
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from .model_check import reads_target_language, run_directions, run_languages
from .static_shapes import resolve_buckets

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
    trained = None
    with contextlib.suppress(TypeError, ValueError):  # a bad corpus setting: the data check says what is wrong
        trained = run_directions(config)
    for i, stage in enumerate(config.get("stages") or []):
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


__all__ = ["CLASS_FIELDS", "check_combinations"]
