"""Temperature-based sampling over translation directions (Arivazhagan et al. 2019).

Direction d with n_d training examples out of N is drawn with probability
`p_d = (n_d / N) ** (1 / T) / sum_e (n_e / N) ** (1 / T)`: T=1 samples proportionally to size,
T -> inf uniformly over directions; the papers use T=5. HLT-MT raises T linearly from 1 to its
final value over the first epochs (`warmup_epochs`).

The sampler draws a direction per example, then the next example of that direction from a
per-epoch permutation (cycled when a small direction is oversampled). It depends only on `seed`
and the epoch, so every process of a distributed run draws the same sequence; accelerate then
gives each process its share of the batches.

With `lengths` and `batch_size`, the draws are sorted by length within mega-batches of
`megabatch_size` batches (as transformers' LengthGroupedSampler does), so a batch holds sentences of
similar length and little padding, as fairseq's length-bucketed batches do, while the mix over
directions stays that of the temperature.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler


class TemperatureSampler(Sampler[int]):
    """Indices of a dataset whose example i belongs to direction `directions[i]`.

    Args:
        directions: the direction (any hashable, e.g. `"en-de"` or `(0, 1)`) of every example, or an `[N, 2]` array
            of (source, target) language ids.
        temperature: the sampling temperature T (5 in the papers).
        num_samples: indices per epoch; defaults to the dataset size.
        seed: base seed; epoch e uses `seed + e`.
        warmup_epochs: raise T linearly from 1 to `temperature` over this many epochs (0: no warm-up).
        lengths: the length of every example (a sequence or an array), to group batches by length (needs
            `batch_size`).
        batch_size: the batch size the grouping works for.
        megabatch_size: batches per sorted mega-batch.
    """

    def __init__(
        self,
        directions: Sequence[Hashable] | np.ndarray,
        temperature: float = 5.0,
        num_samples: int | None = None,
        seed: int = 0,
        warmup_epochs: float = 0.0,
        lengths: Sequence[int] | np.ndarray | None = None,
        batch_size: int | None = None,
        megabatch_size: int = 50,
    ):
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}.")
        if len(directions) == 0:
            raise ValueError("TemperatureSampler needs a non-empty dataset.")
        self.temperature = temperature
        self.seed = seed
        self.warmup_epochs = warmup_epochs
        self.num_samples = num_samples if num_samples is not None else len(directions)
        self.epoch = 0
        labels, inverse = _direction_codes(directions)
        # directions sorted by their text (as the first version did), examples of each in dataset order
        rank = np.empty(len(labels), dtype=np.int64)
        rank[sorted(range(len(labels)), key=lambda i: str(labels[i]))] = np.arange(len(labels))
        code = rank[inverse]
        self.directions = sorted(labels, key=str)
        by_direction = np.argsort(code, kind="stable")
        counts = np.bincount(code, minlength=len(labels))
        # narrow integers throughout: at 110M examples every byte per example is 110 MB per process
        self.index_dtype = np.int32 if len(directions) < 2**31 else np.int64
        by_direction = by_direction.astype(self.index_dtype)
        self.groups = [torch.from_numpy(g) for g in np.split(by_direction, np.cumsum(counts)[:-1])]
        self.sizes = torch.tensor(counts, dtype=torch.float64)
        if lengths is not None and (batch_size is None or len(lengths) != len(directions)):
            raise ValueError("Grouping by length needs batch_size and one length per example.")
        self.lengths = None if lengths is None else np.asarray(lengths).astype(np.int32)
        self.megabatch = None if lengths is None else batch_size * megabatch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def current_temperature(self, epoch: float | None = None) -> float:
        epoch = self.epoch if epoch is None else epoch
        if self.warmup_epochs <= 0:
            return self.temperature
        return 1.0 + (self.temperature - 1.0) * min(1.0, epoch / self.warmup_epochs)

    def probabilities(self, epoch: float | None = None) -> dict[Hashable, float]:
        """Sampling probability of every direction at `epoch` (default: the current one)."""
        # relative to the largest, so that a small T underflows the small directions to 0, never all of them
        weights = (self.sizes / self.sizes.max()) ** (1.0 / self.current_temperature(epoch))
        weights = weights / weights.sum()
        return dict(zip(self.directions, weights.tolist(), strict=True))

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        probs = torch.tensor(list(self.probabilities().values()), dtype=torch.float64)
        drawn = torch.multinomial(probs, self.num_samples, replacement=True, generator=generator)
        counts = torch.bincount(drawn, minlength=len(self.groups)).tolist()
        choices = drawn.numpy().astype(np.int16 if len(self.groups) < 2**15 else np.int32)
        del drawn
        picked: list[np.ndarray] = []
        for group, count in zip(self.groups, counts, strict=True):
            repeats = -(-count // len(group))  # cycle a permutation when the direction is oversampled
            order = torch.cat([group[torch.randperm(len(group), generator=generator)] for _ in range(max(repeats, 1))])
            picked.append(order[:count].numpy())
        # put the per-direction draws back in the order the directions were drawn (a stable sort: the same
        # permutation in numpy as in torch, and a radix sort on 16-bit keys)
        indices = np.empty(self.num_samples, dtype=self.index_dtype)
        indices[np.argsort(choices, kind="stable")] = np.concatenate(picked)
        del choices, picked
        if self.lengths is not None:
            indices = self._longest_first(indices)
        # a chunk at a time: a list of every index would cost ~40 bytes an example (4 GB at OPUS-100's size)
        for start in range(0, self.num_samples, 1 << 16):
            yield from indices[start : start + (1 << 16)].tolist()

    def _longest_first(self, indices: np.ndarray) -> np.ndarray:
        """Each mega-batch of draws sorted by length, longest first, ties in draw order."""
        full = len(indices) // self.megabatch * self.megabatch
        head = indices[:full].reshape(-1, self.megabatch)
        head = np.take_along_axis(head, np.argsort(-self.lengths[head], axis=1, kind="stable"), axis=1)
        tail = indices[full:]
        tail = tail[np.argsort(-self.lengths[tail], kind="stable")]
        return np.concatenate([head.reshape(-1), tail])

    def __len__(self) -> int:
        return self.num_samples


def _direction_codes(directions: Sequence[Hashable] | np.ndarray) -> tuple[list[Hashable], np.ndarray]:
    """`(labels, inverse)`: the distinct directions and each example's index into them. An `[N, 2]` integer array
    (source and target language ids, as the trainer reads them from Arrow columns) is grouped without Python
    objects; its labels are `(src_id, tgt_id)` tuples of ints."""
    if isinstance(directions, np.ndarray) and directions.ndim == 2:
        width = int(directions[:, 1].max()) + 1  # one integer key per (source, target): a 1-D unique is fast
        unique, inverse = np.unique(directions[:, 0].astype(np.int64) * width + directions[:, 1], return_inverse=True)
        return [(int(k // width), int(k % width)) for k in unique], inverse.reshape(-1)
    index: dict[Hashable, int] = {}
    inverse = np.fromiter((index.setdefault(d, len(index)) for d in directions), dtype=np.int64, count=len(directions))
    return list(index), inverse


__all__ = ["TemperatureSampler"]
