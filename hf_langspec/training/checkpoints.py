"""Checkpoints that are verifiably complete: a manifest written last, checked before every resume.

A Trainer checkpoint is several files (weights, `optimizer.pt`, `scheduler.pt`, `rng_state*.pth`,
`trainer_state.json`); a process killed while writing, a full disk or a file removed by hand leaves a
folder that looks like a checkpoint. Resuming from it silently restarts Adam and the warm-up (a missing
`optimizer.pt` / `scheduler.pt`) or fails on a truncated weight file. So:

* after the Trainer has written a checkpoint, `manifest.json` (every file's size and SHA-256) is written
  atomically, last, and only then are older checkpoints rotated away;
* resuming takes the newest checkpoint whose manifest verifies; every other folder named like a
  checkpoint is set aside as `incomplete-checkpoint-N[-K]` with one warning naming what is wrong, a
  name the Trainer's rotation and resuming never match, and that never collides with earlier leftovers.

Checkpoints written before manifests existed are accepted when every file a resume needs is present
and `trainer_state.json` parses (with a warning that their contents could not be checked).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..files import write_atomic

logger = logging.getLogger(__name__)
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
# what a resume restores besides the weights: Adam's moments, the schedule's step, the RNG streams
RESUME_FILES = ("optimizer.pt", "scheduler.pt", TRAINER_STATE)


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: str | os.PathLike) -> Path:
    """Record every file of a checkpoint folder (size, SHA-256) in `manifest.json`, atomically."""
    folder = Path(folder)
    files = {
        str(path.relative_to(folder)): {"size": path.stat().st_size, "sha256": _digest(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST and not path.name.startswith(".")
    }
    write_atomic(folder / MANIFEST, json.dumps({"format": 1, "files": files}, indent=1))
    return folder / MANIFEST


def checkpoint_problem(folder: str | os.PathLike) -> str | None:
    """None when the checkpoint is complete; otherwise what is wrong with it, in a few words."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if manifest_path.exists():
        try:
            files = json.loads(manifest_path.read_text())["files"]
        except (OSError, ValueError, KeyError):
            return "its manifest.json is unreadable"
        for name, expected in files.items():
            path = folder / name
            if not path.is_file():
                return f"{name} is missing"
            if path.stat().st_size != expected["size"]:
                return f"{name} has {path.stat().st_size} bytes, the manifest says {expected['size']}"
            if _digest(path) != expected["sha256"]:
                return f"{name} does not match its checksum"
        return None
    missing = [name for name in RESUME_FILES if not (folder / name).is_file()]
    if not any(folder.glob("*.safetensors")) and not (folder / "pytorch_model.bin").exists():
        missing.insert(0, "model weights")
    if not any(folder.glob("rng_state*.pth")):
        missing.append("rng_state.pth")
    if missing:
        return f"no manifest, and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing"
    try:
        json.loads((folder / TRAINER_STATE).read_text())
    except ValueError:
        return f"no manifest, and {TRAINER_STATE} is truncated"
    logger.warning("%s has no manifest (written by an older version); its files are present but unchecked.", folder)
    return None


def set_aside(folder: Path, problem: str) -> Path:
    """Rename a broken checkpoint out of the Trainer's way, never onto an earlier leftover."""
    target = folder.with_name(f"incomplete-{folder.name}")
    k = 1
    while target.exists():
        k += 1
        target = folder.with_name(f"incomplete-{folder.name}-{k}")
    folder.rename(target)
    logger.warning("%s is not a complete checkpoint (%s); set aside as %s.", folder, problem, target.name)
    return target


def complete_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """The checkpoints of `output_dir` that verify, oldest first; the others are set aside (see the module)."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = CHECKPOINT.match(path.name)
        if not match or not path.is_dir():
            continue
        problem = checkpoint_problem(path)
        if problem is not None:
            set_aside(path, problem)
            continue
        found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest checkpoint that verifies, or None."""
    checkpoints = complete_checkpoints(output_dir)
    return str(checkpoints[-1]) if checkpoints else None


def check_resumable(checkpoint: str | os.PathLike, max_steps: int) -> None:
    """A checkpoint past the run's `max_steps` (one from a longer run, copied or left in the folder) would become
    the run's model with no step trained: a ValueError says so and the fix, before anything is loaded."""
    state_file = Path(checkpoint) / "trainer_state.json"
    if max_steps <= 0 or not state_file.is_file():
        return
    step = json.loads(state_file.read_text(encoding="utf-8")).get("global_step", 0)
    if step > max_steps:
        raise ValueError(
            f"{checkpoint} is at step {step}, past this run's max_steps={max_steps}: resuming would train nothing and "
            "keep that checkpoint's weights as the run's model. Use a new output_dir, or raise max_steps."
        )


def truly_missing_keys(model: torch.nn.Module, missing_keys: list[str]) -> list[str]:
    """The keys of `missing_keys` whose tensor no loaded key shares (tied weights are loaded through their twin)."""
    names_by_tensor: dict[int, list[str]] = {}
    for name, tensor in [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]:
        names_by_tensor.setdefault(id(tensor), []).append(name)
    missing = set(missing_keys)
    loaded_via_twin = {
        name for names in names_by_tensor.values() if any(n not in missing for n in names) for name in names
    }
    return [key for key in missing_keys if key not in loaded_via_twin]


def average_checkpoints(paths: list[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the floating-point weights of several checkpoints (fairseq's average_checkpoints)."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint.")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        weights = Path(path) / "model.safetensors"
        if not weights.exists():
            raise FileNotFoundError(f"{weights} does not exist; is {path} a checkpoint saved by save_pretrained?")
        state = load_file(weights)
        if total and set(state) != set(total):
            raise ValueError(f"{path} has different weights than the first checkpoint; cannot average them.")
        for name, tensor in state.items():
            dtypes[name] = tensor.dtype
            if tensor.is_floating_point():
                total[name] = total.get(name, 0) + tensor.double()  # accumulate in float64
            else:
                total.setdefault(name, tensor)
    return {name: (t / len(paths)).to(dtypes[name]) if t.is_floating_point() else t for name, t in total.items()}


__all__ = [
    "average_checkpoints",
    "check_resumable",
    "checkpoint_problem",
    "complete_checkpoints",
    "last_complete_checkpoint",
    "set_aside",
    "truly_missing_keys",
    "write_manifest",
]
