"""Where does an encoder lose its input? Token distinctness layer by layer, and what CLM's mix does to it.

`source_use` shows *that* a model ignores its source (the shuffled-source loss equals the matched one);
this probe shows *where*: for every point of the encoder (the embeddings, each layer's output, the final
output) the mean cosine similarity between the states of different tokens of one sentence (1: every token
encoded alike; its absolute value, near 1 when the tokens lie on one line with either sign) and the share of
the states' energy that is their sentence mean (the token-independent part):

    common_share = ||mean_t h_t||^2 / mean_t ||h_t||^2          (1: every token the same vector)

For every sublayer it also reports the size of what the sublayer adds (its branch: the attention output, the
FFN's fc2 output) against the residual stream it is added to, and the common share of that branch. In a
pre-norm Transformer the stream grows layer by layer and each branch adds a bounded, mostly token-specific
increment; a branch many times larger than its stream and almost all common replaces the stream with one
vector instead of adding to it.

For a CLM model (Liu et al. 2023, equations 1-3: `z = LN(h + sum_j P_j(h) h W_j)`), every encoder CLM call
adds the size of the mix against its input (`||h~|| / ||h||`), the entropy of its feature proportions over
log k (1: uniform), and `common_share` of its input and output; and the shared maps' spectra: the largest
singular value of each W_j and of their mean, and the mean map's effective rank (exp of the entropy of
its normalised singular values). A mix much larger than its input along few directions writes the same
vector into every token, which the LayerNorm after it then normalises: a collapse.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ..modeling.module_clm import feature_mix


def token_stats(states: torch.Tensor, mask: torch.Tensor) -> tuple[float, float, float]:
    """(mean cosine similarity of distinct tokens of one sentence, the same of its absolute value, common_share),
    averaged over sentences. |cosine| near 1 with cosine near 0: the tokens lie on one line, with either sign."""
    cosines, absolute, shares = [], [], []
    for h, m in zip(states.float(), mask.bool(), strict=True):
        h = h[m]
        if h.shape[0] < 2:
            continue
        unit = torch.nn.functional.normalize(h, dim=-1)
        similarity = unit @ unit.T
        pairs = h.shape[0] * (h.shape[0] - 1)
        cosines.append(((similarity.sum() - similarity.diagonal().sum()) / pairs).item())
        absolute.append(((similarity.abs().sum() - similarity.diagonal().abs().sum()) / pairs).item())
        shares.append((h.mean(0).pow(2).sum() / h.pow(2).sum(-1).mean()).item())
    return sum(cosines) / len(cosines), sum(absolute) / len(absolute), sum(shares) / len(shares)


def map_spectra(weight: torch.Tensor) -> dict[str, Any]:
    """Largest singular value of each `[k, d, d]` map and of their mean; the mean map's effective rank."""
    singular = torch.linalg.svdvals(weight.detach().float())
    mean = torch.linalg.svdvals(weight.detach().float().mean(0))
    p = mean / mean.sum()
    return {
        "largest_singular_value": singular[:, 0].tolist(),
        "mean_map_largest_singular_value": mean[0].item(),
        "mean_map_effective_rank": math.exp(-(p * p.clamp_min(1e-12).log()).sum().item()),
        "dimension": weight.shape[-1],
    }


@contextlib.contextmanager
def _recording_branches(encoder: Any, pre_norm: bool) -> Iterator[dict[str, dict[str, torch.Tensor]]]:
    """Forward hooks on every encoder layer: the stream each sublayer's branch is added to and the branch.

    The stream is the input of the sublayer's LayerNorm in a pre-norm layer, the sublayer's own input in a
    post-norm one; the branch is the attention output and the FFN's fc2 output.
    """
    records: dict[str, dict[str, torch.Tensor]] = {}
    handles = []
    for i, layer in enumerate(getattr(encoder, "layers", [])):
        sublayers = {
            "self_attn": (layer.self_attn_layer_norm if pre_norm else layer.self_attn, layer.self_attn),
            "ffn": (layer.final_layer_norm if pre_norm else layer.fc1, layer.fc2),
        }
        for name, (stream, branch) in sublayers.items():
            entry = records.setdefault(f"layer {i} {name}", {})

            def keep_stream(module, args, entry=entry):
                entry["stream"] = args[0].detach()

            def keep_branch(module, args, output, entry=entry):
                entry["branch"] = (output[0] if isinstance(output, tuple) else output).detach()

            handles += [stream.register_forward_pre_hook(keep_stream), branch.register_forward_hook(keep_branch)]
    try:
        yield records
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _recording_clm(model: Any) -> Iterator[list[dict[str, Any]]]:
    """Forward hooks on the encoder's CLM module: each call's input, output and proportions."""
    module = (model.clm_modules() if hasattr(model, "clm_modules") else {}).get("encoder")
    calls: list[dict[str, Any]] = []
    if module is None:
        yield calls
        return

    def record(mod, args, kwargs, output):
        hidden, lang, layer = args[0], args[1], args[2]
        sublayer = args[3] if len(args) > 3 else kwargs.get("sublayer", "ffn")
        entry = {"layer": layer, "sublayer": sublayer, "input": hidden.detach(), "output": output.detach()}
        if mod.gate is not None:
            proportions = mod.proportions(hidden, lang, layer).detach()
            flat = hidden.reshape(-1, hidden.shape[-1])

            entry["mix"] = feature_mix(flat, proportions.reshape(flat.shape[0], -1), mod.weight).view_as(hidden)
            entry["proportions"] = proportions
        calls.append(entry)

    handle = module.register_forward_hook(record, with_kwargs=True)
    try:
        yield calls
    finally:
        handle.remove()


def encoder_collapse(
    model: Any, tokenizer: Any, sources: Sequence[str], src_lang: str, tgt_lang: str, batch_size: int = 32
) -> dict[str, Any]:
    """The probe over one direction's source sentences (see the module docstring); the model is put in eval mode."""
    if len(sources) < 1:
        raise ValueError("encoder_collapse needs at least one source sentence.")
    device = next(model.parameters()).device
    model.eval()
    points: dict[str, list[tuple[float, float, float, int]]] = {}
    clm: dict[str, list[tuple[float, float, float, float, int]]] = {}
    branches: dict[str, list[tuple[float, float, float, int]]] = {}
    encoder = model.get_encoder()
    pre_norm = bool(getattr(model.config, "normalize_before", True))
    with torch.no_grad():
        for start in range(0, len(sources), batch_size):
            batch = tokenizer(list(sources[start : start + batch_size]), src_lang=src_lang, tgt_lang=tgt_lang,
                              padding=True, return_tensors="pt").to(device)  # fmt: skip
            inputs = {
                k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "src_lang_ids", "tgt_lang_ids")
            }
            with _recording_clm(model) as calls, _recording_branches(encoder, pre_norm) as sublayers:
                out = encoder(**inputs, output_hidden_states=True, return_dict=True)
            mask, n = batch["attention_mask"], batch["input_ids"].shape[0]
            keep = mask.bool()
            for name, entry in sublayers.items():
                stream, branch = entry["stream"][keep].norm(dim=-1).mean(), entry["branch"][keep].norm(dim=-1).mean()
                branches.setdefault(name, []).append(
                    (stream.item(), branch.item(), token_stats(entry["branch"], mask)[2], n)
                )
            names = ["embeddings", *[f"layer {i}" for i in range(len(out.hidden_states) - 1)]]
            for name, states in zip(names, out.hidden_states, strict=True):
                points.setdefault(name, []).append((*token_stats(states, mask), n))
            points.setdefault("output", []).append((*token_stats(out.last_hidden_state, mask), n))
            for call in calls:
                key = f"layer {call['layer']} {call['sublayer']}"
                ratio = (
                    (call["mix"][keep].norm(dim=-1) / call["input"][keep].norm(dim=-1)).mean().item()
                    if "mix" in call
                    else math.nan
                )
                p = call.get("proportions")
                entropy = (
                    (-(p * p.clamp_min(1e-12).log()).sum(-1)[keep].mean() / math.log(p.shape[-1])).item()
                    if p is not None
                    else math.nan
                )
                share_in, share_out = token_stats(call["input"], mask)[2], token_stats(call["output"], mask)[2]
                clm.setdefault(key, []).append((ratio, entropy, share_in, share_out, n))

    def mean(rows: list[tuple], index: int) -> float:
        return sum(r[index] * r[-1] for r in rows) / sum(r[-1] for r in rows)

    result: dict[str, Any] = {
        "sentences": len(sources),
        "points": {
            name: {"token_cosine": mean(rows, 0), "token_abs_cosine": mean(rows, 1), "common_share": mean(rows, 2)}
            for name, rows in points.items()
        },
        "sublayers": {
            name: {"stream_norm": mean(rows, 0), "branch_norm": mean(rows, 1), "branch_common_share": mean(rows, 2)}
            for name, rows in branches.items()
        },
    }
    if clm:
        result["clm"] = {
            name: {"mix_to_input": mean(rows, 0), "proportion_entropy": mean(rows, 1),
                   "common_share_in": mean(rows, 2), "common_share_out": mean(rows, 3)}
            for name, rows in clm.items()
        }  # fmt: skip
        result["clm_maps"] = map_spectra(model.clm_modules()["encoder"].weight)
    return result


__all__ = ["encoder_collapse", "map_spectra"]
