"""Types and ranges of config values, checked against the annotations of the classes that receive them.

A YAML `max_steps: forty` (or `"40"`) used to reach `TrainingArguments` only after the corpus was built
and the tokenizer trained, and then failed with a `TypeError` far from the config. `check_section` checks
every key of a section against the annotation of the field it sets (`LangSpecTrainingArguments` for
[training], the model config's `__init__` for [model]) and the ranges below, before any work.
"""

from __future__ import annotations

import enum
import inspect
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

# lower bounds a value must reach, named by its config key (most classes accept such values silently)
MINIMUM = {
    "d_model": 1, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 1,
    "decoder_attention_heads": 1, "encoder_ffn_dim": 1, "decoder_ffn_dim": 1, "vocab_size": 1,
    "per_device_train_batch_size": 1, "per_device_eval_batch_size": 1, "gradient_accumulation_steps": 1,
    "num_beams": 1, "batch_size": 1, "max_new_tokens": 1, "max_length": 1, "max_sentences_per_direction": 1,
    "valid_sentences_per_direction": 1, "sample_size": 1, "learning_rate": 0, "weight_decay": 0,
    # 0: plain shuffling (no temperature); below 0 the sampler refused it once data, tokenizer and model were built
    "sampling_temperature": 0, "temperature_warmup_epochs": 0, "warmup_steps": 0, "average_last_checkpoints": 0,
    # a negative seed failed in numpy once the corpus was built; a negative max_grad_norm switched clipping off
    "seed": 0, "data_seed": 0, "max_grad_norm": 0, "max_train_examples_per_direction": 1, "pad_to_multiple_of": 1,
}  # fmt: skip
# a mapping's values where their range differs from the key's: 0 examples of one direction keeps its languages and
# test sets but trains none of it (a zero-shot direction, or a pretrained start's untouched languages)
MAPPING_MINIMUM = {"max_train_examples_per_direction": 0}
# save_steps: 0 trained to the end without a checkpoint (an interruption lost the run); logging/eval 0 failed late
POSITIVE = {"temperature", "save_steps", "eval_steps", "logging_steps", "num_train_epochs"}
# probabilities: a dropout of 1 drops everything, and 2.0 trained without a word
PROBABILITY_SUFFIXES = ("dropout", "_probability", "label_smoothing_factor", "warmup_ratio")
BELOW_ONE = ("dropout",)  # a dropout must stay below 1; the other probabilities may reach it


def _probability_problem(key: str, value: float) -> str | None:
    if not key.endswith(PROBABILITY_SUFFIXES):
        return None
    if key.endswith(BELOW_ONE):
        return None if 0 <= value < 1 else "must be in [0, 1)"
    return None if 0 <= value <= 1 else "must be in [0, 1]"


def type_hints(target: Any, fields: bool = False) -> dict[str, Any]:
    """The resolved annotations of a class's `__init__` (or its dataclass `fields`), string annotations evaluated."""
    function = target.__init__ if inspect.isclass(target) and not fields else target
    try:
        return typing.get_type_hints(function)
    except Exception:  # an annotation that cannot be resolved: check nothing rather than refuse a valid value
        return {}


def matches(value: Any, annotation: Any) -> bool:
    """Whether a YAML value fits a (simple) annotation; annotations this does not understand accept anything."""
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    if annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return isinstance(value, str) and value in {m.value for m in annotation}
    if origin in (list, tuple, Sequence, typing.Sequence) or annotation in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(annotation)
        return not args or args[-1] is Ellipsis or all(matches(v, args[0]) for v in value)
    if origin in (dict, Mapping) or annotation is dict:
        args = typing.get_args(annotation)  # the keys and values too: `{supervised: [a.jsonl]}` is not a path
        return isinstance(value, dict) and (
            not args or all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
        )
    return True


def describe(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return f"one of {list(typing.get_args(annotation))}"
    text = str(annotation).replace("typing.", "").replace("collections.abc.", "").replace("<class '", "")
    return text.replace("'>", "").replace("NoneType", "None")


def check_section(section: Mapping[str, Any], hints: Mapping[str, Any], where: str, error: type) -> None:
    """Raise `error` naming the key, the value found and what is allowed, for the first value that does not fit."""
    for key, value in section.items():
        annotation = hints.get(key)
        if annotation is not None and not matches(value, annotation):
            kind = type(value).__name__
            found = ":" if typing.get_origin(annotation) is typing.Literal else f" is {_article(kind)} {kind};"
            raise error(
                f"{where}: {key} = {value!r}{found} it must be {describe(annotation)}"
                + (f" (write {key}: {value.strip()} without quotes)." if _numeric_string(value) else ".")
            )
        # a mapping's numbers have their key's range too (`max_train_examples_per_direction: {en-de: -1}`)
        least = MAPPING_MINIMUM.get(key, MINIMUM.get(key))
        for inner in value.values() if isinstance(value, dict) and key in MINIMUM else ():
            if isinstance(inner, (int, float)) and not isinstance(inner, bool) and inner < least:
                raise error(f"{where}: {key} = {value!r}: each value must be at least {least}.")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                raise error(f"{where}: {key} = {value} must be a finite number.")
            problem = _probability_problem(key, value)
            if problem:
                raise error(f"{where}: {key} = {value} {problem}.")
            if key in MINIMUM and value < MINIMUM[key] and not (key == "max_length" and value is None):
                raise error(f"{where}: {key} = {value} must be at least {MINIMUM[key]}.")
            if key in POSITIVE and value <= 0:
                raise error(f"{where}: {key} = {value} must be greater than 0.")


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _numeric_string(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        float(value)
    except ValueError:
        return False
    return True


__all__ = ["check_section", "matches", "type_hints"]
