"""HLT-MT's analyses (Yang et al. 2022): the SLP's selection probabilities (Figure 6a) and the cosine
similarity of the gradients of different translation directions (Figures 3 and 5).

* `selection_probabilities`: alpha (equation 7) for every language, from its tag embedding;
* `gradient_similarity`: for each direction, the gradient of its batch's loss with respect to the chosen
  parameters (all shared parameters by default), flattened; the matrix of their cosine similarities.
  Negative entries are the interference between directions the paper's two-stage training avoids.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch


@torch.no_grad()
def selection_probabilities(model: Any) -> dict[str, list[float]]:
    """`{language: alpha over the T adapters}` for every language of the model."""
    slp = model.slp()
    ids = torch.arange(len(model.config.languages), device=slp.gate.weight.device)
    alpha = slp.probabilities(model.get_input_embeddings(), ids)
    return {code: row.tolist() for code, row in zip(model.config.languages, alpha.cpu(), strict=True)}


def gradient_similarity(
    model: Any,
    batches: Mapping[str, Mapping[str, torch.Tensor]],
    parameters: Callable[[str], bool] | None = None,
) -> tuple[list[str], torch.Tensor]:
    """`(directions, [n, n] cosine similarity)` of the loss gradients of one batch per direction.

    `parameters(name) -> bool` picks the parameters compared; the default is every parameter outside the
    language-specific modules (`.insertions.`), the ones all directions share.
    """
    keep = parameters or (lambda name: ".insertions." not in name)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad and keep(n)]
    if not named:
        raise ValueError("No parameter matches `parameters`; nothing to compare.")
    was_training = model.training
    model.eval()  # no dropout: the gradients differ only by direction
    gradients = []
    try:
        for batch in batches.values():
            model.zero_grad(set_to_none=True)
            model(**batch).loss.backward()
            gradients.append(
                torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for _, p in named])
            )
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    stacked = torch.stack(gradients).double()
    unit = stacked / stacked.norm(dim=1, keepdim=True).clamp_min(1e-30)
    return list(batches), unit @ unit.T


def plot_matrix(values: torch.Tensor, labels_x: list[str], labels_y: list[str], path: str | os.PathLike | None = None,
                title: str = ""):  # fmt: skip
    """A heat map with its numbers (Figure 6a: languages x adapters; Figures 3/5: directions x directions)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = torch.as_tensor(values).double().cpu().numpy()
    figure, axis = plt.subplots(figsize=(1 + 0.6 * len(labels_x), 1 + 0.5 * len(labels_y)))
    image = axis.imshow(values, cmap="viridis")
    axis.set_xticks(range(len(labels_x)), labels_x, rotation=45, ha="right")
    axis.set_yticks(range(len(labels_y)), labels_y)
    for i in range(len(labels_y)):
        for j in range(len(labels_x)):
            axis.text(j, i, f"{float(values[i][j]):.2f}", ha="center", va="center", color="white", fontsize=7)
    axis.set_title(title)
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    if path is not None:
        figure.savefig(path)
    return figure


__all__ = ["gradient_similarity", "plot_matrix", "selection_probabilities"]
