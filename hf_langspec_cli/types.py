"""Argument types, checked as the arguments are read (before anything is loaded), and the decoding options the
translating commands share.

A type that needs the package (a language-code check, a device, a port) imports it when it runs, so that
`--help` and a usage error answer without loading torch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def codes(text: str) -> list[str]:
    """`en,de, fr`: the comma-separated items, blanks dropped."""
    return [c.strip() for c in text.split(",") if c.strip()]


def books(text: str) -> list[int]:
    """`--books 1-5,40`: book numbers and ranges."""
    numbers: list[int] = []
    for part in codes(text):
        start, _, end = part.partition("-")
        try:
            numbers += list(range(int(start), int(end or start) + 1))
        except ValueError:
            raise ValueError(
                f"--books {text!r}: give book numbers 1-66 and ranges like 1-5,40, got {part!r}."
            ) from None
    return numbers


def whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def positive(text: str) -> int:
    return whole_number(text, 1)


def non_negative(text: str) -> int:
    return whole_number(text, 0)


def non_negative_number(text: str) -> float:
    """A finite number >= 0: a wait in milliseconds, a noise scale (NaN made every new embedding NaN)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):  # NaN too
        raise argparse.ArgumentTypeError(f"must be a finite number of 0 or more, got {text}")
    return value


def positive_number(text: str) -> float:
    """A finite number > 0: a timeout in seconds."""
    value = non_negative_number(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0, got 0")
    return value


def language_code(text: str) -> str:
    """A new language's code, lowercase ISO 639 like the corpora's (`IT` was accepted and tagged as it stood)."""

    from hf_langspec.data.checks import check_code

    try:
        check_code(text, "code")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def port(text: str) -> int:
    from hf_langspec.export.sockets import port_problem

    value = whole_number(text, -sys.maxsize)
    if problem := port_problem(value):
        raise argparse.ArgumentTypeError(problem)
    return value


def device(text: str) -> str:
    """A device PyTorch knows and this machine has, checked as the arguments are read (before any loading)."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a PyTorch device; use cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return text
    backend = getattr(torch, device.type, None) if device.type != "mps" else torch.backends.mps
    if backend is None or not getattr(backend, "is_available", lambda: False)():
        what = "CUDA GPU" if device.type == "cuda" else f"{device.type} device"
        raise argparse.ArgumentTypeError(f"{text}: this machine has no {what} that PyTorch can use; use --device cpu")
    count = getattr(backend, "device_count", lambda: 1)()
    if device.index is not None and device.index >= count:
        raise argparse.ArgumentTypeError(f"{text}: this machine has {count} {device.type} device(s), {device.type}:0"
                                         f" to {device.type}:{count - 1}")  # fmt: skip
    return text


def directions(text: str) -> list[str]:
    """`en-de,de-en`: directions written src-tgt, each once (a repeated one was exported twice, and refused as
    "not empty" half way)."""

    from hf_langspec.data.schema import split_direction

    try:
        found = ["-".join(split_direction(item)) for item in codes(text)]
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    repeated = sorted({d for d in found if found.count(d) > 1})
    if not found or repeated:
        raise argparse.ArgumentTypeError(
            f"{text!r} repeats {repeated}; name each direction once"
            if repeated
            else "give directions like en-de,de-en"
        )
    return found


def quantization(text: str) -> str:
    """A CTranslate2 weight type, from CTranslate2's own list (it refused others only after the model was loaded)."""
    from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES

    if text not in ACCEPTED_MODEL_TYPES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a CTranslate2 weight type; use one of {', '.join(ACCEPTED_MODEL_TYPES)}"
        )
    return text


def corpus_file(text: str) -> Path:
    """A corpus file to write: named .parquet or .jsonl (.json), the formats `train` reads (the content checks
    read it back through the same reader)."""
    path = Path(text)
    if path.suffix not in (".parquet", ".jsonl", ".json"):
        raise argparse.ArgumentTypeError(
            f"{text}: name it X.parquet or X.jsonl, the formats `hf-langspec train` reads (got {path.suffix or 'no'} "
            "extension)"
        )
    return path


def integers(text: str) -> list[int]:
    try:
        return [int(c) for c in codes(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,3, got {text!r}") from None


def parse_target(text: str) -> tuple[str, float]:
    """`--target xx-en=10`: a direction group and the BLEU it must reach."""
    group, _, value = text.partition("=")
    try:
        bleu = float(value)
    except ValueError:  # a ValueError here became argparse's "invalid parse_target value"
        raise argparse.ArgumentTypeError(f"give GROUP=BLEU, e.g. xx-en=10, got {text!r}") from None
    if not 0 <= bleu <= 100:  # NaN too
        raise argparse.ArgumentTypeError(f"a BLEU target is between 0 and 100, got {text!r}")
    return group.strip(), bleu


def generation_options(p: argparse.ArgumentParser) -> None:
    """What translating commands share: the model folder and the decoding budget."""
    p.add_argument("model", help="a directory saved by `hf-langspec train` (model + tokenizer)")
    p.add_argument("--batch-size", type=positive, default=32)
    p.add_argument("--num-beams", type=positive, default=4)
    p.add_argument("--max-new-tokens", type=positive, default=256)
    p.add_argument(
        "--max-source-length", type=non_negative, default=256, help="subwords kept of each input (0: no limit); warns"
    )
    p.add_argument("--device", type=device, help="cpu, cuda, cuda:N, mps (default: cuda when available)")
