"""A run's per-sentence off-target flags, kept beside its outputs so that each output is identified once.

The report tests the off-target rate with the paired bootstrap over sentences, which needs a flag per output; a
results file keeps the rates only. Before, every report build identified every run's outputs again: lingua takes
about 7 ms a sentence on a 2-core CPU and a bible6 run has 2,000, so a bible6 report spent minutes in the identifier
(17 minutes for bible6_clm_norm beside two trainings). `seedN.off_target.json.gz` keeps the flags with what they
depend on: the identifier's name, its packages' versions and the SHA-256 of the outputs file. When any of them
differs, the flags are identified again and the file rewritten, so a cached flag is always the flag the identifier
gives now.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable
from functools import cache
from importlib import metadata
from pathlib import Path

from hf_langspec_cli.config_file import ConfigError

from ..evaluation.language_id import identifier_names, language_identifier, off_target_flags
from ..files import write_atomic
from .shared import results_paths

Pair = tuple[str, str]  # (test set, direction)


def flags_path(results_dir: Path, system: str, seed: int) -> Path:
    return results_dir / system / f"seed{seed}.off_target.json.gz"


def identifier_versions(name: str) -> dict[str, str]:
    """The installed version of each package behind the identifier `name` (e.g. lingua-language-detector)."""
    return dict(_identifier_versions(name))


@cache  # scanning the installed packages takes 0.17 s here, and a report stamps every run with the same answer
def _identifier_versions(name: str) -> tuple[tuple[str, str], ...]:
    distributions = metadata.packages_distributions()
    modules = identifier_names(name)
    return tuple((d, metadata.version(d)) for module in modules for d in distributions.get(module, []))


class ReportFlags(dict):
    """`(system, seed) -> {(set, direction): flags}`: the flags one report build has read or identified; `store`:
    whether it writes the flags files it makes (a report built with `write=False` writes nothing)."""

    def __init__(self, store: bool):
        super().__init__()
        self.store = store


def run_off_target_flags(
    results_dir: Path,
    system: str,
    seed: int,
    identifier: str,
    outputs: dict,
    pairs: Iterable[Pair],
    store: bool = True,
) -> dict[Pair, list[bool]]:
    """Per sentence of each (set, direction) in `pairs`, whether the run's output is not in the target language, as
    `identifier` says: from the run's flags file where it matches the outputs and the identifier, else identified
    now and (with `store`) written atomically for the next report."""
    path, outputs_path = flags_path(results_dir, system, seed), results_paths(results_dir, system, seed)[1]
    stamp = {
        "identifier": identifier,
        "versions": identifier_versions(identifier),
        "outputs_sha256": hashlib.sha256(outputs_path.read_bytes()).hexdigest(),
    }
    stored = _read(path)
    flags: dict[str, dict[str, str]] = stored["flags"] if stored.get("stamp") == stamp else {}
    missing = [(s, d) for s, d in pairs if d not in flags.get(s, {})]
    if missing:
        identify = language_identifier(identifier)
        for set_name, direction in missing:
            found = off_target_flags(outputs[set_name][direction], direction.split("-")[1], identify)
            if found is None:  # its rate was measured, so an identifier covered the language then
                raise ConfigError(
                    f"{system} seed {seed}: the off-target rate of {direction} was measured, but {identify.name} "
                    f"installed here does not cover {direction.split('-')[1]!r}; install the identifier the run used."
                )
            flags.setdefault(set_name, {})[direction] = "".join("1" if flag else "0" for flag in found)
        if store:
            text = json.dumps({"stamp": stamp, "flags": flags}, sort_keys=True)
            write_atomic(path, gzip.compress(text.encode(), mtime=0))
    return {(s, d): [c == "1" for c in flags[s][d]] for s, d in pairs}


def _read(path: Path) -> dict:
    """The stored flags, or nothing where there is no file or it cannot be read (it is then made anew)."""
    try:
        return json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError, EOFError):
        return {}


__all__ = ["ReportFlags", "flags_path", "identifier_versions", "run_off_target_flags"]
