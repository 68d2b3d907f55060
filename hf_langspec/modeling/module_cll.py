"""CLL: the central-language-aware layer (Qu & Watanabe 2022, equation 3), at the `dec_ffn` insertion point.

In a CLL decoder layer the FFN sublayer becomes

    FFN(h) + t_l LSL_l(h)    for a non-central target language l,      FFN(h)    for the central one,

where h is the FFN's own input, LSL_l(h) = W2_l ReLU(W1_l h + b1_l) + b2_l is a small language-specific
FFN and t_l a learned scalar per language and layer, initialised to 0.1. As in the authors' code the
branch has its own dropout and joins the residual sum next to the FFN's output:
`LN(h + Dropout(FFN(h)) + Dropout_cll(t_l LSL_l(h)))` (post-norm). The language is the target
language of each example. Without a central language (the paper's non-centred Triangle and Square
settings) every language has an LSL.

Parameters per CLL layer: L' (2 d m + m + d + 1) for L' non-central languages and inner size m.
Only the rows of examples with a non-central target go through the LSLs, grouped by language. At
inference on a batch of one target language the LSL is folded into the FFN (`folded_ffn`): one wider FFN.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .routing import (
    GatheredWeights,
    LanguageContext,
    LanguageRouter,
    decoding_cache,
    layer_slice,
    sync_free,
    weights_stamp,
)


class CentralLanguageAwareLayers(nn.Module):
    """The LSLs and scales t_l of the decoder layers listed in `layers` (one module for the stack).

    Args:
        config: a `CLLConfig`.
        layers: decoder layer indexes with a CLL.
    """

    def __init__(self, config, layers: list[int]):
        super().__init__()
        d, m = config.d_model, config.cll_inner_dim
        self.languages = list(config.languages)
        self.central = config.central_language
        self.specific = [code for code in self.languages if code != self.central]  # languages with an LSL
        self.layers = list(layers)
        n, count = len(self.layers), len(self.specific)
        self.fc1 = nn.Parameter(torch.empty(n, count, d, m))
        self.fc1_bias = nn.Parameter(torch.empty(n, count, m))
        self.fc2 = nn.Parameter(torch.empty(n, count, m, d))
        self.fc2_bias = nn.Parameter(torch.empty(n, count, d))
        self.scale = nn.Parameter(torch.empty(n, count))  # t_l
        self.scale_init = config.cll_scale_init
        self.dropout = config.cll_dropout
        self.disabled: set[str] = set()  # languages whose LSL is dropped at inference (Tables 9-10)
        self.frozen: set[str] = set(config.cll_frozen_languages)  # no gradient (new-language integration)
        self._slot = {layer: i for i, layer in enumerate(self.layers)}
        self._row: dict[torch.device, torch.Tensor] = {}
        self._gathered: dict[tuple[int, str], GatheredWeights] = {}  # decoding: per-example LSLs gathered once
        self._ffn_is_relu = config.activation_function == "relu"  # the LSL's activation (equation 2)
        self._folded: dict[int, tuple[tuple, tuple[torch.Tensor, ...]]] = {}  # per layer: (stamp, wider FFN)

    def initialize(self, init, config) -> None:
        d, m = self.fc1.shape[-2:]
        # fairseq's Linear: Xavier-uniform weights and zero biases, per language
        init.uniform_(self.fc1, -math.sqrt(6.0 / (d + m)), math.sqrt(6.0 / (d + m)))
        init.uniform_(self.fc2, -math.sqrt(6.0 / (d + m)), math.sqrt(6.0 / (d + m)))
        init.zeros_(self.fc1_bias)
        init.zeros_(self.fc2_bias)
        init.constant_(self.scale, self.scale_init)

    PARAMETERS = ("fc1", "fc1_bias", "fc2", "fc2_bias", "scale")

    def _weights(self, slot: int, scratch: dict | None = None) -> dict[str, torch.Tensor]:
        """The slot's parameters; rows of frozen languages detached (robust to from_pretrained and optimizers)."""
        weights = {name: layer_slice(getattr(self, name), slot, scratch) for name in self.PARAMETERS}
        if not self.frozen:
            return weights
        mask = torch.tensor([code in self.frozen for code in self.specific], device=self.scale.device)
        return {name: torch.where(mask.view(-1, *([1] * (w.dim() - 1))), w.detach(), w) for name, w in weights.items()}

    @torch.no_grad()
    def add_language(self, code: str, languages: list[str]) -> None:
        """Give `code` an LSL and a t_l initialised as the mean of the existing languages' (section 4.4)."""
        for name in self.PARAMETERS:
            old = getattr(self, name)
            mean = old.mean(dim=1, keepdim=True)
            setattr(self, name, nn.Parameter(torch.cat([old, mean], dim=1), requires_grad=old.requires_grad))
        self.languages = list(languages)
        self.specific.append(code)
        self._row.clear()

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """Zero each LSL's output matrix and bias: the FFN's output plus `t_l * 0` (the scale t_l keeps its start)."""
        self.fc2.zero_()
        self.fc2_bias.zero_()

    def row_of(self, device: torch.device) -> torch.Tensor:
        """`[L]`: each language's LSL row, -1 for the central language (built per device on first use)."""
        if device in self._row:
            return self._row[device]
        rows = [self.specific.index(code) if code in self.specific else -1 for code in self.languages]
        row = torch.tensor(rows, device=device)
        if not torch.compiler.is_compiling():  # stored inside a graph, the dict it guards on would recompile it
            self._row[device] = row
        return row

    def folded_ffn(self, layer: nn.Module, lang: LanguageContext, layer_idx: int) -> tuple[torch.Tensor, ...] | None:
        """Inference on a batch of one target language with an LSL: `FFN + t_l LSL_l` as one wider FFN.

        ReLU([h W1 + b1, h W1_l + b1_l]) [W2; t_l W2_l] + b2 + t_l b2_l is equation 3 for that language (in
        `nn.Linear` layout: fc1 `[inner + m, d]`, fc2 `[d, inner + m]`), so a decoding step runs two matmuls
        instead of four plus the routing. Needs a ReLU backbone FFN; cached per layer until a weight changes.
        Returns None where it does not apply (training, mixed batches, the central or a dropped language).
        """
        if torch.is_grad_enabled() or self.training or not self._ffn_is_relu or layer_idx not in self._slot:
            return None
        language = lang.router("target", needed_by="CLL (the target language's LSL)").single_language()
        code = self.languages[language] if language is not None else None
        if code is None or code not in self.specific or code in self.disabled:
            return None
        slot, row = self._slot[layer_idx], self.specific.index(code)
        own = [getattr(self, name) for name in self.PARAMETERS]
        stamp = (row, weights_stamp(layer.fc1.weight, layer.fc1.bias, layer.fc2.weight, layer.fc2.bias, *own))
        hit = self._folded.get(layer_idx)
        if hit is None or hit[0] != stamp:
            t = self.scale[slot, row]
            hit = (
                stamp,
                (
                    torch.cat([layer.fc1.weight, self.fc1[slot, row].t()]),
                    torch.cat([layer.fc1.bias, self.fc1_bias[slot, row]]),
                    torch.cat([layer.fc2.weight, t * self.fc2[slot, row].t()], dim=1),
                    layer.fc2.bias + t * self.fc2_bias[slot, row],
                ),
            )
            self._folded[layer_idx] = hit
        return hit[1]

    def forward(self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int) -> torch.Tensor:
        """The term added next to the FFN output: `t_l LSL_l(h)`, zero for central-language examples."""
        if layer_idx not in self._slot:
            return torch.zeros_like(hidden)
        slot = self._slot[layer_idx]
        key = (id(self), "rows")
        if key not in lang.scratch:  # which examples have an LSL, computed once per forward
            tgt = lang.ids("target", needed_by="CLL (the target language's LSL)")
            rows = self.row_of(tgt.device).index_select(0, tgt)
            for code in self.disabled:
                rows = rows.masked_fill(tgt == self.languages.index(code), -1)
            if sync_free(tgt):  # static shapes: every row computes, central rows are zeroed below
                router = LanguageRouter(rows.clamp(min=0), len(self.specific), lang.routing_strategy)
                lang.scratch[key] = (rows >= 0, router)
            else:
                keep = (rows >= 0).nonzero().squeeze(1)
                router = LanguageRouter(rows.index_select(0, keep), len(self.specific), lang.routing_strategy)
                lang.scratch[key] = (keep, router)
        keep, router = lang.scratch[key]
        if keep.dtype == torch.bool:  # the compiled path's mask of the rows that have an LSL
            return self._term(hidden, slot, lang, router) * keep.view(-1, *([1] * (hidden.dim() - 1)))
        if keep.numel() == 0:
            return torch.zeros_like(hidden)
        every_row = keep.numel() == hidden.shape[0]  # no central-language example: no selection needed
        term = self._term(hidden if every_row else hidden.index_select(0, keep), slot, lang, router)
        return term if every_row else torch.zeros_like(hidden).index_copy(0, keep, term)

    def _term(self, x: torch.Tensor, slot: int, lang: LanguageContext, router: LanguageRouter) -> torch.Tensor:
        """`t_l LSL_l(x)` with dropout, for rows `x` whose languages `router` holds."""
        w = self._weights(slot, lang.scratch)
        cache = {name: decoding_cache(self._gathered, (slot, name)) for name in ("fc1", "fc2")}
        inner = F.relu(router.matmul(x, w["fc1"], w["fc1_bias"], cache=cache["fc1"]))
        lsl = router.matmul(inner, w["fc2"], w["fc2_bias"], cache=cache["fc2"])
        scaled = lsl * router.lookup(w["scale"]).view(-1, *([1] * (lsl.dim() - 1)))
        return F.dropout(scaled, p=self.dropout, training=self.training)


__all__ = ["CentralLanguageAwareLayers"]
