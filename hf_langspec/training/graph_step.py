"""The whole training step as one CUDA graph per static-shape bucket (`training.cuda_graph_step`, issue 57).

Measured on an H200 (README "On a GPU", item 10): with static shapes and the Trainer's CUDA graphs (torch.compile's
reduce-overhead mode, forward and backward only) bible11_gpu's step is 5 ms of GPU work in a 17-21 ms step; the
rest is the host: the loss, clipping, AdamW, the scheduler and the Trainer's bookkeeping, ~400 host ops a step.
Here the step the Trainer would run (`compute_loss` with its label smoothing and the model's auxiliary losses,
`accelerator.backward`, `clip_grad_norm_` to `max_grad_norm`, the fused AdamW's `step`) is recorded once per bucket
into one CUDA graph (`torch.cuda.graph`, the buckets sharing one memory pool), and a training step becomes: copy
the batch into the bucket's input buffers, write the learning rate the scheduler chose into a device tensor,
replay. llm.c and MLPerf's NMT entries train this way; PyTorch's "whole network capture" recipe is followed:
warm-up iterations on a side stream, then capture; the optimizer `capturable`, the learning rate a tensor.

What a graph holds is fixed at capture: it must not read anything from the host inside the step (the package's
GPU path reads nothing back: tests/test_gpu_loop.py) and draws its random numbers on the device (dropout, and
HLT-MT's soft/hard draw there). The warm-up iterations take real optimizer steps, so the weights, the optimizer's
state and the random generators are put back afterwards: the run trains what the eager loop would have trained.

On a CPU standing in for a GPU (`routing.accelerator_path()`, the tests) the same step runs eagerly, unrecorded:
the code path, the Trainer's integration and the arithmetic are checked there; the recording needs CUDA.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from .static_shapes import Bucket, RngState, synthetic_batch

logger = logging.getLogger(__name__)

WARMUP_ITERATIONS = 3  # PyTorch's recipe: a few eager iterations on a side stream (lazy state, cuBLAS workspaces)


def inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer under accelerate's `AcceleratedOptimizer` (or the optimizer itself)."""
    return getattr(optimizer, "optimizer", optimizer)


def check_capturable(optimizer: torch.optim.Optimizer) -> None:
    """The step is recorded with the fused AdamW (its state and step count on the device, a tensor learning rate);
    any other optimizer is a ValueError that says the fix."""
    fused = isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults.get("fused")
    if not fused:
        raise ValueError(
            f"training.cuda_graph_step records the optimizer's step, which needs the fused AdamW; this run's optimizer "
            f"is {type(optimizer).__name__}{' (not fused)' if isinstance(optimizer, torch.optim.AdamW) else ''}: set "
            "training.optim: adamw_torch_fused, or cuda_graph_step: false."
        )


@contextmanager
def learning_rates_as(optimizer: torch.optim.Optimizer, rates: Sequence[torch.Tensor]) -> Iterator[None]:
    """Each param group's `lr` is the device tensor `rates[i]` inside (what a recorded step reads at each replay),
    and the scheduler's float again after it."""
    floats = [group["lr"] for group in optimizer.param_groups]
    for group, rate in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    try:
        yield
    finally:
        for group, value in zip(optimizer.param_groups, floats, strict=True):
            group["lr"] = value


class OptimizerState:
    """The parameters' values and the optimizer's state tensors, put back on `restore()`; state the optimizer
    creates in between (its lazily made moments and step counts) is zeroed, as a fresh optimizer's is."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.values = [p.detach().clone() for p in self.params]
        self.state = {
            (id(p), key): value.detach().clone()
            for p in self.params
            for key, value in optimizer.state.get(p, {}).items()
            if torch.is_tensor(value)
        }

    @torch.no_grad()
    def restore(self) -> None:
        for param, value in zip(self.params, self.values, strict=True):
            param.copy_(value)
        for param in self.params:
            for key, value in self.optimizer.state.get(param, {}).items():
                if torch.is_tensor(value):
                    saved = self.state.get((id(param), key))
                    value.copy_(saved) if saved is not None else value.zero_()


class StepGraphs:
    """One recorded training step per bucket, replayed for every batch of its shape.

    `body(inputs)` is the Trainer's whole step on a batch (loss, backward, clipping, optimizer step) returning
    `(loss, grad_norm)`; `record=False` runs it eagerly instead (a CPU standing in for a GPU).
    """

    def __init__(
        self,
        body: Callable[[dict[str, Any]], tuple[torch.Tensor, torch.Tensor]],
        optimizer: torch.optim.Optimizer,
        buckets: Sequence[Bucket],
        pad_token_id: int,
        device: torch.device,
        record: bool,
    ):
        check_capturable(optimizer)
        self.body, self.optimizer, self.buckets = body, optimizer, list(buckets)
        self.pad_token_id, self.device, self.record = pad_token_id, device, record
        # CUDA's fused AdamW reads a float32 rate (and turns a float one into float32 too); a CPU's reads doubles
        dtype = torch.float32 if device.type == "cuda" else torch.float64
        self.rates = [torch.tensor(float(g["lr"]), dtype=dtype, device=device) for g in optimizer.param_groups]
        self.graphs: dict[Bucket, tuple[Any, dict[str, torch.Tensor], torch.Tensor, torch.Tensor]] = {}
        self.grad_norm: torch.Tensor | None = None
        self.seconds: dict[str, Any] = {}

    def _step(self, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        with learning_rates_as(self.optimizer, self.rates):
            return self.body(inputs)

    def capture(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Record every bucket's step (warm-up iterations on a side stream, then the recording), then put the
        weights, the optimizer's state and the random generators back; returns the seconds it took."""
        if not self.record:
            return {}
        for group in self.optimizer.param_groups:
            group["capturable"] = True  # Adam refuses to be recorded otherwise; fused keeps its state on the device
        snapshot, pool, per_bucket = OptimizerState(self.optimizer), None, []
        start = time.perf_counter()
        with RngState():
            for bucket in self.buckets:
                begin = time.perf_counter()
                static = {k: v.clone() if torch.is_tensor(v) else v
                          for k, v in synthetic_batch(batch, bucket, self.pad_token_id).items()}  # fmt: skip
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    for _ in range(WARMUP_ITERATIONS):
                        self._step(static)
                torch.cuda.current_stream(self.device).wait_stream(side)
                torch.cuda.synchronize(self.device)
                warm = time.perf_counter()
                graph = torch.cuda.CUDAGraph()
                # thread-local: the loader's pin-memory thread may allocate while this thread records
                with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                    loss, norm = self._step(static)
                pool = graph.pool()
                self.graphs[bucket] = (graph, static, loss, norm)
                torch.cuda.synchronize(self.device)
                per_bucket.append({"bucket": list(bucket), "warm_up_s": round(warm - begin, 3),
                                   "record_s": round(time.perf_counter() - warm, 3)})  # fmt: skip
            snapshot.restore()
        torch.cuda.synchronize(self.device)
        self.seconds = {"graph_buckets": [list(b) for b in self.buckets],
                        "graph_capture_s": round(time.perf_counter() - start, 2), "graph_per_bucket": per_bucket}  # fmt: skip
        logger.info(
            "cuda_graph_step: %d buckets recorded in %.1f s", len(self.buckets), self.seconds["graph_capture_s"]
        )
        return self.seconds

    def run(self, batch: dict[str, Any]) -> torch.Tensor:
        """One training step on `batch` (already padded to a bucket and on the device): the loss, a device tensor;
        the gradients' norm before clipping is `self.grad_norm`."""
        for rate, group in zip(self.rates, self.optimizer.param_groups, strict=True):
            rate.fill_(group["lr"])  # the scheduler's rate for this step, written on the device (no sync)
        if not self.record:
            loss, self.grad_norm = self._step(batch)
            return loss
        source = batch["input_ids"].shape[1]
        target = batch["labels"].shape[1] if "labels" in batch else 0
        if (source, target) not in self.graphs:
            raise ValueError(
                f"a batch of shape [{source}, {target}] is no recorded bucket ({list(self.graphs)}): cuda_graph_step "
                "needs the static-shape collator's batches (LangSpecSeq2SeqTrainer pads them)."
            )
        graph, static, loss, norm = self.graphs[(source, target)]
        for name, buffer in static.items():  # the collator padded the batch to this bucket and the full batch size
            if torch.is_tensor(buffer):
                buffer.copy_(batch[name], non_blocking=True)
        graph.replay()
        self.grad_norm = norm
        return loss


def whole_step(
    trainer: Any, model: torch.nn.Module, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer
):
    """The Trainer's step as one function of the batch (what `StepGraphs` records): its `loss_and_backward` (label
    smoothing, auxiliary losses, the batch's own token count as transformers divides), `clip_grad_norm_` to
    `max_grad_norm` (the norm is computed with no clipping at 0), the optimizer's step, and the gradients dropped
    (each step makes its own, in the graph's memory)."""
    max_norm = trainer.args.max_grad_norm or math.inf

    def body(inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        loss = trainer.loss_and_backward(model, inputs)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)  # foreach on CUDA, as the Trainer clips
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach(), norm.detach()

    return body


class StepTakenInGraph:
    """The Trainer's optimizer while the step is recorded: `step` and `zero_grad` are done inside the step (no-ops
    here); everything else (state_dict for checkpoints, param_groups for the scheduler) is the optimizer's."""

    def __init__(self, optimizer: Any):
        self.wrapped = optimizer

    def step(self, closure: Any = None) -> None:
        # it did step, inside the recorded step: what torch's scheduler checks before warning of the opposite
        self.wrapped._opt_called = inner_optimizer(self.wrapped)._opt_called = True

    def zero_grad(self, set_to_none: bool = True) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


__all__ = ["StepGraphs", "StepTakenInGraph", "check_capturable", "whole_step"]
