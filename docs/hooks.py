"""MkDocs hook: the site's home page is the repository's README.md, its links rewritten for the site (one source).

Links into docs/ become site links; links to other repository files become code mentions (the site holds only
docs/)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _relink(match: re.Match) -> str:
    label, target = match.group(1), match.group(2)
    if target.startswith("docs/"):
        return f"[{label}]({target.removeprefix('docs/')})"
    if target.startswith(("http://", "https://", "#")):
        return match.group(0)
    return f"`{target}`" if label in (target, f"`{target}`") else f"{label} (`{target}`)"


def on_page_markdown(markdown: str, page, config, files) -> str:  # MkDocs hook signature
    if page.file.src_uri != "index.md":
        return markdown
    return re.sub(r"(?<!!)\[([^\]]+)\]\(([^)]+)\)", _relink, README.read_text(encoding="utf-8"))
