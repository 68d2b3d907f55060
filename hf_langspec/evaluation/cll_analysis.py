"""CLL's analyses (Qu & Watanabe 2022): LSL ablation (Tables 9-10), the learned t_l (appendix C), attribution.

* `lsl_ablation`: translate with some languages' LSLs dropped at inference and count the output
  languages; a zero-shot direction whose target LSL is dropped rolls back towards a supervised
  direction (the paper's observation: the output turns to the central language or the source).
* `lsl_scales` / `plot_lsl_scales`: t_l per language and layer, and their average over layers.
* `branch_attributions`: integrated gradients (Sundararajan et al. 2017) of the reference's log-probability
  with respect to the outputs of a CLL layer's two branches, the shared FFN and the scaled LSL: the
  straight path scales both branch outputs from 0 to their values, the integral is a Riemann sum
  with `steps` midpoints, and the attributions add up to F(1) - F(0) (completeness) as steps grow.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from .language_id import LanguageIdentifier, language_identifier
from .translate import translate


def lsl_scales(model: Any) -> dict[str, list[float]]:
    """`{language: [t_l of each CLL layer]}` for the languages with an LSL."""
    cll = model.cll()
    scale = cll.scale.detach().float().cpu()
    return {code: scale[:, i].tolist() for i, code in enumerate(cll.specific)}


def plot_lsl_scales(model: Any, path: str | os.PathLike | None = None):
    """Appendix C's figure: each language's t_l averaged over the CLL layers, as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scales = lsl_scales(model)
    figure, axis = plt.subplots(figsize=(max(4.0, 0.35 * len(scales)), 3.0))
    axis.bar(list(scales), [sum(v) / len(v) for v in scales.values()])
    axis.set_ylabel("t_l (mean over CLL layers)")
    axis.set_xlabel("target language")
    figure.tight_layout()
    if path is not None:
        figure.savefig(path)
    return figure


@contextlib.contextmanager
def lsl_dropped(model: Any, languages: Sequence[str]) -> Iterator[None]:
    """Within the block, the LSLs of `languages` are skipped (their targets get the plain FFN)."""
    cll = model.cll()
    unknown = [code for code in languages if code not in cll.specific]
    if unknown:
        raise ValueError(f"{unknown} have no LSL in this model; languages with one: {cll.specific}.")
    before = set(cll.disabled)
    cll.disabled = before | set(languages)
    try:
        yield
    finally:
        cll.disabled = before


def lsl_ablation(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    src_lang: str,
    tgt_lang: str,
    drop: Sequence[str] | None = None,
    identifier: LanguageIdentifier | None = None,
    **generate: Any,
) -> dict[str, Any]:
    """Translate `texts` src -> tgt with and without the LSLs of `drop` (default: the target's).

    Returns the hypotheses of both runs and, for each, the share of outputs per identified language.
    """
    drop = list(drop) if drop is not None else [tgt_lang]
    unknown = [code for code in drop if code not in model.cll().specific]
    if unknown:  # before any translating
        raise ValueError(f"{unknown} have no LSL in this model; languages with one: {model.cll().specific}.")
    identifier = identifier or language_identifier()
    full = translate(model, tokenizer, texts, src_lang, tgt_lang, show_progress=False, **generate)
    with lsl_dropped(model, drop):
        ablated = translate(model, tokenizer, texts, src_lang, tgt_lang, show_progress=False, **generate)

    # the detector that covers the target, where a combined identifier has several
    identify = (identifier.for_language(tgt_lang) if hasattr(identifier, "for_language") else None) or identifier

    def shares(outputs: Sequence[str]) -> dict[str, float]:
        counts = Counter(code or "unknown" for code in identify(outputs))
        return {code: n / len(outputs) for code, n in counts.most_common()}

    return {
        "direction": f"{src_lang}-{tgt_lang}",
        "dropped": drop,
        "identifier": identify.name,
        "with_lsl": {"hypotheses": full, "languages": shares(full)},
        "without_lsl": {"hypotheses": ablated, "languages": shares(ablated)},
    }


def _log_prob(model: Any, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Sum of the reference tokens' log-probabilities (the attributed quantity F)."""
    logits = model(**batch).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # at least float32 for log_softmax
    labels = batch["labels"]
    mask = labels.ne(-100)
    picked = logits.log_softmax(-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (picked * mask).sum()


def branch_attributions(
    model: Any, batch: Mapping[str, torch.Tensor], layer: int, steps: int = 32
) -> dict[str, float]:
    """Integrated gradients of F (the references' log-probability) for the FFN and LSL outputs of decoder `layer`.

    Returns `{"ffn": ..., "lsl": ..., "total": F(1) - F(0)}`; `ffn + lsl` approaches `total` as `steps` grows.
    """
    cll = model.cll()
    if layer not in cll.layers:
        raise ValueError(f"Decoder layer {layer} has no CLL; CLL layers: {cll.layers}.")
    decoder_layer = model.model.decoder.layers[layer]
    state: dict[str, Any] = {"alpha": 1.0, "outputs": {}}

    def scale(name: str):
        def hook(module, args, output):
            if name == "lsl" and args[2] != layer:  # the CLL module serves every CLL layer
                return output
            output = output * state["alpha"]
            if output.requires_grad:
                output.retain_grad()
            state["outputs"][name] = output
            return output

        return hook

    handles = [decoder_layer.fc2.register_forward_hook(scale("ffn")), cll.register_forward_hook(scale("lsl"))]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            state["alpha"] = 1.0
            full_value = _log_prob(model, batch).item()
            state["alpha"] = 0.0
            zero_value = _log_prob(model, batch).item()
        totals = {"ffn": 0.0, "lsl": 0.0}
        for k in range(steps):
            state["alpha"] = (k + 0.5) / steps
            model.zero_grad(set_to_none=True)
            value = _log_prob(model, batch)
            value.backward()
            for name, output in state["outputs"].items():
                if output.grad is None:  # e.g. no example has an LSL target: the branch is constant zero
                    continue
                # d F / d alpha_branch = <grad wrt the scaled output, the unscaled output>
                unscaled = output.detach() / state["alpha"]
                totals[name] += float((output.grad * unscaled).sum()) / steps
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return {"ffn": totals["ffn"], "lsl": totals["lsl"], "total": full_value - zero_value}


__all__ = ["branch_attributions", "lsl_ablation", "lsl_dropped", "lsl_scales", "plot_lsl_scales"]
