"""Off-target rate: the share of outputs a language identifier does not assign to the target language.

The identifier must ship its model in the wheel (the Hub is not reachable): `lingua-language-detector`
(75 languages, Apache-2.0, accurate on short text), `py3langid` (a maintained fork of langid.py, BSD-3;
its 0.4 model has 140 languages) and `langid` (97 languages, BSD). Install them with `pip install
hf_langspec[eval]`.

By default each target language is measured by the first of lingua, py3langid, langid that covers it
(lingua where it can, py3langid for the languages of OPUS-100 / TED-59 / WMT-10 lingua lacks); a language
none covers is "not measured": `off_target_rate` returns None with a
warning naming it, and no mean counts it as on- or off-target. Corpus codes that a detector reports
differently are mapped (`DETECTED_AS`: TED's `pt-br` is `pt`, OPUS-100's `sh` is any of hr / bs / sr), and
NLLB-200 / FLORES-200 codes (`eng_Latn`, `arb_Arab`) are read as the ISO 639-1 language of their ISO 639-3 part.
The coverage of every language of the papers' corpora is in docs/DATA.md (`scripts/language_coverage.py`).
"""

from __future__ import annotations

import importlib
import logging
import re
import warnings
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Protocol

logger = logging.getLogger(__name__)
DEFAULT_ORDER = ("lingua", "py3langid", "langid")
# corpus codes -> what an identifier reports for text in that language
DETECTED_AS = {
    "fr-ca": ("fr",), "pt-br": ("pt",), "zh-cn": ("zh",), "zh-tw": ("zh",),
    "sh": ("sh", "hr", "bs", "sr"),  # Serbo-Croatian (OPUS-100): no detector has it, all three standards are it
    "no": ("no", "nb"), "nb": ("nb", "no"),  # langid reports both for Bokmal text
}  # fmt: skip


# FLORES-200 codes name individual languages where ISO 639-1 has only their macrolanguage
INDIVIDUAL_TO_MACRO = {
    "arb": "ara", "azj": "aze", "ekk": "est", "gaz": "orm", "khk": "mon", "lvs": "lav", "npi": "nep", "ory": "ori",
    "pes": "fas", "plt": "mlg", "swh": "swa", "uzn": "uzb", "ydd": "yid", "zsm": "msa", "als": "sqi", "quy": "que",
}  # fmt: skip
FLORES_CODE = re.compile(r"^([a-z]{3})_[A-Z][a-z]{3}$")


def detected_as(code: str) -> tuple[str, ...]:
    """The identifier codes that count as `code` (itself, the mapping above, or a FLORES-200 code's language)."""
    if code in DETECTED_AS:
        return DETECTED_AS[code]
    match = FLORES_CODE.match(code)
    if match:
        iso1 = iso_639_1(match.group(1))
        if iso1:
            return (code, iso1)
    return (code,)


def iso_639_1(code: str) -> str | None:
    """The ISO 639-1 code of a 3-letter ISO 639-3 code (an individual language FLORES-200 names counts as its
    macrolanguage: `arb` is `ar`), or None (no such language, or lingua not installed)."""
    return _iso_639_1(INDIVIDUAL_TO_MACRO.get(code, code))


@cache
def _iso_639_1(iso3: str) -> str | None:
    """ISO 639-3 -> 639-1 through lingua's table (its languages are the ones a detector reports by 639-1 code)."""
    try:
        from lingua import IsoCode639_3, Language
    except ImportError:
        return None
    try:
        return Language.from_iso_code_639_3(IsoCode639_3.from_str(iso3)).iso_code_639_1.name.lower()
    except ValueError:
        return None


class LanguageIdentifier(Protocol):
    name: str
    languages: frozenset[str]

    def __call__(self, texts: Sequence[str]) -> list[str | None]: ...

    def for_language(self, code: str) -> LanguageIdentifier | None: ...


class _Single:
    """One identifier: it measures a target language when its model has it."""

    name = ""
    languages: frozenset[str] = frozenset()

    def for_language(self, code: str) -> _Single | None:
        return self if any(c in self.languages for c in detected_as(code)) else None


# one text per script whose languages lingua tells apart with n-gram models (up to 5-grams: 5 letters each); the
# languages of a script of their own (Greek, Hangul, Thai...) are decided by rule and need none
SCRIPT_SAMPLES = ("abcde", "абвгд", "ابتثج", "कखगघच")


class LinguaIdentifier(_Single):
    name = "lingua"

    def __init__(self) -> None:
        from lingua import Language, LanguageDetectorBuilder

        # models load when first needed (lingua's default): preloading all 75 took 4-10 s in every process that
        # built one, most of a small evaluation, and detects the same (2,000 bible6 outputs compared)
        self._detector = LanguageDetectorBuilder.from_all_languages().build()
        self.languages = frozenset(lang.iso_code_639_1.name.lower() for lang in Language.all())

    def load_models(self) -> None:
        """Load every model detection can need, one after another (`with_preloaded_language_models` would start
        lingua's thread pool, which a forked child inherits broken): a process that forks after this gives its
        children the models, which a child otherwise loads at its first detection (about 14 CPU seconds each)."""
        for text in SCRIPT_SAMPLES:
            self._detector.detect_language_of(text)

    def __call__(self, texts: Sequence[str]) -> list[str | None]:
        found = self._detector.detect_languages_in_parallel_of(list(texts))
        return [lang.iso_code_639_1.name.lower() if lang is not None else None for lang in found]


class LangidIdentifier(_Single):
    """langid.py's `classify` (or that of its fork py3langid, same model format and API)."""

    name = "langid"

    def __init__(self) -> None:
        module = importlib.import_module(self.name)
        self._classify = module.classify
        module.classify("")  # loads the model, whose labels are the languages
        inner = module.langid  # langid keeps the loaded model in a global, py3langid behind a getter
        model = inner._get_identifier() if hasattr(inner, "_get_identifier") else inner.identifier
        self.languages = frozenset(model.nb_classes)

    def __call__(self, texts: Sequence[str]) -> list[str | None]:
        return [self._classify(text)[0] if text.strip() else None for text in texts]


class Py3langidIdentifier(LangidIdentifier):
    name = "py3langid"


class CombinedIdentifier:
    """Each target language measured by the first of `identifiers` that covers it (name: "lingua+langid")."""

    def __init__(self, identifiers: Sequence[LanguageIdentifier]):
        self.identifiers = list(identifiers)
        self.name = "+".join(i.name for i in self.identifiers)
        self.languages = frozenset().union(*(i.languages for i in self.identifiers))

    def for_language(self, code: str) -> LanguageIdentifier | None:
        return next((i for i in self.identifiers if i.for_language(code) is not None), None)

    def __call__(self, texts: Sequence[str]) -> list[str | None]:
        return self.identifiers[0](texts)


IDENTIFIERS = {"lingua": LinguaIdentifier, "langid": LangidIdentifier, "py3langid": Py3langidIdentifier}


def identifier_names(prefer: str | None) -> list[str]:
    """The identifiers a `language_identifier` name stands for (checked without loading any model)."""
    if prefer is None:
        return list(DEFAULT_ORDER)
    names = prefer.split("+") if isinstance(prefer, str) else []
    if not names or any(name not in IDENTIFIERS for name in names):
        raise ValueError(
            f"language_identifier={prefer!r} is unknown; use one of {sorted(IDENTIFIERS)} or several joined by '+' "
            "(each language measured by the first that covers it)."
        )
    return names


@lru_cache(maxsize=6)
def language_identifier(prefer: str | None = None) -> LanguageIdentifier:
    """The identifier `prefer` ("lingua", "langid", "py3langid", or several joined by "+", each language
    measured by the first that covers it); None: lingua+py3langid+langid, those of them that are installed."""
    names = identifier_names(prefer)
    found, errors = [], []
    for name in names:
        try:
            found.append(IDENTIFIERS[name]())
        except ImportError as err:
            errors.append(f"{name}: {err}")
    if not found or (prefer and errors):
        raise ImportError(
            "The off-target rate needs a language identifier that ships its model: pip install "
            "lingua-language-detector and langid, e.g. pip install 'hf_langspec[eval]'. Missing: " + "; ".join(errors)
        )
    return found[0] if len(found) == 1 else CombinedIdentifier(found)


def load_models(prefer: str | None = None) -> None:
    """Load lingua's models before any detection when `prefer` names it (None: the default order does), without
    starting a thread, so a process that then forks (the compare fork server) gives its children the models:
    lingua keeps them for the whole process, whichever detector loaded them. Without lingua installed nothing
    happens: the process that detects says so."""
    if "lingua" not in identifier_names(prefer):
        return
    try:
        LinguaIdentifier().load_models()
    except ImportError:
        return


def off_target_flags(
    texts: Sequence[str], target_language: str, identifier: LanguageIdentifier | None = None
) -> list[bool] | None:
    """Per text, whether it is not in `target_language`; None (with a warning) when no identifier covers it."""
    identify = identifier or language_identifier()
    chosen = identify.for_language(target_language)
    if chosen is None:
        _warn_not_measured(target_language, identify.name)
        return None
    accepted = set(detected_as(target_language))
    return [code not in accepted for code in chosen(texts)]


@cache
def _warn_not_measured(code: str, name: str) -> None:  # once per language and identifier
    message = (
        f"Off-target rate for {code!r} not measured: {name} does not cover it (docs/DATA.md lists the coverage); "
        "it counts neither as on- nor as off-target."
    )
    warnings.warn(message, stacklevel=4)
    logger.warning(message)


def off_target_rate(
    texts: Sequence[str], target_language: str, identifier: LanguageIdentifier | None = None
) -> float | None:
    """Fraction of `texts` not identified as `target_language`; empty outputs count as off-target.

    None (with a warning naming the language) when the identifier does not cover `target_language`.
    """
    if not texts:
        raise ValueError("off_target_rate needs at least one text.")
    flags = off_target_flags(texts, target_language, identifier)
    return None if flags is None else sum(flags) / len(flags)


__all__ = [
    "DETECTED_AS",
    "IDENTIFIERS",
    "CombinedIdentifier",
    "LangidIdentifier",
    "LinguaIdentifier",
    "Py3langidIdentifier",
    "detected_as",
    "identifier_names",
    "language_identifier",
    "off_target_flags",
    "off_target_rate",
]
