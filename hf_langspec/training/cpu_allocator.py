"""Training on a CPU without a page fault per freed tensor: glibc's malloc set to keep freed memory in the process.

By default glibc serves every allocation over its mmap threshold (at most 32 MiB) with a fresh `mmap` and unmaps it
on free. A training step allocates such tensors anew every step: the logits and their gradient (`[32, 48, 6000]`
float32 is 37 MB at bible6's shape), LMS+FD's two passes and its symmetric KL over them, large per-language
gradients freed by `zero_grad(set_to_none=True)`. Each then costs a page fault and a page zeroing per 4 KiB, every
step (FCLL with 50 languages, 38M parameters in its language-specific layers, measured 40-60k faults per step and
steps of 0.5-1.3 s instead of 0.45 s). PyTorch's CUDA caching allocator keeps freed blocks; this makes the CPU's allocator do the same. It changes
where tensors live, not what is computed: PyTorch aligns every CPU tensor to 64 bytes either way, and a run trains
to the same bits with or without it (tests/test_cpu_allocator.py checks this in two fresh processes).

The cost: memory a process has freed stays with it (its resident size stays at its peak) until it exits. The
training stage sets it on a CPU only, once per process; `HF_LANGSPEC_GLIBC_MALLOC=1` keeps glibc's defaults.
"""

from __future__ import annotations

import ctypes
import os

KEEP_DEFAULTS_VARIABLE = "HF_LANGSPEC_GLIBC_MALLOC"
KEPT = "glibc malloc keeping freed memory (mallopt: no mmap, no trimming)"  # the words of a successful setting
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4  # from glibc's malloc.h
_state: str | None = None


def keep_freed_memory() -> str:
    """Set glibc's malloc to serve large blocks from the heap (no mmap), never to give the heap's top back to the
    system (no trimming), and to grow it 256 MiB at a time. Returns how the allocator is set, in words (for a run's
    record and a benchmark's table); a second call returns the first call's answer."""
    global _state
    if _state is not None:
        return _state
    if os.environ.get(KEEP_DEFAULTS_VARIABLE) == "1":
        _state = f"glibc's default malloc ({KEEP_DEFAULTS_VARIABLE}=1)"
        return _state
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc only
    except (OSError, AttributeError):
        _state = "the C library's default malloc (no mallopt to configure)"
        return _state
    settings = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 256 << 20))
    if all(mallopt(option, value) for option, value in settings):
        _state = KEPT
    else:
        _state = "glibc's default malloc (mallopt refused the settings)"
    return _state


def allocator_setting() -> str | None:
    """What `keep_freed_memory` set in this process, in its words; None where it was not called (a GPU run)."""
    return _state


__all__ = ["KEEP_DEFAULTS_VARIABLE", "KEPT", "allocator_setting", "keep_freed_memory"]
