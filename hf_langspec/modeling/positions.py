"""The backbone's position embeddings (`position_embedding_type`): fairseq's sinusoidal table (the papers' models,
its padding row zero), Marian's, or learned ones."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_langspec import LangSpecConfig


def fairseq_sinusoidal_table(num_rows: int, dim: int, padding_idx: int) -> torch.Tensor:
    """fairseq's `SinusoidalPositionalEmbedding.get_embedding` (also M2M100's): sin | cos halves."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
    angles = torch.arange(num_rows, dtype=torch.float).unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(num_rows, 1)], dim=1)
    table[padding_idx] = 0
    return table


def marian_sinusoidal_table(num_rows: int, dim: int) -> torch.Tensor:
    """Marian's table: angle pos / 10000^(2i/d); sin features in the first half, cos in the second."""
    pos = torch.arange(num_rows, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(dim, dtype=torch.float64)
    angles = pos / torch.pow(10000.0, 2 * torch.div(j, 2, rounding_mode="floor") / dim)
    sentinel = (dim + 1) // 2
    table = torch.empty(num_rows, dim, dtype=torch.float64)
    table[:, :sentinel] = torch.sin(angles[:, 0::2])
    table[:, sentinel:] = torch.cos(angles[:, 1::2])
    return table.float()


class LangSpecPositionalEmbedding(nn.Module):
    """Absolute positions: fairseq sinusoidal (default), Marian sinusoidal, or fairseq learned.

    fairseq numbering (`sinusoidal`, `learned`): position of a token = padding_idx + 1 + number of
    non-padding tokens before it; padding tokens read row padding_idx (zero). Marian numbering:
    0, 1, 2, ... regardless of padding. Sequences longer than `max_position_embeddings` raise.
    """

    def __init__(self, config: LangSpecConfig):
        super().__init__()
        self.kind = config.position_embedding_type
        self.padding_idx = config.pad_token_id
        self.max_positions = config.max_position_embeddings
        self.dim = config.d_model
        if self.kind == "sinusoidal_marian":
            self.offset = 0
            self.register_buffer("weight", self.sinusoidal_table(), persistent=False)
        else:
            self.offset = self.padding_idx + 1
            if self.kind == "learned":
                self.embedding = nn.Embedding(self.num_rows, self.dim, padding_idx=self.padding_idx)
            else:
                self.register_buffer("weight", self.sinusoidal_table(), persistent=False)

    @property
    def num_rows(self) -> int:
        return self.max_positions + self.offset

    def sinusoidal_table(self) -> torch.Tensor:
        if self.kind == "sinusoidal_marian":
            return marian_sinusoidal_table(self.num_rows, self.dim)
        return fairseq_sinusoidal_table(self.num_rows, self.dim, self.padding_idx)

    def forward(
        self, input_ids: torch.Tensor | None, shape: torch.Size, past_length: int | torch.Tensor = 0
    ) -> torch.Tensor:
        """Position vectors for tokens `[B, T]` following `past_length` cached ones: `[B or 1, T, d]`.

        `past_length` is a 0-dim tensor with a static cache (its length lives on the device, so that a decoding
        step reads nothing back); the static cache's size, checked when it was made, bounds the positions then."""
        length = shape[1]
        if isinstance(past_length, int) and past_length + length > self.max_positions:
            raise ValueError(
                f"Sequence of {past_length + length} tokens exceeds max_position_embeddings="
                f"{self.max_positions}; truncate the input (tokenizer `max_length`) or build the model "
                "with a larger max_position_embeddings."
            )
        if self.kind == "sinusoidal_marian":
            if isinstance(past_length, int):
                return self.weight[past_length : past_length + length].unsqueeze(0)
            return self.weight[past_length + torch.arange(length, device=self.weight.device)].unsqueeze(0)
        if input_ids is not None:
            mask = input_ids.ne(self.padding_idx).int()
            positions = (torch.cumsum(mask, dim=1) + past_length) * mask + self.padding_idx
        else:
            start = self.offset + past_length
            positions = torch.arange(start, start + length, device=self._device()).unsqueeze(0)
        table = self.embedding.weight if self.kind == "learned" else self.weight
        return F.embedding(positions, table)

    def _device(self) -> torch.device:
        return self.embedding.weight.device if self.kind == "learned" else self.weight.device


# ---------------------------------------------------------------------------- attention


__all__ = ["LangSpecPositionalEmbedding", "fairseq_sinusoidal_table", "marian_sinusoidal_table"]
