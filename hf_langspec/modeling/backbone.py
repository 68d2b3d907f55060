"""The shared encoder-decoder Transformer and its named insertion points.

One backbone serves every method: fairseq's `transformer` (Vaswani et al. 2017) as the papers
trained it, post-norm by default or pre-norm (`normalize_before`), with PyTorch SDPA attention
and an `EncoderDecoderCache`. Parameter names follow Marian/M2M100 so weights convert by name.

Language-specific modules plug into named insertion points. They live at the stack level
(`LangSpecEncoder.insertions` / `LangSpecDecoder.insertions`, an `nn.ModuleDict` keyed by point),
so a module can share parameters across layers (LAA, CLM's maps) or keep per-layer ones (CLL,
CLM's gates) and is told the `layer_idx` it is called from. Call protocols:

=================================================  =============================================
point                                              call and meaning
=================================================  =============================================
``embed``                                          ``h = m(h, lang, None)`` on scaled token embeddings, before positions
``enc_self_in`` ``enc_ffn_in`` ``dec_self_in``     ``h = m(h, lang, i)`` before the sublayer's residual branch point,
``dec_cross_in`` ``dec_ffn_in``                    so the change stays in the residual stream (LEE)
``enc_self_attn`` ``dec_self_attn``                ``delta = m(x, lang, i, p)`` added to projection ``p`` in
``dec_cross_attn``                                 ``q k v o`` (for ``o``, ``x`` is the attention output) (LAA)
``enc_ffn_proj`` ``dec_ffn_proj``                  ``delta = m(x, lang, i, p)`` added to ``fc1`` (``x``: the FFN input)
                                                   and ``fc2`` (``x``: the activation) (LoRA on the FFN)
``sublayer_out``                                   ``h = m(h, lang, i, s)`` after every sublayer ``s`` in
                                                   ``self_attn`` ``cross_attn`` ``ffn`` (CLM)
``ffn_out``                                        ``h = m(h, lang, i)`` after FFN sublayers only (CLM-top, adapters)
``dec_ffn``                                        ``delta = m(x, lang, i)`` added to the FFN output; ``x`` is the FFN input (CLL)
``enc_out``                                        ``h = m(h, lang, None)`` once on the encoder output (LEE)
``dec_top``                                        ``h = m(h, lang, None)`` after the last decoder layer (HLT-MT's SLP)
=================================================  =============================================

`lang` is the forward's :class:`~.routing.LanguageContext`. A module with a `prepare(lang, hidden)`
method gets it called once per stack forward, after the embeddings and before the layers: per-forward
work (gathering per-example matrices, looking up tag embeddings) done there is shared by every layer
and stays outside gradient-checkpointed layers. An empty `insertions` dict is the plain multilingual
Transformer (Johnson et al. 2017).

A variant may also replace whole layers (`LayerFactory`, `LangSpecModel.build_layer`): LSL's language-specific
layers are the shared layer's code with every weight stacked per language and applied through the router.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions

from .attention_masks import decoder_self_mask, padding_mask
from .configuration_langspec import LangSpecConfig
from .decoding_cache import cache_output, resolve_cache, static_cache_length
from .input_checks import check_encoder_inputs, check_no_attentions
from .positions import LangSpecPositionalEmbedding
from .routing import LanguageContext

INSERTION_POINTS: dict[str, tuple[str, ...]] = {
    "encoder": (
        "embed",
        "enc_self_in",
        "enc_self_attn",
        "enc_ffn_in",
        "enc_ffn_proj",
        "sublayer_out",
        "ffn_out",
        "enc_out",
    ),
    "decoder": (
        "embed",
        "dec_self_in",
        "dec_self_attn",
        "dec_cross_in",
        "dec_cross_attn",
        "dec_ffn_in",
        "dec_ffn_proj",
        "dec_ffn",
        "sublayer_out",
        "ffn_out",
        "dec_top",
    ),
}

Slots = dict[str, nn.Module]
# `(config, side, layer index) -> layer`: how a variant replaces whole layers of a stack (LSL's language-specific
# layers); the default builds the shared layer
LayerFactory = Callable[[LangSpecConfig, str, int], nn.Module]


def _insert(slots: Slots, point: str, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int | None, *extra):
    module = slots.get(point)
    return hidden if module is None else module(hidden, lang, layer_idx, *extra)


class LangSpecAttention(nn.Module):
    """Multi-head attention (Vaswani et al. 2017) on PyTorch SDPA, with an optional language hook.

    The hook (an attention insertion-point module) returns a term added to each of the q, k, v
    projections and to the output projection; query scaling happens inside SDPA, after the sum. A hook
    with a `folded_weight(weight, lang, layer_idx, name)` method may instead return the projection's
    effective weight (None when it cannot), which replaces the weight for that call.
    """

    def __init__(self, config: LangSpecConfig, num_heads: int, layer_idx: int | None = None):
        super().__init__()
        self.embed_dim = config.d_model
        self.num_heads = num_heads
        self.head_dim = self.embed_dim // num_heads
        self.dropout = config.attention_dropout
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            proj.init_gain = 1 / math.sqrt(2)  # fairseq MultiheadAttention.reset_parameters

    def _project(self, linear: nn.Linear, x, hook, lang, name):
        if hook is None:
            return linear(x)
        # a hook may fold its term into the projection's weight (LAA at inference, one language in the batch)
        fold = getattr(hook, "folded_weight", None)
        weight = fold(linear.weight, lang, self.layer_idx, name) if fold is not None else None
        if weight is not None:
            return F.linear(x, weight, linear.bias)
        return linear(x) + hook(x, lang, self.layer_idx, name)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:2], self.num_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        lang: LanguageContext,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        past_key_values: Cache | None = None,
        hook: nn.Module | None = None,
    ) -> torch.Tensor:
        is_cross = key_value_states is not None
        query = self._heads(self._project(self.q_proj, hidden_states, hook, lang, "q"))

        cache = None
        if past_key_values is not None:
            if isinstance(past_key_values, EncoderDecoderCache):
                cache = past_key_values.cross_attention_cache if is_cross else past_key_values.self_attention_cache
            else:
                cache = past_key_values
        if is_cross and cache is not None and past_key_values.is_updated.get(self.layer_idx):
            # encoder keys/values were computed at the first decoding step
            key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
        else:
            source = key_value_states if is_cross else hidden_states
            key = self._heads(self._project(self.k_proj, source, hook, lang, "k"))
            value = self._heads(self._project(self.v_proj, source, hook, lang, "v"))
            if cache is not None:
                key, value = cache.update(key, value, self.layer_idx)
                if is_cross:
                    past_key_values.is_updated[self.layer_idx] = True

        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
        )
        out = out.transpose(1, 2).reshape(*hidden_states.shape[:2], self.embed_dim)
        return self._project(self.out_proj, out, hook, lang, "o")


# ---------------------------------------------------------------------------- layers
class _Sublayers(GradientCheckpointingLayer):
    """Shared residual plumbing: `x -> [LN] -> f -> dropout -> (+ parallel) -> + residual -> [LN]`."""

    def __init__(self, config: LangSpecConfig, layer_idx: int, num_heads: int, ffn_dim: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.normalize_before = config.normalize_before
        self.dropout = config.dropout
        self.self_attn = LangSpecAttention(config, num_heads, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self._init_ffn(config, ffn_dim)
        # residual connections this layer goes without (encoder_drop_residual; set by the encoder layer)
        self.no_residual: frozenset[str] = frozenset()

    def _init_ffn(self, config: LangSpecConfig, inner_dim: int) -> None:
        self.fc1 = nn.Linear(config.d_model, inner_dim)
        self.fc2 = nn.Linear(inner_dim, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout
        self.final_layer_norm = nn.LayerNorm(config.d_model)

    def feed_forward(self, x: torch.Tensor, hook: nn.Module | None = None, lang=None) -> torch.Tensor:
        """fc1 -> activation -> dropout -> fc2: the FFN sublayer body; a projection hook (`*_ffn_proj`) adds its
        term to fc1's and fc2's outputs."""
        if hook is None:
            x = F.dropout(self.activation_fn(self.fc1(x)), p=self.activation_dropout, training=self.training)
            return self.fc2(x)
        inner = self.fc1(x) + hook(x, lang, self.layer_idx, "fc1")
        inner = F.dropout(self.activation_fn(inner), p=self.activation_dropout, training=self.training)
        return self.fc2(inner) + hook(inner, lang, self.layer_idx, "fc2")

    def _norm(self, norm: nn.Module, hidden: torch.Tensor, lang: LanguageContext | None) -> torch.Tensor:
        """One of the layer's LayerNorms (a language-specific layer's take the examples' languages: LSL)."""
        return norm(hidden)

    def _residual_block(self, hidden, norm: nn.LayerNorm, body, parallel=None, sublayer: str = "ffn", lang=None):
        residual = hidden
        if self.normalize_before:
            hidden = self._norm(norm, hidden, lang)
        out = F.dropout(body(hidden), p=self.dropout, training=self.training)
        if parallel is not None:
            # a parallel branch (CLL) sees the sublayer's own input and applies its own dropout
            out = out + parallel(hidden)
        # Liu et al. 2021 / CLL's SD: a middle encoder layer drops a residual to loosen positional correspondence
        hidden = out if sublayer in self.no_residual else residual + out
        return hidden if self.normalize_before else self._norm(norm, hidden, lang)

    def _attention_block(self, hidden, slots: Slots, lang, points: tuple[str, str], norm, attention, **kwargs):
        """`points` = (point before the block, attention point); `kwargs` go to the attention."""
        hidden = _insert(slots, points[0], hidden, lang, self.layer_idx)
        hook = slots.get(points[1])
        sublayer = "cross_attn" if points[1] == "dec_cross_attn" else "self_attn"
        hidden = self._residual_block(
            hidden, norm, lambda x: attention(x, lang, hook=hook, **kwargs), sublayer=sublayer, lang=lang
        )
        return _insert(slots, "sublayer_out", hidden, lang, self.layer_idx, sublayer)

    def _ffn_block(
        self, hidden, slots: Slots, lang, in_point: str, proj_point: str, parallel_point: str | None = None
    ):
        hidden = _insert(slots, in_point, hidden, lang, self.layer_idx)
        module = slots.get(parallel_point) if parallel_point else None
        hook = slots.get(proj_point)
        body, parallel = (lambda x: self.feed_forward(x, hook, lang)), None
        if module is not None:
            # a parallel branch may fold itself into a wider FFN (CLL at inference, one language in the batch)
            fold = getattr(module, "folded_ffn", None) if hook is None else None  # a hook needs fc1, fc2 apart
            weights = fold(self, lang, self.layer_idx) if fold is not None else None
            if weights is not None:
                fc1_weight, fc1_bias, fc2_weight, fc2_bias = weights
                body = lambda x: F.linear(self.activation_fn(F.linear(x, fc1_weight, fc1_bias)), fc2_weight, fc2_bias)  # noqa: E731
            else:
                parallel = lambda x: module(x, lang, self.layer_idx)  # noqa: E731
        hidden = self._residual_block(hidden, self.final_layer_norm, body, parallel, lang=lang)
        hidden = _insert(slots, "sublayer_out", hidden, lang, self.layer_idx, "ffn")
        return _insert(slots, "ffn_out", hidden, lang, self.layer_idx)


class LangSpecEncoderLayer(_Sublayers):
    def __init__(self, config: LangSpecConfig, layer_idx: int):
        super().__init__(config, layer_idx, config.encoder_attention_heads, config.encoder_ffn_dim)
        drops = getattr(config, "encoder_drop_residual", [])
        self.no_residual = frozenset(sublayer for layer, sublayer in drops if layer == layer_idx)

    def forward(self, hidden_states, attention_mask, lang: LanguageContext, slots: Slots):
        hidden_states = self._attention_block(
            hidden_states,
            slots,
            lang,
            ("enc_self_in", "enc_self_attn"),
            self.self_attn_layer_norm,
            self.self_attn,
            attention_mask=attention_mask,
        )
        return self._ffn_block(hidden_states, slots, lang, "enc_ffn_in", "enc_ffn_proj")


class LangSpecDecoderLayer(_Sublayers):
    def __init__(self, config: LangSpecConfig, layer_idx: int):
        super().__init__(config, layer_idx, config.decoder_attention_heads, config.decoder_ffn_dim)
        self.encoder_attn = LangSpecAttention(config, config.decoder_attention_heads, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)

    def forward(
        self,
        hidden_states,
        self_attn_mask,
        is_causal: bool,
        encoder_hidden_states,
        encoder_attention_mask,
        past_key_values,
        lang: LanguageContext,
        slots: Slots,
    ):
        hidden_states = self._attention_block(
            hidden_states,
            slots,
            lang,
            ("dec_self_in", "dec_self_attn"),
            self.self_attn_layer_norm,
            self.self_attn,
            attention_mask=self_attn_mask,
            is_causal=is_causal,
            past_key_values=past_key_values,
        )
        hidden_states = self._attention_block(
            hidden_states,
            slots,
            lang,
            ("dec_cross_in", "dec_cross_attn"),
            self.encoder_attn_layer_norm,
            self.encoder_attn,
            key_value_states=encoder_hidden_states,
            attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
        )
        return self._ffn_block(hidden_states, slots, lang, "dec_ffn_in", "dec_ffn_proj", parallel_point="dec_ffn")


# ---------------------------------------------------------------------------- stacks
class _Stack(nn.Module):
    """Embedding front-end shared by the encoder and the decoder."""

    side: str

    def __init__(self, config: LangSpecConfig, embed_tokens: nn.Embedding, insertions: dict[str, nn.Module] | None):
        super().__init__()
        self.config = config
        self.embed_tokens = embed_tokens
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = LangSpecPositionalEmbedding(config)
        self.layernorm_embedding = nn.LayerNorm(config.d_model) if config.layernorm_embedding else None
        self.layer_norm = nn.LayerNorm(config.d_model) if config.normalize_before else None
        self.dropout = config.dropout
        unknown = set(insertions or {}) - set(INSERTION_POINTS[self.side])
        if unknown:
            raise ValueError(
                f"Insertion points {sorted(unknown)} do not exist in the {self.side}; "
                f"its points are {list(INSERTION_POINTS[self.side])}."
            )
        self.insertions = nn.ModuleDict(insertions or {})

    def language_context(self, batch_size, src_lang_ids, tgt_lang_ids) -> LanguageContext:
        """The validated language ids of one forward, with the shared embeddings in its scratch (LEE, SLP read them)."""
        lang = LanguageContext(
            src_lang_ids, tgt_lang_ids, self.config.num_languages, batch_size, self.config.routing_strategy
        )
        lang.scratch["embed_tokens"] = self.embed_tokens  # LEE reads language-tag embeddings from it
        return lang

    def prepare_modules(self, lang: LanguageContext, hidden: torch.Tensor) -> None:
        """Modules' once-per-forward work (gathers, lookups) runs here, outside the layers, so gradient
        checkpointing recomputes a layer with exactly the operations of its first run."""
        for module in self.insertions.values():
            prepare = getattr(module, "prepare", None)
            if prepare is not None:
                prepare(lang, hidden)

    def _embed(self, input_ids, inputs_embeds, lang: LanguageContext, slots: Slots, past_length: int = 0):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"Pass exactly one of input_ids or inputs_embeds to the {self.side}.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        hidden = inputs_embeds * self.embed_scale
        hidden = _insert(slots, "embed", hidden, lang, None)
        hidden = hidden + self.embed_positions(input_ids, hidden.shape, past_length)
        if self.layernorm_embedding is not None:
            hidden = self.layernorm_embedding(hidden)
        return F.dropout(hidden, p=self.dropout, training=self.training)


class LangSpecEncoder(_Stack):
    """Transformer encoder of `config.encoder_layers` [`LangSpecEncoderLayer`]s."""

    side = "encoder"
    main_input_name = "input_ids"

    def __init__(self, config, embed_tokens, insertions=None, build_layer: LayerFactory | None = None):
        super().__init__(config, embed_tokens, insertions)
        build_layer = build_layer or (lambda config, side, i: LangSpecEncoderLayer(config, i))
        self.layers = nn.ModuleList([build_layer(config, self.side, i) for i in range(config.encoder_layers)])

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        tgt_lang_ids: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput:
        check_no_attentions(output_attentions)
        check_encoder_inputs(input_ids, attention_mask, inputs_embeds, self.embed_tokens.num_embeddings)
        batch = (input_ids if input_ids is not None else inputs_embeds).shape[0]
        lang = self.language_context(batch, src_lang_ids, tgt_lang_ids)
        slots = dict(self.insertions.items())
        hidden = self._embed(input_ids, inputs_embeds, lang, slots)
        self.prepare_modules(lang, hidden)
        mask = padding_mask(attention_mask, hidden.dtype)
        states = [hidden] if output_hidden_states else None
        for layer in self.layers:
            hidden = layer(hidden, mask, lang, slots)
            if states is not None:
                states.append(hidden)
        if self.layer_norm is not None:
            hidden = self.layer_norm(hidden)
        hidden = _insert(slots, "enc_out", hidden, lang, None)
        return BaseModelOutput(last_hidden_state=hidden, hidden_states=tuple(states) if states else None)


class LangSpecDecoder(_Stack):
    """Transformer decoder of `config.decoder_layers` [`LangSpecDecoderLayer`]s with an `EncoderDecoderCache`."""

    side = "decoder"

    def __init__(self, config, embed_tokens, insertions=None, build_layer: LayerFactory | None = None):
        super().__init__(config, embed_tokens, insertions)
        build_layer = build_layer or (lambda config, side, i: LangSpecDecoderLayer(config, i))
        self.layers = nn.ModuleList([build_layer(config, self.side, i) for i in range(config.decoder_layers)])

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        tgt_lang_ids: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: Cache | None = None,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        check_no_attentions(output_attentions)
        past_key_values = resolve_cache(cache, past_key_values)
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs encoder_hidden_states (the encoder's last_hidden_state).")
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(), DynamicCache())
        if not use_cache:
            past_key_values = None
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        static_length = static_cache_length(past_key_values)
        if static_length is not None and isinstance(past_length, int):
            past_length = torch.tensor(past_length, device=encoder_hidden_states.device)  # the first step
        reference = input_ids if input_ids is not None else inputs_embeds
        batch, length = reference.shape[:2]
        lang = self.language_context(batch, src_lang_ids, tgt_lang_ids)
        slots = dict(self.insertions.items())
        hidden = self._embed(input_ids, inputs_embeds, lang, slots, past_length)
        self.prepare_modules(lang, hidden)
        self_mask, is_causal = decoder_self_mask(
            attention_mask, length, past_length, hidden.dtype, hidden.device, static_length
        )
        cross_mask = padding_mask(encoder_attention_mask, hidden.dtype)
        states = [hidden] if output_hidden_states else None
        for layer in self.layers:
            hidden = layer(
                hidden, self_mask, is_causal, encoder_hidden_states, cross_mask, past_key_values, lang, slots
            )
            if states is not None:
                states.append(hidden)
        if self.layer_norm is not None:
            hidden = self.layer_norm(hidden)
        hidden = _insert(slots, "dec_top", hidden, lang, None)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden, hidden_states=tuple(states) if states else None, **cache_output(past_key_values)
        )
