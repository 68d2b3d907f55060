"""What the commands read: a trained model folder (checked before it loads) and a text file or stdin."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from ..model_folder import ModelFolderError, check_model_folder, load_model_folder, load_tokenizer


def load_model(path: str, device: str | None, codes: Sequence[str] = ()):
    check_model_folder(path, tokenizer=True)  # before anything is loaded: missing, damaged or pickled files named
    tokenizer = load_tokenizer(path)
    for code in codes:
        tokenizer.language_id(code)  # an unknown code fails before the model is loaded
    model = load_model_folder(path, folder_checked=True)  # the variant's own class; non-finite weights refused
    try:
        tokenizer.check_model(model)
    except ValueError as err:
        raise ModelFolderError(f"Model folder {path}: {err}") from None
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer


def read_text(source: str | None) -> str:
    """A file, or stdin, as UTF-8 text; anything else is one clear error."""
    data = Path(source).read_bytes() if source else sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        where = source or "stdin"
        raise ValueError(
            f"{where} is not UTF-8 text (byte {err.start}); convert it, e.g. with iconv -t UTF-8."
        ) from None
