"""Learning the joint subword vocabulary of a multilingual corpus (the papers' SentencePiece setup).

The papers train one SentencePiece model over all languages (BPE or unigram, vocabulary 32k-64k,
character coverage 1.0 or 0.9995) on a sample balanced across languages. `train_tokenizer` does the
same with the `tokenizers` library, so the result is a native fast tokenizer:

* the sample: `sample_size` sentences drawn per language with probability proportional to
  `(n_l / N) ** (1 / temperature)` (T=1 proportional, larger T flatter), each language's sentences
  deduplicated first, low-resource languages oversampled when their share exceeds their size;
* character coverage (SentencePiece's `character_coverage`): the most frequent characters that cover
  that share of all character occurrences form the alphabet; rarer ones become `<unk>`;
* SentencePiece's pre-tokenization (Metaspace `▁`) and NFKC normalisation;
* fairseq's special ids `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3, then one tag per language.
"""

from __future__ import annotations

import json
import logging
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from .tags import check_tag_template
from .tokenization_langspec import (
    SPECIAL_TOKENS,
    TAG_STYLES,
    LangSpecTokenizer,
    check_unique_languages,
    target_backend,
)

logger = logging.getLogger(__name__)
MODEL_TYPES = ("unigram", "bpe")
# the choices as annotations: a config names them, and its check (config_types) reads them from here
ModelType = Literal[MODEL_TYPES]
TagStyle = Literal[TAG_STYLES]
SCORE_DIGITS = 6  # significant digits kept of a unigram piece's log-probability (see canonical_unigram_order)
UNLEARNED_STEP = 1e-4  # the unigram trainer's score step between the alphabet characters it appends unlearned


def sentences_by_language(texts: Mapping[str, Iterable[str]] | Iterable[Mapping[str, str]]) -> dict[str, list[str]]:
    """Unique sentences per language, from a `{code: sentences}` mapping or canonical rows (a dataset or a list)."""
    by_language: dict[str, dict[str, None]] = {}
    if isinstance(texts, Mapping):
        for code, lines in texts.items():
            if isinstance(lines, str):
                raise ValueError(f"texts[{code!r}] is a single string; give an iterable of sentences.")
            by_language.setdefault(code, {}).update(dict.fromkeys(lines))
    else:
        for i, row in enumerate(texts):
            if not isinstance(row, Mapping) or not {"src_lang", "tgt_lang", "src", "tgt"} <= set(row):
                raise ValueError(
                    "texts must be a {language: sentences} mapping or canonical rows with src_lang, tgt_lang, "
                    f"src, tgt; row {i} is {row!r:.200}."
                )
            by_language.setdefault(row["src_lang"], {})[row["src"]] = None
            by_language.setdefault(row["tgt_lang"], {})[row["tgt"]] = None
    return {code: [s for s in sentences if s] for code, sentences in by_language.items()}


def temperature_sample(
    sentences: Mapping[str, Sequence[str]], sample_size: int, temperature: float, seed: int = 0
) -> dict[str, list[str]]:
    """Draw about `sample_size` sentences, language l with share proportional to n_l ** (1/T)."""
    picked = temperature_sample_positions(
        {code: len(s) for code, s in sentences.items()}, sample_size, temperature, seed
    )
    return {code: [sentences[code][i] for i in positions] for code, positions in picked.items()}


def temperature_sample_positions(
    sizes: Mapping[str, int], sample_size: int, temperature: float, seed: int = 0
) -> dict[str, list[int]]:
    """`temperature_sample` as positions into each language's sentences, from their counts alone (so a corpus on
    disk gives its sample without holding its sentences; `random.sample` and `random.choices` draw positions, so
    both forms pick the same sentences)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}.")
    total = sum(sizes.values())
    largest = max(sizes.values())
    # relative to the largest language: equal after normalising, and a tiny T cannot underflow every weight to 0
    weights = {code: (n / largest) ** (1.0 / temperature) for code, n in sizes.items()}
    norm = sum(weights.values())
    budget = min(sample_size, total)
    rng = random.Random(seed)
    sample = {}
    for code in sorted(sizes):
        n = sizes[code]
        k = max(1, round(budget * weights[code] / norm))
        if k <= n:
            sample[code] = rng.sample(range(n), k)
        else:  # oversample a small language: every sentence, then draws with replacement
            sample[code] = list(range(n)) + rng.choices(range(n), k=k - n)
    return sample


def _corpus_sample(corpus: Any, sample_size: int, temperature: float, seed: int) -> tuple[dict[str, int], Any]:
    """`(sentences per language, draw)` for a corpus from `corpus_store.read_corpus`: the distinct sentences are
    found by their hash columns, and `draw()` reads only the sampled ones."""
    from ..data.columns import distinct_texts, texts_at

    positions = distinct_texts(corpus)
    sizes = {code: len(p) for code, p in positions.items()}

    def draw() -> dict[str, list[str]]:
        picked = temperature_sample_positions(sizes, sample_size, temperature, seed)
        return {code: texts_at(corpus, positions[code][np.asarray(i, dtype=np.int64)]) for code, i in picked.items()}

    return sizes, draw


def covered_alphabet(lines: Iterable[str], character_coverage: float) -> tuple[list[str], float]:
    """The most frequent characters covering `character_coverage` of all occurrences, and the share they cover."""
    if not 0 < character_coverage <= 1:
        raise ValueError(f"character_coverage must be in (0, 1], got {character_coverage}.")
    counts = Counter(ch for line in lines for ch in line if not ch.isspace())
    total = sum(counts.values())
    alphabet, covered = [], 0
    for ch, n in counts.most_common():
        if alphabet and covered >= character_coverage * total:
            break
        alphabet.append(ch)
        covered += n
    return alphabet, covered / max(total, 1)


def train_tokenizer(
    texts: Mapping[str, Iterable[str]] | Any,
    languages: Sequence[str] | None = None,
    vocab_size: int = 8000,
    model_type: ModelType = "unigram",
    character_coverage: float = 1.0,
    temperature: float = 5.0,
    sample_size: int = 1_000_000,
    seed: int = 0,
    lang_tag_style: TagStyle = "source",
    lang_tag_template: str = "<2{}>",
    mask_token: bool = False,
    show_progress: bool = True,
) -> LangSpecTokenizer:
    """Learn one joint vocabulary over all languages and return a `LangSpecTokenizer`.

    Args:
        texts: `{language: sentences}`, or canonical rows (src_lang, tgt_lang, src, tgt) as a dataset or a list; a
            corpus from `corpus_store.read_corpus` is read only for its sample (the same sample as its rows give).
        languages: tag order (the ids of the language contract); defaults to the sorted codes of `texts`.
        vocab_size: size of the vocabulary, special and tag tokens included.
        model_type: `"unigram"` (SentencePiece's default) or `"bpe"`.
        character_coverage: share of character occurrences the alphabet must cover (1.0, or 0.9995 for
            scripts with large character sets).
        temperature: sampling temperature over languages for the training sample (T=1 proportional).
        sample_size: sentences in the training sample (SentencePiece's `input_sentence_size`).
        mask_token: add `<mask>` (for masked language modelling, e.g. XLP/XLM pre-training) after the tags,
            so the ids of the other special tokens and of the tags do not move.
    """
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type={model_type!r} is not supported; use one of {list(MODEL_TYPES)}.")
    if isinstance(texts, Dataset) and {"src_hash", "tgt_hash"} <= set(texts.column_names):
        sizes, draw = _corpus_sample(texts, sample_size, temperature, seed)  # a corpus on disk: only its sample read
    else:
        sentences = sentences_by_language(texts)
        sizes = {code: len(s) for code, s in sentences.items()}

        def draw() -> dict[str, list[str]]:
            return temperature_sample(sentences, sample_size, temperature, seed)

    languages = list(languages) if languages is not None else sorted(sizes)
    check_unique_languages(languages)  # before the vocabulary is trained, as the tokenizer itself refuses it
    check_tag_template(lang_tag_template, languages)
    unknown = sorted(set(sizes) - set(languages))
    if unknown:
        raise ValueError(
            f"texts has languages {unknown} that are not in languages={languages}; add them or drop those texts."
        )
    empty = [code for code in languages if not sizes.get(code)]
    if empty:
        raise ValueError(f"No sentences for languages {empty}: every language in `languages` needs training text.")
    specials = list(SPECIAL_TOKENS.values()) + [lang_tag_template.format(code) for code in languages]
    if mask_token:
        specials.append("<mask>")
    if vocab_size <= len(specials):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beyond the {len(specials)} special and tag tokens.")
    if sample_size < 1:
        raise ValueError(f"sample_size={sample_size}: the tokenizer needs a sample of at least 1 sentence.")

    sample = draw()
    lines = [line for code in languages for line in sample[code]]
    alphabet, covered = covered_alphabet(lines, character_coverage)
    if character_coverage < 1.0:
        keep = set(alphabet)
        lines = ["".join(ch for ch in line if ch in keep or ch.isspace()) for line in lines]
    logger.info(
        "Training a %s vocabulary of %d on %d sentences (%s); alphabet of %d characters covers %.4f",
        model_type, vocab_size, len(lines), ", ".join(f"{c}={len(sample[c])}" for c in languages), len(alphabet), covered,
    )  # fmt: skip

    backend = _trained_backend(lines, [*alphabet, "▁"], specials, vocab_size, model_type, show_progress)
    return LangSpecTokenizer(
        tokenizer_object=backend,
        languages=languages,
        lang_tag_style=lang_tag_style,
        lang_tag_template=lang_tag_template,
        extra_special_tokens=specials[len(SPECIAL_TOKENS) : len(SPECIAL_TOKENS) + len(languages)],
        **({"mask_token": "<mask>"} if mask_token else {}),
    )


def _trained_backend(lines: list[str], alphabet: list[str], specials: list[str], vocab_size: int,
                     model_type: ModelType, show_progress: bool) -> Tokenizer:  # fmt: skip
    """A `tokenizers` model of `model_type` trained on `lines` (NFKC, Metaspace pre-tokenizer and decoder), its
    ids starting with `specials` and its alphabet `alphabet` (Metaspace's "▁" included)."""
    if vocab_size < len(specials) + len(alphabet):  # the trainers refuse it with a bare Exception
        raise ValueError(
            f"vocab_size={vocab_size} cannot hold the {len(specials)} special and tag tokens and the {len(alphabet)} "
            f"characters of the sample; use at least {len(specials) + len(alphabet)}, or a lower character_coverage."
        )
    if model_type == "bpe":
        backend = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"], fuse_unk=True))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet,
            limit_alphabet=len(alphabet), show_progress=show_progress,
        )  # fmt: skip
    else:
        backend = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials, unk_token=SPECIAL_TOKENS["unk_token"],
            initial_alphabet=alphabet, show_progress=show_progress,
        )  # fmt: skip
    backend.normalizer = normalizers.NFKC()
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    backend.train_from_iterator(lines, trainer=trainer, length=len(lines))
    return canonical_unigram_order(backend, len(specials)) if model_type == "unigram" else backend


def canonical_unigram_order(backend: Tokenizer, num_special: int) -> Tokenizer:
    """The trained unigram model with its pieces in a fixed order: by score (highest first), then by text.

    `tokenizers`' unigram trainer is not deterministic across processes (measured: 28-30 of 600 ids
    differed between two trainings on the same data): it returns pieces of equal score in hash-map
    order, its EM sums in hash-map order (a score may differ in its last bit or two), and it appends
    the alphabet's characters that were not learned with scores `min - k * 1e-4`, k in hash-map order.
    So: the characters on that lattice get their scores again with k in the characters' sorted order;
    every score is rounded to `SCORE_DIGITS` significant digits (a log-probability to about 1e-5; a last-bit difference
    crosses a rounding boundary with probability about 1e-9 per piece); pieces are sorted by score,
    highest first, then by text. The special and tag tokens keep their leading ids.
    """
    state = json.loads(backend.to_str())
    vocab = state["model"]["vocab"]
    pieces = [list(item) for item in vocab[num_special:]]
    # the appended characters: single characters on the lattice `base - k * 1e-4` below the start of the
    # longest run of such steps (a learned character can fall between them: it is off the lattice)
    best, start = (0, 0), 0
    while start < len(pieces):
        end = start + 1
        while (
            end < len(pieces)
            and len(pieces[end][0]) == len(pieces[end - 1][0]) == 1
            and (abs(pieces[end - 1][1] - pieces[end][1] - UNLEARNED_STEP) < 1e-9)
        ):
            end += 1
        best = max(best, (end - start, start))
        start = end
    if best[0] > 1:
        base = pieces[best[1]][1]
        on_lattice = [
            i
            for i, (piece, score) in enumerate(pieces)
            if len(piece) == 1
            and score <= base + 1e-9
            and abs((base - score) / UNLEARNED_STEP - round((base - score) / UNLEARNED_STEP)) < 1e-4
        ]
        for k, piece in enumerate(sorted(pieces[i][0] for i in on_lattice)):
            pieces[on_lattice[k]] = [piece, base - k * UNLEARNED_STEP]
    rounded = [[piece, float(f"{score:.{SCORE_DIGITS}g}")] for piece, score in pieces]
    state["model"]["vocab"] = vocab[:num_special] + sorted(rounded, key=lambda item: (-item[1], item[0]))
    return Tokenizer.from_str(json.dumps(state))


def extend_tokenizer(
    tokenizer: LangSpecTokenizer, texts: Iterable[str], code: str, vocab_size: int = 8000, show_progress: bool = True
) -> LangSpecTokenizer:
    """Add a language to a unigram `LangSpecTokenizer`: its new pieces and its tag, appended (old ids unchanged).

    A unigram vocabulary of `vocab_size` is trained on `texts`; its pieces the old vocabulary lacks are
    appended with their scores, then the tag `<2code>`. Old-language text keeps its segmentation unless
    a new piece occurs in it and scores higher (`changed_segmentations` counts such sentences).
    (CLL's new-language integration, Qu & Watanabe 2022, section 4.4.)
    """
    if code in tokenizer.languages:
        raise ValueError(f"{code!r} is already one of the tokenizer's languages {tokenizer.languages}.")
    if target_backend(tokenizer) is not tokenizer.backend_tokenizer:
        raise ValueError("This tokenizer cuts sources and targets with two subword models (a Marian checkpoint's); "
                         "extend_tokenizer grows one. Add a language to a pretrained model with "
                         "model.add_languages.")  # fmt: skip
    state = json.loads(tokenizer.backend_tokenizer.to_str())
    if state["model"]["type"] != "Unigram":
        raise ValueError(
            f"extend_tokenizer appends unigram pieces; this tokenizer's model is {state['model']['type']}. "
            "Train the original tokenizer with model_type='unigram' (the default)."
        )
    fresh = train_tokenizer({code: list(texts)}, languages=[code], vocab_size=vocab_size, show_progress=show_progress)
    fresh_state = json.loads(fresh.backend_tokenizer.to_str())
    known = {piece for piece, _ in state["model"]["vocab"]}
    specials = set(fresh.all_special_tokens)
    added = [[p, score] for p, score in fresh_state["model"]["vocab"] if p not in known and p not in specials]
    tag = tokenizer.lang_tag_template.format(code)
    state["model"]["vocab"] += [*added, [tag, 0.0]]
    state["added_tokens"].append({
        "id": len(state["model"]["vocab"]) - 1, "content": tag, "single_word": False, "lstrip": False,
        "rstrip": False, "normalized": False, "special": True,
    })  # fmt: skip
    old_tags = [tokenizer.lang_tag(c) for c in tokenizer.languages]
    return LangSpecTokenizer(
        tokenizer_object=Tokenizer.from_str(json.dumps(state)),
        languages=[*tokenizer.languages, code],
        lang_tag_style=tokenizer.lang_tag_style,
        lang_tag_template=tokenizer.lang_tag_template,
        extra_special_tokens=[*old_tags, tag],
        **({"mask_token": tokenizer.mask_token} if tokenizer.mask_token is not None else {}),
    )


def changed_segmentations(old: LangSpecTokenizer, new: LangSpecTokenizer, texts: Iterable[str]) -> int:
    """How many of `texts` the two tokenizers segment differently."""
    texts = list(texts)
    return sum(a != b for a, b in zip(old.encode_text(texts), new.encode_text(texts), strict=True))


__all__ = [
    "canonical_unigram_order",
    "changed_segmentations",
    "covered_alphabet",
    "extend_tokenizer",
    "sentences_by_language",
    "temperature_sample",
    "train_tokenizer",
]
