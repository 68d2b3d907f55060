"""A corpus's columns as arrays: what the checks, the filters, the tokenizer's sample and the sampler read of a
corpus on disk without turning its rows into Python objects.

A corpus here is a `datasets.Dataset` with the canonical string columns and `src_hash` / `tgt_hash`
(`processing.text_hashes` of each side with its language), as `corpus_store.read_corpus` writes it; `as_corpus`
gives a list of rows the same form in memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, Features

from .processing import hash_columns
from .schema import CANONICAL_COLUMNS, canonical_dataset

HASH_COLUMNS = ("src_hash", "tgt_hash")
CORPUS_SCHEMA = pa.schema(
    [*(pa.field(name, pa.string()) for name in CANONICAL_COLUMNS), *(pa.field(h, pa.uint64()) for h in HASH_COLUMNS)]
)
CORPUS_FEATURES = Features.from_arrow_schema(CORPUS_SCHEMA)


def as_corpus(corpus: Dataset | Sequence[Mapping[str, str]]) -> Dataset:
    """A corpus with the text-hash columns: a `read_corpus` dataset as it is, canonical rows put in memory."""
    if isinstance(corpus, Dataset) and {"src_hash", "tgt_hash"} <= set(corpus.column_names):
        return corpus
    rows = canonical_dataset(corpus)
    return rows.map(hash_columns, batched=True, keep_in_memory=True, features=CORPUS_FEATURES)


def column(dataset: Dataset, name: str) -> pa.ChunkedArray:
    """A column as Arrow (zero-copy from the memory map; through the dataset's indices mapping, if any)."""
    return dataset.with_format("arrow")[name]


def direction_sizes(dataset: Dataset) -> dict[str, int]:
    """Examples per direction `"src-tgt"`, counted over the Arrow columns."""
    table = pa.table({"s": column(dataset, "src_lang"), "t": column(dataset, "tgt_lang")})
    counts = table.group_by(["s", "t"]).aggregate([([], "count_all")])
    return {f"{s}-{t}": n for s, t, n in zip(*(counts.column(i).to_pylist() for i in range(3)), strict=True)}


def language_counts(dataset: Dataset) -> dict[str, int]:
    """Sides per language (a pair counts once for each of its two languages)."""
    counts: dict[str, int] = {}
    for name in ("src_lang", "tgt_lang"):
        for entry in pc.value_counts(column(dataset, name)).to_pylist():
            counts[entry["values"]] = counts.get(entry["values"], 0) + entry["counts"]
    return counts


def first_occurrence(dataset: Dataset, code: str) -> int:
    """The index of the first example with `code` on either side."""
    found = [pc.index(column(dataset, name), code).as_py() for name in ("src_lang", "tgt_lang")]
    return min(i for i in found if i >= 0)


def distinct_texts(dataset: Dataset) -> dict[str, np.ndarray]:
    """Each language's distinct sentences as positions `2 * row + side` (side 0: src, 1: tgt), in the order of
    their first occurrence over src, tgt, src, tgt, ...: the order `sentences_by_language` gives them, from the hash
    columns alone."""
    hashes = np.empty(2 * len(dataset), dtype=np.uint64)
    hashes[0::2] = column(dataset, "src_hash").to_numpy()
    hashes[1::2] = column(dataset, "tgt_hash").to_numpy()
    _, first = np.unique(hashes, return_index=True)
    del hashes
    first.sort()
    sides = pa.chunked_array([*column(dataset, "src_lang").chunks, *column(dataset, "tgt_lang").chunks], pa.string())
    languages = pc.dictionary_encode(sides.combine_chunks())
    codes, index = languages.dictionary.to_pylist(), languages.indices.to_numpy()
    n = len(dataset)
    side_language = np.empty(2 * n, dtype=np.int32)
    side_language[0::2], side_language[1::2] = index[:n], index[n:]
    of_first = side_language[first]
    return {code: first[of_first == i] for i, code in enumerate(codes) if (of_first == i).any()}


def texts_at(dataset: Dataset, positions: np.ndarray) -> list[str]:
    """The sentences at positions `2 * row + side`, in the order given."""
    positions = np.asarray(positions, dtype=np.int64)
    rows, order = np.unique(positions // 2, return_inverse=True)
    table = _rows(dataset, rows)
    src, tgt = table.column("src").to_pylist(), table.column("tgt").to_pylist()
    return [tgt[r] if p % 2 else src[r] for p, r in zip(positions.tolist(), order.tolist(), strict=True)]


def _rows(dataset: Dataset, rows: np.ndarray) -> pa.Table:
    """The `src` / `tgt` of ascending `rows`. From a corpus on disk they are read in one pass over its Arrow files,
    not through its memory map: a sample spread over a corpus would otherwise map in nearly all of its pages (the
    tokenizer's 200,000 sentences of a 10M-pair corpus: 2.3 GB of resident memory)."""
    files = [f["filename"] for f in dataset.cache_files]
    if not files or not len(rows):
        return dataset.select_columns(["src", "tgt"]).with_format("arrow")[rows.tolist()]
    indices = getattr(dataset, "_indices", None)  # a view (`select`): its rows in the files' numbering
    wanted = rows if indices is None else indices.column(0).to_numpy()[rows]
    order = np.argsort(wanted, kind="stable")
    parts = [
        pa.table([batch.column("src").take(local), batch.column("tgt").take(local)], ["src", "tgt"])
        for batch, local in batch_rows(files, wanted[order])
        if len(local)
    ]
    return pa.concat_tables(parts).take(np.argsort(order))  # back in the order of `rows`


def stream_batches(files: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of Arrow stream files, read rather than memory-mapped, so that a pass over a whole
    corpus never counts its pages in this process's resident memory."""
    for file in files:
        with pa.OSFile(file) as source:
            yield from pa.ipc.open_stream(source)


def batch_rows(files: Sequence[str], rows: np.ndarray) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """Each record batch of `files` (`stream_batches`) with the ascending `rows`, numbered over the files'
    concatenation, that fall in it, as indexes into the batch."""
    start = 0
    for batch in stream_batches(files):
        end = start + batch.num_rows
        yield batch, rows[np.searchsorted(rows, start) : np.searchsorted(rows, end)] - start
        start = end


__all__ = [
    "CORPUS_FEATURES",
    "CORPUS_SCHEMA",
    "HASH_COLUMNS",
    "as_corpus",
    "batch_rows",
    "column",
    "direction_sizes",
    "distinct_texts",
    "first_occurrence",
    "language_counts",
    "stream_batches",
    "texts_at",
]
