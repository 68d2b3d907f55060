"""Failures of the machine rather than of the input: a full disk, a file-size or disk-quota limit, a read-only
or forbidden path, memory. Each is said as one line (what failed, the path where it is known, what it needs)
instead of a traceback that asks for a bug report: the CLI says `environment_problem`'s line, and the writers of
files and checkpoints name their path with `writing`.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

# errno: (what happened, what it needs)
ERRNO_PROBLEMS = {
    errno.ENOSPC: ("the disk is full", "free space there or write elsewhere"),
    errno.EFBIG: ("the file is larger than this system allows (a file-size limit: ulimit -f)",
                  "raise the limit or write to a file system that allows larger files"),
    errno.EDQUOT: ("the disk quota is used up", "free space within the quota or write elsewhere"),
    errno.EROFS: ("the file system is read-only", "write to a writable folder"),
    errno.EACCES: ("permission denied", "write to a folder this user may write, or change its permissions"),
    errno.EPERM: ("operation not permitted", "write to a folder this user may write, or change its permissions"),
    errno.ENOMEM: ("out of memory", "lower the batch size or data.num_proc, or use a machine with more memory"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n) or lower data.num_proc"),
}  # fmt: skip
# the same failures as libraries word them without an errno (torch's checkpoint writer, safetensors, the loader)
TEXT_PROBLEMS = (
    ("No space left on device", errno.ENOSPC),
    ("StorageFull", errno.ENOSPC),
    ("File too large", errno.EFBIG),
    ("FileTooLarge", errno.EFBIG),
    ("Disk quota exceeded", errno.EDQUOT),
    ("Cannot allocate memory", errno.ENOMEM),
    ("failed to map segment from shared object", errno.ENOMEM),
    ("DefaultCPUAllocator: can't allocate memory", errno.ENOMEM),
    ("PytorchStreamWriter failed writing file", errno.ENOSPC),
)
MEMORY_FIX = ERRNO_PROBLEMS[errno.ENOMEM][1]


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def _text_code(text: str) -> int | None:
    return next((code for pattern, code in TEXT_PROBLEMS if pattern in text), None)


@contextlib.contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Inside the block, a failure of the machine that does not say where (a write to an open file, pyarrow's
    writer) is raised again as an `OSError` naming `path`, the file or folder being written."""
    try:
        yield
    except OSError as err:
        code = err.errno if err.errno in ERRNO_PROBLEMS else _text_code(str(err))
        if code is None or err.filename:
            raise
        raise OSError(code, os.strerror(code), str(path)) from err
    except Exception as err:  # a library's own wording (torch's checkpoint writer): the path rides along
        if _text_code(str(err)) is not None:
            err.written_path = str(path)
        raise


def process_running(pid: int) -> bool:
    """Whether a process with this id runs on this machine (one of another user's counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def environment_problem(err: BaseException) -> str | None:
    """One line for an error caused by the machine (see the module docstring), or None for any other error."""
    for link in _chain(err):
        if isinstance(link, MemoryError):
            return f"ran out of memory; {MEMORY_FIX}."
        code = link.errno if isinstance(link, OSError) else None
        if code not in ERRNO_PROBLEMS:
            text = str(link)
            code = _text_code(text)
            if code is None:
                continue
            if "PytorchStreamWriter" in text:  # torch does not say why: the usual causes, not a certainty
                where = f" ({link.written_path})" if getattr(link, "written_path", None) else ""
                return (f"a checkpoint write failed{where} (torch: file write failed): the disk is full or the file "
                        "is larger than allowed; free space or raise the limit, then rerun (training resumes from the "
                        "last complete checkpoint).")  # fmt: skip
        what, need = ERRNO_PROBLEMS[code]
        path = getattr(link, "filename", None) or getattr(link, "written_path", None)
        where = f" ({path})" if path else ""
        if code == errno.ENOMEM:
            return f"ran out of memory{where}; {need}."
        if code in (errno.EACCES, errno.EPERM, errno.EMFILE):  # a read as much as a write
            return f"{path or 'a file'}: {what}; {need}."
        return f"could not write{where}: {what}; {need}."
    return None


__all__ = ["environment_problem", "writing"]
