"""Scores as the papers report them: sacreBLEU (13a), chrF and chrF++ per direction, spBLEU with a local
SentencePiece model, with their signatures,
the length ratio and the share of degenerate outputs, group means (en->xx, xx->en, zero-shot; Low/Med/High
by training size) and the win ratio."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import mean
from typing import Any

import sacrebleu
import sentencepiece


class SentencePieceBLEU:
    """spBLEU (Goyal et al. 2022, FLORES-101; NLLB's FLORES-200 numbers): sacreBLEU's BLEU over both sides cut into
    the pieces of a SentencePiece model, here a local file (sacreBLEU's `flores200` tokenizer downloads its model;
    this reads the one given and cuts as sacreBLEU's `TokenizerSPM` does). The signature names the file and the
    first 12 hex digits of its SHA-256, so that scores with another model are not mistaken for FLORES-200's."""

    def __init__(self, model_file: str | os.PathLike):
        path = Path(model_file)
        if not path.is_file():
            raise FileNotFoundError(f"--spm {path}: no such file; give a SentencePiece model (.model) file.")
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.Load(str(path))
        except (OSError, RuntimeError) as error:
            raise ValueError(f"--spm {path} is not a SentencePiece model ({error}).") from None
        self.name = f"spm-{path.name}-{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"

    def pieces(self, text: str) -> str:
        return " ".join(self.processor.EncodeAsPieces(text))

    def __call__(self, hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
        bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
        score = bleu.corpus_score([self.pieces(h) for h in hypotheses], [[self.pieces(r) for r in references]])
        signature = str(bleu.get_signature()).replace("tok:none", f"tok:{self.name}")
        return {"spbleu": score.score, "spbleu_signature": signature}


def corpus_scores(
    hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a", spm: SentencePieceBLEU | None = None
) -> dict[str, Any]:
    """sacreBLEU BLEU, chrF and chrF++ (`word_order=2`) of one direction, with the signatures that make them
    reproducible, and spBLEU where `spm` is given; `length_ratio` is BLEU's output / reference length, `degenerate`
    the share of outputs caught in a repetition loop (:func:`is_degenerate`)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references.")
    if not references:
        raise ValueError("Cannot score an empty test set: no references.")
    bleu = sacrebleu.metrics.BLEU(tokenize=tokenize)
    chrf = sacrebleu.metrics.CHRF()
    chrfpp = sacrebleu.metrics.CHRF(word_order=2)
    bleu_score = bleu.corpus_score(list(hypotheses), [list(references)])
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    return {
        "bleu": bleu_score.score,
        "chrf": chrf_score.score,
        "chrfpp": chrfpp.corpus_score(list(hypotheses), [list(references)]).score,
        "length_ratio": bleu_score.sys_len / max(bleu_score.ref_len, 1),
        "degenerate": sum(map(is_degenerate, hypotheses)) / len(hypotheses),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "chrfpp_signature": str(chrfpp.get_signature()),
        "sentences": len(references),
    } | (spm(hypotheses, references) if spm is not None else {})


def is_degenerate(text: str, max_ngram: int = 4, min_repeats: int = 4) -> bool:
    """True when some n-gram of words (n <= `max_ngram`) repeats `min_repeats` times in a row.

    The loop a decoder falls into when it loses track of the source ("the the the the", "a b a b a b a b");
    natural text almost never repeats a phrase four times back to back. Words are split on whitespace,
    or into characters for text without spaces longer than 16 characters (scripts written without them).
    """
    words = text.split()
    if len(words) == 1 and len(text) > 16:
        words = list(text)
    for n in range(1, max_ngram + 1):
        for start in range(len(words) - n * min_repeats + 1):
            gram = words[start : start + n]
            if all(words[start + k * n : start + (k + 1) * n] == gram for k in range(1, min_repeats)):
                return True
    return False


def direction_groups(
    directions: Sequence[str], pivot: str = "en", zero_shot: Sequence[str] = ()
) -> dict[str, list[str]]:
    """`{"en-xx": [...], "xx-en": [...], "zero-shot": [...]}` for a pivot (English-centric) setting."""
    groups: dict[str, list[str]] = {f"{pivot}-xx": [], f"xx-{pivot}": [], "zero-shot": [], "other": []}
    for d in directions:
        src, tgt = d.split("-")
        if d in zero_shot:
            groups["zero-shot"].append(d)
        elif src == pivot:
            groups[f"{pivot}-xx"].append(d)
        elif tgt == pivot:
            groups[f"xx-{pivot}"].append(d)
        else:
            groups["other"].append(d)
    return {name: members for name, members in groups.items() if members}


def resource_groups(
    train_sizes: Mapping[str, int], low_below: int = 100_000, high_from: int = 1_000_000, pivot: str = "en"
) -> dict[str, str]:
    """Low/Med/High of each non-pivot language by its training size (the OPUS-100 papers' thresholds:
    Low < 100k pairs <= Med < 1M <= High). `train_sizes` maps a language or a direction to a size."""
    if low_below > high_from:
        raise ValueError(f"low_below={low_below} must not exceed high_from={high_from}.")
    groups = {}
    for key, size in train_sizes.items():
        language = next((c for c in key.split("-") if c != pivot), key)
        groups[language] = "Low" if size < low_below else ("High" if size >= high_from else "Med")
    return groups


def group_means(
    results: Mapping[str, Mapping[str, float]], groups: Mapping[str, Sequence[str]], metric: str = "bleu"
) -> dict[str, float]:
    """Mean of `metric` over the directions of each group that have it (groups with none are left out)."""
    means = {}
    for name, directions in groups.items():
        values = [results[d][metric] for d in directions if metric in results.get(d, {})]
        if values:
            means[name] = mean(values)
    return means


def win_ratio(
    results: Mapping[str, Mapping[str, float]], reference: Mapping[str, Mapping[str, float]], metric: str = "bleu"
) -> float:
    """Share of the directions scored in both runs on which `results` beats `reference` (ties do not win).

    Directions scored on other sentences in the two runs (their `test_fingerprint`s differ) are refused: a win
    ratio compares two systems on one test set."""
    common = sorted(set(results) & set(reference))
    if not common:
        raise ValueError("The two runs share no scored direction; cannot compute a win ratio.")
    differ = [
        d for d in common
        if {"test_fingerprint"} <= set(results[d]) & set(reference[d])
        and results[d]["test_fingerprint"] != reference[d]["test_fingerprint"]
    ]  # fmt: skip
    if differ:
        raise ValueError(
            f"The two runs scored other test sentences in {', '.join(differ[:5])}{' ...' if len(differ) > 5 else ''}; "
            "a win ratio compares two systems on the same test set: evaluate both on the same files and limits."
        )
    return sum(results[d][metric] > reference[d][metric] for d in common) / len(common)


__all__ = [
    "SentencePieceBLEU",
    "corpus_scores",
    "direction_groups",
    "group_means",
    "is_degenerate",
    "resource_groups",
    "win_ratio",
]
