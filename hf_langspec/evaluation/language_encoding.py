"""The XLP paper's analyses of language encoding (Luo et al., Section 4.4, Figures 4 and 5).

* `cross_language_similarity`: one word, encoded "into" every language (XLP: P_t w; additive:
  w + l_t), and the cosine similarity of those vectors across languages (Figure 4). Language-specific
  encodings give low similarities; an identity projection gives a matrix of ones.
* `word_similarity`: several words encoded into one language and their pairwise cosine similarity
  (Figure 5: topic groups such as [happy, glad, sad], [car, plane, bike], [meat, food, rice]).
* `plot_similarity`: either matrix as a heat map (matplotlib, `pip install hf_langspec[eval]`).

A word that the tokenizer splits into several pieces is represented by the mean of its pieces'
embeddings (the paper samples sub-words; this keeps whole words usable). Encodings are taken from the
encoder's `embed` insertion point (`stack="encoder"`) or the decoder's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..modeling.routing import LanguageContext
from ..tokenization.tokenization_langspec import encode_text


def word_vector(model: Any, tokenizer: Any, word: str) -> torch.Tensor:
    ids = encode_text(tokenizer, [word])[0]
    if not ids:
        raise ValueError(f"{word!r} has no pieces in this tokenizer's vocabulary.")
    embeddings = model.get_input_embeddings().weight[ids]
    return embeddings.mean(0) * model.get_encoder().embed_scale


def encode_into_language(model: Any, vectors: torch.Tensor, language: str, stack: str = "encoder") -> torch.Tensor:
    """`vectors` ([n, d]) as the `stack`'s embed insertion point encodes them for `language`."""

    insertions = getattr(model.model, stack).insertions
    if "embed" not in insertions:
        raise ValueError(
            f"The {stack} of this model has no language encoding at its embed point (XLP projections or "
            "language_embedding='additive'); there is nothing to compare."
        )
    module = insertions["embed"]
    ids = torch.full((1,), model.config.language_id(language), dtype=torch.long)
    context = LanguageContext(ids, ids, model.config.num_languages, batch_size=1)
    return module(vectors.unsqueeze(0), context, None).squeeze(0)


@torch.no_grad()
def cross_language_similarity(
    model: Any, tokenizer: Any, word: str, languages: Sequence[str] | None = None, stack: str = "encoder"
) -> torch.Tensor:
    """`[L, L]` cosine similarities of `word` encoded into each of `languages` (default: all)."""
    languages = list(languages or model.config.languages)
    vector = word_vector(model, tokenizer, word).unsqueeze(0)
    encoded = torch.stack([encode_into_language(model, vector, lang, stack)[0] for lang in languages])
    return F.cosine_similarity(encoded.unsqueeze(1), encoded.unsqueeze(0), dim=-1)


@torch.no_grad()
def word_similarity(
    model: Any, tokenizer: Any, words: Sequence[str], language: str, stack: str = "encoder"
) -> torch.Tensor:
    """`[W, W]` cosine similarities of `words` encoded into `language`."""
    vectors = torch.stack([word_vector(model, tokenizer, w) for w in words])
    encoded = encode_into_language(model, vectors, language, stack)
    return F.cosine_similarity(encoded.unsqueeze(1), encoded.unsqueeze(0), dim=-1)


def plot_similarity(matrix: torch.Tensor, labels: Sequence[str], path: str | os.PathLike, title: str = "") -> None:
    """Save `matrix` as an annotated heat map (PNG, PDF, ... by the file extension)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if matrix.shape != (len(labels), len(labels)):
        raise ValueError(f"A {tuple(matrix.shape)} matrix needs {matrix.shape[0]} labels, got {len(labels)}.")
    size = 1.0 + 0.6 * len(labels)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(matrix.numpy(), vmin=-1, vmax=1, cmap="RdBu_r")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=7)
    fig.colorbar(image, ax=ax, fraction=0.046)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["cross_language_similarity", "encode_into_language", "plot_similarity", "word_similarity"]
