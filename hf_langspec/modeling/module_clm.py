"""CLM: token-level cross-lingual feature mixing (Liu et al. 2023), at `sublayer_out` or `ffn_out`.

For a token representation h after a sublayer (equations 1-3):

    P(h) = (1 - alpha) softmax(h P) + alpha / k              feature proportions, P in R^{d x k}
    h~   = sum_j P_j(h) h W_j                                the mix of k linear maps W_j in R^{d x d}
    z    = LN(h + dropout(h~))                               its own residual block (`clm_norm="post"`)

The paper ran fairseq's Transformer-base, post-norm: every sublayer's output is already normalised, so eq. 3's LN
keeps the stream as normalised as the backbone keeps it. Applied verbatim after a *pre-norm* sublayer, the same LN
renormalises a stream the backbone leaves unnormalised, and the CLM model becomes a post-LN network beside a
pre-LN control. `clm_norm="pre"` is eq. 3 in the pre-norm form, with the same parameters:

    z    = h + dropout(sum_j P_j(LN(h)) LN(h) W_j)           gate and maps read LN(h); the stream stays unnormalised

In a post-norm backbone the two forms coincide in what matters (the next sublayer's LN renormalises the stream
either way); `"post"` stays the default, so every model saved before `clm_norm` existed computes what it did.

Choices where the paper is silent (no public code; ../shared/notes/reference_implementations.md),
checked against its parameter counts (Tables 1, 3 and 9 agree only with this layout):

* the k maps W_j (bias-free, full d x d) are one set per stack, shared by all its CLM modules
  (footnote 2); the gate P (bias-free) is one per *layer*, shared by that layer's sublayers
  ("distinguish the feature projection weight P across different Transformer layers"); every
  sublayer's CLM has its own LayerNorm (Table 9: CLM and CLM-top differ by exactly those);
* sCLM: one P per layer; mCLM: one P per layer and per key, the key being the language pair
  (`config.language_pairs`, the paper's mCLM) or the source or target language (the paper's
  zero-shot mCLM-D is keyed by the target language);
* a pair never seen in training (zero-shot) under mCLM keyed by pair follows `clm_unseen_pair`:
  `"error"` (default) raises; `"target_mean"` uses the mean of the trained pairs' parameters with the
  same target language (the decoder's job is to produce that language);
* LS (the ablation of Table 3): no gate; one map per key (pair or language), selected per example;
* sparsity (section 5.4): with `clm_top_w` only the w largest proportions of each token are kept,
  renormalised to sum to one (`clm_top_w_renormalize`);
* the maps start Xavier-uniform (fairseq's `Linear`), or at zero with `clm_map_init="zeros"` (the module then
  starts as `z = LN(h)`; docs/DECISIONS.md "CLM").

Efficiency: the mix costs k d^2 multiply-adds per token. The naive formulation builds the features
h W_j of every token, a `[tokens, k, d]` tensor that autograd keeps for the backward pass; at the
paper's k = 194-560 that exhausts memory. `FeatureMix` computes the same sum in chunks of features
as `(p (x) h) W_stack` and recomputes what the backward pass needs from h, the proportions and the
maps, so the activations it keeps are `[tokens, d + k]` whatever k is, for the same matmul FLOPs
(forward k d^2, backward 2 k d^2 per token: g W_j^T serves both dh and dP).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .routing import LanguageContext, LanguageRouter, PairIndex, sync_free

MIX_CHUNK_ELEMENTS = 1 << 23  # transient [tokens, chunk, d] block of the fast mix: 32 MiB of float32
CLM_VARIANTS = ("none", "sclm", "mclm", "ls")
CLM_KEYS = ("pair", "source", "target")
UNSEEN_PAIR_RULES = ("error", "target_mean")
CLM_MAP_INITS = ("xavier", "zeros")
CLM_NORMS = ("post", "pre")
SUBLAYERS = {"encoder": ("self_attn", "ffn"), "decoder": ("self_attn", "cross_attn", "ffn")}


# ---------------------------------------------------------------------------- the mix
def feature_mix_naive(hidden: torch.Tensor, proportions: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Equation 2 as written: `sum_j p_j (h W_j)`; `hidden` [N, d], `proportions` [N, k], `weight` [k, d, e]."""
    features = torch.einsum("nd,kde->nke", hidden, weight)  # the [N, k, e] tensor autograd keeps
    return torch.einsum("nke,nk->ne", features, proportions)


def _chunk(tokens: int, k: int, d: int) -> int:
    return max(1, min(k, MIX_CHUNK_ELEMENTS // max(1, tokens * d)))


class FeatureMix(torch.autograd.Function):
    """Equation 2 without the `[N, k, d]` activations: chunked forward, recomputing backward.

    forward:  out = sum over chunks of `(p_c (x) h) @ W_c`, the outer product flattened to [N, c d];
    backward: U_c = g W_c^T ([N, c, d]); dh = sum_j p_j U_j; dp_j = <U_j, h>; dW_j = (p_j h)^T g.
    """

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, proportions: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(hidden, proportions, weight)
        k, d, e = weight.shape
        n = hidden.shape[0]
        step = _chunk(n, k, d)
        dtype = torch.promote_types(hidden.dtype, weight.dtype)
        out = hidden.new_zeros(n, e, dtype=dtype)
        for start in range(0, k, step):
            p = proportions[:, start : start + step].to(dtype)
            w = weight[start : start + step].to(dtype)
            outer = (p.unsqueeze(2) * hidden.to(dtype).unsqueeze(1)).reshape(n, -1)
            out.addmm_(outer, w.reshape(-1, e))
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        hidden, proportions, weight = ctx.saved_tensors
        k, d, e = weight.shape
        n = hidden.shape[0]
        step = _chunk(n, k, d)
        dtype = grad_out.dtype
        h = hidden.to(dtype)
        grad_hidden = torch.zeros_like(h)
        grad_p = torch.empty(n, k, dtype=dtype, device=h.device)
        grad_w = torch.empty(k, d, e, dtype=dtype, device=h.device)
        for start in range(0, k, step):
            stop = min(k, start + step)
            p = proportions[:, start:stop].to(dtype)
            w = weight[start:stop].to(dtype)
            u = (grad_out @ w.permute(2, 0, 1).reshape(e, -1)).view(n, stop - start, d)  # g W_j^T
            grad_hidden.add_(torch.bmm(p.unsqueeze(1), u).squeeze(1))
            grad_p[:, start:stop] = torch.bmm(u, h.unsqueeze(2)).squeeze(2)
            outer = (p.unsqueeze(2) * h.unsqueeze(1)).reshape(n, -1)
            grad_w[start:stop] = (outer.t() @ grad_out).view(stop - start, d, e)
        return grad_hidden.to(hidden.dtype), grad_p.to(proportions.dtype), grad_w.to(weight.dtype)


def feature_mix(hidden: torch.Tensor, proportions: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Equation 2, memory-flat in k (see :class:`FeatureMix`); `hidden` [..., d], `proportions` [..., k]."""
    shape = hidden.shape
    out = FeatureMix.apply(hidden.reshape(-1, shape[-1]), proportions.reshape(-1, proportions.shape[-1]), weight)
    return out.reshape(*shape[:-1], weight.shape[-1])


def feature_proportions(logits: torch.Tensor, alpha: float, top_w: int | None = None, renormalize: bool = True):
    """Equation 1, `(1 - alpha) softmax(logits) + alpha / k`, optionally pruned to the top-w features."""
    k = logits.shape[-1]
    proportions = (1 - alpha) * logits.softmax(-1) + alpha / k
    if top_w is None or top_w >= k:
        return proportions
    values, index = proportions.topk(top_w, dim=-1)
    if renormalize:
        values = values / values.sum(-1, keepdim=True)
    return torch.zeros_like(proportions).scatter(-1, index, values)


# ---------------------------------------------------------------------------- keys (mCLM / LS)
class _Keys:
    """Per-example key ids for mCLM and LS, and the extra rows that unseen pairs resolve to."""

    def __init__(self, ids: torch.Tensor, mix: torch.Tensor | None, strategy: str, num_keys: int):
        self.ids, self.mix = ids, mix
        rows = num_keys + (0 if mix is None else mix.shape[0])
        self.router = LanguageRouter(ids, rows, strategy)

    def table(self, weight: torch.Tensor) -> torch.Tensor:
        """`weight` [n_keys, ...] with one appended row per unseen pair (the mean of its rows)."""
        if self.mix is None:
            return weight
        extra = (self.mix.to(weight.dtype) @ weight.flatten(1)).view(-1, *weight.shape[1:])
        return torch.cat([weight, extra])


class CrossLingualMixing(nn.Module):
    """The CLM modules of one stack: the shared maps, the per-layer gates, one LayerNorm per sublayer.

    Called at `sublayer_out` (`m(h, lang, layer, sublayer)`, CLM) or at `ffn_out` (CLM-top).

    Args:
        config: a `CLMConfig`.
        side: `"encoder"` or `"decoder"`.
        variant: `"sclm"`, `"mclm"` or `"ls"`.
        key: what mCLM / LS parameters are per: `"pair"`, `"source"` or `"target"`.
        sublayers: the sublayers that carry a CLM (`("ffn",)` for CLM-top).
    """

    def __init__(self, config, side: str, variant: str, key: str, sublayers: tuple[str, ...]):
        super().__init__()
        d = config.d_model
        self.variant, self.key, self.side = variant, key, side
        self.alpha = config.clm_alpha
        self.top_w = config.clm_top_w
        self.renormalize = config.clm_top_w_renormalize
        self.naive = config.clm_implementation == "naive"
        self.unseen_rule = config.clm_unseen_pair
        self.routing_strategy = config.routing_strategy
        self.dropout = config.dropout if config.clm_dropout is None else config.clm_dropout
        self.pre_norm = getattr(config, "clm_norm", "post") == "pre"
        layers = config.encoder_layers if side == "encoder" else config.decoder_layers
        self.num_keys = len(config.language_pairs) if key == "pair" else config.num_languages
        k = config.clm_num_features
        if variant == "ls":  # one language-specific map per key, no gate
            self.weight = nn.Parameter(torch.empty(self.num_keys, d, d))
            self.gate = None
        else:
            self.weight = nn.Parameter(torch.empty(k, d, d))
            gate_shape = (layers, d, k) if variant == "sclm" else (layers, self.num_keys, d, k)
            self.gate = nn.Parameter(torch.empty(gate_shape))
        self.recorder: list | None = None  # set by the ATP analysis (section 5.1) to collect proportions
        self.layer_norms = nn.ModuleList(nn.ModuleDict({s: nn.LayerNorm(d) for s in sublayers}) for _ in range(layers))
        self.languages = list(config.languages)
        self.pair_index = PairIndex(config.languages, config.language_pairs)
        self._by_target: dict[torch.device, torch.Tensor] = {}

    def _pairs_into(self, device: torch.device) -> torch.Tensor:
        """`[L, n_pairs]`: one-hot of the trained pairs into each target language (built per device on first use)."""
        if device not in self._by_target:
            by_target = torch.zeros(len(self.languages), len(self.pair_index))
            for i, (_, tgt) in enumerate(self.pair_index.pairs):
                by_target[tgt, i] = 1.0
            self._by_target[device] = by_target.to(device)
        return self._by_target[device]

    def initialize(self, init, config) -> None:
        # Xavier-uniform per d x d map and per d x k gate (fairseq's Linear initialisation); with
        # clm_map_init="zeros" the maps start at 0, so the module starts as z = LN(h) and the gates still
        # differ (their gradient reaches them once the maps have moved)
        d = self.weight.shape[-1]
        if config.clm_map_init == "zeros":
            init.zeros_(self.weight)
        else:
            init.uniform_(self.weight, -math.sqrt(3.0 / d), math.sqrt(3.0 / d))
        if self.gate is not None:
            bound = math.sqrt(6.0 / (self.gate.shape[-2] + self.gate.shape[-1]))
            init.uniform_(self.gate, -bound, bound)
        for norms in self.layer_norms:
            for norm in norms.values():
                init.ones_(norm.weight)
                init.zeros_(norm.bias)

    def identity_problem(self) -> str | None:
        """The paper's form, `LN(h + mix)`, puts a LayerNorm on the stream after every sublayer."""
        return (
            None if self.pre_norm else "CLM's form z = LN(h + mix) (eq. 3) renormalises the stream; use clm_norm='pre'"
        )

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """Zero the maps: the pre-LN form `h + mix(LN(h))` adds `0` to the stream."""
        self.weight.zero_()

    # ------------------------------------------------------------------ keys
    def _keys(self, lang: LanguageContext) -> _Keys:
        cache_key = (id(self), "keys")
        if cache_key in lang.scratch:  # once per forward, shared by every layer
            return lang.scratch[cache_key]
        needed_by = f"{'mCLM' if self.variant == 'mclm' else 'the LS ablation'} keyed by {self.key}"
        mix = None
        if self.key == "source":
            ids = lang.ids("source", needed_by)
        elif self.key == "target":
            ids = lang.ids("target", needed_by)
        else:
            src, tgt = lang.ids("source", needed_by), lang.ids("target", needed_by)
            ids = self.pair_index.ids(src, tgt)
            unseen = ids < 0
            # a sync-free step trains on trained pairs only (the device's index kernels assert on a -1); the mean
            # over a target's pairs needs the unseen pairs' targets, read back
            if (not sync_free(ids) or self.unseen_rule != "error") and bool(unseen.any()):
                ids, mix = self._resolve_unseen(ids, unseen, src, tgt)
        keys = _Keys(ids, mix, self.routing_strategy, self.num_keys)
        lang.scratch[cache_key] = keys
        return keys

    def _resolve_unseen(self, ids, unseen, src, tgt) -> tuple[torch.Tensor, torch.Tensor]:
        names = self.pair_index.names(src[unseen], tgt[unseen])
        if self.unseen_rule == "error":
            raise ValueError(
                f"mCLM keyed by language pair has no parameters for {names}: they are not in config.language_pairs "
                f"({len(self.pair_index)} trained pairs). Set clm_unseen_pair='target_mean' to use the mean of the "
                "trained pairs into the same target language, or key the decoder by target (clm_decoder_key='target')."
            )
        by_target = self._pairs_into(src.device)
        targets = torch.unique(tgt[unseen])
        counts = by_target[targets].sum(-1)
        if bool((counts == 0).any()):
            missing = [self.languages[t] for t in targets[counts == 0].tolist()]
            raise ValueError(
                f"clm_unseen_pair='target_mean' needs a trained pair into {missing}; none is in language_pairs."
            )
        mix = by_target[targets] / counts.unsqueeze(1)
        slot = torch.searchsorted(targets, tgt)
        return torch.where(unseen, self.num_keys + slot, ids), mix

    # ------------------------------------------------------------------ forward
    def proportions(self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int) -> torch.Tensor:
        """Equation 1 for every token: `[B, T, k]` (sCLM and mCLM)."""
        if self.variant == "sclm":
            logits = hidden @ self.gate[layer_idx]
        else:
            keys = self._keys(lang)
            logits = keys.router.matmul(hidden, keys.table(self.gate[layer_idx]))
        return feature_proportions(logits, self.alpha, self.top_w, self.renormalize)

    def forward(
        self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int, sublayer: str = "ffn"
    ) -> torch.Tensor:
        norm = self.layer_norms[layer_idx][sublayer]
        source = norm(hidden) if self.pre_norm else hidden  # what the gate and the maps read
        if self.variant == "ls":
            keys = self._keys(lang)
            mixed = keys.router.matmul(source, keys.table(self.weight))
        else:
            proportions = self.proportions(source, lang, layer_idx)
            if self.recorder is not None:
                self.recorder.append((layer_idx, sublayer, proportions.detach()))
            mix = feature_mix_naive if self.naive else feature_mix
            flat = source.reshape(-1, source.shape[-1])
            mixed = mix(flat, proportions.reshape(flat.shape[0], -1), self.weight).view_as(hidden)
        mixed = F.dropout(mixed, p=self.dropout, training=self.training)
        return hidden + mixed if self.pre_norm else norm(hidden + mixed)


__all__ = [
    "CLM_KEYS",
    "CLM_MAP_INITS",
    "CLM_NORMS",
    "CLM_VARIANTS",
    "CrossLingualMixing",
    "FeatureMix",
    "feature_mix",
    "feature_mix_naive",
    "feature_proportions",
]
