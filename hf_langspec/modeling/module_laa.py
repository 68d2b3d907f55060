"""LAA: language-aware multi-head attention (Jin & Xiong 2022, section 4, equations 3-7, appendix A).

A language is a d x d matrix W^lang, split by columns into the heads. It is added to the query, key
and value projections and its transpose to the output projection (equations 3 and 5):

    q = Q (W^Q + W^lang),  k = K (W^K + W^lang),  v = V (W^V + W^lang),  Z = z (W^O + (W^lang)^T)

computed as appendix A does (equations 6-7), without forming W + W^lang per example: the language term
`X W^lang` is computed once per input and cached (self-attention's q, k and v share it), and the
per-example matrices come from the routing primitive (gathered once per generation during decoding).
At inference on a batch of one target language (how `translate` batches a test set) the matrix is
folded into the projections instead, W + W^lang computed once, so decoding costs what the baseline costs.

Choices (the authors' code; ../shared/notes/reference_implementations.md): one matrix per language per
stack, shared by the stack's layers and by q, k and v (`laa_per_layer=True` gives one per layer); in the
decoder, self- and cross-attention share the matrices; cross-attention adds `encoder_out W^lang` to keys
and values with the decoder's matrix; the language is always the TARGET language, also in encoder
self-attention (`laa_encoder_language="source"` for the alternative); Xavier-uniform initialisation per
language slice. LAA^R (section 5.5) replaces each example's language by one drawn uniformly at random.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .routing import GatheredWeights, LanguageContext, LanguageRouter, decoding_cache, layer_slice, weights_stamp

LAA_POINTS = ("enc_self_attn", "dec_self_attn", "dec_cross_attn")


class LanguageAwareAttention(nn.Module):
    """The LAA matrices of one stack, used as the attention hook of its LAA points (`m(x, lang, i, p)`)."""

    def __init__(self, config, side: str):
        super().__init__()
        self.side = side
        d, languages = config.d_model, config.num_languages
        layers = config.encoder_layers if side == "encoder" else config.decoder_layers
        self.per_layer = config.laa_per_layer
        self.num_layers = layers
        shape = (layers, languages, d, d) if self.per_layer else (languages, d, d)
        self.weight = nn.Parameter(torch.empty(shape))
        self.language_side = config.laa_encoder_language if side == "encoder" else "target"
        self.override_ids: torch.Tensor | None = None  # LAA^R: per-example random languages, set by the model
        self._caches: dict[int | None, GatheredWeights] = {}
        self._folded: dict[tuple, tuple[tuple, torch.Tensor]] = {}  # per projection: (stamp, W + W^lang)

    def initialize(self, init, config) -> None:
        d = self.weight.shape[-1]
        bound = math.sqrt(6.0 / (2 * d))  # Xavier-uniform of each d x d slice (gain 1)
        init.uniform_(self.weight, -bound, bound)

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """Zero the language matrices: each projection is then the pretrained `W + 0`."""
        self.weight.zero_()

    def matrices(self, layer_idx: int | None, scratch: dict | None = None) -> torch.Tensor:
        """`[L, d, d]`: the matrices used in layer `layer_idx` (`scratch`: see `layer_slice`)."""
        return layer_slice(self.weight, layer_idx, scratch) if self.per_layer else self.weight

    def _ids(self, lang: LanguageContext) -> torch.Tensor:
        if self.override_ids is not None:
            return self.override_ids
        return lang.ids(self.language_side, needed_by=f"LAA in the {self.side} (the {self.language_side} language)")

    def _router(self, lang: LanguageContext) -> LanguageRouter:
        key = (id(self), "router")
        if key not in lang.scratch:
            lang.scratch[key] = LanguageRouter(self._ids(lang), self.weight.shape[-3], lang.routing_strategy)
        return lang.scratch[key]

    def _fold_language(self, lang: LanguageContext) -> int | None:
        """The batch's one language when its matrix can be folded into the projections (inference), else None."""
        if torch.is_grad_enabled() or self.override_ids is not None:
            return None
        return self._router(lang).single_language()

    def folded_weight(
        self, weight: torch.Tensor, lang: LanguageContext, layer_idx: int | None, projection: str
    ) -> torch.Tensor | None:
        """Inference on a batch of one language: the effective weight of equation 3, else None.

        `nn.Linear` computes x A^T, so q/k/v use A + (W^lang)^T and o uses A^O + W^lang: the weights a
        specialised model holds, which makes the language term free per decoding step. Computed once per
        projection and language, and recomputed when either weight changes (version or storage).
        """
        language = self._fold_language(lang)
        if language is None:
            return None
        matrix = self.matrices(layer_idx)[language]
        stamp = (language, weights_stamp(weight, self.weight))
        key = (weight.data_ptr(), projection)  # the self- and cross-attention projections of a layer differ
        hit = self._folded.get(key)
        if hit is None or hit[0] != stamp:
            hit = (stamp, weight + (matrix if projection == "o" else matrix.t()))
            self._folded[key] = hit
        return hit[1]

    def prepare(self, lang: LanguageContext, hidden: torch.Tensor) -> None:
        """Once per forward: gather each example's matrices when gathering is the routing choice (appendix A).

        The gather serves every layer (shared matrices), q/k/v and, transposed, o; at inference it is
        cached across decoding steps. Not needed when the projections fold the batch's one language.
        """
        router = self._router(lang)
        d = self.weight.shape[-1]
        uses = 2 if self.per_layer else 2 * self.num_layers  # the q/k/v term and the o term of each layer served
        if router.choose(d, d, uses) != "gather" or self._fold_language(lang) is not None:
            return
        gathered = {}
        for slot in range(self.weight.shape[0]) if self.per_layer else [None]:
            weight = self.matrices(slot, lang.scratch)
            cache = decoding_cache(self._caches, slot)
            cached = cache.get(weight, router.lang_ids, uses) if cache is not None else None
            gathered[slot] = cached if cached is not None else weight.index_select(0, router.lang_ids)
        lang.scratch[(id(self), "gathered")] = gathered

    def _times(self, x: torch.Tensor, lang: LanguageContext, layer_idx: int | None, transpose: bool) -> torch.Tensor:
        gathered = lang.scratch.get((id(self), "gathered"))
        if gathered is not None:
            g = gathered[layer_idx if self.per_layer else None]
            return torch.bmm(x, g.transpose(1, 2) if transpose else g)
        weight = self.matrices(layer_idx, lang.scratch)
        return self._router(lang).matmul(x, weight.transpose(1, 2) if transpose else weight)

    def forward(self, x: torch.Tensor, lang: LanguageContext, layer_idx: int | None, projection: str) -> torch.Tensor:
        if projection == "o":
            return self._times(x, lang, layer_idx, transpose=True)
        # q, k and v of one input share X W^lang (appendix A: computed first and cached)
        cache_key = (id(self), "last")
        last = lang.scratch.get(cache_key)
        if last is not None and last[0] is x and last[1] == layer_idx:
            return last[2]
        out = self._times(x, lang, layer_idx, transpose=False)
        lang.scratch[cache_key] = (x, layer_idx, out)
        return out


class SharedHook(nn.Module):
    """Routes a second insertion point to a module registered elsewhere (the decoder's LAA for cross-attention)."""

    def __init__(self, target: nn.Module):
        super().__init__()
        object.__setattr__(self, "target", target)  # not a submodule: its parameters are saved once

    def forward(self, *args, **kwargs):
        return self.target(*args, **kwargs)

    def folded_weight(self, *args) -> torch.Tensor | None:
        fold = getattr(self.target, "folded_weight", None)
        return fold(*args) if fold is not None else None


__all__ = ["LAA_POINTS", "LanguageAwareAttention", "SharedHook"]
