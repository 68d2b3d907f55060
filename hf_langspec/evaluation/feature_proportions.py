"""CLM's feature-proportion analysis (Liu et al. 2023, section 5.1, equation 4, Tables 4, 10 and 11).

The average token-level feature proportion of a direction l over its test set D_l, per stack:

    ATP^l = sum_{X in D_l} sum_{x in X} sum_{m in N} P_m(x)  /  sum_{X in D_l} |X| |N|

where N is the set of CLM modules of the stack (one per sublayer and layer). Source sentences are
encoded and references teacher-forced, so the decoder's proportions are those of the reference
tokens. Directions are then compared by the cosine similarity of their ATP vectors; Table 4 lists
each direction's five most similar ones, in the encoder and in the decoder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from tqdm.auto import tqdm

from ..data.processing import per_direction


def gated_clm_modules(model: Any) -> dict[str, Any]:
    """The CLM modules with a gate (sCLM, mCLM) per stack; none is a ValueError (no proportions to average)."""
    modules = model.clm_modules() if hasattr(model, "clm_modules") else {}
    modules = {side: m for side, m in modules.items() if m.gate is not None}
    if not modules:
        raise ValueError("This model has no gated CLM module (sCLM or mCLM): there are no feature proportions.")
    return modules


@contextlib.contextmanager
def recording_proportions(model: Any) -> Iterator[dict[str, list]]:
    """Collect `(layer, sublayer, proportions [B, T, k])` of every CLM call, per stack, while the block runs."""
    modules = gated_clm_modules(model)
    records: dict[str, list] = {side: [] for side in modules}
    try:
        for side, module in modules.items():
            module.recorder = records[side]
        yield records
    finally:
        for module in modules.values():
            module.recorder = None


@torch.no_grad()
def average_token_proportions(
    model: Any, tokenizer: Any, rows: Iterable[Mapping[str, str]], batch_size: int = 32, show_progress: bool = True
) -> dict[str, dict[str, torch.Tensor]]:
    """Equation 4 for every direction of `rows` (canonical rows): `{"src-tgt": {"encoder": [k], "decoder": [k]}}`."""
    gated_clm_modules(model)  # before any batch
    model.eval()
    device = next(model.parameters()).device
    result: dict[str, dict[str, torch.Tensor]] = {}
    directions = per_direction(rows)
    for direction, examples in tqdm(directions.items(), desc="ATP", disable=not show_progress):
        sums: dict[str, torch.Tensor] = {}
        tokens = {"encoder": 0, "decoder": 0}
        for start in range(0, len(examples), batch_size):
            chunk = examples[start : start + batch_size]
            batch = tokenizer(
                [r["src"] for r in chunk], text_target=[r["tgt"] for r in chunk], src_lang=chunk[0]["src_lang"],
                tgt_lang=chunk[0]["tgt_lang"], padding=True, return_tensors="pt",
            ).to(device)  # fmt: skip
            masks = {"encoder": batch["attention_mask"].bool(), "decoder": batch["labels"].ne(-100)}
            with recording_proportions(model) as records:
                model(**batch)
            for side, calls in records.items():
                mask = masks[side]
                for _, _, proportions in calls:
                    total = proportions[mask].sum(0).double()
                    sums[side] = sums[side] + total if side in sums else total
                tokens[side] += int(mask.sum()) * len({(layer, sub) for layer, sub, _ in calls})
        result[direction] = {side: (total / tokens[side]).float().cpu() for side, total in sums.items()}
    return result


def _label(directions: list[str]) -> dict[str, str]:
    """Name directions by their other language when they share a side (en-xx -> xx), else keep `src-tgt`."""
    sources = {d.split("-")[0] for d in directions}
    targets = {d.split("-")[1] for d in directions}
    if len(sources) == 1 and len(directions) > 1:
        return {d: d.split("-")[1] for d in directions}
    if len(targets) == 1 and len(directions) > 1:
        return {d: d.split("-")[0] for d in directions}
    return {d: d for d in directions}


def most_similar(atp: Mapping[str, Mapping[str, torch.Tensor]], side: str, top: int = 5) -> dict[str, list[str]]:
    """Each direction's `top` most similar other directions by cosine similarity of their ATP on `side`."""
    names = list(atp)
    if len(names) < 2:
        raise ValueError("Comparing ATP vectors needs at least two directions.")
    vectors = torch.stack([torch.as_tensor(atp[n][side]) for n in names]).double()
    unit = vectors / vectors.norm(dim=1, keepdim=True)
    similarity = unit @ unit.T
    similarity.fill_diagonal_(-float("inf"))
    order = similarity.argsort(dim=1, descending=True)[:, : min(top, len(names) - 1)]
    return {name: [names[j] for j in row.tolist()] for name, row in zip(names, order, strict=True)}


def similarity_table(atp: Mapping[str, Mapping[str, torch.Tensor]], top: int = 5) -> str:
    """Table 4's layout in Markdown: for each direction, its `top` most similar ones in the encoder and decoder."""
    labels = _label(list(atp))
    sides = [s for s in ("encoder", "decoder") if all(s in v for v in atp.values())]
    ranked = {side: most_similar(atp, side, top) for side in sides}
    header = "| rank | " + " | ".join(f"{labels[d]} {side[:3]}" for d in atp for side in sides) + " |"
    lines = [header, "|---" * (1 + len(atp) * len(sides)) + "|"]
    depth = min(top, len(atp) - 1)
    for rank in range(depth):
        cells = [labels[ranked[side][d][rank]] for d in atp for side in sides]
        lines.append(f"| {rank + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["average_token_proportions", "most_similar", "recording_proportions", "similarity_table"]
