"""Static batch shapes for compiled training: every batch padded to one of a few declared buckets.

Why (issue 57, measured on an H200): with the lengths a translation batch comes in, `torch.compile` either
compiles the whole seq2seq step with symbolic lengths (no step finished within 270 s) or, with static shapes,
compiles and records a CUDA graph for every (source, target) length pair it meets (458 ms per step averaged over
the first 90 steps, while one replayed step cost 4.7 ms of GPU work). NMT toolkits batch into a few length
buckets (fairseq's `--max-tokens`, OpenNMT's `bucket_size`, Marian's `--mini-batch-fit`); pytorch's own advice for
CUDA graphs is the same: pad to a few fixed sizes, linearly spaced.

`training.static_shapes` (a `LangSpecTrainingArguments` field):

* `"auto"` (the default): on when the step is compiled (`torch_compile`), off otherwise; the buckets are
  `AUTO_BUCKETS` square `[L, L]` shapes linearly spaced up to the training set's longest example, each a multiple
  of 8 (bible11_gpu, `max_length` 48: `[16, 16]`, `[24, 24]`, `[40, 40]`, `[48, 48]`);
* `"off"`: batches as the collator makes them (every length);
* `[[src, tgt], ...]`: these buckets, compiled or not.

A batch goes to the smallest bucket (by area) that holds both its source and target lengths, and gets the full
batch size's rows: the epoch's last, smaller batch is filled with rows whose every label is -100 and whose source
is masked out. Padding is masked everywhere (source keys, ignored labels, the decoder's causal attention never
sees later positions), so the loss and the gradients are those of the unpadded batch, up to float rounding; the
CPU path, whose runs are not compiled, is unchanged. The compiled step is then traced with `dynamic=False`, so it
is compiled once per bucket, and `capture_buckets` compiles (and on CUDA records) every bucket before the first
counted step, leaving weights, optimizer, RNG and data order as they were.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

AUTO_BUCKETS = 4  # square buckets of "auto": few enough to compile in a minute, close enough to cut the padding
MULTIPLE = 8  # bucket lengths are multiples of 8: tensor-core friendly
IGNORE = -100
# per batch field: how its rows and its positions are filled ("pad" is the tokenizer's pad id, "first" row 0's value)
FILL = {
    "input_ids": "pad",
    "attention_mask": 0,
    "labels": IGNORE,
    "decoder_input_ids": "pad",
    "decoder_attention_mask": 0,
}
SOURCE_FIELDS = ("input_ids", "attention_mask")  # the other FILL fields are the target's
ROW_FIELDS = ("src_lang_ids", "tgt_lang_ids")  # one value per example: extra rows copy the first


Bucket = tuple[int, int]


def auto_buckets(longest: int, count: int = AUTO_BUCKETS, multiple: int = MULTIPLE) -> list[Bucket]:
    """`count` square `[L, L]` buckets linearly spaced up to `longest` (rounded up to `multiple`), duplicates merged:
    `auto_buckets(48)` is `[(16, 16), (24, 24), (40, 40), (48, 48)]`."""
    if longest < 1:
        raise ValueError(f"static_shapes 'auto' needs a training set with tokens; its longest example has {longest}.")
    lengths = sorted({multiple * math.ceil(longest * k / count / multiple) for k in range(1, count + 1)})
    return [(length, length) for length in lengths]


def parse_buckets(value: Any) -> list[Bucket]:
    """Declared buckets `[[src, tgt], ...]` as sorted `(src, tgt)` tuples; a ValueError names a malformed one."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(
            f"training.static_shapes={value!r}: give 'auto', 'off' or a list of [source, target] lengths, "
            "e.g. [[24, 24], [48, 48]]."
        )
    buckets = []
    for item in value:
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in item)
        ):
            raise ValueError(
                f"training.static_shapes: {item!r} is not a [source, target] pair of positive lengths; "
                "write each bucket as [src, tgt], e.g. [48, 48]."
            )
        buckets.append((int(item[0]), int(item[1])))
    return sorted(set(buckets), key=lambda b: (b[0] * b[1], b))


def resolve_buckets(setting: Any, compiled: bool, longest: Callable[[], int]) -> list[Bucket] | None:
    """The run's buckets for `training.static_shapes`, or None for batches as the collator makes them.

    `longest` is asked only for "auto" with a compiled step (it reads the training set's lengths)."""
    if setting is None or setting == "off":
        return None
    if setting == "auto":
        return auto_buckets(longest()) if compiled else None
    if isinstance(setting, str):
        raise ValueError(
            f"training.static_shapes={setting!r}: give 'auto', 'off' or a list of [source, target] lengths."
        )
    return parse_buckets(setting)


def check_lengths_fit(buckets: Sequence[Bucket], source: np.ndarray, target: np.ndarray) -> None:
    """Before training: every example fits the largest bucket, or a ValueError says which length and the fix."""
    max_src, max_tgt = max(b[0] for b in buckets), max(b[1] for b in buckets)
    worst_src, worst_tgt = int(source.max(initial=0)), int(target.max(initial=0))
    if worst_src > max_src or worst_tgt > max_tgt:
        raise ValueError(
            f"training.static_shapes: the training set has examples of source length {worst_src} and target length "
            f"{worst_tgt}, but the largest bucket holds [{max_src}, {max_tgt}]; add a bucket that holds them, lower "
            "data.max_length, or use static_shapes: auto (derived from the data)."
        )


def choose_bucket(buckets: Sequence[Bucket], source: int, target: int) -> Bucket:
    """The smallest bucket (by area; `buckets` is sorted so) holding a batch of these lengths."""
    for bucket in buckets:
        if bucket[0] >= source and bucket[1] >= target:
            return bucket
    raise ValueError(
        f"a batch of source length {source} and target length {target} fits no training.static_shapes bucket "
        f"(the largest: {list(buckets[-1])}); add a bucket that holds it or lower data.max_length."
    )


def _fill_and_length(name: str, bucket: Bucket, pad_token_id: int) -> tuple[int, int]:
    """What a `FILL` field is padded with, and to which of the bucket's lengths (source or target)."""
    fill = pad_token_id if FILL[name] == "pad" else FILL[name]
    return fill, bucket[0] if name in SOURCE_FIELDS else bucket[1]


def pad_to(tensor: torch.Tensor, rows: int, length: int | None, fill: int) -> torch.Tensor:
    """`tensor` `[b, n]` (or `[b]` with `length` None) padded at the end to `[rows, length]` with `fill`."""
    if tensor.shape[0] > rows:
        raise ValueError(f"a batch of {tensor.shape[0]} rows is larger than the static batch size {rows}.")
    if length is not None:
        if tensor.shape[1] > length:
            raise ValueError(f"a batch of length {tensor.shape[1]} does not fit the bucket length {length}.")
        tensor = F.pad(tensor, (0, length - tensor.shape[1]), value=fill)
    if tensor.shape[0] < rows:
        extra = tensor.new_full((rows - tensor.shape[0], *tensor.shape[1:]), fill)
        tensor = torch.cat([tensor, extra])
    return tensor


def pad_batch(batch: dict[str, Any], bucket: Bucket, rows: int, pad_token_id: int) -> dict[str, Any]:
    """A copy of `batch` padded to `rows` x `bucket`; fields the padding does not know are an error."""
    out = dict(batch)
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor):
            continue
        if name in ROW_FIELDS:
            out[name] = pad_to(value, rows, None, int(value[0]) if value.numel() else 0)
        elif name in FILL:
            fill, length = _fill_and_length(name, bucket, pad_token_id)
            out[name] = pad_to(value, rows, length, fill)
        else:
            raise ValueError(
                f"training.static_shapes cannot pad the batch field {name!r} (it pads {sorted([*FILL, *ROW_FIELDS])}); "
                "set static_shapes: off for this data collator."
            )
    return out


class StaticShapeCollator:
    """A data collator whose batches are padded to `rows` x the smallest fitting bucket (`pad_batch`)."""

    def __init__(self, collator: Callable, buckets: Sequence[Bucket], rows: int, pad_token_id: int):
        self.collator, self.buckets, self.rows, self.pad_token_id = collator, list(buckets), rows, pad_token_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(features)
        source = batch["input_ids"].shape[1]
        target = batch["labels"].shape[1] if "labels" in batch else 0
        return pad_batch(batch, choose_bucket(self.buckets, source, target), self.rows, self.pad_token_id)


def synthetic_batch(batch: dict[str, Any], bucket: Bucket, pad_token_id: int) -> dict[str, torch.Tensor]:
    """A batch of `bucket`'s shape made from a real one (cropped or padded; its values only need to be valid ids):
    what `capture_buckets` compiles each bucket with, so that no batch of the data is drawn for it."""
    out = {}
    for name, value in batch.items():
        if not isinstance(value, torch.Tensor) or name not in FILL:
            out[name] = value
            continue
        fill, length = _fill_and_length(name, bucket, pad_token_id)
        out[name] = F.pad(value[:, :length], (0, max(0, length - value.shape[1])), value=fill)
    return out


def use_compile_cache(path: str | os.PathLike) -> None:
    """Point inductor's caches (FX graphs, AOTAutograd, Triton kernels: TORCHINDUCTOR_CACHE_DIR) at `path`, unless
    the user chose a folder: torch writes its default into the variable on first use (importing transformers
    does), so a value equal to that default counts as unset."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # older torch: only an unset variable is ours to set
        default = None
    else:
        default = os.path.abspath(default_cache_dir())
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current is None or os.path.abspath(current) == default:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(path).resolve())


class RngState:
    """The torch generators' states (CPU and every CUDA device), put back on exit: a warm-up's dropout draws and
    HLT-MT's soft/hard draws leave the run's random stream where it was."""

    def __enter__(self) -> RngState:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def _synchronize(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def capture_buckets(
    forward_backward: Callable[[dict[str, Any]], Any],
    model: torch.nn.Module,
    batch: dict[str, Any],
    buckets: Sequence[Bucket],
    pad_token_id: int,
    device: torch.device,
    replays: int = 2,
) -> dict[str, Any]:
    """Compile (and on CUDA record) every bucket's step before the first counted one.

    For each bucket, `forward_backward` runs on a synthetic batch of its shape once (dynamo traces, inductor
    compiles; CUDA graph trees warm up) and `replays` more times (the graphs are recorded, then replayed); the
    gradients are dropped and the RNG restored, and no optimizer step is taken, so the model, the optimizer state
    and the data order are as if nothing had run. Returns the seconds spent compiling (first calls) and capturing
    (the others), per run and per bucket.
    """
    compile_s = capture_s = 0.0
    per_bucket = []
    mark_step = getattr(torch.compiler, "cudagraph_mark_step_begin", None)
    with RngState():
        for bucket in buckets:
            inputs = synthetic_batch(batch, bucket, pad_token_id)
            seconds = []
            for _ in range(1 + replays):
                start = _synchronize(device)
                if mark_step is not None:
                    mark_step()
                forward_backward(inputs)
                seconds.append(_synchronize(device) - start)
                model.zero_grad(set_to_none=True)
            compile_s += seconds[0]
            capture_s += sum(seconds[1:])
            per_bucket.append({"bucket": list(bucket), "compile_s": round(seconds[0], 3),
                               "capture_s": round(sum(seconds[1:]), 3)})  # fmt: skip
    record = {"static_buckets": [list(b) for b in buckets], "compile_s": round(compile_s, 2),
              "capture_s": round(capture_s, 2), "per_bucket": per_bucket}  # fmt: skip
    logger.info(
        "static shapes: %d buckets %s compiled in %.1f s, captured in %.1f s before the first step",
        len(buckets), record["static_buckets"], compile_s, capture_s,
    )  # fmt: skip
    return record


def compiled_shapes_risk(config: dict[str, Any]) -> str | None:
    """The warning for compiled training over unpadded batches: length-grouped batches come in every length up to
    `data.max_length`, and with CUDA graphs (`torch_compile_mode: reduce-overhead`) each length records its own
    graph and memory pool; None when nothing is compiled or the lengths are bucketed (`static_shapes`, on by
    default when compiled, or `pad_to_multiple_of`)."""
    training = config.get("training", {})
    if not training.get("torch_compile") or training.get("pad_to_multiple_of"):
        return None
    if training.get("static_shapes", "auto") not in ("off", None):
        return None
    mode = training.get("torch_compile_mode") or "default"
    cost = (
        "each length records its own CUDA graph and memory pool"
        if mode in ("reduce-overhead", "max-autotune")
        else "the compiled step serves them with symbolic lengths, slower than a few fixed shapes"
    )
    return (
        f"training.torch_compile ({mode} mode) with static_shapes: off: batches come in every length up to "
        f"data.max_length, and {cost}. Leave training.static_shapes at auto (4 length buckets, each compiled once "
        "before the first step) or set training.pad_to_multiple_of: 16; padding is masked, so no result changes."
    )


__all__ = [
    "StaticShapeCollator",
    "auto_buckets",
    "capture_buckets",
    "check_lengths_fit",
    "choose_bucket",
    "compiled_shapes_risk",
    "pad_batch",
    "parse_buckets",
    "resolve_buckets",
    "use_compile_cache",
]
