"""What counts as text, the same for every reader: lines end only at a line feed, and a text of whitespace and
invisible characters only is blank.

* Lines: `str.splitlines()` and Python's text mode also split at `\\r`, `\\v`, `\\f`, `\\x1c`-`\\x1e`, `\\x85`,
  U+2028 and U+2029, which occur inside sentences of real corpora (a stray carriage return, a Unicode line
  separator from a word processor); one input line must give exactly one output line and a Moses pair must stay
  aligned, so only `\\n` ends a line (a `\\r` before it, from Windows files, is dropped).
* Blank: besides whitespace, format characters (Unicode category Cf: zero-width space and joiners, the byte-order
  mark, soft hyphen, bidirectional marks), variation selectors and the Hangul fillers show nothing; a text made
  only of them is blank, as an empty line is (a model would otherwise invent a translation for it).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

# Unicode 14's format characters (category Cf), the variation selectors and the Hangul fillers, as ranges
_INVISIBLE = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u115f-\u1160\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
    "\U000e0100-\U000e01ef"
)
_VISIBLE = re.compile(f"[^\\s{_INVISIBLE}]")


def is_blank(text: str) -> bool:
    """Whether `text` shows nothing: only whitespace and invisible characters (or nothing)."""
    if text.isascii():  # the common case, without the regular expression
        return not text.strip()
    return _VISIBLE.search(text) is None


def split_lines(text: str) -> list[str]:
    """The lines of `text`, split at `\\n` only (a `\\r` before it dropped); a final line feed ends the last line
    rather than starting an empty one."""
    return list(file_lines(io.StringIO(text, newline="\n")))


def file_lines(handle) -> Iterator[str]:
    """The lines of a text file opened with `newline="\\n"`, as `split_lines` splits them."""
    for line in handle:
        line = line[:-1] if line.endswith("\n") else line
        yield line[:-1] if line.endswith("\r") else line


__all__ = ["file_lines", "is_blank", "split_lines"]
