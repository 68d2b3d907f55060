"""A saved model's folder, checked before it is loaded and after: one line naming the file and the fault.

Every command that reads a model (`translate`, `evaluate`, `export`, `serve --model`, the analyses) goes
through :func:`load_model_folder`. What a user can meet, and what each gets instead of a traceback or,
worse, an empty translation:

* no `config.json`, or one that is not JSON;
* no weights, or weights only as a pickle (`pytorch_model.bin`: never unpickled, since unpickling runs code);
* a `*.safetensors` file that is truncated or has a damaged header (safetensors checks that its header
  parses and that the tensors it lists cover the file exactly: a cheap read, no tensor loaded), or a shard
  that the index lists and the folder lacks;
* a tokenizer file that does not parse;
* weights that load but hold NaN or infinite values (bytes overwritten): the first such tensor is named.

Checkpoints of a training run are checked by their manifests instead (`training/checkpoints.py`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PICKLES = ("pytorch_model.bin", "model.pt", "model.bin")


class ModelFolderError(ValueError):
    """A model folder that cannot be used; the message names the folder, the file and what is wrong."""


def _json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return f"{path.name} is not UTF-8 text"
    except ValueError as err:
        return f"{path.name} is not valid JSON ({err})"
    return None


def _truncation(shard: Path) -> str | None:
    """'X is truncated (...)' when the file is shorter than its own header says (the header read, nothing else);
    said in this package's words, since safetensors' own differ between its versions."""
    import struct

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
    from safetensors import SafetensorError, safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        problem = _json_problem(index)
        if problem:
            return problem
        listed = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [name for name in listed if not (folder / name).is_file()]
        if missing:
            return f"{missing[0]} is missing (model.safetensors.index.json lists it)"
        shards = [folder / name for name in listed]
    else:
        shards = sorted(folder.glob("*.safetensors"))
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


def folder_problem(folder: str | os.PathLike) -> str | None:
    """None when the folder looks loadable; otherwise what is wrong, in one clause."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        hint = f"; it looks like a run folder: its model is {folder / 'model'}" if (folder / "model").is_dir() else ""
        return f"it holds no saved model (config.json){hint}"
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            problem = _json_problem(folder / name)
            if problem:
                return problem
    return weights_problem(folder)


def non_finite_tensor(model: Any) -> str | None:
    """The name of the first floating-point parameter or buffer holding NaN or infinite values, or None."""
    import torch

    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def check_model_folder(path: str | os.PathLike) -> None:
    """Raise :class:`ModelFolderError` naming the fault when `path` is not a loadable model folder."""
    if not Path(path).is_dir():
        raise ModelFolderError(f"Model folder {path} does not exist; give the folder `hf-langspec train` saved.")
    problem = folder_problem(path)
    if problem:
        raise ModelFolderError(f"Model folder {path}: {problem}.")


def load_model_folder(path: str | os.PathLike, folder_checked: bool = False) -> Any:
    """`AutoModelForSeq2SeqLM.from_pretrained(path)`, with the folder checked before and the weights after.

    Raises :class:`ModelFolderError` with one line for every fault listed in the module docstring.
    `folder_checked=True`: the caller ran :func:`check_model_folder` already (before loading its tokenizer).
    """
    from transformers import AutoModelForSeq2SeqLM

    if not folder_checked:
        check_model_folder(path)
    model = AutoModelForSeq2SeqLM.from_pretrained(path)  # the variant's own class (baseline, XLP, ...)
    bad = non_finite_tensor(model)
    if bad:
        raise ModelFolderError(
            f"Model folder {path}: tensor {bad} holds NaN or infinite values (a damaged file, or a run that "
            "diverged); use an earlier checkpoint or train again."
        )
    return model


__all__ = [
    "ModelFolderError",
    "check_model_folder",
    "folder_problem",
    "load_model_folder",
    "non_finite_tensor",
    "weights_problem",
]
