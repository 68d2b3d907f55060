"""Training corpora on disk: read once into memory-mapped Arrow, tokenized once, shared by every run and process.

At the papers' size (OPUS-100: 110M training examples) a corpus cannot live in Python objects (about 6 KB a
pair in lists of dicts); here it never does:

1. `read_corpus(files)`: JSONL / TSV / Moses / Parquet files (`write_corpus`, `data local|hub --output X.parquet`),
   folders of Parquet shards, or folders saved by `Dataset.save_to_disk`, are read row by row through the loaders' checks (a malformed line names its file and line, before any tokenizer or
   model work) and written in batches as one Arrow file with the canonical columns plus `src_hash` / `tgt_hash`
   (`processing.text_hashes`: what de-duplication, the exclusion of valid/test text and the tokenizer's sample
   compare instead of strings). The result is memory-mapped (`Dataset.from_file`).
2. `prepare_training_set(corpus, tokenizer, ...)`: one batched, multi-process `map` tokenizes every example
   (ids stored as int32); the filters run over columns (`processing.select_pairs`: lengths from
   the tokenized lists, de-duplication by the hash pair); the kept examples are written contiguously, a record
   batch at a time, and memory-mapped. Nothing is tokenized twice. The attention mask, all ones, is not stored:
   the data collator makes it.

A tokenizer trained on a corpus is kept too (`cached_tokenizer_folder`): a run on the same corpus with the same
`[tokenizer]` section into another output folder copies it instead of training it again.

Both steps are cached under `cache_root()` (`data.cache_dir`, else `$HF_LANGSPEC_CACHE`, else
`~/.cache/hf_langspec`), keyed by what changes their output: the files' contents (SHA-256, re-read only when a file's state
changed: `content_fingerprint`), the tokenizer (its whole serialised state, languages and tag style) and the settings (`max_length`,
per-direction caps, excluded text). A resumed run, every system and seed of a `compare` suite, and every process
of a launch meet the same key: the main process prepares, the others memory-map the same files. Entries are
written into a temporary folder and renamed into place, so an interrupted preparation leaves nothing half-written.
A corpus the cache's disk cannot hold is refused, before any work, with the space it needs.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from datasets import Dataset, Features, List, Value, load_from_disk
from tqdm.auto import tqdm

from ..environment import writing
from ..files import removed_on_failure, write_jsonl
from ..modeling.configuration_langspec import decoder_tag, source_tag_side
from ..tokenization.tokenization_langspec import encode_text, target_backend
from .cache import (
    cache_root,
    check_space,
    content_fingerprint,
    digest,
    discard_entry,
    files_fingerprint,
    input_bytes,
    open_entry,
    publish,
    record_entry,
    work_folder,
)
from .columns import CORPUS_SCHEMA, HASH_COLUMNS, batch_rows, column, stream_batches
from .local import check_row, iter_rows
from .processing import FilterReport, PairColumns, blank_sides, hash_columns, select_pairs
from .schema import CANONICAL_COLUMNS

logger = logging.getLogger(__name__)

# bump when what is written changes: older entries are then never read
CORPUS_VERSION = 2
PREPARED_VERSION = 4  # 4: control-token strings in text are spelled out (tokenization_langspec.encode_text)
PREPARED_FILE = "train.arrow"
TOKENIZED_FEATURES = Features(
    {
        "input_ids": List(Value("int32")),
        "labels": List(Value("int32")),
        "src_lang_ids": Value("int32"),
        "tgt_lang_ids": Value("int32"),
        "blank": Value("bool"),
        **{h: Value("uint64") for h in HASH_COLUMNS},
    }
)
# no attention mask: a training example's is all ones, and the collator (tokenizer.pad) makes it, padding included
TRAINING_COLUMNS = ["input_ids", "labels", "src_lang_ids", "tgt_lang_ids"]
TRAINING_FEATURES = Features({name: TOKENIZED_FEATURES[name] for name in TRAINING_COLUMNS})
READ_BATCH = 10_000
# rows per record batch of the files written: long column buffers, so a column is read without the others' pages
WRITE_BATCH = 100_000
# disk an entry needs, per byte of its input: Arrow strings plus hashes (corpus); the tokenized set, written twice
# (all examples, then the kept ones), per byte of the corpus (prepared)
CORPUS_SPACE_FACTOR = 1.5
PREPARED_SPACE_FACTOR = 3.0


# ----------------------------------------------------------------------------------------------- reading
def _batches(rows: Iterator[dict[str, str]]) -> Iterator[pa.RecordBatch]:
    columns: dict[str, list[str]] = {name: [] for name in CANONICAL_COLUMNS}
    for row in rows:
        for name in CANONICAL_COLUMNS:
            columns[name].append(row[name])
        if len(columns["src"]) == WRITE_BATCH:
            yield _record_batch(columns)
            columns = {name: [] for name in CANONICAL_COLUMNS}
    if columns["src"]:
        yield _record_batch(columns)


def _record_batch(columns: dict[str, list[str]]) -> pa.RecordBatch:
    return pa.record_batch({**columns, **hash_columns(columns)}, schema=CORPUS_SCHEMA)


def corpus_rows(path: str | os.PathLike) -> Iterator[dict[str, str]]:
    """The canonical rows of one file, every row through the loaders' checks: JSONL / TSV through `local`'s
    readers, a Parquet file (read in place, in batches: nothing is copied into the datasets library's cache,
    outside `data.cache_dir` and its space check), a folder of Parquet shards (`parquet_shards`) or a
    `save_to_disk` folder (memory-mapped where it is) through the same `check_row`, with the row's number in the
    error."""
    path = Path(path)
    if path.is_dir() and not (path / "state.json").exists():
        for shard in parquet_shards(path):
            yield from corpus_rows(shard)
        return
    if path.is_dir():
        dataset = load_from_disk(str(path))
        names, batches = dataset.column_names, dataset.iter(batch_size=READ_BATCH)
    elif path.suffix == ".parquet":
        try:
            parquet = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as error:
            raise ValueError(f"{path} is not a readable Parquet file ({error}); write it again.") from None
        names = parquet.schema_arrow.names
        batches = (b.to_pydict() for b in parquet.iter_batches(READ_BATCH, columns=list(CANONICAL_COLUMNS)))
    else:
        yield from iter_rows(path)
        return
    missing = [c for c in CANONICAL_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{path}: no columns {missing}; a corpus needs {list(CANONICAL_COLUMNS)}.")
    number = 0
    for batch in batches:
        for values in zip(*(batch[c] for c in CANONICAL_COLUMNS), strict=True):
            number += 1
            yield check_row(dict(zip(CANONICAL_COLUMNS, values, strict=True)), f"{path}: row {number}")


def parquet_shards(folder: Path) -> list[Path]:
    """A folder's Parquet shards in name order: the `*.parquet` files at its top. A writer's bookkeeping (names
    starting with `.` or `_`: `_SUCCESS`, `.part-0.parquet.crc`) is passed over with a logged line; anything else in
    the folder (another file, a shard in a subfolder) is a ValueError naming it, never a corpus read in part."""
    entries = sorted(folder.iterdir())
    shards = [p for p in entries if p.suffix == ".parquet" and p.is_file()]
    bookkeeping = [p.name for p in entries if p not in shards and p.name.startswith((".", "_"))]
    others = [p.name + ("/" if p.is_dir() else "") for p in entries if p not in shards and p.name not in bookkeeping]
    if others:
        raise ValueError(f"{folder} holds {others} beside its Parquet shards; a corpus folder holds only its shards at "
                         "its top: move the rest out, or give the files one by one.")  # fmt: skip
    if not shards:
        raise ValueError(f"{folder} is a folder without Parquet shards or a saved dataset; give a data file.")
    if bookkeeping:
        logger.info("%s: %d shards read; %s passed over (a writer's bookkeeping)", folder, len(shards), bookkeeping)
    return shards


def write_corpus(path: str | os.PathLike, rows: Iterator[dict[str, str]]) -> int:
    """Write canonical rows to `path`, streamed: Parquet (`.parquet`, row groups of 100,000 examples, which
    `train` and suites read directly) or JSON lines (any other name). Written to a temporary file and renamed into
    place; returns the count."""

    path = Path(path)
    if path.suffix != ".parquet":
        return write_jsonl(path, rows)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    schema = pa.schema([pa.field(name, pa.string()) for name in CANONICAL_COLUMNS])
    count = 0
    with removed_on_failure(tmp, path):
        with pq.ParquetWriter(str(tmp), schema) as writer:
            for batch in _batches(rows):
                writer.write_batch(batch.select(list(CANONICAL_COLUMNS)), row_group_size=100_000)
                count += batch.num_rows
        os.replace(tmp, path)
    return count


def renamed_languages(
    rows: Iterable[dict[str, str]], language_codes: Mapping[str, str] | None
) -> Iterator[dict[str, str]]:
    """`rows` with their language codes renamed by `language_codes` (`{"en": "eng_Latn"}`; unnamed codes kept)."""
    if not language_codes:
        yield from rows
        return
    for row in rows:
        yield {**row, "src_lang": language_codes.get(row["src_lang"], row["src_lang"]),
               "tgt_lang": language_codes.get(row["tgt_lang"], row["tgt_lang"])}  # fmt: skip


def read_corpus(
    files: Sequence[str | os.PathLike],
    cache_dir: str | os.PathLike | None = None,
    show_progress: bool = True,
    language_codes: Mapping[str, str] | None = None,
) -> Dataset:
    """The training files as one memory-mapped Arrow dataset (canonical columns + `src_hash` / `tgt_hash`),
    read once and reused while the files are unchanged. `language_codes` renames codes as the rows are read
    (`data.language_codes`: a corpus labelled `en` for a checkpoint that writes `eng_Latn`)."""
    files = [Path(f) for f in files]
    for file in files:
        if not file.exists():
            raise FileNotFoundError(f"{file} does not exist.")
    root = cache_root(cache_dir)
    renaming = sorted((language_codes or {}).items())
    key = digest(["corpus", CORPUS_VERSION, content_fingerprint(files, cache_dir), *([renaming] if renaming else [])])
    target = root / "corpora" / key
    reused = open_entry(target, "corpus.arrow", ["corpus.arrow", "files.json"])
    if reused is not None:
        logger.info("Reusing the corpus read into %s", target)
        return reused
    check_space(root, int(input_bytes(files) * CORPUS_SPACE_FACTOR), f"reading {[str(f) for f in files]}")
    work = work_folder(root / "corpora", key)
    try:
        # the bar ends its line before an error in the files is said (not glued to the error's line)
        with (
            writing(root / "corpora"),
            _progress(show_progress, "reading the training files", "pairs") as progress,
            pa.OSFile(str(work / "corpus.arrow"), "wb") as sink,
            pa.ipc.new_stream(sink, CORPUS_SCHEMA) as writer,
        ):
            for file in files:
                for batch in _batches(renamed_languages(corpus_rows(file), language_codes)):
                    writer.write_batch(batch)
                    progress.update(batch.num_rows)
        (work / "files.json").write_text(json.dumps(files_fingerprint(files), indent=1))
        record_entry(work, ["corpus.arrow", "files.json"])
        publish(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Dataset.from_file(str(target / "corpus.arrow"))


@contextlib.contextmanager
def _progress_bars(show: bool) -> Iterator[None]:
    """datasets' progress bars as `show` says (they are a global switch), restored after."""

    was = datasets.is_progress_bar_enabled()
    (datasets.enable_progress_bars if show else datasets.disable_progress_bars)()
    try:
        yield
    finally:
        (datasets.enable_progress_bars if was else datasets.disable_progress_bars)()


def _progress(show: bool, desc: str, unit: str):
    return tqdm(desc=desc, unit=f" {unit}", disable=not show)


# ----------------------------------------------------------------------------------------------- preparing
@dataclass
class PreparedTrainingSet:
    """The tokenized, filtered training set (memory-mapped) and what the filters removed."""

    dataset: Dataset
    report: FilterReport
    path: Path
    reused: bool


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """Everything that decides a tokenizer's ids: its whole serialised state, languages, tags and tag style."""
    state = [tokenizer.backend_tokenizer.to_str(), tokenizer.languages, tokenizer.lang_tag_template]
    if target_backend(tokenizer) is not tokenizer.backend_tokenizer:  # a second subword model cuts the targets
        state.append(target_backend(tokenizer).to_str())
    return digest([state, tokenizer.lang_tag_style, tokenizer.eos_token_id])


def special_counts(tokenizer: Any) -> tuple[int, int]:
    """Tokens the tokenizer adds to a source and to a target besides the pieces (`</s>`, and the tag on its side)."""
    style = tokenizer.lang_tag_style
    return 1 + (source_tag_side(style) is not None), 1 + decoder_tag(style)


def direction_order(dataset: Dataset, cap: int | Mapping[str, int | None]) -> np.ndarray:
    """`cap_directions` over columns: the first `cap` examples of every direction (a mapping caps the directions
    it names, `"default"` the rest), directions in the order of their first example, examples in corpus order."""
    table = pa.table({"s": column(dataset, "src_lang"), "t": column(dataset, "tgt_lang")})
    keys = pc.binary_join_element_wise(table.column("s"), table.column("t"), "-")
    encoded = pc.dictionary_encode(keys.combine_chunks())
    names = encoded.dictionary.to_pylist()  # in the order of first occurrence
    ids = encoded.indices.to_numpy()
    limits = dict(cap) if isinstance(cap, Mapping) else {"default": cap}
    unknown = sorted(set(limits) - set(names) - {"default"})
    if unknown:
        raise ValueError(
            f"[data] max_train_examples_per_direction names {unknown}, which have no training data; the directions "
            f"are {sorted(names)}."
        )
    order = np.argsort(ids, kind="stable")
    counts = np.bincount(ids, minlength=len(names))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(len(order)) - np.repeat(starts, counts)  # position within its direction
    limit = np.array([limits.get(d, limits.get("default")) for d in names], dtype=object)
    bound = np.array([np.iinfo(np.int64).max if v is None else int(v) for v in limit], dtype=np.int64)
    for name, size, b in zip(names, counts, bound, strict=True):
        if size > b:
            logger.info("Capped %s at %d of %d training examples", name, b, size)
    return order[rank < bound[ids[order]]]


def prepare_training_set(
    corpus: Dataset,
    tokenizer: Any,
    max_length: int | None = 100,
    cap: int | Mapping[str, int | None] | None = None,
    exclude_hashes: np.ndarray | None = None,
    num_proc: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    show_progress: bool = True,
) -> PreparedTrainingSet:
    """Tokenize and filter a corpus from `read_corpus` once; later calls with the same key reuse it.

    The result equals `filter_pairs(corpus, tokenizer, max_length)` mapped through `tokenizer(...)`, row for row
    (tests/test_corpus_store.py), with the direction caps of `cap_directions` applied first.
    """
    if not {*CANONICAL_COLUMNS, *HASH_COLUMNS} <= set(corpus.column_names):
        raise ValueError("prepare_training_set takes a corpus from read_corpus (canonical columns and text hashes).")
    root = cache_root(cache_dir)
    excluded = np.unique(np.asarray(exclude_hashes if exclude_hashes is not None else [], dtype=np.uint64))
    settings = {
        "max_length": max_length,
        "cap": cap,
        "excluded": hashlib.sha256(excluded.tobytes()).hexdigest()[:20],
    }
    if not corpus.cache_files or corpus._indices is not None:
        raise ValueError("prepare_training_set takes the memory-mapped corpus read_corpus returns, as it is.")
    corpus_files = files_fingerprint([f["filename"] for f in corpus.cache_files])
    key = digest(["prepared", PREPARED_VERSION, corpus_files, tokenizer_fingerprint(tokenizer), settings])
    target = root / "prepared" / key
    recorded = _filter_report(target)
    if recorded is None and target.exists():
        discard_entry(target, "filter_report.json is missing or cannot be read")
    reused = open_entry(target, PREPARED_FILE, [PREPARED_FILE, "filter_report.json"], recorded and recorded["kept"])
    if reused is not None:
        logger.info("Reusing the tokenized training set in %s", target)
        return PreparedTrainingSet(reused, FilterReport(**recorded), target, True)
    corpus_bytes = sum(Path(f["filename"]).stat().st_size for f in corpus.cache_files)
    check_space(root, int(corpus_bytes * PREPARED_SPACE_FACTOR), "tokenizing the training set")
    work = work_folder(root / "prepared", key)
    try:
        with writing(root / "prepared"):  # a full disk names the cache
            source = corpus.select(direction_order(corpus, cap)) if cap else corpus
            with _progress_bars(show_progress):
                tokenized = source.map(
                    _Encoder(tokenizer),
                    batched=True,
                    num_proc=num_proc,
                    remove_columns=corpus.column_names,
                    features=TOKENIZED_FEATURES,
                    cache_file_name=str(work / "tokenized.arrow"),
                    new_fingerprint=f"{key}-tokenized",
                    desc="tokenizing train",
                )
            files = [f["filename"] for f in tokenized.cache_files]
            columns = _pair_columns(files, *special_counts(tokenizer))
            kept, report = select_pairs(columns, max_length=max_length, excluded_hashes=excluded)
            del columns
            (work / "set").mkdir()
            _write_kept(files, kept, work / "set" / PREPARED_FILE)
            (work / "set" / "filter_report.json").write_text(
                json.dumps({"kept": report.kept, "removed": report.removed})
            )
            record_entry(work / "set", [PREPARED_FILE, "filter_report.json"])
            del tokenized
            publish(work / "set", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return PreparedTrainingSet(Dataset.from_file(str(target / PREPARED_FILE)), report, target, False)


def _filter_report(folder: Path) -> dict[str, Any] | None:
    """A prepared entry's filter report (its kept count is the rows `train.arrow` must hold), or None when it is
    missing or unreadable (the entry is then discarded and built again)."""
    try:
        report = json.loads((folder / "filter_report.json").read_text())
        return report if isinstance(report, dict) and isinstance(report.get("kept"), int) else None
    except (OSError, ValueError):
        return None


def _pair_columns(files: list[str], extra_src: int, extra_tgt: int) -> PairColumns:
    """What the filters read of the tokenized examples: lengths in pieces (the list lengths less the tokens the
    tokenizer adds), blank sides and hashes."""
    parts: dict[str, list[np.ndarray]] = {name: [] for name in ("src_len", "tgt_len", "blank", *HASH_COLUMNS)}
    for batch in stream_batches(files):
        parts["src_len"].append(pc.list_value_length(batch.column("input_ids")).to_numpy() - extra_src)
        parts["tgt_len"].append(pc.list_value_length(batch.column("labels")).to_numpy() - extra_tgt)
        parts["blank"].append(batch.column("blank").to_numpy(zero_copy_only=False))
        for name in HASH_COLUMNS:  # a copy: a view would keep the batch's whole buffer (the ids too) alive
            parts[name].append(batch.column(name).to_numpy().copy())
    return PairColumns(**{name: np.concatenate(chunks) for name, chunks in parts.items()})


def _write_kept(files: list[str], kept: np.ndarray, target: Path) -> None:
    """The training columns of the rows `kept` (ascending indexes over the concatenated Arrow stream `files`) into
    one Arrow file, a record batch at a time. The files are read, not memory-mapped: the pages of the whole
    tokenized set never count in this process's resident memory."""
    schema = TRAINING_FEATURES.arrow_schema
    pending: list[pa.RecordBatch] = []
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:

        def flush() -> None:
            # one record batch of many rows: each column is then one long buffer, so reading the small ones (language
            # ids, list offsets: what the sampler reads) touches their pages only, not pages spread over the file
            if pending:
                writer.write_table(pa.Table.from_batches(pending, schema).combine_chunks())
                pending.clear()

        for batch, rows in batch_rows(files, kept):
            if len(rows):
                taken = [batch.column(name).take(pa.array(rows)) for name in TRAINING_COLUMNS]
                pending.append(pa.RecordBatch.from_arrays(taken, schema=schema))
            if sum(b.num_rows for b in pending) >= WRITE_BATCH:
                flush()
        flush()


class _Encoder:
    """The `map` function: every pair encoded as `LangSpecTokenizer.__call__` encodes it (tag and `</s>` where its
    `lang_tag_style` puts them; tests/test_corpus_store.py checks the two agree), written as Arrow list arrays
    built from flat numpy buffers rather than as nested Python lists, and whether a side is blank. A class, so that
    datasets can pickle it to its worker processes."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.tags = np.asarray(tokenizer.lang_tag_token_ids, dtype=np.int32)
        self.eos = tokenizer.eos_token_id
        self.codes = {code: i for i, code in enumerate(tokenizer.languages)}

    def _side(self, texts: list[str], tags: np.ndarray | None, target: bool = False) -> pa.ListArray:
        """`[tag] pieces </s>` per text (no tag when `tags` is None) as one list<int32> array; `target`: the texts
        are targets (cut by the tokenizer's target subword model where it has one)."""
        pieces = encode_text(self.tokenizer, texts, target=target)
        lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces))
        extra = 1 + (tags is not None)
        offsets = np.zeros(len(pieces) + 1, dtype=np.int32)
        np.cumsum(lengths + extra, out=offsets[1:])
        values = np.empty(offsets[-1], dtype=np.int32)
        special = np.zeros(len(values), dtype=bool)
        special[offsets[1:] - 1] = True
        values[offsets[1:] - 1] = self.eos
        if tags is not None:
            special[offsets[:-1]] = True
            values[offsets[:-1]] = tags
        values[~special] = np.fromiter(itertools.chain.from_iterable(pieces), dtype=np.int32, count=int(lengths.sum()))
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))

    def __call__(self, batch: dict[str, list]) -> pa.Table:
        try:
            src_ids = np.array([self.codes[c] for c in batch["src_lang"]], dtype=np.int32)
            tgt_ids = np.array([self.codes[c] for c in batch["tgt_lang"]], dtype=np.int32)
        except KeyError:  # the tokenizer's own error, naming the code and the codes it knows
            self.tokenizer(batch["src"], src_lang=batch["src_lang"], tgt_lang=batch["tgt_lang"])
            raise
        style = self.tokenizer.lang_tag_style
        side = source_tag_side(style)
        return pa.table(
            {
                "input_ids": self._side(
                    batch["src"], self.tags[{"target": tgt_ids, "source": src_ids}[side]] if side else None
                ),
                "labels": self._side(batch["tgt"], self.tags[tgt_ids] if decoder_tag(style) else None, target=True),
                "src_lang_ids": src_ids,
                "tgt_lang_ids": tgt_ids,
                "blank": pa.array(blank_sides(batch["src"], batch["tgt"]), pa.bool_()),
                **{name: pa.array(batch[name], pa.uint64()) for name in HASH_COLUMNS},  # kept for the filters
            }
        )


def canonical_rows(dataset: Dataset) -> Iterator[dict[str, str]]:
    """The canonical rows of a corpus, streamed in batches (for code that wants rows of a small corpus)."""
    for batch in dataset.select_columns(list(CANONICAL_COLUMNS)).iter(batch_size=READ_BATCH):
        yield from (dict(zip(CANONICAL_COLUMNS, v, strict=True)) for v in zip(*batch.values(), strict=True))


__all__ = ["PreparedTrainingSet", "direction_order", "prepare_training_set", "read_corpus", "write_corpus"]
