"""Files the package writes and reads back: atomic writes (a temporary file renamed into place), JSON that names
its fix when damaged, and the checks that refuse, before any work, an output that would replace what a user has."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .environment import writing


@contextlib.contextmanager
def removed_on_failure(tmp: Path, path: str | os.PathLike | None = None) -> Iterator[None]:
    """Delete the temporary file `tmp` if the block fails (a full disk, a file-size limit, an interruption):
    a failed write leaves the old file as it was and nothing half-written beside it; a failure of the machine
    names `path` (the file being written; default `tmp`)."""

    try:
        with writing(path or tmp):
            yield
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) through a temporary file and a rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with removed_on_failure(tmp, path):
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows as JSON lines atomically (a temporary file renamed into place); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with removed_on_failure(tmp, path):
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
        os.replace(tmp, path)
    return count


class DamagedFileError(ValueError):
    """A file this package wrote and reads back (results, outputs, manifests, run state) that no longer parses."""


def read_json(path: str | os.PathLike, fix: str | None = None, gzipped: bool = False) -> Any:
    """A JSON file (gzip-compressed with `gzipped`) this package wrote, or a one-line `DamagedFileError` naming the
    file and the fix when it no longer parses (cut short, edited by hand, another file under its name).

    A missing file is the caller's question (FileNotFoundError passes through); `fix` defaults to deleting the file
    so that the command that wrote it makes it again.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        return json.loads((gzip.decompress(data) if gzipped else data).decode("utf-8"))
    except (EOFError, OSError, zlib.error) as err:  # gzip: truncated, or not gzip at all
        reason = f"not a complete gzip file ({err})"
    except UnicodeDecodeError:
        reason = "not UTF-8 text"
    except ValueError as err:
        reason = f"not valid JSON ({err})"
    fix = fix or "delete it and rerun the command that wrote it, or restore it from a copy"
    raise DamagedFileError(f"{path} is damaged: {reason}; {fix}.")


def read_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Raw JSON records, unchecked. Data goes through the checked readers instead: `local.iter_rows` (translation
    pairs) and `local.read_multiway` (multi-way records), which every command uses."""
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not a JSON object ({err.msg}).") from None


def check_output_file(
    path: str | os.PathLike, option: str, force: bool = False, keep: Iterable[str | os.PathLike] = ()
) -> None:
    """Refuse, before any work, an output file that would replace what the user has: an existing file unless
    `force` (the command's `--force`), a folder, or a file in or of `keep` (the model folder a command reads, its
    input files), which not even `force` replaces."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option} {path} is a folder; give a file name.")
    target = path.resolve()
    for kept in map(Path, keep):
        if target == kept.resolve() or (kept.is_dir() and kept.resolve() in target.parents):
            where = "the input file" if target == kept.resolve() else f"inside {kept}, which this command reads"
            raise ValueError(f"{option} {path} is {where}; write it to another file.")
    if path.exists() and not force:
        raise FileExistsError(f"{option} {path} exists; pass --force to replace it, or give another file.")


def check_output_dir(
    path: str | os.PathLike,
    option: str,
    force: bool = False,
    keep: Iterable[str | os.PathLike] = (),
    force_flag: str = "--force",
) -> None:
    """Refuse, before any work, an output folder that would replace what the user has: a file (or a folder under
    one), a folder that is or lies inside one of `keep` (the model folder a command reads: not even `force`
    writes there), or a folder with anything in it unless `force` (`force_flag` is how the caller says it)."""
    path = Path(path)
    named = f"{option} {path}".strip()
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                what = "is a file" if existing == path else f"lies under {existing}, a file"
                raise ValueError(f"{named} {what}; give a folder.")
            break
    target = path.resolve()
    for kept in map(Path, keep):
        if target == kept.resolve() or kept.resolve() in target.parents:
            where = f"the folder {kept}" if target == kept.resolve() else f"inside {kept}"
            raise ValueError(f"{named} is {where}, which this command reads; write to another folder.")
    if path.is_dir() and any(path.iterdir()) and not force:
        raise FileExistsError(f"{named} is not empty; pass {force_flag} to overwrite it, or give a new folder.")


def refuse_to_overwrite(folder: Path, force: bool) -> None:
    """Nothing a user owns is overwritten without `force`; a file where the folder goes is refused too."""
    check_output_dir(folder, "", force, force_flag="force=True (--force)")
