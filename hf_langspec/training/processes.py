"""The processes a run was launched with (`accelerate launch`): checks that they joined one group and that FSDP
applied where it was asked for, and their group's end."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import torch.distributed as dist
from accelerate.utils import DistributedType

logger = logging.getLogger(__name__)


def check_processes_joined(world_size: int) -> None:
    """Several processes launched, but this one is alone (no GPU and `use_cpu` false, so accelerate found no
    backend to join them): each would train its own model into the same folder. A ValueError says the fix."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and world_size == 1:
        raise ValueError(
            f"accelerate launched {launched} processes, but they did not join one process group (no GPU here, and "
            "training.use_cpu is false): set training.use_cpu: true to train on CPU processes."
        )


def warn_if_fsdp_not_applied(accelerator: Any) -> None:
    """An FSDP config on CPU processes trains with DDP: say so instead of letting it pass.

    accelerate (1.15) turns its FSDP plugin on only for GPU-like devices (`AcceleratorState` sets
    `DistributedType.FSDP` inside its MULTI_GPU / NPU / XPU / ... branch; CPU processes are MULTI_CPU),
    so every process holds the whole model and its optimizer state.
    """

    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and (
        accelerator.state.distributed_type != DistributedType.FSDP
    ):
        message = (
            f"accelerate was launched with FSDP, but it applies FSDP only on GPUs: these "
            f"{accelerator.state.distributed_type.value} processes train with DDP (a full copy of the model and "
            "optimizer each). On CPU use examples/accelerate/ddp.yaml; FSDP needs GPUs."
        )
        warnings.warn(message, stacklevel=3)
        logger.warning(message)


__all__ = ["check_processes_joined", "warn_if_fsdp_not_applied"]


def end_process_group() -> None:
    """End a launched process's group once every process has reached its end (accelerate's `end_training`).

    The barrier is the point: with gloo, a process that destroys the group while another still works (rank 0
    saving the model, say) can abort with "terminate called without an active exception". Without a group this
    does nothing, so a one-process run calls it too.
    """
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
