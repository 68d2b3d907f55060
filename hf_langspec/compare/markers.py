"""Where a suite's report goes inside another file (`insert_into`): between `<!-- compare:NAME -->` and
`<!-- /compare:NAME -->`; its answer table (`answers_into`) between `<!-- answers:NAME -->` and
`<!-- /answers:NAME -->`. Checked when the suite is loaded, written when the report is built."""

from __future__ import annotations

from pathlib import Path

from hf_langspec_cli.config_file import ConfigError

from ..files import write_atomic


def _markers(name: str, kind: str) -> tuple[str, str]:
    return f"<!-- {kind}:{name} -->", f"<!-- /{kind}:{name} -->"


def insertion_problem(path: Path, name: str, kind: str = "compare") -> str | None:
    """Why the report (`kind` compare) or answer table (answers) of suite `name` cannot go into `path` (no such
    file, or no markers), or None."""
    start, end = _markers(name, kind)
    content = path.read_text() if path.is_file() else ""
    if start not in content or end not in content:
        return f"{path} has no `{start}` ... `{end}` markers; add them where the report should go."
    return None


def insert_markdown(path: Path, name: str, text: str, kind: str = "compare") -> None:
    """Replace what stands between `<!-- KIND:NAME -->` and `<!-- /KIND:NAME -->` in `path`."""
    problem = insertion_problem(path, name, kind)
    if problem:
        raise ConfigError(problem)
    start, end = _markers(name, kind)
    content = path.read_text()
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    write_atomic(path, f"{head}{start}\n{text}{end}{tail}".encode())


__all__ = ["insert_markdown", "insertion_problem"]
