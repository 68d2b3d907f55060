"""Off-target rate: the share of outputs a language identifier does not assign to the target language.

The identifier must ship its model in the wheel (the Hub is not reachable): `lingua-language-detector`
(75 languages, accurate on short text) when installed, else `langid`; `py3langid` (a maintained fork of
langid.py, 97 languages, BSD-3) can be chosen by name. Install them with `pip install hf_langspec[eval]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol


class LanguageIdentifier(Protocol):
    name: str

    def __call__(self, texts: Sequence[str]) -> list[str | None]: ...


class LinguaIdentifier:
    name = "lingua"

    def __init__(self) -> None:
        from lingua import LanguageDetectorBuilder

        self._detector = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models().build()

    def __call__(self, texts: Sequence[str]) -> list[str | None]:
        found = self._detector.detect_languages_in_parallel_of(list(texts))
        return [lang.iso_code_639_1.name.lower() if lang is not None else None for lang in found]


class LangidIdentifier:
    """langid.py's `classify` (or that of its fork py3langid, same model format and API)."""

    name = "langid"

    def __init__(self) -> None:
        import importlib

        self._classify = importlib.import_module(self.name).classify

    def __call__(self, texts: Sequence[str]) -> list[str | None]:
        return [self._classify(text)[0] if text.strip() else None for text in texts]


class Py3langidIdentifier(LangidIdentifier):
    name = "py3langid"


IDENTIFIERS = {"lingua": LinguaIdentifier, "langid": LangidIdentifier, "py3langid": Py3langidIdentifier}


@lru_cache(maxsize=3)
def language_identifier(prefer: str | None = None) -> LanguageIdentifier:
    """The available identifier (`prefer` = "lingua", "langid" or "py3langid" to choose)."""
    if prefer is not None and prefer not in IDENTIFIERS:
        raise ValueError(f"Unknown language identifier {prefer!r}; use one of {sorted(IDENTIFIERS)}.")
    order = [prefer] if prefer else ["lingua", "langid"]
    errors = []
    for name in order:
        try:
            return IDENTIFIERS[name]()
        except ImportError as err:
            errors.append(f"{name}: {err}")
    raise ImportError(
        "The off-target rate needs a language identifier that ships its model: pip install "
        "lingua-language-detector (or langid), e.g. pip install 'hf_langspec[eval]'. Tried " + "; ".join(errors)
    )


def off_target_rate(texts: Sequence[str], target_language: str, identifier: LanguageIdentifier | None = None) -> float:
    """Fraction of `texts` not identified as `target_language` (ISO 639-1); empty outputs count as off-target."""
    if not texts:
        raise ValueError("off_target_rate needs at least one text.")
    identify = identifier or language_identifier()
    found = identify(texts)
    return sum(code != target_language for code in found) / len(texts)


__all__ = [
    "IDENTIFIERS",
    "LangidIdentifier",
    "LinguaIdentifier",
    "Py3langidIdentifier",
    "language_identifier",
    "off_target_rate",
]
