"""Counting what makes a training step wait for the GPU: host reads of tensor values and data-dependent shapes.

On CUDA the host queues kernels ahead of the device; a step stays ahead (and can be captured as a CUDA graph) only
if nothing in it needs a value the device has not computed yet. Two kinds of calls do:

* **host reads**: a tensor's value turned into Python (`item()`, `tolist()`, `int(t)`, `float(t)`, `bool(t)`,
  also `if t:` and `a or b` on tensors, `numpy()`, `cpu()`): each copies device to host and waits;
* **data-dependent shapes**: ops whose output size depends on the values (`nonzero`, `masked_select`, `unique`,
  `bincount`, `repeat_interleave` without `output_size`, indexing with a boolean mask): the host must read the
  size before it can allocate.

`HostSyncCensus` counts both at the Python level with a `TorchFunctionMode`, so it works on a CPU too (where
none of these calls wait, but the same code on a GPU would): the CPU test that a step has none is the GPU's
guarantee. `torch.cuda.set_sync_debug_mode("error")` is the device's own check (`StepCensus(sync_debug=True)`).
"""

from __future__ import annotations

import collections
import sys
import warnings
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from transformers import TrainerCallback

HOST_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu"})
SHAPE_OPS = frozenset({"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount"})
INDEXING = frozenset({"__getitem__", "__setitem__", "index_put", "index_put_"})


def _is_bool_index(index: Any) -> bool:
    items = index if isinstance(index, tuple | list) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def sync_kind(name: str, args: tuple, kwargs: dict) -> str | None:
    """`"host read"`, `"data-dependent shape"` or None for a call seen by a `TorchFunctionMode`."""
    if name in HOST_READS:
        return "host read"
    if name in SHAPE_OPS:
        return "data-dependent shape"
    if name == "repeat_interleave" and kwargs.get("output_size") is None and len(args) < 4:
        repeats = args[1] if len(args) > 1 else kwargs.get("repeats")
        return "data-dependent shape" if isinstance(repeats, torch.Tensor) else None
    if name in INDEXING and len(args) > 1 and _is_bool_index(args[1]):
        return "data-dependent shape"
    return None


class HostSyncCensus(TorchFunctionMode):
    """Within `with HostSyncCensus() as census:`, `census.calls` counts `(kind, name)` of every host read and
    data-dependent-shape op, and `census.where` keeps the innermost package or transformers frame of each."""

    def __init__(self, where: bool = True):
        super().__init__()
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self.where: collections.Counter[str] = collections.Counter()
        self._where = where

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        kind = sync_kind(name, args, kwargs)
        if kind is not None:
            self.calls[(kind, name)] += 1
            if self._where:
                self.where[_caller()] += 1
        return func(*args, **kwargs)

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def _caller() -> str:
    """`file:line function` of the nearest frame in hf_langspec, transformers or accelerate (not torch)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if any(part in path for part in ("hf_langspec", "transformers", "accelerate")) and "host_syncs" not in path:
            short = path.split("site-packages/")[-1].split("/hf_langspec/")[-1]
            return f"{short}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "elsewhere"


class StepCensus(TrainerCallback):
    """Counts host syncs inside training steps `start .. start + steps - 1` (from each step's start to its end:
    forward, backward, the loss's bookkeeping, clipping, optimizer and scheduler; the next batch's loading and
    collation are outside). With `sync_debug` on CUDA it also counts the device's own sync warnings.
    `host_ops=False` leaves the Python-level census out (host reads and data-dependent shapes then read None): under
    `torch.compile` its function mode would recompile the step and count a graph other than the one that runs,
    where the device's count needs no mode."""

    def __init__(self, start: int, steps: int, sync_debug: bool = False, host_ops: bool = True):
        self.start, self.steps, self.sync_debug, self.host_ops = start, steps, sync_debug, host_ops
        self.census = HostSyncCensus()
        self.device_syncs = 0
        self.counted_steps = 0
        self._caught: list | None = None
        self._catcher: Any = None

    def _active(self, step: int) -> bool:
        return self.start <= step < self.start + self.steps

    def on_step_begin(self, args, state, control, **kwargs):
        if self._active(state.global_step):
            if self.host_ops:
                self.census.__enter__()
            if self.sync_debug and torch.cuda.is_available():
                self._catcher = warnings.catch_warnings(record=True)
                self._caught = self._catcher.__enter__()
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")

    def on_step_end(self, args, state, control, **kwargs):
        if self._active(state.global_step - 1):  # global_step was raised before this call
            if self._catcher is not None:
                torch.cuda.set_sync_debug_mode("default")
                self.device_syncs += sum("synchroniz" in str(w.message) for w in self._caught or [])
                self._catcher.__exit__(None, None, None)
                self._catcher = self._caught = None
            if self.host_ops:
                self.census.__exit__(None, None, None)
            self.counted_steps += 1

    def per_step(self) -> dict[str, float | None]:
        """Host reads, data-dependent-shape ops (None without `host_ops`) and (CUDA with sync_debug) device syncs
        per counted step."""
        steps = max(self.counted_steps, 1)
        kinds = collections.Counter()
        for (kind, _), count in self.census.calls.items():
            kinds[kind] += count
        result = {
            "host reads": kinds["host read"] / steps if self.host_ops else None,
            "data-dependent shapes": kinds["data-dependent shape"] / steps if self.host_ops else None,
        }
        if self.sync_debug:
            result["device syncs"] = self.device_syncs / steps
        return result
