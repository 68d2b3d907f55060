"""Linguistic typology probing of learned language representations (Jin & Xiong 2022, section 5.4, appendices E-F).

The language representations a translation model learned (the tag-token embeddings of Token_src /
Token_tgt, LEE's embeddings, LAA's d x d matrices) predict URIEL's typological features (syntax,
phonology, phonetic inventory; queried through `lang2vec`, which ships the database) by k-nearest
neighbours, leaving one language out at a time:

* similarity: cosine for vectors; for matrices, the mean cosine similarity of corresponding rows
  (the paper's "average cosine similarity for all rows");
* for a held-out language and one binary feature, the k most similar other languages that have a
  value for that feature vote (a tie goes to the value of the most similar voter);
* a language's accuracy is the share of its known features predicted right; the reported accuracy
  is the mean over languages, for k in {1, 3, 5, 7, 9} (Table 6 / Figure 3).

URIEL's `*_average` feature sets are used: the mean over its sources, 1/0 where they agree, missing
("--") where no source has the feature; features missing for the held-out language are not scored.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

FEATURE_GROUPS = {"syntax": "syntax_average", "phonology": "phonology_average", "inventory": "inventory_average"}
K_VALUES = (1, 3, 5, 7, 9)


def _lang2vec():
    """Import `lang2vec`; it still imports `pkg_resources` (gone from setuptools >= 81) for one file lookup."""
    try:
        import pkg_resources  # noqa: F401
    except ModuleNotFoundError:
        shim = types.ModuleType("pkg_resources")

        def resource_filename(package: str, path: str) -> str:
            return os.path.join(os.path.dirname(importlib.util.find_spec(package).origin), path)

        shim.resource_filename = resource_filename
        sys.modules["pkg_resources"] = shim
    try:
        with _without_shadowing_lang2vec():
            import lang2vec.lang2vec as l2v
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "Typology probing queries URIEL through lang2vec: pip install 'hf_langspec[eval]' (or pip install lang2vec)."
        ) from None
    return l2v


@contextlib.contextmanager
def _without_shadowing_lang2vec() -> Iterator[None]:
    """lang2vec installs a copy of its module as the script `bin/lang2vec.py`; a console script (`hf-langspec`)
    puts bin/ first on sys.path, so `import lang2vec` found that file instead of the package, which then looked
    for its database in bin/data/ (FileNotFoundError). The folder of such a file leaves sys.path for the import."""
    spec = importlib.util.find_spec("lang2vec") if "lang2vec" not in sys.modules else None
    saved = sys.path[:]
    if spec is not None and spec.origin and spec.submodule_search_locations is None:  # a file, not the package
        shadow = os.path.dirname(os.path.abspath(spec.origin))
        sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != shadow]
    try:
        yield
    finally:
        sys.path[:] = saved


def uriel_features(languages: Sequence[str], group: str) -> dict[str, list[float | None]]:
    """URIEL's features of `group` (syntax, phonology, inventory) per language; None where unknown."""
    if group not in FEATURE_GROUPS:
        raise ValueError(f"Unknown feature group {group!r}; use one of {list(FEATURE_GROUPS)}.")
    l2v = _lang2vec()
    unknown = [code for code in languages if code not in l2v.LETTER_CODES and code not in l2v.available_languages()]
    if unknown:
        raise ValueError(f"URIEL has no languages {unknown} (lang2vec takes ISO 639-1 or 639-3 codes).")
    raw = l2v.get_features(list(languages), FEATURE_GROUPS[group])
    return {code: [None if v == "--" else float(v) for v in raw[code]] for code in languages}


def language_representations(model: Any, source: str = "auto") -> dict[str, torch.Tensor]:
    """Each language's learned representation, keyed by code.

    Args:
        source: `"laa"` (the decoder's LAA matrices, else the encoder's; per-layer matrices are averaged
            over layers), `"lee"` (LEE's embedding table), `"tag"` (the tag tokens' embedding rows: Token_src,
            Token_tgt and LEE in `tag` mode), or `"auto"` (LAA if the model has it, else LEE's table, else tags).
    """
    config = model.config
    laa = model.laa_modules() if hasattr(model, "laa_modules") else {}
    lee_tables = [
        m.weight for side in ("decoder", "encoder") for m in getattr(model.model, side).insertions.values()
        if getattr(m, "mode", None) == "table"
    ]  # fmt: skip
    if source == "auto":
        source = "laa" if laa else ("lee" if lee_tables else "tag")
    if source == "laa":
        if not laa:
            raise ValueError("This model has no LAA matrices; use source='tag' or 'lee'.")
        module = laa.get("decoder", laa.get("encoder"))
        weights = module.weight.detach()
        table = weights.mean(0) if module.per_layer else weights
    elif source == "lee":
        if not lee_tables:
            raise ValueError("This model has no LEE embedding table (lee_embedding='table'); use source='tag'.")
        table = lee_tables[0].detach()
    elif source == "tag":
        if config.lang_tag_token_ids is None:
            raise ValueError("The config has no lang_tag_token_ids, so there are no tag embeddings to probe.")
        table = model.get_input_embeddings().weight.detach()[config.lang_tag_token_ids]
    else:
        raise ValueError(f"source={source!r} must be 'auto', 'laa', 'lee' or 'tag'.")
    return {code: table[i].float().cpu() for i, code in enumerate(config.languages)}


def similarity_matrix(representations: Sequence[torch.Tensor]) -> torch.Tensor:
    """Pairwise similarity: cosine of vectors, or the mean row-wise cosine of matrices."""
    stacked = torch.stack([r.double() for r in representations])
    if stacked.dim() == 2:
        stacked = stacked.unsqueeze(1)  # a vector is a one-row matrix
    unit = stacked / stacked.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return torch.einsum("ard,brd->abr", unit, unit).mean(-1)


def knn_accuracy(
    similarity: torch.Tensor, features: Sequence[Sequence[float | None]], k: int
) -> tuple[float, list[float]]:
    """Leave-one-language-out k-NN accuracy: `(mean over languages, per-language accuracy)`.

    `features[i][f]` is language i's value of feature f (1/0, or None when unknown). Languages with no
    known feature get no accuracy and do not enter the mean.
    """
    n = len(features)
    per_language: list[float] = []
    for i in range(n):
        order = [j for j in torch.argsort(similarity[i], descending=True).tolist() if j != i]
        correct = total = 0
        for f, gold in enumerate(features[i]):
            if gold is None:
                continue
            voters = [features[j][f] for j in order if features[j][f] is not None][:k]
            if not voters:
                continue
            ones = sum(1 for v in voters if v >= 0.5)
            zeros = len(voters) - ones
            prediction = (1.0 if ones > zeros else 0.0) if ones != zeros else (1.0 if voters[0] >= 0.5 else 0.0)
            correct += int(prediction == (1.0 if gold >= 0.5 else 0.0))
            total += 1
        if total:
            per_language.append(correct / total)
    if not per_language:
        raise ValueError("No language has a known feature with a known neighbour: nothing to score.")
    return sum(per_language) / len(per_language), per_language


def typology_table(
    representations: Mapping[str, torch.Tensor],
    groups: Sequence[str] = tuple(FEATURE_GROUPS),
    ks: Sequence[int] = K_VALUES,
    features: Mapping[str, Mapping[str, Sequence[float | None]]] | None = None,
) -> dict[str, dict[int, float]]:
    """`{group: {k: accuracy}}` for the paper's Table 6 (`features` defaults to URIEL's via lang2vec)."""
    codes = list(representations)
    if len(codes) < 2:
        raise ValueError("Typology probing needs at least two languages.")
    similarity = similarity_matrix([representations[c] for c in codes])
    table: dict[str, dict[int, float]] = {}
    for group in groups:
        values = features[group] if features is not None else uriel_features(codes, group)
        rows = [values[c] for c in codes]
        table[group] = {k: knn_accuracy(similarity, rows, k)[0] for k in ks}
    return table


def format_typology_table(table: Mapping[str, Mapping[int, float]], label: str = "model") -> str:
    """Markdown in Table 6's layout: one row per feature group, accuracy (%) per k and the maximum."""
    ks = sorted(next(iter(table.values())))
    lines = [
        "| feature | model | " + " | ".join(f"k={k}" for k in ks) + " | max |",
        "|---|---|" + "---:|" * (len(ks) + 1),
    ]
    for group, row in table.items():
        cells = [f"{100 * row[k]:.2f}" for k in ks]
        lines.append(f"| {group} | {label} | " + " | ".join(cells) + f" | {100 * max(row.values()):.2f} |")
    return "\n".join(lines)


def plot_typology(tables: Mapping[str, Mapping[str, Mapping[int, float]]], path: str | os.PathLike | None = None):
    """Figure 3: accuracy against k, one panel per feature group, one line per model (`{model: table}`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(next(iter(tables.values())))
    figure, axes = plt.subplots(1, len(groups), figsize=(4 * len(groups), 3.2), squeeze=False)
    for axis, group in zip(axes[0], groups, strict=True):
        for name, table in tables.items():
            ks = sorted(table[group])
            axis.plot(ks, [100 * table[group][k] for k in ks], marker="o", label=name)
        axis.set_title(group)
        axis.set_xlabel("k")
        axis.set_ylabel("accuracy (%)")
    axes[0][0].legend()
    figure.tight_layout()
    if path is not None:
        figure.savefig(path)
    return figure


__all__ = [
    "FEATURE_GROUPS",
    "K_VALUES",
    "format_typology_table",
    "knn_accuracy",
    "language_representations",
    "plot_typology",
    "similarity_matrix",
    "typology_table",
    "uriel_features",
]
