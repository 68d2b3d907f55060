"""`evaluate` metric modules shipped with the package, loadable offline by path.

    import evaluate
    from hf_langspec import metrics

    mt = evaluate.load(metrics.path("langspec_mt"))
    mt.compute(predictions=hyps, references=refs, src_lang=srcs, tgt_lang=tgts, zero_shot=["de-fr"])

`langspec_mt`: per-direction sacreBLEU BLEU, chrF, chrF++ and off-target rate, with the group means
(en->xx, xx->en, zero-shot) of the papers' tables; the numbers are those of
`hf_langspec.evaluation.metrics.corpus_scores` and `hf_langspec.evaluation.off_target_rate`.
"""

from __future__ import annotations

from pathlib import Path

MODULES = ("langspec_mt",)


def path(name: str = "langspec_mt") -> str:
    """The folder of a shipped metric module, for `evaluate.load(path)` (no Hub access needed)."""
    if name not in MODULES:
        raise ValueError(f"Unknown metric module {name!r}; this package ships {list(MODULES)}.")
    return str(Path(__file__).resolve().parent / name)


__all__ = ["MODULES", "path"]
