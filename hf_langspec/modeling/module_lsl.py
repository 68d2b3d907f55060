"""Language-specific Transformer layers (LSL; Pires et al. 2023, "Learning Language-Specific Layers for Multilingual
Machine Translation", ACL).

An LSL is one regular Transformer layer per language; each example runs through the layer of its source or its
target language: `LSL(x) = sum_l 1[lang(x) = l] Layer_l(x)`. Here the layers of one position are one layer whose
every weight is stacked over the languages (`per_language_weight [L, d_in, d_out]`, `per_language_bias [L, d_out]`,
the LayerNorms' `[L, d]`) and applied through the package's router, so a batch mixing directions runs each example
through its own language's layer without a Python loop over examples, in training and in beam search, and the
computation per token is the shared layer's (the router's `group` path: one matmul of each language's rows;
`gather` copies the examples' weights instead, `routing`).

Parameters per LSL position: L times the shared layer's (`L - 1` layers added); extra FLOPs per token: none.
The layers reuse the backbone's layer code (`backbone._Sublayers`): only the projections and the LayerNorms change,
so post-/pre-norm, dropout, the KV cache and gradient checkpointing behave as in the shared layers.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import LangSpecAttention, LangSpecDecoderLayer, LangSpecEncoderLayer
from .routing import LanguageContext, decoding_cache

LANGUAGE_SIDES = ("source", "target")
OUTSIDE_THE_LAYERS = ("embed", "enc_out", "dec_top")  # insertion points that act outside every layer


class LanguageSpecificLinear(nn.Module):
    """`y = x W_l + b_l` with `l` each example's language: one `nn.Linear(d_in, d_out)` per language, stacked."""

    def __init__(self, num_languages: int, d_in: int, d_out: int, side: str, init_gain: float = 1.0):
        super().__init__()
        self.side = side
        self.init_gain = init_gain
        self.per_language_weight = nn.Parameter(torch.empty(num_languages, d_in, d_out))
        self.per_language_bias = nn.Parameter(torch.empty(num_languages, d_out))
        self._caches: dict = {}

    def initialize(self, init, config=None) -> None:
        # each language's matrix as the shared nn.Linear's (fairseq: Xavier-uniform over d_in + d_out, zero bias)
        d_in, d_out = self.per_language_weight.shape[1:]
        bound = self.init_gain * math.sqrt(6.0 / (d_in + d_out))
        init.uniform_(self.per_language_weight, -bound, bound)
        init.zeros_(self.per_language_bias)

    def forward(self, x: torch.Tensor, lang: LanguageContext) -> torch.Tensor:
        router = lang.router(self.side, needed_by=f"a language-specific layer (indexed by the {self.side} language)")
        cache = decoding_cache(self._caches, "weight")  # decoding steps reuse gathered weights (inference only)
        return router.matmul(x, self.per_language_weight, self.per_language_bias, cache)

    def plain(self, language: int) -> dict[str, torch.Tensor]:
        """Language `language`'s weights as an `nn.Linear`'s state (`weight [d_out, d_in]`, `bias`): folding."""
        return {"weight": self.per_language_weight[language].t(), "bias": self.per_language_bias[language]}

    @torch.no_grad()
    def copy_shared(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """Every language's layer set to one shared `nn.Linear`'s `weight [d_out, d_in]` and `bias`."""
        self.per_language_weight.copy_(weight.t().unsqueeze(0).expand_as(self.per_language_weight))
        self.per_language_bias.copy_(bias.unsqueeze(0).expand_as(self.per_language_bias))


class LanguageSpecificLayerNorm(nn.Module):
    """`LayerNorm` with each language's own gain and bias (`[L, d]`), eps as `nn.LayerNorm`'s default."""

    def __init__(self, num_languages: int, d_model: int, side: str, eps: float = 1e-5):
        super().__init__()
        self.side = side
        self.eps = eps
        self.per_language_weight = nn.Parameter(torch.empty(num_languages, d_model))
        self.per_language_bias = nn.Parameter(torch.empty(num_languages, d_model))

    def initialize(self, init, config=None) -> None:
        init.ones_(self.per_language_weight)
        init.zeros_(self.per_language_bias)

    def forward(self, x: torch.Tensor, lang: LanguageContext) -> torch.Tensor:
        router = lang.router(self.side, needed_by=f"a language-specific layer (indexed by the {self.side} language)")
        normed = F.layer_norm(x, x.shape[-1:], eps=self.eps)
        gain, bias = router.lookup(self.per_language_weight), router.lookup(self.per_language_bias)
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        return normed * gain.view(shape) + bias.view(shape)

    def plain(self, language: int) -> dict[str, torch.Tensor]:
        return {"weight": self.per_language_weight[language], "bias": self.per_language_bias[language]}

    @torch.no_grad()
    def copy_shared(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        self.per_language_weight.copy_(weight.unsqueeze(0).expand_as(self.per_language_weight))
        self.per_language_bias.copy_(bias.unsqueeze(0).expand_as(self.per_language_bias))


LANGUAGE_SPECIFIC_MODULES = (LanguageSpecificLinear, LanguageSpecificLayerNorm)


class LanguageSpecificAttention(LangSpecAttention):
    """[`LangSpecAttention`] with q, k, v and the output projection of each example's language. An attention hook
    (LAA, LoRA) still adds its term; a hook's folded weight cannot replace a per-language one and is not asked."""

    def __init__(self, config, num_heads: int, layer_idx: int, side: str):
        super().__init__(config, num_heads, layer_idx)
        d, languages = config.d_model, config.num_languages
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            gain = getattr(getattr(self, name), "init_gain", 1.0)  # fairseq's 1/sqrt(2) on q, k, v
            setattr(self, name, LanguageSpecificLinear(languages, d, d, side, gain))

    def _project(self, linear: LanguageSpecificLinear, x, hook, lang, name):
        out = linear(x, lang)
        return out if hook is None else out + hook(x, lang, self.layer_idx, name)


class _LanguageSpecificSublayers:
    """What LSL changes in a backbone layer: per-language FFN matrices and LayerNorms (mixed into the layer class)."""

    def _make_language_specific(self, config, side: str, ffn_dim: int, norms: tuple[str, ...]) -> None:
        d, languages = config.d_model, config.num_languages
        self.language_side = side
        self.fc1 = LanguageSpecificLinear(languages, d, ffn_dim, side)
        self.fc2 = LanguageSpecificLinear(languages, ffn_dim, d, side)
        for name in norms:
            setattr(self, name, LanguageSpecificLayerNorm(languages, d, side))

    def _norm(self, norm, hidden, lang):
        return norm(hidden, lang)

    def _sorted_context(self, lang: LanguageContext, slots: dict, cached: bool):
        """`(context, order, inverse)` to run this layer on its rows put in language order once, or None.

        Where the router would group rows by language at each of the layer's six matmuls (and look up its norms),
        sorting the rows once at the layer's input and once at its output is cheaper (measured on the CPU: a
        routed d x 4d matmul of 32 x 32 rows, 6 languages, forward and backward: 6.7 ms grouped each time, 4.3 ms
        presorted, 2.8 ms shared). Not when another module acts inside the layer (it may hold per-example state
        in batch order) or a decoding cache holds the batch's order."""
        if cached or any(point not in OUTSIDE_THE_LAYERS for point in slots):
            return None
        router = lang.router(self.language_side, needed_by=f"a language-specific layer ({self.language_side})")
        fc1 = self.fc1.per_language_weight
        if router.choose(*fc1.shape[1:]) != "group" or router.single_language() is not None:
            return None
        return lang.sorted_by(self.language_side)

    def feed_forward(self, x: torch.Tensor, hook: nn.Module | None = None, lang=None) -> torch.Tensor:
        inner = self.fc1(x, lang)
        if hook is not None:
            inner = inner + hook(x, lang, self.layer_idx, "fc1")
        inner = F.dropout(self.activation_fn(inner), p=self.activation_dropout, training=self.training)
        out = self.fc2(inner, lang)
        return out if hook is None else out + hook(inner, lang, self.layer_idx, "fc2")


class LanguageSpecificEncoderLayer(_LanguageSpecificSublayers, LangSpecEncoderLayer):
    """An encoder layer per language (`side`: indexed by the "source" or the "target" language)."""

    def __init__(self, config, layer_idx: int, side: str):
        super().__init__(config, layer_idx)
        self.self_attn = LanguageSpecificAttention(config, config.encoder_attention_heads, layer_idx, side)
        self._make_language_specific(
            config, side, config.encoder_ffn_dim, ("self_attn_layer_norm", "final_layer_norm")
        )

    def forward(self, hidden_states, attention_mask, lang: LanguageContext, slots):
        sorted_ = self._sorted_context(lang, slots, cached=False)
        if sorted_ is None:
            return super().forward(hidden_states, attention_mask, lang, slots)
        context, order, inverse = sorted_
        mask = None if attention_mask is None else attention_mask.index_select(0, order)
        return super().forward(hidden_states.index_select(0, order), mask, context, slots).index_select(0, inverse)


class LanguageSpecificDecoderLayer(_LanguageSpecificSublayers, LangSpecDecoderLayer):
    """A decoder layer per language; its cross-attention's keys and values too are the example's language's."""

    def __init__(self, config, layer_idx: int, side: str):
        super().__init__(config, layer_idx)
        heads = config.decoder_attention_heads
        self.self_attn = LanguageSpecificAttention(config, heads, layer_idx, side)
        self.encoder_attn = LanguageSpecificAttention(config, heads, layer_idx, side)
        self._make_language_specific(
            config,
            side,
            config.decoder_ffn_dim,
            ("self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"),
        )

    def forward(self, hidden_states, self_attn_mask, is_causal, encoder_hidden_states, encoder_attention_mask,
                past_key_values, lang: LanguageContext, slots):  # fmt: skip
        sorted_ = self._sorted_context(lang, slots, cached=past_key_values is not None)
        if sorted_ is None:
            return super().forward(hidden_states, self_attn_mask, is_causal, encoder_hidden_states,
                                   encoder_attention_mask, past_key_values, lang, slots)  # fmt: skip
        context, order, inverse = sorted_

        def rows(tensor):  # masks may broadcast over the batch ([1, 1, T, S])
            return tensor if tensor is None or tensor.shape[0] == 1 else tensor.index_select(0, order)

        out = super().forward(rows(hidden_states), rows(self_attn_mask), is_causal, rows(encoder_hidden_states),
                              rows(encoder_attention_mask), None, context, slots)  # fmt: skip
        return out.index_select(0, inverse)


class LanguageSpecificSearchLayer(nn.Module):
    """The paper's architecture search at one encoder position: `sum_k softmax(alpha)_k Layer_k(x)` over a shared
    layer, a source-indexed LSL and a target-indexed LSL (section 3; the mix is trained with the model, then each
    position takes its largest weight). Three layers' compute; an analysis, not a model to serve."""

    CHOICES = ("shared", "source", "target")

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.shared = LangSpecEncoderLayer(config, layer_idx)
        self.source = LanguageSpecificEncoderLayer(config, layer_idx, "source")
        self.target = LanguageSpecificEncoderLayer(config, layer_idx, "target")
        self.choice_logits = nn.Parameter(torch.zeros(len(self.CHOICES)))

    def initialize(self, init, config=None) -> None:
        init.zeros_(self.choice_logits)  # the three choices start equally weighted

    def choice_weights(self) -> torch.Tensor:
        return torch.softmax(self.choice_logits, dim=0)

    def forward(self, hidden_states, attention_mask, lang: LanguageContext, slots):
        weights = self.choice_weights()
        layers = (self.shared, self.source, self.target)
        return sum(
            w * layer(hidden_states, attention_mask, lang, slots) for w, layer in zip(weights, layers, strict=True)
        )


__all__ = [
    "LANGUAGE_SIDES",
    "LANGUAGE_SPECIFIC_MODULES",
    "LanguageSpecificAttention",
    "LanguageSpecificDecoderLayer",
    "LanguageSpecificEncoderLayer",
    "LanguageSpecificLayerNorm",
    "LanguageSpecificLinear",
    "LanguageSpecificSearchLayer",
]
