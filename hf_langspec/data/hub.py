"""The papers' corpora on the Hugging Face Hub, mapped to the canonical schema.

Two row layouts cover them:

* `translation`: `{"translation": {"de": "...", "en": "..."}}`, one config per language pair
  (OPUS-100, WMT-14, the WMT-10 collection, IWSLT-17, Europarl);
* `ted_multi`: `{"translations": {"language": [...], "translation": [...]}, "talk_name": ...}`,
  multi-way TED talks (the TED-59 setting of Qi et al. 2018 used by the LEE/LAA and CLL papers).

`load_corpus(name, directions, split)` calls `datasets.load_dataset(repo, config, split=...)`. Where
the Hub cannot be reached, `data_files` points the same code at local files with the same rows
(JSON lines, Parquet or CSV), for example a mirror of the Hub's Parquet export.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, load_dataset

from .schema import canonical_dataset, split_direction

# WMT-10 of Wang et al. (2020), used by HLT-MT: ten languages paired with English, each from its WMT year.
WMT10_SOURCES = {
    "fr": ("wmt/wmt14", "fr-en"),
    "cs": ("wmt/wmt19", "cs-en"),
    "de": ("wmt/wmt19", "de-en"),
    "fi": ("wmt/wmt19", "fi-en"),
    "lv": ("wmt/wmt17", "lv-en"),
    "et": ("wmt/wmt18", "et-en"),
    "ro": ("wmt/wmt16", "ro-en"),
    "hi": ("wmt/wmt14", "hi-en"),
    "tr": ("wmt/wmt18", "tr-en"),
    "gu": ("wmt/wmt19", "gu-en"),
}


# Every language of the papers' multilingual corpora (English included), for coverage checks such as the
# off-target detectors' (docs/DATA.md). OPUS-100: Zhang et al. (2020), the Hub's configs; TED-59: the
# codes of neulab/ted_multi without its "calv" talks (Qi et al. 2018); WMT-10: Wang et al. (2020).
CORPUS_LANGUAGES = {
    "opus100": (
        "af", "am", "an", "ar", "as", "az", "be", "bg", "bn", "br", "bs", "ca", "cs", "cy", "da", "de", "dz", "el",
        "en", "eo", "es", "et", "eu", "fa", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "hu",
        "hy", "id", "ig", "is", "it", "ja", "ka", "kk", "km", "kn", "ko", "ku", "ky", "li", "lt", "lv", "mg", "mk",
        "ml", "mn", "mr", "ms", "mt", "my", "nb", "ne", "nl", "nn", "no", "oc", "or", "pa", "pl", "ps", "pt", "ro",
        "ru", "rw", "se", "sh", "si", "sk", "sl", "sq", "sr", "sv", "ta", "te", "tg", "th", "tk", "tr", "tt", "ug",
        "uk", "ur", "uz", "vi", "wa", "xh", "yi", "yo", "zh", "zu",
    ),
    "ted59": (
        "ar", "az", "be", "bg", "bn", "bs", "cs", "da", "de", "el", "en", "eo", "es", "et", "eu", "fa", "fi", "fr",
        "fr-ca", "gl", "he", "hi", "hr", "hu", "hy", "id", "it", "ja", "ka", "kk", "ko", "ku", "lt", "mk", "mn",
        "mr", "ms", "my", "nb", "nl", "pl", "pt", "pt-br", "ro", "ru", "sk", "sl", "sq", "sr", "sv", "ta", "th",
        "tr", "uk", "ur", "vi", "zh", "zh-cn", "zh-tw",
    ),
    "wmt10": ("en", *WMT10_SOURCES),
}  # fmt: skip


def _sorted_pair(src: str, tgt: str) -> str:
    return "-".join(sorted((src, tgt)))


def _english_pair(src: str, tgt: str) -> str:
    other = tgt if src == "en" else src
    if "en" not in (src, tgt):
        raise ValueError(f"WMT configs pair a language with English; {src}-{tgt} has no English side.")
    return f"{other}-en"


@dataclass(frozen=True)
class HubCorpus:
    """A corpus on the Hub: where it is, how its configs are named, and its row layout."""

    repo: str
    layout: str  # "translation" or "ted_multi"
    config: Callable[[str, str], str | None]
    splits: tuple[str, ...]
    description: str

    def source(self, src: str, tgt: str) -> tuple[str, str | None]:
        return self.repo, self.config(src, tgt)


@dataclass(frozen=True)
class WMT10Corpus(HubCorpus):
    def source(self, src: str, tgt: str) -> tuple[str, str | None]:
        other = tgt if src == "en" else src
        if "en" not in (src, tgt) or other not in WMT10_SOURCES:
            raise ValueError(
                f"WMT-10 has {sorted(WMT10_SOURCES)} paired with English; {src}-{tgt} is not one of them."
            )
        return WMT10_SOURCES[other]


CORPORA: dict[str, HubCorpus] = {
    "opus100": HubCorpus(
        "Helsinki-NLP/opus-100", "translation", _sorted_pair, ("train", "validation", "test"),
        "OPUS-100 (Zhang et al. 2020): English-centric, 100 languages",
    ),
    "wmt14": HubCorpus(
        "wmt/wmt14", "translation", _english_pair, ("train", "validation", "test"),
        "WMT-14: cs, de, fr, hi, ru paired with English",
    ),
    "wmt10": WMT10Corpus(
        "wmt", "translation", _english_pair, ("train", "validation", "test"),
        "WMT-10 (Wang et al. 2020; HLT-MT): fr cs de fi lv et ro hi tr gu paired with English",
    ),
    "iwslt17": HubCorpus(
        "IWSLT/iwslt2017", "translation", lambda s, t: f"iwslt2017-{s}-{t}", ("train", "validation", "test"),
        "IWSLT-17 TED: en, de, it, nl, ro (multilingual configs for zero-shot)",
    ),
    "europarl": HubCorpus(
        "Helsinki-NLP/europarl", "translation", _sorted_pair, ("train",),
        "Europarl v8 (OPUS): 21 European languages, train split only",
    ),
    "ted59": HubCorpus(
        "neulab/ted_multi", "ted_multi", lambda s, t: None, ("train", "validation", "test"),
        "TED talks (Qi et al. 2018), multi-way: the TED-59 setting",
    ),
}  # fmt: skip


def load_from_hub(repo: str, config: str | None, split: str, **kwargs: Any) -> Dataset:
    """`datasets.load_dataset` of a Hub repository; an unreachable Hub is one line naming the ways around it."""
    try:
        return load_dataset(repo, config, split=split, **kwargs)
    except ConnectionError as error:
        raise ConnectionError(
            f"Cannot reach {repo} on the Hugging Face Hub ({type(error).__name__}: {str(error).splitlines()[0]}); "
            "check the network, or give local files in its layout (--data-files / data_files=), or run with "
            "HF_DATASETS_OFFLINE=1 where it is cached."
        ) from None


def _load_raw(
    repo: str, config: str | None, split: str, data_files: str | Sequence[str] | None, **kwargs: Any
) -> Dataset:
    if data_files is None:
        return load_from_hub(repo, config, split, **kwargs)
    files = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
    suffix = Path(str(files[0])).suffix
    builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(suffix)
    if builder is None:
        raise ValueError(f"Cannot tell the format of {files[0]}: use .jsonl, .json, .parquet or .csv files.")
    return load_dataset(builder, data_files=[str(f) for f in files], split="train", **kwargs)


def translation_rows(raw: Dataset, src: str, tgt: str, where: str) -> Iterable[dict[str, str]]:
    """Canonical rows from the `translation` layout; a wrong layout names the expected fields."""
    if "translation" not in raw.column_names:
        raise ValueError(
            f"{where}: expected rows like {{'translation': {{'{src}': ..., '{tgt}': ...}}}}, "
            f"found columns {raw.column_names}."
        )
    for i, pair in enumerate(raw["translation"]):
        if not isinstance(pair, Mapping) or src not in pair or tgt not in pair:
            keys = sorted(pair) if isinstance(pair, Mapping) else type(pair).__name__
            raise ValueError(f"{where}, row {i}: 'translation' has {keys}, expected the keys '{src}' and '{tgt}'.")
        yield {"src_lang": src, "tgt_lang": tgt, "src": pair[src], "tgt": pair[tgt]}


def ted_multi_rows(raw: Dataset, src: str, tgt: str, where: str) -> Iterable[dict[str, str]]:
    """Canonical rows from the multi-way `ted_multi` layout; talks lacking a side are skipped per direction."""
    if "translations" not in raw.column_names:
        raise ValueError(
            f"{where}: expected rows like {{'translations': {{'language': [...], 'translation': [...]}}, "
            f"'talk_name': ...}}, found columns {raw.column_names}."
        )
    for i, record in enumerate(raw["translations"]):
        if not isinstance(record, Mapping) or not {"language", "translation"} <= set(record):
            raise ValueError(f"{where}, row {i}: 'translations' must have the fields 'language' and 'translation'.")
        texts = dict(zip(record["language"], record["translation"], strict=True))
        if src in texts and tgt in texts:
            yield {"src_lang": src, "tgt_lang": tgt, "src": texts[src], "tgt": texts[tgt]}


def load_corpus(
    name: str,
    directions: Sequence[str | tuple[str, str]],
    split: str = "train",
    data_files: Mapping[str, str | Sequence[str]] | str | Sequence[str] | None = None,
    **load_kwargs: Any,
) -> Dataset:
    """Load `directions` (e.g. `["en-de", "de-en"]`) of a papers' corpus as canonical rows.

    Args:
        name: one of `CORPORA` (opus100, wmt14, wmt10, iwslt17, europarl, ted59).
        split: `train`, `validation` or `test` (as the corpus has them).
        data_files: local files in the Hub's row layout instead of the Hub: one path/list for every
            direction, or a mapping from `"src-tgt"` to paths.
    """
    if name not in CORPORA:
        raise ValueError(f"Unknown corpus {name!r}; known: {sorted(CORPORA)}.")
    corpus = CORPORA[name]
    if split not in corpus.splits:
        raise ValueError(f"{name} has splits {list(corpus.splits)}, not {split!r}.")
    pairs = [split_direction(item) if isinstance(item, str) else tuple(item) for item in directions]
    known = CORPUS_LANGUAGES.get(name)
    unknown = sorted({code for pair in pairs for code in pair if known and code not in known})
    if unknown:  # before anything is downloaded
        raise ValueError(f"{name} has no language {', '.join(map(repr, unknown))}; its languages: {', '.join(known)}.")
    rows: list[dict[str, str]] = []
    for src, tgt in pairs:
        repo, config = corpus.source(src, tgt)
        files = data_files.get(f"{src}-{tgt}") if isinstance(data_files, Mapping) else data_files
        if isinstance(data_files, Mapping) and files is None:
            raise ValueError(f"data_files has no entry for {src}-{tgt}; its keys are {sorted(data_files)}.")
        where = (
            f"{repo}" + (f" ({config})" if config else "") + f" split {split}" + (f" from {files}" if files else "")
        )
        raw = _load_raw(repo, config, split, files, **load_kwargs)
        reader = translation_rows if corpus.layout == "translation" else ted_multi_rows
        rows.extend(reader(raw, src, tgt, where))
    return canonical_dataset(rows)


__all__ = [
    "CORPORA",
    "CORPUS_LANGUAGES",
    "WMT10_SOURCES",
    "HubCorpus",
    "load_corpus",
    "ted_multi_rows",
    "translation_rows",
]
