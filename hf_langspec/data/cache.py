"""The package's data cache: where it is (`cache_root`), what identifies an entry (`content_fingerprint`: the
SHA-256 of what a user's files hold; `files_fingerprint` for the package's own entries), and how an entry is written
(refused before any work when the disk cannot hold it; built in a temporary folder and renamed into place)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from datasets import Dataset

from ..environment import process_running
from ..files import write_atomic
from ..stopping import AT_STOP
from .bible import default_cache_dir

logger = logging.getLogger(__name__)

CACHE_ENV = "HF_LANGSPEC_CACHE"
TOKENIZER_VERSION = 1  # the trained tokenizers kept by cached_tokenizer_folder; bump when what is kept changes


class CacheSpaceError(ValueError):
    """The cache's disk cannot hold what would be written there."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where prepared corpora live: `cache_dir`, else the package's cache (`$HF_LANGSPEC_CACHE`, else
    `~/.cache/hf_langspec`, where the Bible database is kept too)."""

    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:20]


def files_fingerprint(files: Sequence[str | os.PathLike]) -> list[list[Any]]:
    """The files' resolved paths, sizes and modification times: an identity only for files this package owns and
    never rewrites in place (its cache entries); a user's files are identified by `content_fingerprint`."""
    out = []
    for file in files:
        path = Path(file).resolve()
        parts = sorted(path.rglob("*")) if path.is_dir() else [path]
        out.append([str(path), [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in parts if p.is_file()]])
    return out


HASHES_FILE = "file_hashes.json"  # under cache_root(): content hashes by the file state they were read in


def content_fingerprint(files: Sequence[str | os.PathLike], cache_dir: str | os.PathLike | None = None) -> list[Any]:
    """What the files hold: the SHA-256 of each file (of each file of a folder, by relative path), in order, whatever
    their paths, sizes and modification times. A hash is read again only when the file's state changed: it is
    remembered under its resolved path, size, modification and change times and inode, and no write to a file
    leaves all of them as they were (the change time cannot be set back), so a remembered hash is the content's."""
    memo_path = cache_root(cache_dir) / HASHES_FILE
    try:
        memo = json.loads(memo_path.read_text()) if memo_path.is_file() else {}
    except (ValueError, OSError):  # a damaged memo is only a cache: hash again
        memo = {}
    changed, out = False, []
    for file in files:
        root = Path(file).resolve()
        parts = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        digests = []
        for part in parts:
            stat = part.stat()
            state = f"{part}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ctime_ns}|{stat.st_ino}"
            if state not in memo:
                for stale in [key for key in memo if key.startswith(f"{part}|")]:  # the file's earlier states
                    del memo[stale]
                with open(part, "rb") as handle:
                    memo[state] = hashlib.file_digest(handle, "sha256").hexdigest()
                changed = True
            digests.append([part.relative_to(root).as_posix() if root.is_dir() else "", memo[state]])
        out.append(digests)
    if changed:
        with contextlib.suppress(OSError):  # a read-only cache still reads; it hashes again next time
            memo_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(memo_path, json.dumps(memo, sort_keys=True).encode())
    return out


def input_bytes(files: Sequence[str | os.PathLike]) -> int:
    return sum(size for _, parts in files_fingerprint(files) for _, size, _ in parts)


def check_space(root: Path, needed: int, what: str) -> None:
    """Refuse, before writing, an entry that the disk under `root` cannot hold."""
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if needed > free:
        raise CacheSpaceError(
            f"The data cache {root} has {free / 1e9:.1f} GB free, but {what} needs about {needed / 1e9:.1f} GB; free "
            f"space there or point data.cache_dir (or ${CACHE_ENV}) at a larger disk."
        )


ENTRY_FILE = "entry.json"  # in a cache entry: the sizes its files were written with


def record_entry(folder: Path, names: Sequence[str]) -> None:
    """Record the sizes of `names` in `folder` (a finished entry, before it is published), for `entry_problem`."""
    sizes = {name: (folder / name).stat().st_size for name in names}
    (folder / ENTRY_FILE).write_text(json.dumps(sizes))


def entry_problem(folder: Path, names: Sequence[str]) -> str | None:
    """Why the cache entry `folder` cannot be reused (a file missing, or of another size than it was written with:
    cut short by a full disk, a copy or a crash), or None. An entry written before sizes were recorded is checked
    for its files only; `open_entry` then catches what its reader refuses."""
    for name in names:
        if not (folder / name).is_file():
            return f"{name} is missing"
    recorded = json.loads((folder / ENTRY_FILE).read_text()) if (folder / ENTRY_FILE).is_file() else {}
    for name, size in recorded.items():
        actual = (folder / name).stat().st_size if (folder / name).is_file() else None
        if actual != size:
            return f"{name} is {actual:,} bytes, written as {size:,}"
    return None


def discard_entry(folder: Path, problem: str) -> None:
    """Remove a damaged entry of the package's own cache (renamed first, so a reader never sees half of it), saying
    why; the caller builds it again."""
    logger.warning("The cache entry %s is damaged (%s): building it again.", folder, problem)
    aside = work_folder(folder.parent, folder.name + "-damaged")
    os.replace(folder, aside / "entry")
    shutil.rmtree(aside, ignore_errors=True)
    OPEN_WORK_FOLDERS.discard(aside)


def open_entry(folder: Path, name: str, names: Sequence[str], rows: int | None = None) -> Dataset | None:
    """The Arrow file `name` of the entry `folder` memory-mapped, or None after discarding the entry when it is
    missing, damaged (`entry_problem`, a file the Arrow reader refuses) or holds another number of `rows` than it
    was written with."""
    if not folder.exists():
        return None
    problem = entry_problem(folder, names)
    if problem is None:
        try:
            dataset = Dataset.from_file(str(folder / name))
        except (OSError, ValueError, pa.ArrowException) as error:  # ArrowInvalid is a ValueError
            problem = f"{name} cannot be read ({type(error).__name__}: {str(error)[:120]})"
        else:
            if rows is None or dataset.num_rows == rows:
                return dataset
            problem = f"{name} holds {dataset.num_rows:,} rows, written with {rows:,}"
    discard_entry(folder, problem)
    return None


def publish(work: Path, target: Path) -> None:
    """Rename a finished temporary folder into place (another process may have published it first)."""
    try:
        os.replace(work, target)
    except OSError:
        if not target.exists():
            raise
        shutil.rmtree(work, ignore_errors=True)


def cached_tokenizer_folder(
    corpus: Dataset, settings: Mapping[str, Any], cache_dir: str | os.PathLike | None = None
) -> Path:
    """Where the tokenizer trained on `corpus` (as `read_corpus` returned it: its folder is named by the files'
    contents) with `settings` (the `[tokenizer]` section and the per-direction cap) is kept, so that a run on the
    same corpus into another output folder reuses it instead of training it again."""
    if not corpus.cache_files:
        raise ValueError("cached_tokenizer_folder takes the memory-mapped corpus read_corpus returns.")
    corpus_files = files_fingerprint([f["filename"] for f in corpus.cache_files])
    return cache_root(cache_dir) / "tokenizers" / digest(["tokenizer", TOKENIZER_VERSION, corpus_files, settings])


OPEN_WORK_FOLDERS: set[Path] = set()  # this process's work folders: what SIGTERM removes (`stopping.stop_now`)


def remove_open_work_folders() -> None:
    """Remove this process's work folders (at SIGTERM, once the processes writing into them have ended)."""
    for folder in list(OPEN_WORK_FOLDERS):
        shutil.rmtree(folder, ignore_errors=True)


AT_STOP.add(remove_open_work_folders)


def work_folder(parent: Path, name: str) -> Path:
    """A new temporary folder under `parent` to build the entry `name` in, named with this process's id. An
    interrupted build removes its own (its `finally` on an error or Ctrl-C; on SIGTERM `stopping.stop_now` removes
    every one in `OPEN_WORK_FOLDERS`); one left by a process killed outright (SIGKILL, a power cut) is removed by the
    next build in `parent`."""
    parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(parent)
    work = Path(tempfile.mkdtemp(prefix=f".{name}-pid{os.getpid()}-", dir=parent))
    OPEN_WORK_FOLDERS.add(work)
    return work


def remove_abandoned(parent: Path) -> list[Path]:
    """Remove the temporary folders under `parent` whose process no longer runs; returns them. A folder of a live
    process (or of a process id reused since, which only delays its removal) is left alone."""
    removed = []
    for entry in parent.glob(".*-pid*-*"):
        owner = re.search(r"-pid(\d+)-", entry.name)
        if entry.is_dir() and owner and not process_running(int(owner.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def publish_copy(source: Path, target: Path) -> None:
    """Copy the folder `source` to `target` through a temporary folder renamed into place: an interrupted copy
    leaves no half-written `target` (another process may have published it first)."""
    work = work_folder(target.parent, target.name)
    try:
        shutil.copytree(source, work, dirs_exist_ok=True)
        publish(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


__all__ = [
    "CACHE_ENV",
    "HASHES_FILE",
    "OPEN_WORK_FOLDERS",
    "CacheSpaceError",
    "cache_root",
    "cached_tokenizer_folder",
    "check_space",
    "content_fingerprint",
    "digest",
    "files_fingerprint",
    "input_bytes",
    "publish",
    "publish_copy",
    "remove_abandoned",
    "work_folder",
]
