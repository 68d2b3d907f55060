"""The report's figures (matplotlib, `pip install hf_langspec[eval]`): group means with error bars, zero-shot
off-target against supervised BLEU (one point per run), and a zero-shot BLEU heat map per system."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from ..files import write_atomic
from .suite import Suite


def _save(fig: Any, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    write_atomic(path, buffer.getvalue())


def write_plots(suite: Suite, report: dict[str, Any], runs: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = report["systems"]
    names = list(systems)
    labels = [systems[n]["label"] for n in names]
    panels = [("en-xx", "bleu", "en->xx BLEU"), ("xx-en", "bleu", "xx->en BLEU"), ("zero-shot", "bleu", "zero-shot BLEU"),
              ("zero-shot", "off_target", "zero-shot off-target (%)")]  # fmt: skip
    panels = [p for p in panels if any(p[1] in systems[n]["groups"].get(p[0], {}) for n in names)]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 0.35 * len(names) + 1.5), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (group, metric, title) in zip(axes, panels, strict=True):
        scale = 100 if metric == "off_target" else 1
        entries = [systems[n]["groups"].get(group, {}).get(metric) for n in names]
        values = [e["mean"] * scale if e else 0 for e in entries]
        errors = [e["std"] * scale if e else 0 for e in entries]
        colors = ["0.5" if n == report["baseline"] else "tab:blue" for n in names]
        ax.barh(range(len(names)), values, xerr=errors, color=colors, capsize=2)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0].set_yticks(range(len(names)), labels)
    axes[0].invert_yaxis()
    fig.suptitle(f"{report['suite']}: mean ± std over seeds", fontsize=10)
    _save(fig, out / "bars.png")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    markers = "os^vD<>phX*P8H"
    for i, name in enumerate(names):
        xs, ys = [], []
        for seed in systems[name]["seeds"]:
            groups = report["runs"][f"{name} seed {seed}"]
            supervised = [groups[g]["bleu"] for g in ("en-xx", "xx-en") if g in groups]
            if supervised and "off_target" in groups.get("zero-shot", {}):
                xs.append(sum(supervised) / len(supervised))
                ys.append(groups["zero-shot"]["off_target"] * 100)
        ax.scatter(xs, ys, marker=markers[i % len(markers)], label=systems[name]["label"], s=28)
    ax.set_xlabel("supervised BLEU (mean of en->xx and xx->en)")
    ax.set_ylabel("zero-shot off-target (%)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"{report['suite']}: one point per run", fontsize=10)
    _save(fig, out / "offtarget_vs_bleu.png")
    plt.close(fig)

    languages = sorted({c for r in runs.values() for s in r["sets"].values() for d in s for c in d.split("-")})
    columns = min(4, len(names))
    rows = -(-len(names) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.0 * columns, 2.8 * rows), squeeze=False)
    index = {c: i for i, c in enumerate(languages)}
    for k, name in enumerate(names):
        ax = axes[k // columns][k % columns]
        grid = np.full((len(languages), len(languages)), np.nan)
        seeds = systems[name]["seeds"]
        for direction in runs[(name, seeds[0])]["sets"].get("zero-shot", {}):
            src, tgt = direction.split("-")
            grid[index[src], index[tgt]] = np.mean(
                [runs[(name, s)]["sets"]["zero-shot"][direction]["bleu"] for s in seeds]
            )
        image = ax.imshow(grid, cmap="viridis", vmin=0)
        ax.set_xticks(range(len(languages)), languages, fontsize=6)
        ax.set_yticks(range(len(languages)), languages, fontsize=6)
        ax.set_title(systems[name]["label"], fontsize=8)
        fig.colorbar(image, ax=ax, fraction=0.046)
    for k in range(len(names), rows * columns):
        axes[k // columns][k % columns].axis("off")
    fig.suptitle("zero-shot BLEU per direction (rows: source, columns: target; mean over seeds)", fontsize=10)
    _save(fig, out / "zeroshot_heatmaps.png")
    plt.close(fig)
