"""The test sets pretrained-model users report, read from local files in their release layouts.

`--test-set KIND:PATH` (`hf-langspec evaluate`) names one:

| kind | PATH | languages, directions |
|---|---|---|
| `flores200` (`flores101`) | the release folder (`devtest/<code>.devtest`; `dev/` with `flores200-dev:`) | every file: FLORES codes (`eng_Latn`); multi-way, any pair |
| `ntrex128` | the `NTREX-128` folder (`newstest2019-src.eng.txt`, `newstest2019-ref.<code>.txt`) | ISO 639-3 codes (`deu`, `aze-Latn`); English to and from each |
| `tico19` | its `testsets` folder (`en-<xx>/tico19-test.{en,<xx>}`) | the folder names' codes (`fr`, `es_LA`); English to and from each |
| `wmt` (`opus-mt`) | `<testsets>/<src>-<tgt>/<name>` (one pair) or `<testsets>/<name>` (every pair folder holding it), Helsinki-NLP/OPUS-MT-testsets' layout (`newstest2019.de`, `newstest2019.en`) | the pair folders' codes; both ways |

Directions are named in the model's codes: a file's code is matched to the model's language it names
(`tokenization.checkpoint_tokenizer.same_language`, the table the pretrained start uses: `deu` and `de` are NLLB's
`deu_Latn`), so `eng_Latn-deu_Latn` for NLLB and `en-de` for a model with ISO codes read the same files. A direction
the files lack, or a file whose lines do not pair with its source's, is a ValueError naming it and what the files
hold. The rows are the package's canonical rows, scored like any test set (BLEU, chrF++, off-target rates).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..tokenization.checkpoint_tokenizer import same_language
from .language_id import iso_639_1

logger = logging.getLogger(__name__)

KINDS = {"flores200": "devtest", "flores200-dev": "dev", "flores101": "devtest", "ntrex128": None, "tico19": None,
         "wmt": None, "opus-mt": None}  # fmt: skip
NTREX_SOURCE = "newstest2019-src.eng.txt"
NTREX_REFERENCE = re.compile(r"^newstest2019-ref\.([A-Za-z]{3}(?:-[A-Za-z]+)?)\.txt$")  # a second reference: -ref-2
PAIR_FOLDER = re.compile(r"^([A-Za-z]{2,3}(?:_[A-Za-z]+)?)-([A-Za-z]{2,3}(?:_[A-Za-z]+)?)$")


@dataclass(frozen=True)
class StandardTestSet:
    """One `KIND:PATH`: its name in results (the kind), its files by language, and the pairs they hold."""

    name: str
    files: dict[str, Path]  # by the files' language code: line i of each is the same sentence
    pairs: tuple[tuple[str, str], ...]  # (source, target) codes the set is read in; multi-way sets: every pair

    def lines(self, code: str) -> list[str]:
        return self.files[code].read_text(encoding="utf-8").splitlines()


def parse_spec(spec: str) -> tuple[str, Path]:
    """`KIND:PATH` as (kind, path), refused with the kinds when the kind is unknown or the path missing."""
    kind, _, path = spec.partition(":")
    if kind not in KINDS or not path:
        raise ValueError(f"--test-set {spec!r}: give KIND:PATH with KIND one of {', '.join(KINDS)} (e.g. flores200:"
                         "path/to/flores200_dataset)")  # fmt: skip
    if kind not in ("wmt", "opus-mt") and not Path(path).is_dir():
        raise ValueError(f"--test-set {spec}: {path} is not a folder; give the {kind} release folder")
    return kind, Path(path)


def find_test_set(spec: str) -> StandardTestSet:
    """The files of `KIND:PATH` in their layout (see the module)."""
    kind, path = parse_spec(spec)
    if kind.startswith("flores"):
        return _flores(kind, path)
    if kind == "ntrex128":
        return _ntrex(path)
    if kind == "tico19":
        return _tico(path)
    return _pair_folders("wmt" if kind == "wmt" else kind, path)


def _flores(kind: str, path: Path) -> StandardTestSet:
    split = KINDS[kind]
    folder = path / split if (path / split).is_dir() else path
    files = {f.name[: -len(split) - 1]: f for f in sorted(folder.glob(f"*.{split}"))}
    if len(files) < 2:
        raise ValueError(f"{kind}: {folder} holds {len(files)} <code>.{split} files; give the release folder (with "
                         f"{split}/) of at least two languages")  # fmt: skip
    return StandardTestSet(kind, files, tuple((s, t) for s in files for t in files if s != t))


def _ntrex(path: Path) -> StandardTestSet:
    if not (path / NTREX_SOURCE).is_file():
        raise ValueError(f"ntrex128: {path} has no {NTREX_SOURCE}; give the NTREX-128 folder")
    files = {"eng": path / NTREX_SOURCE}
    files |= {
        m.group(1): f for f in sorted(path.iterdir()) if (m := NTREX_REFERENCE.match(f.name)) and m.group(1) != "eng"
    }
    others = [code for code in files if code != "eng" and not code.startswith("eng-")]
    return StandardTestSet("ntrex128", files, tuple(p for c in others for p in (("eng", c), (c, "eng"))))


def _tico(path: Path) -> StandardTestSet:
    files: dict[str, Path] = {}
    pairs = []
    for folder in sorted(path.iterdir()):
        match = PAIR_FOLDER.match(folder.name)
        if not (folder.is_dir() and match):
            continue
        source, target = match.groups()
        for code in (source, target):
            if (folder / f"tico19-test.{code}").is_file():
                files.setdefault(code, folder / f"tico19-test.{code}")
        pairs += [(source, target), (target, source)]
    if not pairs:
        raise ValueError(f"tico19: {path} has no <en>-<xx>/tico19-test.* folders; give its testsets folder")
    return StandardTestSet("tico19", files, tuple(pairs))


def _pair_folders(kind: str, path: Path) -> StandardTestSet:
    """`<testsets>/<src>-<tgt>/<name>` or `<testsets>/<name>`: the name's files in one or every pair folder. Its
    files differ by pair (English in de-en is not English in fr-en), so they are keyed by pair."""
    name, parent = path.name, path.parent
    folders = [parent] if PAIR_FOLDER.match(parent.name) else sorted(p for p in parent.glob("*-*") if p.is_dir())
    files, pairs = {}, []
    for folder in folders:
        match = PAIR_FOLDER.match(folder.name)
        if match and all((folder / f"{name}.{code}").is_file() for code in match.groups()):
            source, target = match.groups()
            files[f"{source}@{folder.name}"] = folder / f"{name}.{source}"
            files[f"{target}@{folder.name}"] = folder / f"{name}.{target}"
            pairs += [(f"{source}@{folder.name}", f"{target}@{folder.name}"), (f"{target}@{folder.name}", f"{source}@{folder.name}")]  # fmt: skip
    if not pairs:
        raise ValueError(f"{kind}: no pair folder <src>-<tgt> under {parent} holds {name}.<src> and {name}.<tgt>; give "
                         "testsets/de-en/newstest2019 (one pair) or testsets/newstest2019 (every pair holding it)")  # fmt: skip
    return StandardTestSet(kind, files, tuple(pairs))


def model_code(code: str, languages: Sequence[str]) -> str | None:
    """The model's language that a file's code names, or None: the same code, the checkpoint's code of the same
    language (`deu` or `de` for NLLB's `deu_Latn`), or the ISO 639-1 code of a 3-letter one (`eng_Latn`, `eng` for
    a model's `en`)."""
    base = code.split("@")[0]
    if base in languages:
        return base
    found = same_language(base.replace("-", "_"), languages)
    if found is None and len(three := base.split("_")[0].split("-")[0].lower()) == 3:
        iso1 = iso_639_1(three)
        found = iso1 if iso1 in languages else None
    return found


def read_test_set(
    spec: str, languages: Sequence[str], directions: Sequence[str] | None = None
) -> dict[str, list[dict[str, str]]]:
    """The set's canonical rows by direction in the model's codes: `directions` (each must be in the files), or
    every direction of the set between languages the model has."""
    found = find_test_set(spec)
    available: dict[str, tuple[str, str]] = {}
    for source, target in found.pairs:
        mapped = (model_code(source, languages), model_code(target, languages))
        if None not in mapped and mapped[0] != mapped[1]:
            available.setdefault(f"{mapped[0]}-{mapped[1]}", (source, target))
    wanted = list(directions) if directions else sorted(available)
    missing = [d for d in wanted if d not in available]
    if missing or not wanted:
        held = ", ".join(sorted(available)) or "none of the model's languages"
        raise ValueError(f"--test-set {spec}: the files hold no {', '.join(missing) or 'direction'} in the model's "
                         f"codes; they hold {held}")  # fmt: skip
    out = {}
    for direction in wanted:
        source, target = available[direction]
        src_lang, tgt_lang = direction.split("-", 1) if direction.count("-") == 1 else _split(direction, languages)
        sources, targets = found.lines(source), found.lines(target)
        if len(sources) != len(targets):
            raise ValueError(f"--test-set {spec}: {found.files[source]} has {len(sources)} lines and "
                             f"{found.files[target]} {len(targets)}; the files of one set pair line by line")  # fmt: skip
        rows = [{"src_lang": src_lang, "tgt_lang": tgt_lang, "src": s, "tgt": t}
                for s, t in zip(sources, targets, strict=True) if s.strip() and t.strip()]  # fmt: skip
        if len(rows) < len(sources):  # a blank line is not a sentence to translate or to score against
            logger.warning("%s %s: %d of %d line pairs have a blank side (%s, %s) and are left out", found.name,
                           direction, len(sources) - len(rows), len(sources), found.files[source], found.files[target])  # fmt: skip
        out[direction] = rows
    return out


def _split(direction: str, languages: Sequence[str]) -> tuple[str, str]:
    """`src-tgt` where codes may hold a hyphen themselves: the split whose sides are both model languages."""
    for i, char in enumerate(direction):
        if char == "-" and direction[:i] in languages and direction[i + 1 :] in languages:
            return direction[:i], direction[i + 1 :]
    raise ValueError(f"{direction!r} is not a direction between the model's languages {list(languages)}")


def read_test_sets(specs: Sequence[str], languages: Sequence[str], directions: Sequence[str] | None = None,
                   taken: Collection[str] = (), option: str = "--test-set") -> dict[str, list[dict[str, str]]]:  # fmt: skip
    """Several `KIND:PATH` specs as named test sets of canonical rows, each named by its kind (`flores200`); a
    name given twice, or one in `taken` (the other test sets), is refused. `option` is how the caller names them
    (`--test-set`, `[evaluation] test_sets`)."""
    sets: dict[str, list[dict[str, str]]] = {}
    for spec in specs:
        name = parse_spec(spec)[0]
        if name in taken or name in sets:
            raise ValueError(f"{option} {spec}: a test set named {name} is already given; give each set once")
        sets[name] = [row for rows in read_test_set(spec, languages, directions).values() for row in rows]
    return sets


__all__ = ["KINDS", "StandardTestSet", "find_test_set", "model_code", "parse_spec", "read_test_set", "read_test_sets"]
