"""The on-disk data path (`data/corpus_store.py`) against the row-by-row path it replaced.

The references below are the earlier implementations, written out plainly (lists of dicts, a set of strings, a
loop per example): the Arrow path must give the same examples in the same order, the same filter counts, the same
tokenizer and the same sampler draws, so that published runs reproduce.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tempfile
from collections import namedtuple
from pathlib import Path

import command_server
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import DataCollatorForSeq2Seq

from hf_langspec.data.cache import CacheSpaceError
from hf_langspec.data.columns import texts_at
from hf_langspec.data.corpus_store import direction_order, prepare_training_set, read_corpus, write_corpus
from hf_langspec.data.sampler import TemperatureSampler
from hf_langspec.data.schema import CANONICAL_COLUMNS
from hf_langspec.tokenization import train_tokenizer
from hf_langspec.training.batches import sampling_columns

WORDS = ["the", "word", "was", "god", "im", "anfang", "war", "das", "wort", "au", "commencement", "etait", "verbe"]
LANGS = ["en", "de", "fr"]


def reference_filter(rows, lengths, max_length=100, min_length=1):
    """The earlier `filter_pairs`: the first failing check counts, duplicates by a set of full-text tuples."""
    removed = {"empty side": 0, f"longer than {max_length}": 0, f"shorter than {min_length}": 0, "duplicate": 0}
    seen, kept = set(), []
    for row in rows:
        s, t = lengths(row["src"]), lengths(row["tgt"])
        if not row["src"].strip() or not row["tgt"].strip():
            removed["empty side"] += 1
        elif max(s, t) > max_length:
            removed[f"longer than {max_length}"] += 1
        elif min(s, t) < min_length:
            removed[f"shorter than {min_length}"] += 1
        else:
            key = (row["src_lang"], row["tgt_lang"], row["src"], row["tgt"])
            if key in seen:
                removed["duplicate"] += 1
            else:
                kept.append(row)
            seen.add(key)
    return kept, removed


def reference_cap(rows, cap):
    """The earlier `cap_directions`: rows grouped by direction in order of first appearance, the first `cap` each."""
    groups: dict[str, list] = {}
    for row in rows:
        groups.setdefault(f"{row['src_lang']}-{row['tgt_lang']}", []).append(row)
    limits = cap if isinstance(cap, dict) else {"default": cap}
    out = []
    for direction, group in groups.items():
        limit = limits.get(direction, limits.get("default"))
        out += group if limit is None else group[: int(limit)]
    return out


def reference_sampler(directions, temperature, seed, epoch, lengths=None, batch_size=None, megabatch=50):
    """The earlier `TemperatureSampler.__iter__` on Python lists."""
    groups: dict = {}
    for i, d in enumerate(directions):
        groups.setdefault(d, []).append(i)
    names = sorted(groups, key=str)
    sizes = torch.tensor([len(groups[d]) for d in names], dtype=torch.float64)
    weights = (sizes / sizes.max()) ** (1.0 / temperature)
    probs = weights / weights.sum()
    generator = torch.Generator().manual_seed(seed + epoch)
    n = len(directions)
    choices = torch.multinomial(probs, n, replacement=True, generator=generator)
    counts = torch.bincount(choices, minlength=len(names)).tolist()
    picked = []
    for name, count in zip(names, counts, strict=True):
        group = torch.tensor(groups[name])
        repeats = max(-(-count // len(group)), 1)
        picked.append(
            torch.cat([group[torch.randperm(len(group), generator=generator)] for _ in range(repeats)])[:count]
        )
    indices = torch.empty(n, dtype=torch.long)
    indices[torch.argsort(choices, stable=True)] = torch.cat(picked)
    if lengths is not None:
        lengths = torch.tensor(lengths)
        chunks = indices.split(batch_size * megabatch)
        indices = torch.cat([c[torch.argsort(lengths[c], descending=True, stable=True)] for c in chunks])
    return indices.tolist()


def random_rows(seed: int, directions: list[tuple[str, str]], src_words: int, tgt_words: int) -> list[dict]:
    rng = random.Random(seed)
    return [
        {"src_lang": s, "tgt_lang": t, "src": " ".join(rng.choices(WORDS, k=src_words)),
         "tgt": " ".join(rng.choices(WORDS, k=tgt_words))}
        for s, t in directions
    ]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    rows = random_rows(0, [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en")] * 50, 6, 5)
    return train_tokenizer(rows, vocab_size=60, show_progress=False)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join)
row = st.tuples(st.sampled_from([("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "de")]), sentence, sentence).map(
    lambda x: {"src_lang": x[0][0], "tgt_lang": x[0][1], "src": x[1], "tgt": x[2]}
)
# duplicates on purpose: a corpus is drawn from a small pool of distinct rows
corpora = st.lists(row, min_size=1, max_size=12).flatmap(
    lambda pool: st.lists(st.sampled_from(pool), min_size=1, max_size=60)
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=corpora, max_length=st.integers(3, 20), cap=st.one_of(st.none(), st.integers(1, 8)),
       style=st.sampled_from(["source", "target", "both", "none"]))  # fmt: skip
def test_the_prepared_training_set_is_the_row_by_row_one(tokenizer, rows, max_length, cap, style):
    """Same examples, order, ids and filter counts as: cap, filter row by row, tokenize the kept rows (with the
    tags where each style puts them)."""
    work = Path(tempfile.mkdtemp())
    tokenizer.lang_tag_style = style
    try:
        corpus = read_corpus([write_jsonl(work / "train.jsonl", rows)], cache_dir=work, show_progress=False)
        prepared = prepare_training_set(corpus, tokenizer, max_length, cap, cache_dir=work, show_progress=False)

        def pieces(text):
            return len(tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids)

        kept, removed = reference_filter(reference_cap(rows, cap) if cap else rows, pieces, max_length)
        assert prepared.report.removed == removed
        assert prepared.report.kept == len(kept) == len(prepared.dataset)
        if kept:
            expected = tokenizer(
                [r["src"] for r in kept], text_target=[r["tgt"] for r in kept],
                src_lang=[r["src_lang"] for r in kept], tgt_lang=[r["tgt_lang"] for r in kept],
            )  # fmt: skip
            for name in ("input_ids", "labels", "src_lang_ids", "tgt_lang_ids"):
                assert prepared.dataset[name][:] == expected[name], name
            # the batches the trainer collates, attention mask included (not stored: the collator makes it)
            collate = DataCollatorForSeq2Seq(tokenizer)
            indices = list(range(len(kept)))[:8]
            stored = collate([prepared.dataset[i] for i in indices])
            encoded = collate([{k: expected[k][i] for k in expected} for i in indices])
            assert stored.keys() == encoded.keys()
            assert all(torch.equal(stored[k], encoded[k]) for k in stored)
    finally:
        tokenizer.lang_tag_style = "source"
        shutil.rmtree(work)


@settings(max_examples=40, deadline=None)
@given(
    directions=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=400),
    temperature=st.sampled_from([1.0, 5.0, 100.0]),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 3),
    batch_size=st.one_of(st.none(), st.integers(1, 9)),
)
def test_the_sampler_draws_what_the_list_based_sampler_drew(directions, temperature, seed, epoch, batch_size):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 50) for _ in directions] if batch_size else None
    expected = reference_sampler(directions, temperature, seed, epoch, lengths, batch_size)
    for given_as in (np.array(directions), directions):  # arrays from Arrow columns, or a list of tuples
        sampler = TemperatureSampler(
            given_as, temperature=temperature, seed=seed,
            lengths=None if lengths is None else np.array(lengths), batch_size=batch_size,
        )  # fmt: skip
        sampler.set_epoch(epoch)
        assert list(sampler) == expected


def test_the_trainer_reads_directions_and_lengths_from_the_arrow_columns(tokenizer, tmp_path):
    rng = random.Random(1)
    rows = [
        {"src_lang": s, "tgt_lang": t, "src": " ".join(rng.choices(WORDS, k=rng.randint(1, 9))), "tgt": "das wort"}
        for s, t in [("en", "de"), ("fr", "en"), ("de", "en")] * 30
    ]
    corpus = read_corpus([write_jsonl(tmp_path / "t.jsonl", rows)], cache_dir=tmp_path, show_progress=False)
    dataset = prepare_training_set(corpus, tokenizer, cache_dir=tmp_path, show_progress=False).dataset
    view = dataset.select([5, 3, 70, 0])  # through an indices mapping, as a stage's directions select them
    directions, lengths = sampling_columns(view, with_lengths=True)
    assert directions.tolist() == [[view[i]["src_lang_ids"], view[i]["tgt_lang_ids"]] for i in range(4)]
    assert lengths.tolist() == [max(len(view[i]["input_ids"]), len(view[i]["labels"])) for i in range(4)]


def test_the_tokenizer_trained_on_the_corpus_on_disk_is_the_one_trained_on_its_rows(tmp_path):
    rows = random_rows(2, [("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en"), ("en", "de")] * 40, 5, 4)
    corpus = read_corpus([write_jsonl(tmp_path / "t.jsonl", rows)], cache_dir=tmp_path, show_progress=False)
    for sample_size in (30, 5000):  # a sample smaller than the corpus, and one that oversamples
        on_disk = train_tokenizer(corpus, vocab_size=50, sample_size=sample_size, show_progress=False)
        in_memory = train_tokenizer(rows, vocab_size=50, sample_size=sample_size, show_progress=False)
        assert on_disk.backend_tokenizer.to_str() == in_memory.backend_tokenizer.to_str()


def test_capped_directions_keep_the_first_examples_of_each_in_first_seen_order(tmp_path):
    rng = random.Random(3)
    rows = [
        {"src_lang": s, "tgt_lang": t, "src": f"s {i}", "tgt": f"t {i}"}
        for i, (s, t) in enumerate(rng.choices([("en", "de"), ("de", "en"), ("fr", "en")], k=200))
    ]
    corpus = read_corpus([write_jsonl(tmp_path / "t.jsonl", rows)], cache_dir=tmp_path, show_progress=False)
    for cap in (7, {"de-en": 3, "default": None}, {"fr-en": 1, "default": 10}, {"fr-en": 0, "default": None}):
        order = direction_order(corpus, cap).tolist()
        assert [corpus[i]["src"] for i in order] == [r["src"] for r in reference_cap(rows, cap)]
    assert all(corpus[i]["src_lang"] != "fr" for i in direction_order(corpus, {"fr-en": 0, "default": None}))
    with pytest.raises(ValueError, match=r"names \['es-en'\], which have no training data"):
        direction_order(corpus, {"es-en": 3})
    # the tokenizer's sample reads its sentences from the files, also through a capped view's indices
    view = corpus.select(direction_order(corpus, 7))
    positions = np.array([9, 0, 17, 4, 9, 1])
    expected = [[view[int(p) // 2]["src"], view[int(p) // 2]["tgt"]][int(p) % 2] for p in positions]
    assert texts_at(view, positions) == expected


def test_the_cache_is_reused_for_the_same_inputs_and_rebuilt_when_they_change(tokenizer, tmp_path):
    rows = [{"src_lang": "en", "tgt_lang": "de", "src": f"the word {i}", "tgt": f"das wort {i}"} for i in range(50)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    corpus = read_corpus([path], cache_dir=tmp_path / "cache", show_progress=False)
    first = prepare_training_set(corpus, tokenizer, cache_dir=tmp_path / "cache", show_progress=False)
    again = prepare_training_set(
        read_corpus([path], cache_dir=tmp_path / "cache", show_progress=False), tokenizer,
        cache_dir=tmp_path / "cache", show_progress=False,
    )  # fmt: skip
    assert not first.reused and again.reused and again.path == first.path
    assert again.dataset[:] == first.dataset[:] and again.report == first.report
    other = prepare_training_set(corpus, tokenizer, max_length=3, cache_dir=tmp_path / "cache", show_progress=False)
    assert other.path != first.path and other.report.removed["longer than 3"] > 0
    write_jsonl(path, rows[:10])  # the file changed: read again, prepared again
    changed = read_corpus([path], cache_dir=tmp_path / "cache", show_progress=False)
    assert len(changed) == 10
    assert (
        len(prepare_training_set(changed, tokenizer, cache_dir=tmp_path / "cache", show_progress=False).dataset) == 10
    )
    assert not [p for p in (tmp_path / "cache").rglob(".*") if p.is_dir()]  # no temporary folder left behind


DAMAGES = {
    "cut to half": lambda f: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]),
    "emptied": lambda f: f.write_bytes(b""),
    "removed": lambda f: f.unlink(),
    "overwritten with text": lambda f: f.write_text("not what was written"),
    "one byte longer": lambda f: f.write_bytes(f.read_bytes() + b"\0"),
}
ENTRY_FILES = [("corpora", "corpus.arrow"), ("corpora", "files.json"), ("prepared", "train.arrow"),
               ("prepared", "filter_report.json")]  # fmt: skip


@pytest.mark.reliability
@pytest.mark.parametrize("damage", list(DAMAGES))
@pytest.mark.parametrize(("kind", "name"), ENTRY_FILES)
def test_a_damaged_cache_entry_is_built_again_not_read(tokenizer, tmp_path, caplog, kind, name, damage):
    """Issue 75: every `train.arrow` of the cache cut short was a traceback ("this is a bug"). The class: each file of
    each kind of data-cache entry, damaged each way, is noticed on reuse (its recorded size, the Arrow reader, the
    recorded row count), said in one warning, and built again to what it was; nothing damaged is left behind."""
    rows = [{"src_lang": "en", "tgt_lang": "de", "src": f"the word {i}", "tgt": f"das wort {i}"} for i in range(40)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    cache = tmp_path / "cache"

    def prepared():
        corpus = read_corpus([path], cache_dir=cache, show_progress=False)
        return corpus, prepare_training_set(corpus, tokenizer, cache_dir=cache, show_progress=False)

    corpus, first = prepared()
    expected_corpus, expected = corpus[:], first.dataset[:]
    (entry,) = [p for p in (cache / kind).iterdir() if not p.name.startswith(".")]
    DAMAGES[damage](entry / name)
    with caplog.at_level("WARNING"):
        corpus, again = prepared()
    assert corpus[:] == expected_corpus and again.dataset[:] == expected and again.report == first.report
    warnings = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(warnings) == 1 and str(entry) in warnings[0] and "building it again" in warnings[0], warnings
    assert not [p for p in cache.rglob(".*") if p.is_dir()]  # no damaged or temporary folder left behind


def test_a_parquet_corpus_reads_as_its_jsonl(tmp_path):
    from datasets import Dataset

    rows = [{"src_lang": "en", "tgt_lang": "fr", "src": f"word {i}", "tgt": f"verbe {i}"} for i in range(30)]
    Dataset.from_list(rows).to_parquet(str(tmp_path / "t.parquet"))
    from_parquet = read_corpus([tmp_path / "t.parquet"], cache_dir=tmp_path, show_progress=False)
    from_jsonl = read_corpus([write_jsonl(tmp_path / "t.jsonl", rows)], cache_dir=tmp_path, show_progress=False)
    assert from_parquet[:] == from_jsonl[:]


@pytest.mark.reliability
def test_a_bad_line_deep_in_a_large_file_names_the_file_and_the_line_and_leaves_no_cache(tmp_path):
    path = tmp_path / "big.jsonl"
    good = json.dumps({"src_lang": "en", "tgt_lang": "de", "src": "the word", "tgt": "das wort"}) + "\n"
    with path.open("w") as f:
        f.write(good * 120_000)
        f.write('{"src_lang": "en", "tgt_lang": "de", "src": "the word"}\n')
    with pytest.raises(ValueError, match=rf"{path}:120001: missing fields \['tgt'\]"):
        read_corpus([path], cache_dir=tmp_path / "cache", show_progress=False)
    assert not any((tmp_path / "cache" / "corpora").iterdir())


@pytest.mark.reliability
def test_a_corpus_the_cache_disk_cannot_hold_is_refused_with_the_space_it_needs(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "t.jsonl", [{"src_lang": "en", "tgt_lang": "de", "src": "a", "tgt": "b"}] * 100)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**6, 10**6 - 100, 100))
    with pytest.raises(CacheSpaceError, match=r"has 0\.0 GB free, but reading .* needs about .*data\.cache_dir"):
        read_corpus([path], cache_dir=tmp_path / "cache", show_progress=False)


def test_data_local_writes_parquet_that_train_reads_as_the_jsonl(tmp_path):

    rows = [{"src_lang": "de", "tgt_lang": "en", "src": f"das wort {i}", "tgt": f"the word {i}"} for i in range(40)]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    command = ["data", "local", str(source), "--output"]
    out = command_server.run(*command, str(tmp_path / "out.parquet"), capture_output=True, text=True, check=True)
    assert "wrote 40 examples" in out.stdout
    parquet = read_corpus([tmp_path / "out.parquet"], cache_dir=tmp_path, show_progress=False)
    assert parquet[:] == read_corpus([source], cache_dir=tmp_path, show_progress=False)[:]
    (tmp_path / "shards").mkdir()  # a folder of shards reads as their concatenation, in name order
    for i in (1, 0):
        shutil.copy(tmp_path / "out.parquet", tmp_path / "shards" / f"part-{i}.parquet")
    assert len(read_corpus([tmp_path / "shards"], cache_dir=tmp_path, show_progress=False)) == 80
    (tmp_path / "empty.jsonl").write_text("")
    empty = command_server.run(*command[:-2], tmp_path / "empty.jsonl", "--output", tmp_path / "e.parquet",
                               capture_output=True, text=True)  # fmt: skip
    assert empty.returncode != 0 and "No examples to write" in empty.stderr and not (tmp_path / "e.parquet").exists()


@pytest.mark.reliability
def test_a_parquet_corpus_is_read_in_place_not_copied_into_the_datasets_cache(tmp_path, monkeypatch):
    """Before: `Dataset.from_parquet` copied the file into the datasets library's cache (HF_DATASETS_CACHE), outside
    `data.cache_dir` and its free-space check."""
    import datasets

    rows = [{"src_lang": "en", "tgt_lang": "fr", "src": f"word {i}", "tgt": f"verbe {i}"} for i in range(30)]
    write_corpus(tmp_path / "t.parquet", iter(rows))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    corpus = read_corpus([tmp_path / "t.parquet"], cache_dir=tmp_path / "cache", show_progress=False)
    assert [dict(zip(CANONICAL_COLUMNS, v, strict=True)) for v in zip(*(corpus[c] for c in CANONICAL_COLUMNS),
                                                                     strict=True)] == rows  # fmt: skip
    assert not (tmp_path / "datasets-cache").exists()
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ValueError, match=r"broken.parquet is not a readable Parquet file .*; write it again"):
        read_corpus([tmp_path / "broken.parquet"], cache_dir=tmp_path / "cache", show_progress=False)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("extra", "refused"),
    [("notes.txt", "['notes.txt']"), ("more/part-2.parquet", "['more/']"), ("_SUCCESS", None),
     (".part-0.parquet.crc", None)],
)  # fmt: skip
def test_a_shard_folder_reads_all_its_shards_or_names_what_else_it_holds(tmp_path, extra, refused):
    """Before: only the top-level `*.parquet` files were read and the rest skipped without a word (a shard in a
    subfolder lost). A writer's bookkeeping files (Spark's `_SUCCESS`, `.crc`) are passed over with a logged line."""
    rows = [{"src_lang": "en", "tgt_lang": "fr", "src": f"word {i}", "tgt": f"verbe {i}"} for i in range(20)]
    folder = tmp_path / "shards"
    folder.mkdir()
    write_corpus(folder / "part-0.parquet", iter(rows[:10]))
    write_corpus(folder / "part-1.parquet", iter(rows[10:]))
    (folder / extra).parent.mkdir(exist_ok=True)
    shutil.copy(folder / "part-0.parquet", folder / extra)
    if refused:
        with pytest.raises(ValueError, match=re.escape(f"holds {refused} beside its Parquet shards")):
            read_corpus([folder], cache_dir=tmp_path / "cache", show_progress=False)
    else:
        assert read_corpus([folder], cache_dir=tmp_path / "cache", show_progress=False)["src"] == [
            r["src"] for r in rows
        ]
