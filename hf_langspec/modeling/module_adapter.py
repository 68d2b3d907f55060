"""The adapter family: one stacked adapter module shared by HLT-MT's pool and the adapter baselines.

:class:`BottleneckAdapters` holds ``S x K`` adapters (S slots, for example layers, and K keys, for
example languages) stacked along leading axes, applied per example through the routing primitive:

* ``norm="pre"`` (Bapna & Firat 2019):    ``h + W2 act(W1 LN(h) + b1) + b2``
* ``norm="post"`` (HLT-MT's equation 4): ``LN(h + W2 act(W1 h + b1) + b2)``
* ``norm="none"``:                       ``h + W2 act(W1 h + b1) + b2``
* ``form="matrix"`` (the LAA paper's monolingual-adapter baseline, section 5.3: "we omit the
  bottleneck dimension and activation function ... and adopt a matrix as the adapter"): ``h + h W``
  with one d x d matrix, and the chosen norm around it.

Each LayerNorm has its own weight and bias per adapter. Weights are Xavier-uniform and biases zero
(fairseq's `Linear`), as the papers train the adapters from scratch with the model.

:class:`LanguageAdapters` puts them in a stack of the backbone: after every layer (the ``ffn_out``
point) or once after the stack (``enc_out`` / ``dec_top``), one adapter per key and per layer, or one
per key shared by every layer. The key of an example is its language (the source language in the
encoder and the target language in the decoder: monolingual adapters, Philip et al. 2020) or its
direction (`config.language_pairs`: language-pair adapters, Bapna & Firat 2019). FLOPs per token
and adapter: ``4 d b`` (bottleneck b) or ``2 d^2`` (matrix); parameters per adapter
``2 d b + b + 3 d`` or ``d^2 + 2 d``.
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
    PairIndex,
    decoding_cache,
    layer_slice,
    sync_free,
)

ADAPTER_NORMS = ("pre", "post", "none")
ADAPTER_FORMS = ("bottleneck", "matrix")


class BottleneckAdapters(nn.Module):
    """``slots x keys`` adapters of width ``d_model`` and inner size ``inner_dim``, stacked.

    Args:
        slots: independent groups (layers); `forward` picks one.
        keys: adapters per slot; each example picks one through a router over `[B]` key ids.
        d_model: the hidden size.
        inner_dim: the bottleneck size (ignored by `form="matrix"`, whose matrix is d x d).
        norm: `"pre"`, `"post"` or `"none"` (see the module docstring).
        activation: `"relu"` or `"gelu"`.
        form: `"bottleneck"` or `"matrix"`.
    """

    def __init__(
        self,
        slots: int,
        keys: int,
        d_model: int,
        inner_dim: int,
        norm: str = "pre",
        activation: str = "relu",
        form: str = "bottleneck",
    ):
        super().__init__()
        if norm not in ADAPTER_NORMS or form not in ADAPTER_FORMS or activation not in ("relu", "gelu"):
            raise ValueError(
                f"adapter norm={norm!r}, form={form!r}, activation={activation!r}: use a norm of {ADAPTER_NORMS}, "
                f"a form of {ADAPTER_FORMS} and 'relu' or 'gelu'."
            )
        self.form, self.norm, self.keys = form, norm, keys
        inner = d_model if form == "matrix" else inner_dim
        self.fc1 = nn.Parameter(torch.empty(slots, keys, d_model, inner))
        if form == "bottleneck":
            self.fc1_bias = nn.Parameter(torch.empty(slots, keys, inner))
            self.fc2 = nn.Parameter(torch.empty(slots, keys, inner, d_model))
            self.fc2_bias = nn.Parameter(torch.empty(slots, keys, d_model))
        if norm != "none":
            self.norm_weight = nn.Parameter(torch.empty(slots, keys, d_model))
            self.norm_bias = nn.Parameter(torch.empty(slots, keys, d_model))
        self.activation = F.relu if activation == "relu" else F.gelu
        self._parameter_names = tuple(name for name, _ in self.named_parameters(recurse=False))
        self._gathered: dict[tuple[int, str], GatheredWeights] = {}  # decoding: per-example weights gathered once

    def initialize(self, init, config=None) -> None:
        d, inner = self.fc1.shape[-2:]
        bound = math.sqrt(6.0 / (d + inner))
        init.uniform_(self.fc1, -bound, bound)
        if self.form == "bottleneck":
            init.uniform_(self.fc2, -bound, bound)
            init.zeros_(self.fc1_bias)
            init.zeros_(self.fc2_bias)
        if self.norm != "none":
            init.ones_(self.norm_weight)
            init.zeros_(self.norm_bias)

    def identity_problem(self) -> str | None:
        """Why this module cannot start as the identity (a post-norm adapter renormalises the stream), or None."""
        return (
            "post-norm adapters (LN(h + delta)) renormalise the stream at zero delta" if self.norm == "post" else None
        )

    @torch.no_grad()
    def start_as_identity(self) -> None:
        """Zero the last matrix (and bias) on the residual branch: `h + 0 = h`, as LoRA starts its B at zero."""
        for name in ("fc2", "fc2_bias") if self.form == "bottleneck" else ("fc1",):
            getattr(self, name).zero_()

    def _layer_norm(self, hidden: torch.Tensor, router: LanguageRouter, w: dict[str, torch.Tensor]) -> torch.Tensor:
        normed = F.layer_norm(hidden, hidden.shape[-1:])
        shape = (-1,) + (1,) * (hidden.dim() - 2) + (hidden.shape[-1],)
        return normed * router.lookup(w["norm_weight"]).view(shape) + router.lookup(w["norm_bias"]).view(shape)

    def forward(
        self, hidden: torch.Tensor, router: LanguageRouter, slot: int = 0, scratch: dict | None = None
    ) -> torch.Tensor:
        """Each example's adapter `router.lang_ids[b]` of `slot` applied to `hidden` `[B, ..., d]`.

        `scratch`: the forward's `LanguageContext.scratch`, so that the slots are split once (`layer_slice`).
        """
        cache = {name: decoding_cache(self._gathered, (slot, name)) for name in ("fc1", "fc2")}
        w = {name: layer_slice(getattr(self, name), slot, scratch) for name in self._parameter_names}
        x = self._layer_norm(hidden, router, w) if self.norm == "pre" else hidden
        if self.form == "matrix":
            delta = router.matmul(x, w["fc1"], cache=cache["fc1"])
        else:
            inner = self.activation(router.matmul(x, w["fc1"], w["fc1_bias"], cache=cache["fc1"]))
            delta = router.matmul(inner, w["fc2"], w["fc2_bias"], cache=cache["fc2"])
        out = hidden + delta
        return self._layer_norm(out, router, w) if self.norm == "post" else out


class LanguageAdapters(nn.Module):
    """Per-language (or per-direction) adapters in one stack, after every layer or once after the stack.

    Args:
        config: an `AdapterConfig`.
        side: `"encoder"` or `"decoder"`; the language key reads the source language in the encoder and the
            target language in the decoder.
    """

    def __init__(self, config, side: str):
        super().__init__()
        self.side = side
        self.key = config.adapter_key
        self.pair_index = PairIndex(config.languages, config.language_pairs)
        keys = len(self.pair_index) if self.key == "pair" else config.num_languages
        layers = config.encoder_layers if side == "encoder" else config.decoder_layers
        self.per_layer = config.adapter_position == "layers" and not config.adapter_share_layers
        self.adapters = BottleneckAdapters(
            layers if self.per_layer else 1,
            keys,
            config.d_model,
            config.adapter_dim,
            norm=config.adapter_norm,
            activation=config.adapter_activation,
            form=config.adapter_form,
        )

    def key_ids(self, lang: LanguageContext) -> torch.Tensor:
        """`[B]` adapter keys: the example's language on this side, or its direction's index."""
        role = "source" if self.side == "encoder" else "target"
        if self.key == "language":
            return lang.ids(role, needed_by=f"the {self.side}'s language adapters (the {role} language)")
        src = lang.ids("source", needed_by="language-pair adapters (the source language)")
        tgt = lang.ids("target", needed_by="language-pair adapters (the target language)")
        ids = self.pair_index.ids(src, tgt)
        if not sync_free(ids) and bool((ids < 0).any()):  # a sync-free step: the adapters' index kernels assert
            unseen = self.pair_index.names(src[ids < 0], tgt[ids < 0])
            raise ValueError(
                f"Language-pair adapters have no adapter for {unseen}: they are not in config.language_pairs. "
                "Pair adapters only cover trained directions; key the adapters by language "
                "(adapter_key='language', Philip et al.'s monolingual adapters) to translate zero-shot."
            )
        return ids

    def prepare(self, lang: LanguageContext, hidden: torch.Tensor) -> None:
        # one router per forward, shared by every layer (group indexes are computed once)
        lang.scratch[id(self)] = LanguageRouter(self.key_ids(lang), self.adapters.keys, lang.routing_strategy)

    def forward(self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int | None = None) -> torch.Tensor:
        router = lang.scratch.get(id(self))
        if router is None:  # called outside a stack forward (tests, analyses)
            self.prepare(lang, hidden)
            router = lang.scratch[id(self)]
        return self.adapters(hidden, router, layer_idx if self.per_layer else 0, lang.scratch)


__all__ = ["ADAPTER_FORMS", "ADAPTER_NORMS", "BottleneckAdapters", "LanguageAdapters"]
