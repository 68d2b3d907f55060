"""A saved model's folder, checked before it is loaded and after: one line naming the file and the fault.

Every command that reads a model (`translate`, `evaluate`, `export`, `serve --model`, the analyses) goes
through :func:`load_model_folder`. What a user can meet, and what each gets instead of a traceback or,
worse, an empty translation:

* no folder (or a file where the folder should be); no `config.json`, or one that is not JSON;
* a `config.json` of another kind of model (its `model_type` is not one of this package's translation models;
  read before transformers, which would otherwise ask interactively whether to run the folder's code), or one
  whose values the config class or the model refuses;
* a `config.json` that does not match the weights (edited, or copied from another model): tensors the config
  asks for and the file lacks, tensors of another shape, or tensors the config has no place for;
* no `tokenizer.json` where a command needs the vocabulary (`check_model_folder(..., tokenizer=True)`);
* no weights, or weights only as a pickle (`pytorch_model.bin`: never unpickled, since unpickling runs code);
* a `*.safetensors` file that is truncated or has a damaged header (safetensors checks that its header
  parses and that the tensors it lists cover the file exactly: a cheap read, no tensor loaded), or a shard
  that the index lists and the folder lacks;
* a tokenizer file that does not parse, or parses but is no vocabulary tokenizers can read, or settings in
  `tokenizer_config.json` the tokenizer refuses (`load_tokenizer`);
* a config.json value of the wrong type or range (a string where a number goes, languages as one string), named
  by the same check as an experiment config's values (`config_types`);
* a weights file that is a folder, or a shard index without its weight map;
* weights that load but hold NaN or infinite values (bytes overwritten): the first such tensor is named;
* a `generation_config.json` value transformers would take and then fail on, or decode wrongly with, later (a beam
  count of 0 or "4", a token id outside the vocabulary, a negative length): the key, the value and what it must be;
* a folder whose card (README.md) records other content than the folder holds: weights saved over, or a config,
  generation setting or tokenizer (its normaliser included) edited or copied in after the card and its scores were
  written (:func:`described_model_problem`, checked by `card`, `push` and `serve`; the records are
  :func:`weights_fingerprint` and :func:`model_files_fingerprint`).

Checkpoints of a training run are checked by their manifests instead (`training/checkpoints.py`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError, safe_open
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
from transformers.utils import logging as hf_logging

from .config_types import check_section, type_hints
from .modeling import LangSpecConfig, XLPConfig
from .modeling.registry import config_classes_by_model_type
from .tokenization import LangSpecTokenizer

PICKLES = ("pytorch_model.bin", "model.pt", "model.bin")


class ModelFolderError(ValueError):
    """A model folder that cannot be used; the message names the folder, the file and what is wrong."""


def json_problem(path: Path, mapping: bool = False) -> str | None:
    """'NAME is not valid JSON (...)' or 'NAME is not UTF-8 text', or None; `mapping`: it must hold an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return f"{path.name} is not UTF-8 text"
    except ValueError as err:
        return f"{path.name} is not valid JSON ({err})"
    if mapping and not isinstance(value, dict):
        return f"{path.name} is not a JSON object (it holds a {type(value).__name__})"
    return None


def _truncation(shard: Path) -> str | None:
    """'X is truncated (...)' when the file is shorter than its own header says (the header read, nothing else);
    said in this package's words, since safetensors' own differ between its versions."""
    size = shard.stat().st_size
    try:
        with shard.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(min(length, 100 << 20)))
        end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    except (struct.error, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None  # no readable header: safetensors names the fault
    expected = 8 + length + end
    if size < expected:
        return f"{shard.name} is truncated ({size:,} bytes, its header describes {expected:,}); save or copy the model again"
    return None


def weights_problem(folder: Path) -> str | None:
    """What is wrong with the folder's weight files, or None (headers and sizes only; nothing is loaded)."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        problem = json_problem(index, mapping=True)
        if problem:
            return problem
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(name, str) for name in weight_map.values()):
            return "model.safetensors.index.json has no weight_map of tensor names to files; save the model again"
        listed = sorted(set(weight_map.values()))
        missing = [name for name in listed if not (folder / name).is_file()]
        if missing:
            return f"{missing[0]} is missing (model.safetensors.index.json lists it)"
        shards = [folder / name for name in listed]
    else:
        shards = sorted(folder.glob("*.safetensors"))
    folders = [shard.name for shard in shards if shard.is_dir()]
    if folders:  # read as a file it was errno 21, reported as a bug
        return f"{folders[0]} is a folder, not a weights file; save or copy the model again"
    if not shards:
        pickle = next((name for name in PICKLES if (folder / name).is_file()), None)
        if pickle:
            return (
                f"its weights are only {pickle}, a pickle, which is not loaded (unpickling can run code); in an "
                "environment you trust, load it and save_pretrained() it again, which writes model.safetensors"
            )
        return "it has no weights file (model.safetensors); the save was interrupted or the file was removed"
    for shard in shards:
        truncated = _truncation(shard)
        if truncated:
            return truncated
        try:
            with safe_open(str(shard), "pt"):
                pass
        except SafetensorError as err:
            reason = str(err).removeprefix("Error while deserializing header: ")
            return f"{shard.name} is damaged ({reason}, {shard.stat().st_size:,} bytes); save or copy the model again"
    return None


def config_problem(folder: Path, translation: bool = True) -> str | None:
    """What is wrong with a parsed config.json's kind of model, or None: it must name one of this package's
    translation models, or with `translation=False` also its XLP encoder (a model of another library or an
    edited model_type is named as such)."""

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))  # an object: folder_problem checked
    model_type = config.get("model_type")
    if model_type == XLPConfig.model_type and translation:
        return (
            f"config.json describes an XLP encoder (model_type {model_type!r}, pre-training), not a translation "
            "model; give the translation model trained from it (model.init_encoder_from)"
        )
    classes = config_classes_by_model_type()
    classes |= {} if translation else {XLPConfig.model_type: XLPConfig}
    kinds = sorted(classes)
    if model_type not in kinds:
        named = f"config.json's model_type is {model_type!r}" if model_type else "config.json names no model_type"
        return (
            f"{named}, not one of this package's {'translation ' if translation else ''}models ({', '.join(kinds)}); "
            "the folder holds another kind of model, or config.json was edited"
        )
    return _value_problem(config, classes[model_type])


def _value_problem(config: dict[str, Any], config_class: type) -> str | None:
    """A config.json value of the wrong type or range, named as an experiment config's would be (`config_types`):
    the config class compared it with a number first ("'<=' not supported between instances of 'str' and 'int'"),
    or read a string of languages letter by letter."""

    hints = {**type_hints(LangSpecConfig), **type_hints(config_class)}
    try:
        check_section(config, hints, "config.json", ValueError)
    except ValueError as err:
        return str(err).rstrip(".") + "; the file was edited or damaged: save or copy the model again"
    return None


def tokenizer_problem(folder: str | os.PathLike) -> str | None:
    """What keeps a folder's tokenizer files (tokenizer.json, tokenizer_config.json) from loading, or None.
    Checked before anything is loaded: without them every language code reads as unknown, and tokenizers
    reports a vocabulary it cannot read with a bare Exception and a JSON position."""
    folder = Path(folder)
    vocabulary, settings = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not vocabulary.is_file():
        return "it has no tokenizer.json (the vocabulary the model was trained with)"
    for file in (vocabulary, settings):
        problem = json_problem(file, mapping=True) if file.is_file() else None
        if problem:
            return problem
    languages = json.loads(settings.read_text(encoding="utf-8")).get("languages") if settings.is_file() else None
    if not isinstance(languages, list) or not languages:
        what = (
            "its tokenizer_config.json lists no languages" if settings.is_file() else "it has no tokenizer_config.json"
        )
        return f"{what} (the tokenizer's language codes and tags)"
    try:
        Tokenizer.from_file(str(vocabulary))
    except Exception as err:  # tokenizers' parse errors are plain Exceptions
        return f"tokenizer.json is not a vocabulary the tokenizers library can read ({err})"
    return None


def load_tokenizer(folder: str | os.PathLike, label: str = "Model folder", **kwargs: Any) -> Any:
    """`LangSpecTokenizer.from_pretrained(folder, **kwargs)` of a folder :func:`tokenizer_problem` passed; a
    setting the tokenizer refuses (a tag style, languages without tags in the vocabulary) is a
    :class:`ModelFolderError` starting with `label` and the folder."""

    try:
        return LangSpecTokenizer.from_pretrained(folder, **kwargs)
    except ValueError as err:
        raise ModelFolderError(f"{label} {folder}: tokenizer_config.json is refused: {err}") from None


def folder_problem(folder: str | os.PathLike, tokenizer: bool = False, translation: bool = True) -> str | None:
    """None when the folder looks loadable; otherwise what is wrong, in one clause. `tokenizer`: the
    vocabulary (tokenizer.json) is needed too; `translation=False`: any of this package's models will do
    (an XLP encoder to start from)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        hint = f"; it looks like a run folder: its model is {folder / 'model'}" if (folder / "model").is_dir() else ""
        return f"it holds no saved model (config.json){hint}"
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            problem = json_problem(folder / name, mapping=True)  # each of these holds one object
            if problem:
                return problem
    if tokenizer:
        problem = tokenizer_problem(folder)
        if problem:
            copy = "copy tokenizer.json and tokenizer_config.json from the run's tokenizer folder"
            return f"{problem}; save the model with its tokenizer, or {copy}"
    return config_problem(folder, translation) or generation_problem(folder) or weights_problem(folder)


GENERATION_COUNTS = {"num_beams": 1, "num_return_sequences": 1, "max_length": 1, "max_new_tokens": 1, "min_length": 0,
                     "min_new_tokens": 0, "no_repeat_ngram_size": 0, "num_beam_groups": 1}  # fmt: skip
GENERATION_TOKEN_IDS = ("decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id", "bos_token_id",
                        "eos_token_id", "pad_token_id")  # fmt: skip
GENERATION_NUMBERS = ("length_penalty", "repetition_penalty", "temperature", "top_p", "diversity_penalty")


def generation_problem(folder: Path) -> str | None:
    """What is wrong with a generation_config.json value, or None. transformers loads a beam count of 0 or "4", a
    negative length or a token id past the vocabulary without a word, and then fails inside `generate()` or
    decodes from a wrong start token; these are named here, before a model is loaded."""
    file = folder / "generation_config.json"
    if not file.is_file():
        return None
    values = json.loads(file.read_text(encoding="utf-8"))  # an object: folder_problem checked
    vocab = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("vocab_size")
    fix = "the file was edited: correct it, or remove the key for transformers' default"

    def whole(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    for key, least in GENERATION_COUNTS.items():
        value = values.get(key)
        if value is not None and not (whole(value) and value >= least):
            return f"generation_config.json's {key} is {value!r}, not a whole number of at least {least}; {fix}"
    for key in GENERATION_TOKEN_IDS:
        value = values.get(key)
        for token in value if isinstance(value, list) else [] if value is None else [value]:
            if not (whole(token) and token >= 0 and (not whole(vocab) or token < vocab)):
                within = f" below the vocabulary's size {vocab}" if whole(vocab) else ""
                return f"generation_config.json's {key} is {value!r}, not a token id (a whole number from 0{within}); {fix}"
    for key in GENERATION_NUMBERS:
        value = values.get(key)
        if value is not None and not (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ):
            return f"generation_config.json's {key} is {value!r}, not a finite number; {fix}"
    return None


def non_finite_tensor(model: Any) -> str | None:
    """The name of the first floating-point parameter or buffer holding NaN or infinite values, or None."""

    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def check_model_folder(path: str | os.PathLike, tokenizer: bool = False, translation: bool = True) -> None:
    """Raise :class:`ModelFolderError` naming the fault when `path` is not a loadable model folder
    (`tokenizer`: with its vocabulary; `translation`: a translation model, not only an encoder)."""
    if not Path(path).is_dir():
        what = "is a file, not a folder" if Path(path).exists() else "does not exist"
        raise ModelFolderError(f"Model folder {path} {what}; give the folder `hf-langspec train` saved.")
    problem = folder_problem(path, tokenizer, translation)
    if problem:
        raise ModelFolderError(f"Model folder {path}: {problem}.")


def load_model_folder(path: str | os.PathLike, folder_checked: bool = False, translation: bool = True) -> Any:
    """`AutoModelForSeq2SeqLM.from_pretrained(path)`, with the folder checked before and the weights after.

    Raises :class:`ModelFolderError` with one line for every fault listed in the module docstring.
    `folder_checked=True`: the caller ran :func:`check_model_folder` already (before loading its tokenizer).
    `translation=False`: `AutoModel` (the bare model, an XLP encoder too), for a model to start an encoder from.
    """

    if not folder_checked:
        check_model_folder(path, translation=translation)
    model = _load_matching(path, AutoModelForSeq2SeqLM if translation else AutoModel)
    bad = non_finite_tensor(model)
    if bad:
        raise ModelFolderError(
            f"Model folder {path}: tensor {bad} holds NaN or infinite values (a damaged file, or a run that "
            "diverged); use an earlier checkpoint or train again."
        )
    return model


def _load_matching(path: str | os.PathLike, auto_class: Any) -> Any:
    """The model, its config built first (values it refuses are config.json's fault), then the weights, which
    must fill exactly the tensors the config makes (transformers would start missing or mis-shaped ones at
    random and only warn: a model that translates nonsense)."""

    try:
        config = AutoConfig.from_pretrained(path)
    except (ValueError, TypeError, KeyError) as err:
        raise ModelFolderError(f"Model folder {path}: config.json is refused ({str(err).rstrip('.')}).") from None
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' load report: its faults are refused below in one line
    try:
        model, info = auto_class.from_pretrained(
            path, config=config, output_loading_info=True, ignore_mismatched_sizes=True
        )  # the variant's own class (baseline, XLP, ...)
    except (ValueError, TypeError, KeyError) as err:
        raise ModelFolderError(
            f"Model folder {path}: config.json does not build a model ({str(err).rstrip('.')})."
        ) from None
    finally:
        hf_logging.set_verbosity(verbosity)
    fix = "config.json was edited or belongs to other weights; use the config saved with them"
    if info["mismatched_keys"]:
        name, in_file, in_config = sorted(info["mismatched_keys"])[0]
        more = f" (and {len(info['mismatched_keys']) - 1} more)" if len(info["mismatched_keys"]) > 1 else ""
        raise ModelFolderError(
            f"Model folder {path}: config.json does not match the weights: {name} is {list(in_file)} in the weights "
            f"and {list(in_config)} by config.json{more}; {fix}."
        )
    for key, what in (("missing_keys", "the weights lack"), ("unexpected_keys", "config.json has no place for")):
        names = sorted(info[key])
        if names:
            raise ModelFolderError(
                f"Model folder {path}: config.json does not match the weights: {what} {len(names)} tensor(s) "
                f"({', '.join(names[:2])}{', ...' if len(names) > 2 else ''}); {fix}."
            )
    return model


WEIGHT_FILES = ("*.safetensors", *PICKLES)


def weights_fingerprint(folder: str | os.PathLike) -> str:
    """A short hash of a model folder's weight files (names and bytes): what a model card and a results file
    record of the weights they describe, so that `card`, `push` and `serve` can tell when the weights beside them
    changed afterwards (an extended run whose evaluation did not finish, a folder copied over)."""
    digest = hashlib.sha256()
    files = sorted({path for pattern in WEIGHT_FILES for path in Path(folder).glob(pattern) if path.is_file()})
    if not files:
        raise ModelFolderError(f"Model folder {folder}: no weights (*.safetensors) to describe.")
    for path in files:
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 23):
                digest.update(chunk)
    return digest.hexdigest()[:16]


# the files beside the weights that decide what the model outputs: its shape and language settings, how it
# generates, and its tokenizer (vocabulary, normaliser, language tags)
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json")  # fmt: skip


def model_files_fingerprint(folder: str | os.PathLike) -> dict[str, str]:
    """A short hash of each of the folder's :data:`MODEL_FILES` that exists, by name: recorded beside
    :func:`weights_fingerprint` by results and cards, so that an edited generation setting or tokenizer normaliser
    is told apart from the folder that was scored as surely as other weights are."""
    return {name: hashlib.sha256((Path(folder) / name).read_bytes()).hexdigest()[:16]
            for name in MODEL_FILES if (Path(folder) / name).is_file()}  # fmt: skip


def changed_model_files(recorded: Any, actual: dict[str, str]) -> list[str]:
    """The names among :data:`MODEL_FILES` whose content differs between `recorded` and `actual` (both
    :func:`model_files_fingerprint`; a file added or removed since counts), or [] when they match or nothing usable
    was recorded (a record written before files were)."""
    if not isinstance(recorded, dict):
        return []
    return [name for name in MODEL_FILES if recorded.get(name) != actual.get(name)]


def described_model_problem(folder: str | os.PathLike) -> str | None:
    """What is wrong when the folder's model card (README.md, written by this package) records other weights or
    other model files than the folder holds; None when they match, or when there is no such card or it predates
    the record."""
    card = Path(folder) / "README.md"
    if not card.is_file():
        return None
    front = _card_front(card.read_text(encoding="utf-8", errors="replace"))
    again = ("Evaluate the folder as it is and write the card again (`hf-langspec evaluate` then "
             "`hf-langspec card --results`)")  # fmt: skip
    recorded = front.get(CARD_WEIGHTS_FIELD)
    if isinstance(recorded, str):
        actual = weights_fingerprint(folder)
        if recorded != actual:
            return (
                f"{card} describes other weights ({recorded}) than the folder holds ({actual}): the weights changed "
                f"after the card and its scores were written (an extended run whose evaluation did not finish?). {again}"
            )
    changed = changed_model_files(front.get(CARD_FILES_FIELD), model_files_fingerprint(folder))
    if changed:
        return (
            f"{card} describes the folder with another {', '.join(changed)} than it holds now: "
            f"{'it was' if len(changed) == 1 else 'they were'} edited, added, removed or copied in after the card and "
            f"its scores were written, and the same weights may now translate otherwise. {again}"
        )
    return None


CARD_WEIGHTS_FIELD = "hf_langspec_weights"  # the card metadata key holding weights_fingerprint
CARD_FILES_FIELD = "hf_langspec_files"  # the card metadata key holding model_files_fingerprint


def _card_front(text: str) -> dict[str, Any]:
    """A card's YAML front matter as a mapping ({} when it has none or it does not parse)."""
    if not text.startswith("---"):
        return {}
    try:
        front = yaml.safe_load(text[3:].split("\n---", 1)[0])
    except yaml.YAMLError:
        return {}
    return front if isinstance(front, dict) else {}


__all__ = [
    "CARD_FILES_FIELD",
    "CARD_WEIGHTS_FIELD",
    "ModelFolderError",
    "changed_model_files",
    "check_model_folder",
    "config_problem",
    "described_model_problem",
    "folder_problem",
    "generation_problem",
    "json_problem",
    "load_model_folder",
    "load_tokenizer",
    "model_files_fingerprint",
    "non_finite_tensor",
    "tokenizer_problem",
    "weights_fingerprint",
    "weights_problem",
]
