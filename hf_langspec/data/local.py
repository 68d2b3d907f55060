"""Local parallel data in the canonical schema: JSONL, TSV, and Moses-style pairs of plain-text files.

Every malformed line raises a ValueError naming the file and the line number; nothing is skipped.

* JSONL: one object per line with string fields `src_lang`, `tgt_lang`, `src`, `tgt` (extra fields ignored).
* TSV: `src_lang<TAB>tgt_lang<TAB>src<TAB>tgt`, or `src<TAB>tgt` with `src_lang`/`tgt_lang` given.
* Moses: `corpus.de` + `corpus.en`, line i of one translating line i of the other.
* Monolingual text (`read_sentences`): one sentence per line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from datasets import Dataset

from .checks import LANGUAGE_CODE, check_code
from .schema import CANONICAL_COLUMNS, canonical_dataset
from .text import file_lines, is_blank


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8", newline="\n") as f:  # a line ends at \n only (data/text.py)
            yield from enumerate(file_lines(f), 1)
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err}).") from None


_CHECKED_CODES: set[str] = set()  # codes check_code accepted: a corpus has few, and each is checked once


def check_row(row: dict, where: str) -> dict[str, str]:
    """One canonical row, checked (every reader and every stored corpus passes its rows through here).

    The common case (four non-blank strings, two known valid codes that differ, not the header) is decided in a
    few comparisons, since a corpus of 110M examples passes through here; anything else goes through every check
    and fails with its message.
    """
    src_lang, tgt_lang, src, tgt = (row.get(c) for c in CANONICAL_COLUMNS) if isinstance(row, dict) else (None,) * 4
    if (
        type(src_lang) is str and type(tgt_lang) is str and type(src) is str and type(tgt) is str
        and src_lang in _CHECKED_CODES and tgt_lang in _CHECKED_CODES and src_lang != tgt_lang
        and src_lang != "src_lang" and not is_blank(src) and not is_blank(tgt)
    ):  # fmt: skip
        return {"src_lang": src_lang, "tgt_lang": tgt_lang, "src": src, "tgt": tgt}
    checked = _check_row_fully(row, where)
    _CHECKED_CODES.update((checked["src_lang"], checked["tgt_lang"]))
    return checked


def _check_row_fully(row: dict, where: str) -> dict[str, str]:
    missing = [c for c in CANONICAL_COLUMNS if c not in row]
    codes_only = (
        len(row) >= 2 and not set(row) & set(CANONICAL_COLUMNS) and all(map(LANGUAGE_CODE.match, map(str, row)))
    )
    if missing and ("texts" in row or codes_only):
        raise ValueError(
            f"{where}: a multi-way record ({{code: text}} per language), where translation pairs are read; give a "
            f"file of pairs with {list(CANONICAL_COLUMNS)}, or name this one *.multiway.jsonl where multi-way files "
            "are taken (train-tokenizer, a suite's eval sets)."
        )
    if missing:
        raise ValueError(f"{where}: missing fields {missing}; each line needs {list(CANONICAL_COLUMNS)}.")
    bad = [c for c in CANONICAL_COLUMNS if not isinstance(row[c], str) or is_blank(row[c])]
    if bad:
        raise ValueError(f"{where}: fields {bad} must be non-empty strings.")
    if [row[c] for c in CANONICAL_COLUMNS] == list(CANONICAL_COLUMNS):
        raise ValueError(f"{where} is a header line ({', '.join(CANONICAL_COLUMNS)}); remove it, data lines only.")
    check_code(row["src_lang"], where)
    check_code(row["tgt_lang"], where)
    if row["src_lang"] == row["tgt_lang"]:
        raise ValueError(
            f"{where}: source and target are both {row['src_lang']!r}; a translation pair joins two languages."
        )
    return {c: row[c] for c in CANONICAL_COLUMNS}


def read_multiway(path: str | os.PathLike, languages: Sequence[str] | None = None) -> Iterator[dict[str, str]]:
    """Multi-way records, one JSON object per line: `{"texts": {code: text}}` (the Bible's `*.multiway.jsonl`) or
    one field per code, each checked like a pair's fields (codes, non-empty strings; a blank or missing language
    is absent from that record). Yields `{code: text}`, restricted to `languages` when given."""
    for where, record in _json_lines(Path(path), "record"):
        texts = record.get("texts", record) if isinstance(record, dict) else None
        if not isinstance(texts, dict):
            raise ValueError(f"{where}: expected a JSON object of {{code: text}} fields or a `texts` mapping.")
        if set(CANONICAL_COLUMNS) <= set(texts):
            raise ValueError(
                f"{where}: a translation pair ({', '.join(CANONICAL_COLUMNS)}), where multi-way records are read; "
                "give a file of {code: text} records, or name a file of pairs without .multiway."
            )
        for code, text in texts.items():
            check_code(code, where)
            if not isinstance(text, str):
                raise ValueError(f"{where}: the text of {code!r} is a {type(text).__name__}, not a string.")
        yield {c: t for c, t in texts.items() if not is_blank(t) and (languages is None or c in languages)}


def read_sentences(path: str | os.PathLike) -> list[str]:
    """Monolingual text, one sentence per line (e.g. for MLM pre-training); a blank line is an error."""
    path = Path(path)
    sentences = []
    for number, line in _lines(path):
        if is_blank(line):
            raise ValueError(f"{path}:{number}: empty line; give one non-empty sentence per line.")
        sentences.append(line)
    return sentences


def _json_lines(path: Path, what: str) -> Iterator[tuple[str, object]]:
    """`(file:line, value)` of each line of a JSON-lines file; a blank or unparsable line is an error."""
    for number, line in _lines(path):
        where = f"{path}:{number}"
        if is_blank(line):
            raise ValueError(f"{where}: empty line; remove it (each line must be one {what}).")
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not valid JSON ({err.msg} at column {err.colno}).") from None


def read_jsonl_pairs(path: str | os.PathLike) -> Iterator[dict[str, str]]:
    for where, row in _json_lines(Path(path), "example"):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}.")
        yield check_row(row, where)


def read_tsv_pairs(
    path: str | os.PathLike, src_lang: str | None = None, tgt_lang: str | None = None
) -> Iterator[dict[str, str]]:
    path = Path(path)
    expected = 2 if src_lang and tgt_lang else 4
    for number, line in _lines(path):
        fields = line.split("\t")
        if len(fields) != expected:
            layout = "src<TAB>tgt" if expected == 2 else "src_lang<TAB>tgt_lang<TAB>src<TAB>tgt"
            raise ValueError(f"{path}:{number}: {len(fields)} tab-separated fields, expected {expected} ({layout}).")
        values = [src_lang, tgt_lang, *fields] if expected == 2 else fields
        yield check_row(dict(zip(CANONICAL_COLUMNS, values, strict=True)), f"{path}:{number}")


def read_moses_pairs(
    src_path: str | os.PathLike, tgt_path: str | os.PathLike, src_lang: str, tgt_lang: str
) -> Iterator[dict[str, str]]:
    src_path, tgt_path = Path(src_path), Path(tgt_path)
    sources, targets = _lines(src_path), _lines(tgt_path)
    # streamed in step, so that a corpus of any size is never held in memory; the line counts only when they differ
    aligned = 0
    while True:
        source, target = next(sources, None), next(targets, None)
        if source is None or target is None:
            break
        aligned = source[0]
        where = f"{src_path}:{aligned} / {tgt_path}:{aligned}"
        yield check_row({"src_lang": src_lang, "tgt_lang": tgt_lang, "src": source[1], "tgt": target[1]}, where)
    if source is not None or target is not None:
        src_count = aligned + (source is not None) + sum(1 for _ in sources)
        tgt_count = aligned + (target is not None) + sum(1 for _ in targets)
        raise ValueError(
            f"{src_path} has {src_count} lines but {tgt_path} has {tgt_count}; Moses-style files must align line by "
            "line."
        )


def iter_rows(
    path: str | os.PathLike,
    format: str | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    tgt_path: str | os.PathLike | None = None,
) -> Iterator[dict[str, str]]:
    """The checked canonical rows of one local file (or a Moses pair), streamed: `load_local` without the dataset.

    `format` is `"jsonl"`, `"tsv"` or `"moses"`; by default it comes from the extension (`.jsonl`/`.json`,
    `.tsv`), and a Moses pair is given as `path` (source side) plus `tgt_path`.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist.")
    if path.is_dir():  # read as a file it was an unknown format, or errno 21 from a reader
        raise IsADirectoryError(f"{path} is a folder; give a data file (.jsonl, .json or .tsv, or a Moses pair).")
    if format is None:
        format = (
            "moses" if tgt_path is not None else {".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv"}.get(path.suffix)
        )
    if format == "jsonl":
        return read_jsonl_pairs(path)
    if format == "tsv":
        return read_tsv_pairs(path, src_lang, tgt_lang)
    if format == "moses":
        if tgt_path is None or not src_lang or not tgt_lang:
            raise ValueError("Moses-style data needs tgt_path, src_lang and tgt_lang.")
        return read_moses_pairs(path, tgt_path, src_lang, tgt_lang)
    raise ValueError(
        f"Cannot tell the format of {path} from its extension: name it .jsonl, .json or .tsv, or pass "
        "format='jsonl', 'tsv' or 'moses' (`data local --format`)."
    )


def load_local(
    path: str | os.PathLike,
    format: str | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    tgt_path: str | os.PathLike | None = None,
) -> Dataset:
    """Load one local file (or a Moses pair) as a canonical in-memory `datasets.Dataset` (`iter_rows`' rows).

    For a training corpus of any size use `corpus_store.read_corpus`, which keeps it on disk.
    """
    return canonical_dataset(iter_rows(path, format, src_lang, tgt_lang, tgt_path))


__all__ = [
    "check_row",
    "iter_rows",
    "load_local",
    "read_jsonl_pairs",
    "read_moses_pairs",
    "read_multiway",
    "read_sentences",
    "read_tsv_pairs",
]
