"""A resumed run is the run that was started: the stored config is compared before anything trains, and one
process at a time trains into an output directory.

* `experiment_config.json` is written when a run starts. Re-running into the same directory with a
  config that changes what is trained (learning rate, architecture, data, ...) is refused with the
  differing keys listed; settings that do not change the trained model (logging, saving, evaluation,
  the printed example) may change; a larger `training.max_steps` extends the run, and says so.
* `experiment_inputs.json` holds the SHA-256 of every file the config names (training, validation and test files,
  a saved tokenizer, starting checkpoints): a resumed run whose files now hold something else is refused, whatever
  their paths and times.
* `.hf_langspec.lock` names the process that trains (pid, host, start time). A second process is
  refused with that name; a lock whose process is gone (killed, rebooted) is taken over with a warning.
"""

from __future__ import annotations

import atexit
import copy
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from ..data.cache import content_fingerprint
from ..environment import process_running
from ..files import read_json, write_atomic
from ..stopping import AT_STOP

logger = logging.getLogger(__name__)
CONFIG_FILE = "experiment_config.json"
LOCK_FILE = ".hf_langspec.lock"
# keys that may change between a run and its resumption: they do not change what is trained
FREE_KEYS = ("output_dir", "evaluation", "translate", "card", "expected", "data.num_proc", "data.cache_dir", "training.logging_steps",
             "training.logging_strategy", "training.save_steps", "training.save_strategy", "training.save_total_limit",
             "training.disable_tqdm", "training.report_to", "training.dataloader_num_workers",
             "training.include_num_input_tokens_seen",
             # validation during training and where it runs: what is trained stays the same
             "training.eval_strategy", "training.eval_steps", "training.per_device_eval_batch_size",
             "training.predict_with_generate", "training.generation_num_beams", "training.generation_max_length",
             "training.use_cpu")  # fmt: skip


INPUTS_FILE = "experiment_inputs.json"
# the files a run reads: a resumed run must read the same contents (identity by content, not by path or time)
INPUT_KEYS = ("data.train_files", "data.valid_files", "data.test_files", "tokenizer.path", "model.init_from",
              "model.init_encoder_from", "model.init_from_pretrained")  # fmt: skip


# the keys whose values name files or folders: the same file spelled two ways (relative, absolute, through a
# link) is one run, so they are compared and recorded resolved
PATH_KEYS = ("output_dir", "data.train_files", "data.valid_files", "data.test_files", "data.cache_dir",
             "tokenizer.path", "model.init_from", "model.init_encoder_from", "model.init_from_pretrained")  # fmt: skip


def resolved_paths(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with every path it names (PATH_KEYS, in lists and mappings too) made absolute and resolved."""

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            return os.path.realpath(os.path.expanduser(value))
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: v if isinstance(v, bool) else resolve(v) for k, v in value.items()}
        return value

    config = copy.deepcopy(config)
    for key in PATH_KEYS:
        node, last = section_of(config, key)
        if node is not None and node.get(last) is not None:
            node[last] = resolve(node[last])
    return config


def section_of(config: Any, key: str) -> tuple[dict[str, Any] | None, str]:
    """`(the mapping that holds dotted key's last part, that part)`: `("training" section, "max_steps")` for
    `training.max_steps`; None for the mapping when a section on the way is missing or not a mapping."""
    *sections, last = key.split(".")
    node = config
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), last


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """`{"training": {"max_steps": 5}}` -> `{"training.max_steps": 5}` (lists stay values)."""
    if not isinstance(config, dict):
        return {prefix: config}
    flat: dict[str, Any] = {}
    for key, value in config.items():
        flat |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
    return flat


def under(key: str, section: str) -> bool:
    """Whether dotted `key` is `section` or lies inside it (`training.max_steps` is under `training`)."""
    return key == section or key.startswith(section + ".")


def _free(key: str) -> bool:
    return any(under(key, free) for free in FREE_KEYS)


# overridable without changing the scores: the keys that do not change the trained model, but for
# `evaluation` (which sentences and how they are decoded), of which only the batch size is free
KEEP_SCORES = (*(key for key in FREE_KEYS if key != "evaluation"), "evaluation.batch_size")
_UNSET = object()  # a key the config does not have


def void_expectations(config: dict[str, Any], changes: Mapping[str, Any]) -> str | None:
    """Drop `config["expected"]` when `changes` (dotted keys -> new values, about to be set) alter what its
    ranges were measured on; returns the line that says so, or None (no section, or nothing that matters
    changes: the same value again, a logging or saving setting, new ranges given with the changes)."""
    if "expected" not in config or any(under(key, "expected") for key in changes):
        return None
    changed = [
        key
        for key, value in changes.items()
        if not any(under(key, free) for free in KEEP_SCORES) and _get(config, key) != value
    ]
    if not changed:
        return None
    del config["expected"]
    return (
        f"expected ranges: not checked, they were measured with the config as written and the overrides change "
        f"{', '.join(changed)} (give new ones with --set expected=...)"
    )


def _get(config: Mapping[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _UNSET
        node = node[part]
    return node


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """`{dotted key: (old value, new value)}` of every leaf that differs between two configs, compared as JSON
    (a value JSON cannot hold is compared as its text); a key on one side only has `_UNSET` on the other."""
    before, after = (
        flatten(json.loads(json.dumps(old, default=str))),
        flatten(json.loads(json.dumps(new, default=str))),
    )
    return {k: (before.get(k, _UNSET), after.get(k, _UNSET)) for k in sorted(set(before) | set(after))
            if before.get(k, _UNSET) != after.get(k, _UNSET)}  # fmt: skip


def describe_changes(changes: Mapping[str, tuple[Any, Any]]) -> str:
    """`key: old -> new; ...` (values as repr, `'(unset)'` for a side without the key)."""

    def shown(value: Any) -> str:
        return repr("(unset)" if value is _UNSET else value)

    return "; ".join(f"{key}: {shown(old)} -> {shown(new)}" for key, (old, new) in changes.items())


def check_resumed_config(output_dir: Path, config: dict[str, Any], resume: bool) -> None:
    """Refuse a config that changes what the run in `output_dir` has trained so far (checkpoints or a model)."""

    path = output_dir / CONFIG_FILE
    found = [name for name in ("checkpoints", "model") if (output_dir / name).exists()]
    trained = bool(found)
    if trained and not path.exists():  # not a run's folder (or one from before runs recorded their config)
        raise ConfigError(
            f"{output_dir} holds {' and '.join(f'{name}/' for name in found)} that no hf_langspec run recorded (no "
            f"{CONFIG_FILE}), which training would replace; use a new output_dir, or move them away."
        )
    stored = read_json(path) if path.exists() and resume and trained else None
    if stored is not None:
        stored, config = resolved_paths(stored), resolved_paths(config)  # identity by the file, not its spelling
        changed = {k: pair for k, pair in config_changes(stored, config).items() if not _free(k)}
        steps = "training.max_steps"
        old_steps, new_steps = changed.get(steps, (None, None))
        if isinstance(old_steps, int) and isinstance(new_steps, int) and new_steps > old_steps:
            logger.warning("%s: max_steps %d -> %d extends the run.", output_dir, old_steps, new_steps)
            print(f"Extending the run in {output_dir}: training.max_steps {old_steps} -> {new_steps}.")
            del changed[steps]
        if changed:
            raise ConfigError(
                f"{output_dir} holds a run started with another config ({describe_changes(changed)}). Use a new "
                "output_dir, or --no-resume to train it anew from scratch."
            )
        check_inputs_unchanged(output_dir, config)


def record_config(output_dir: Path, config: dict[str, Any]) -> None:
    """Store the config of the run that starts (or continues) training now, and what its input files hold,
    atomically."""

    write_atomic(output_dir / CONFIG_FILE, json.dumps(resolved_paths(config), indent=1, default=str))
    write_atomic(output_dir / INPUTS_FILE, json.dumps(input_fingerprints(config), indent=1))


def input_fingerprints(config: dict[str, Any]) -> dict[str, Any]:
    """`{key: the contents' hashes}` of every local file or folder the config names in INPUT_KEYS (a Hub id is not
    a file and is left out): the same path with other contents is another input."""

    cache = _get(config, "data.cache_dir")
    out = {}
    for key in INPUT_KEYS:
        value = _get(config, key)
        values = value if isinstance(value, list) else list(value.values()) if isinstance(value, Mapping) else [value]
        paths = [v for v in values if isinstance(v, str | os.PathLike) and Path(v).exists()]
        if value is not _UNSET and paths:
            out[key] = content_fingerprint(paths, None if cache is _UNSET else cache)
    return out


def check_inputs_unchanged(output_dir: Path, config: dict[str, Any]) -> None:
    """Refuse to resume a run whose input files now hold something else than when it started training."""

    path = output_dir / INPUTS_FILE
    if not path.is_file():  # a run recorded before its inputs were: nothing to compare
        return
    recorded, now = read_json(path), input_fingerprints(config)
    changed = sorted(key for key in set(recorded) | set(now) if recorded.get(key) != now.get(key))
    if changed:
        named = "; ".join(f"{key} ({_get(config, key)})" for key in changed)
        raise ConfigError(
            f"{output_dir} holds a run trained on other inputs: the contents of {named} changed since it started. "
            "Use a new output_dir, put the files back, or --no-resume to train it anew from scratch."
        )


class RunLock:
    """`with RunLock(output_dir):` one training process per output directory (see the module docstring).

    A signal can end the process anywhere, inside `__enter__` and `__exit__` too (SIGTERM, or an exception raised
    by a handler). So the lock is never half made: its content is written to a private file that is then
    hard-linked into place (atomic, and refused when the lock exists), and its release, registered before the link
    both as an exit hook and in `stopping.AT_STOP` (SIGTERM's exit, which skips the hooks), removes the lock when it
    still holds this holder's token. A stop that lands between the link and the `with` body therefore leaves
    nothing stale behind.
    """

    def __init__(self, output_dir: Path) -> None:
        self.path = Path(output_dir) / LOCK_FILE
        # the token tells this holder from another in the same process (which the pid would not)
        self.me = {"pid": os.getpid(), "host": socket.gethostname(), "token": uuid.uuid4().hex}
        self.private = self.path.with_name(f"{LOCK_FILE}.{self.me['token']}")  # the lock's content before the link

    def _holder(self) -> dict[str, Any]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def release(self) -> None:
        """Remove the lock if this holder holds it (idempotent; also the exit hook)."""
        self.private.unlink(missing_ok=True)
        if self._holder().get("token") == self.me["token"]:
            self.path.unlink(missing_ok=True)

    def _place(self, me: dict[str, Any]) -> None:
        """Put the lock in place with its content; FileExistsError when there is one."""
        try:
            os.link(self.private, self.path)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links (some network and FUSE mounts): create it in place
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            with os.fdopen(fd, "w") as handle:
                json.dump(me, handle)

    def __enter__(self) -> RunLock:
        me = {**self.me, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        atexit.register(self.release)
        AT_STOP.add(self.release)
        try:
            self.private.write_text(json.dumps(me))
            for _ in range(2):
                try:
                    self._place(me)
                    return self
                except FileExistsError:
                    holder = self._holder()
                    same_host = holder.get("host") == me["host"]
                    if holder and (not same_host or process_running(int(holder.get("pid", -1)))):
                        raise ConfigError(
                            f"{self.path.parent} is being trained by process {holder.get('pid')} on "
                            f"{holder.get('host')} (since {holder.get('started')}); wait for it to finish or use "
                            "another output_dir"
                            + ("." if same_host else f", or remove {self.path} if that process is gone.")
                        ) from None
                    logger.warning("Taking over the stale lock %s of a process that is gone (%s).", self.path, holder)
                    self.path.unlink(missing_ok=True)
            raise ConfigError(f"Could not take the lock {self.path}; another process keeps creating it.")
        except BaseException:  # a signal may land just after the link: the lock may be ours already
            self.release()
            self._forget()
            raise
        finally:
            self.private.unlink(missing_ok=True)

    def _forget(self) -> None:
        atexit.unregister(self.release)
        AT_STOP.discard(self.release)

    def __exit__(self, *exc: Any) -> None:
        self.release()
        self._forget()


__all__ = ["RunLock", "check_resumed_config", "flatten", "record_config", "resolved_paths", "section_of"]
