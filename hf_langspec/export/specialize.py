"""Specialization: one direction of a trained model folded into a plain `MarianMTModel` or `M2M100ForConditionalGeneration`.

For a fixed source and target language, the language modules of most methods are fixed linear maps
or constants, so they fold into ordinary weights and the direction is served by a model without custom
code (and by the inference engines that know Marian / M2M100). None of the papers or their code does this.

What folds where (exact in float arithmetic up to rounding; checked by tests on logits and outputs):

* XLP's projection and the additive language embedding (`embed` point), and LEE at the first layer's
  self-attention input: `f(s E[x]) = s E[x] A + c` becomes a new embedding matrix `E A + c / s` per stack.
  The output projection keeps `E`, so these need Marian's separate encoder, decoder and output matrices.
* LEE at any other switching point: the constant `e` joins the bias of what wrote the residual stream last:
  the previous sublayer's LayerNorm (post-norm) or output projection (pre-norm); at the encoder output the
  last LayerNorm.
* LAA: `x (W_p^T + M_p)` for p in q, k, v, o, so `W_p <- W_p + M_p^T` in every layer with LAA; language-specific
  LoRA likewise (`M_p = (alpha / r) A B` of the language), also on the FFN's fc1 and fc2.
* LSL: a language-specific layer becomes the layer of the direction's source or target language.
* CLL: `FFN(h) + t LSL(h)` is one wider ReLU FFN: the LSL's units appended to fc1 and `t W2` to fc2
  (`t b2` into fc2's bias); layers without a CLL get the same number of zero units, so all layers keep
  one width.
* The baseline: nothing to fold.

Not foldable, with a ValueError that says why: CLM (each token's mix proportions are a softmax of the
token itself), adapters after a layer or the stack and HLT-MT's pool (a LayerNorm and a ReLU bottleneck
on the residual stream where the plain model has none), LAA^R (a random matrix per example), and
backbone features Marian / M2M100 lack (embedding LayerNorm, a removed residual, position numbering).

The target model follows the backbone: post-norm with `position_embedding_type="sinusoidal_marian"` ->
`MarianMTModel`; pre-norm with fairseq sinusoids (`"sinusoidal"`) -> `M2M100ForConditionalGeneration`.
The tokenizer becomes a plain `PreTrainedTokenizerFast` that adds the direction's source tag itself;
with target tags the generation config forces the tag as the first token. It is saved with
`split_special_tokens=True`, so transformers never matches a tag or `</s>` written in the text, and a unigram
vocabulary's control pieces are put out of its subword model's reach (`unreachable_control_pieces`): loaded
without this package, the folder reads such strings as text.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tokenizers import Regex, pre_tokenizers, processors
from transformers import (
    GenerationConfig,
    M2M100Config,
    M2M100ForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from ..data.schema import check_direction
from ..interop import INHERITED_GENERATION, backbone_problems, copy_state, reference_kwargs
from ..modeling.configuration_langspec import decoder_tag, source_tag_side
from ..modeling.routing import LanguageContext
from ..tokenization.tokenization_langspec import control_token_ids

# LEE-style constants: (stack, point) -> the sublayer whose input they join
_INPUT_POINTS = {"enc_self_in": "self", "enc_ffn_in": "ffn", "dec_self_in": "self", "dec_cross_in": "cross",
                 "dec_ffn_in": "ffn"}  # fmt: skip
_ATTENTION_POINTS = {"enc_self_attn": "self_attn", "dec_self_attn": "self_attn", "dec_cross_attn": "encoder_attn"}
_FFN_PROJECTION_POINTS = ("enc_ffn_proj", "dec_ffn_proj")
# the sublayer before each one in a layer, and the parameters that write its output to the residual stream
_PREVIOUS = {("encoder", "ffn"): "self", ("decoder", "cross"): "self", ("decoder", "ffn"): "cross"}
_WRITERS = {
    "post": {"self": "self_attn_layer_norm.bias", "cross": "encoder_attn_layer_norm.bias", "ffn": "final_layer_norm.bias"},
    "pre": {"self": "self_attn.out_proj.bias", "cross": "encoder_attn.out_proj.bias", "ffn": "fc2.bias"},
}  # fmt: skip
_NOT_FOLDABLE = {
    "CrossLingualMixing": "CLM mixes k shared maps with proportions that are a softmax of each token itself, so "
    "it is no fixed linear map even for one direction",
    "SelectiveLanguagePool": "HLT-MT's pool applies a ReLU adapter with a residual and a LayerNorm after the "
    "decoder, which a plain Marian/M2M100 model has no place for",
    "LanguageAdapters": "adapters apply a ReLU bottleneck (and LayerNorms) to the residual stream between layers, "
    "which a plain Marian/M2M100 layer cannot express",
}


class Specialized(NamedTuple):
    """`specialize`'s result: the plain model and, when a tokenizer was given, its plain tokenizer."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast | None


class Folded(NamedTuple):
    """One direction of a model as plain encoder-decoder weights (`fold`'s result; input of both exports).

    `state` holds the backbone under Marian/M2M100 parameter names without the `model.` prefix, every
    decoder FFN `extra_ffn` units wider than the generic model's; `embeddings` holds the encoder / decoder
    token embeddings the direction changed (XLP, an additive language embedding, LEE at the first layer);
    the output projection is always `state["shared.weight"]`.
    """

    config: Any
    state: dict[str, torch.Tensor]
    embeddings: dict[str, torch.Tensor]
    extra_ffn: int


def fold(model: Any, src_lang: str, tgt_lang: str) -> Folded:
    """The language modules of `model` for `src_lang -> tgt_lang` folded into its backbone's weights.

    Raises a ValueError naming the module for what cannot fold (CLM, adapters, HLT-MT's pool, LAA^R).
    The backbone itself is kept as it is (post- or pre-norm, any positions, embedding LayerNorm): which
    runtime can hold it is the export's question.
    """
    config = model.config
    src, tgt = check_direction(src_lang, tgt_lang, config)
    if getattr(config, "laa_random", False):
        raise ValueError("Cannot specialize LAA^R (laa_random=True): its matrices are drawn at random per example.")
    state = {k: v.detach().clone().float() for k, v in model.state_dict().items() if ".insertions." not in k}
    state = {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")}  # lm_head is `shared`
    _take_languages_layers(model, state, src, tgt)  # before the modules below add to those layers' weights
    embeddings = {side: (None, None) for side in ("encoder", "decoder")}  # (A, c): embedding = E A + c / s
    widths = {}
    with torch.no_grad():
        for side in ("encoder", "decoder"):
            stack = getattr(model.model, side)
            lang = _context(model, stack, src, tgt)
            for point, module in stack.insertions.items():
                name = type(module).__name__
                if name in _NOT_FOLDABLE:
                    raise ValueError(f"Cannot specialize {type(model).__name__}: {_NOT_FOLDABLE[name]}.")
                if point == "embed":
                    embeddings[side] = _affine(module, lang, config.d_model, embeddings[side])
                elif point in _INPUT_POINTS or point == "enc_out":
                    _fold_constants(module, lang, side, point, state, config, embeddings)
                elif point in _ATTENTION_POINTS:
                    _fold_attention(module, lang, side, point, state, config)
                elif point in _FFN_PROJECTION_POINTS:
                    _fold_ffn_projections(module, lang, side, point, state, config)
                elif point == "dec_ffn":
                    widths = _fold_parallel_ffn(module, tgt, state, config)
                else:
                    raise ValueError(f"Cannot specialize {type(model).__name__}: no fold for {name} at {point}.")
    extra = _one_ffn_width(state, config, widths)
    return Folded(config, state, _embedding_matrices(state["shared.weight"], embeddings, config), extra)


def specialize(model: Any, src_lang: str, tgt_lang: str, tokenizer: Any = None) -> Specialized:
    """The direction `src_lang -> tgt_lang` of `model` as a `MarianMTModel` or `M2M100ForConditionalGeneration`.

    Args:
        model: a translation model of this package (any method; the ones that cannot fold raise a ValueError).
        src_lang: the direction's source, a code of `model.config.languages`.
        tgt_lang: its target, a code of `model.config.languages`.
        tokenizer: the model's `LangSpecTokenizer`; if given, a plain tokenizer for the direction is returned too.

    Returns:
        `Specialized(model, tokenizer)`; the model is in eval mode, float32 like the generic one's weights.
    """
    if tokenizer is not None:
        tokenizer.check_model(model)  # the vocabulary, languages and tags must be the model's
    target = plain_target(model.config)
    folded = fold(model, src_lang, tgt_lang)
    plain = build_plain_model(folded, target)
    set_plain_generation(plain, model, model.config.language_id(tgt_lang))
    plain_tokenizer = specialize_tokenizer(tokenizer, src_lang, tgt_lang) if tokenizer is not None else None
    return Specialized(plain.eval(), plain_tokenizer)


def save_condensed(model: Any, tokenizer: Any, output_dir: str | Path) -> Path:
    """An LMS model trained with fuse distillation, as the plain multilingual Transformer its shared route is
    (`LMSForConditionalGeneration.condense`), saved with its tokenizer into `output_dir` (a new folder)."""
    condense = getattr(model, "condense", None)
    if condense is None:
        raise ValueError(
            f"--condensed folds LMS's fuse-distilled shared matrices; {type(model).__name__} has none. Export one "
            "direction (--src-lang/--tgt-lang) to fold a model's language modules."
        )
    if model.config.lms_inference_route != "shared":
        raise ValueError(
            "This LMS model translates through its languages' matrices (lms_inference_route='language'), so the "
            "condensed model would not be the one its results describe; export directions instead."
        )
    tokenizer.check_model(model)
    plain = condense()
    output_dir = Path(output_dir)
    plain.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def unreachable_control_pieces(backend: Any, controls: list[str]) -> Any:
    """A copy of `backend` whose subword model cannot choose a control piece for text.

    `split_special_tokens` keeps transformers from matching `<2fr>` or `</s>` in text as added tokens, but a unigram
    vocabulary also holds them as pieces, and its lattice picks the whole piece for the same characters. A last
    pre-tokenizer step cuts each control string written in text after its first character (`<` | `2fr>`), so no
    pre-token holds one and the piece is out of reach; text without control strings encodes exactly as before."""
    copied = copy.deepcopy(backend)
    if not controls:
        return copied
    rests = "|".join(re.escape(token[1:]) for token in sorted(controls, key=len, reverse=True))
    cut = pre_tokenizers.Split(Regex(f"(?:{'|'.join(sorted({re.escape(t[0]) for t in controls}))})(?=(?:{rests}))"),
                               behavior="isolated")  # fmt: skip
    steps = [copied.pre_tokenizer] if copied.pre_tokenizer is not None else []
    copied.pre_tokenizer = pre_tokenizers.Sequence([*steps, cut])
    return copied


def specialize_tokenizer(tokenizer: Any, src_lang: str, tgt_lang: str) -> PreTrainedTokenizerFast:
    """A plain `PreTrainedTokenizerFast` for one direction: `[tag] pieces </s>` with source tags, else `pieces </s>`."""
    for code in (src_lang, tgt_lang):
        tokenizer.language_id(code)  # unknown codes fail here, with the tokenizer's message
    backend = unreachable_control_pieces(
        tokenizer.backend_tokenizer, tokenizer.convert_ids_to_tokens(sorted(control_token_ids(tokenizer)))
    )
    eos = tokenizer.eos_token
    specials = [(eos, tokenizer.eos_token_id)]
    template = f"$A {eos}"
    side = source_tag_side(tokenizer.lang_tag_style)
    if side:
        tag = tokenizer.lang_tag(tgt_lang if side == "target" else src_lang)
        template = f"{tag} $A {eos}"
        specials.append((tag, tokenizer.convert_tokens_to_ids(tag)))
    backend.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    plain = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=tokenizer.bos_token,
        eos_token=eos,
        unk_token=tokenizer.unk_token,
        pad_token=tokenizer.pad_token,
        additional_special_tokens=[tokenizer.lang_tag(code) for code in tokenizer.languages],
        split_special_tokens=True,  # transformers then never matches a tag or </s> written in the text
    )
    plain.model_input_names = ["input_ids", "attention_mask"]
    return plain


# ---------------------------------------------------------------------------- checks and probes
def plain_target(config) -> str:
    """ "marian" or "m2m100": the transformers class that holds `config`'s backbone exactly (a ValueError if none)."""
    target = "m2m100" if config.normalize_before else "marian"
    problems = backbone_problems(config, target)
    if problems:
        raise ValueError(
            f"Cannot specialize a {'pre' if config.normalize_before else 'post'}-norm model into {target}: "
            + "; ".join(problems)
            + ". These are fixed when the model is built; train with the target's settings to serve it plainly."
        )
    return target


def _take_languages_layers(model, state: dict[str, torch.Tensor], src: int, tgt: int) -> None:
    """LSL: at each language-specific layer, the weights of the direction's language (the source's or the target's,
    as the layer is indexed) under the shared layer's names (`per_language_weight [L, d_in, d_out]` -> `weight`)."""
    ids = {"source": src, "target": tgt}
    for name, module in model.model.named_modules():
        if not hasattr(module, "per_language_weight"):
            continue
        for key in ("per_language_weight", "per_language_bias"):
            del state[f"{name}.{key}"]
        for key, value in module.plain(ids[module.side]).items():
            state[f"{name}.{key}"] = value.detach().clone().float()


def _context(model, stack, src: int, tgt: int) -> LanguageContext:
    """One example of the direction, with the stack's modules prepared as in its own forward."""
    lang = stack.language_context(1, torch.tensor([src]), torch.tensor([tgt]))
    stack.prepare_modules(lang, torch.zeros(1, 1, model.config.d_model, dtype=model.dtype))
    return lang


def _probe(function, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(A, c)` with `function(h) = h A + c` (rows of the identity and zero through the module); checked affine."""
    eye = torch.eye(d).unsqueeze(0)
    zero = torch.zeros(1, 1, d)
    c = function(zero)[0, 0].float()
    a = function(eye)[0].float() - c
    check = torch.randn(1, 3, d, generator=torch.Generator().manual_seed(0))
    if not torch.allclose(function(check)[0].float(), check[0] @ a + c, atol=1e-4, rtol=1e-4):
        raise ValueError("A language module that should be affine for a fixed direction is not; it cannot be folded.")
    return a, c


def _affine(module, lang, d: int, current):
    """The `embed` module as `(A, c)`, keeping a constant LEE already folded into this stack's embeddings."""
    a, c = _probe(lambda h: module(h, lang, None), d)
    return a, c if current[1] is None else c + current[1]


def _layers(point: str, config) -> list[int | None]:
    if point == "enc_out":
        return [None]
    return list(range(config.encoder_layers if point.startswith("enc") else config.decoder_layers))


def _fold_constants(module, lang, side, point, state, config, embeddings) -> None:
    """LEE: `h + e` before a sublayer goes into whatever wrote `h` last."""
    style = "pre" if config.normalize_before else "post"
    prefix = f"{side}.layers"
    for layer in _layers(point, config):
        zero = torch.zeros(1, 1, config.d_model)
        e = module(zero, lang, layer)[0, 0].float()
        if point == "enc_out":
            name = (
                "encoder.layer_norm.bias"
                if style == "pre"
                else f"{prefix}.{config.encoder_layers - 1}.{_WRITERS['post']['ffn']}"
            )
        else:
            sublayer = _INPUT_POINTS[point]
            if sublayer == "self":
                if layer == 0 and config.layernorm_embedding:  # after the embedding LayerNorm: its bias
                    name = f"{side}.layernorm_embedding.bias"
                    state[name] = state[name] + e
                    continue
                if layer == 0:  # the embeddings themselves
                    a, c = embeddings[side]
                    embeddings[side] = (a, e if c is None else c + e)
                    continue
                name = f"{prefix}.{layer - 1}.{_WRITERS[style]['ffn']}"
            else:
                name = f"{prefix}.{layer}.{_WRITERS[style][_PREVIOUS[side, sublayer]]}"
        state[name] = state[name] + e


def _fold_attention(module, lang, side, point, state, config) -> None:
    """LAA: the projection p gains `M_p^T` (nn.Linear stores `W` with `y = x W^T`)."""
    attention = _ATTENTION_POINTS[point]
    for layer in _layers(point, config):
        for p, linear in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
            a, c = _probe(lambda h, p=p, layer=layer: module(h, lang, layer, p), config.d_model)
            if c.abs().max() > 0:
                raise ValueError(f"The {point} module adds a constant to {p}; only linear terms fold into weights.")
            name = f"{side}.layers.{layer}.{attention}.{linear}.weight"
            state[name] = state[name] + a.T


def _fold_ffn_projections(module, lang, side, point, state, config) -> None:
    """LoRA on the FFN: fc1 and fc2 gain `M^T`, as LAA's attention projections do."""
    for layer in _layers(point, config):
        for p in ("fc1", "fc2"):
            name = f"{side}.layers.{layer}.{p}.weight"
            a, c = _probe(lambda h, p=p, layer=layer: module(h, lang, layer, p), state[name].shape[1])
            if c.abs().max() > 0:
                raise ValueError(f"The {point} module adds a constant to {p}; only linear terms fold into weights.")
            state[name] = state[name] + a.T


def _fold_parallel_ffn(module, tgt: int, state, config) -> dict[int, int]:
    """CLL: the target's LSL joins the FFN as extra ReLU units; returns the extra width per decoder layer."""
    if config.activation_function != "relu":
        raise ValueError(
            f"Cannot fold CLL into the FFN: the LSLs use ReLU but the FFN uses {config.activation_function!r}."
        )
    code = config.languages[tgt]
    if code == module.central or code in module.disabled or code not in module.specific:
        return {}
    row = module.specific.index(code)
    m = module.fc1.shape[-1]
    for slot, layer in enumerate(module.layers):
        prefix = f"decoder.layers.{layer}"
        scale = module.scale[slot, row].float()
        state[f"{prefix}.fc1.weight"] = torch.cat([state[f"{prefix}.fc1.weight"], module.fc1[slot, row].float().T])
        state[f"{prefix}.fc1.bias"] = torch.cat([state[f"{prefix}.fc1.bias"], module.fc1_bias[slot, row].float()])
        state[f"{prefix}.fc2.weight"] = torch.cat(
            [state[f"{prefix}.fc2.weight"], scale * module.fc2[slot, row].float().T], dim=1
        )
        state[f"{prefix}.fc2.bias"] = state[f"{prefix}.fc2.bias"] + scale * module.fc2_bias[slot, row].float()
    return {layer: m for layer in module.layers}


# ---------------------------------------------------------------------------- the plain model
def _one_ffn_width(state: dict, config, widths: dict[int, int]) -> int:
    """Pad the decoder FFNs without a CLL with zero units, so every layer has one width; the extra width."""
    extra = max(widths.values(), default=0)
    for layer in range(config.decoder_layers):
        missing = extra - widths.get(layer, 0)
        if missing:
            prefix = f"decoder.layers.{layer}"
            fc1, fc2 = state[f"{prefix}.fc1.weight"], state[f"{prefix}.fc2.weight"]
            state[f"{prefix}.fc1.weight"] = torch.cat([fc1, fc1.new_zeros(missing, fc1.shape[1])])
            state[f"{prefix}.fc1.bias"] = torch.cat([state[f"{prefix}.fc1.bias"], fc1.new_zeros(missing)])
            state[f"{prefix}.fc2.weight"] = torch.cat([fc2, fc2.new_zeros(fc2.shape[0], missing)], dim=1)
    return extra


def _embedding_matrices(shared: torch.Tensor, embeddings: dict, config) -> dict[str, torch.Tensor]:
    """`E A + c / s` for each stack whose embedding the direction changed."""
    scale = config.d_model**0.5 if config.scale_embedding else 1.0
    own = {}
    for side, (a, c) in embeddings.items():
        if a is not None or c is not None:
            matrix = shared @ a if a is not None else shared.clone()
            own[side] = matrix + (c / scale if c is not None else 0.0)
    return own


def build_plain_model(folded: Folded, target: str) -> PreTrainedModel:
    config, state, own = folded.config, dict(folded.state), folded.embeddings
    kwargs = reference_kwargs(config) | {"decoder_ffn_dim": config.decoder_ffn_dim + folded.extra_ffn}
    shared = state["shared.weight"]
    if target == "m2m100":
        if own:
            raise ValueError(
                f"Cannot specialize into M2M100: the {' and '.join(own)} embeddings change for this direction "
                "(XLP, an additive language embedding or LEE at the first layer), and M2M100 shares one matrix "
                "between encoder, decoder and output. Serve the generic model, or train a post-norm model with "
                "position_embedding_type='sinusoidal_marian', which specializes into MarianMTModel's separate matrices."
            )
        plain = M2M100ForConditionalGeneration(M2M100Config(**kwargs))
    else:
        plain = MarianMTModel(
            MarianConfig(
                **kwargs | {"tie_word_embeddings": not own},
                decoder_vocab_size=config.vocab_size,
                share_encoder_decoder_embeddings=not own,
                forced_eos_token_id=None,
            )
        )
    names = {f"model.{k}": v for k, v in state.items()} | {"lm_head.weight": shared}
    if own:  # Marian's separate matrices: the output projection keeps `shared`
        del names["model.shared.weight"]
        names["model.encoder.embed_tokens.weight"] = own.get("encoder", shared)
        names["model.decoder.embed_tokens.weight"] = own.get("decoder", shared)
    copy_state(names, plain, ignore=("final_logits_bias", "embed_positions.weight"), source="the folded weights")
    return plain


def set_plain_generation(plain: PreTrainedModel, model: Any, tgt: int) -> None:
    config = model.config
    source = model.generation_config.to_dict()
    generation = GenerationConfig(
        **{k: source[k] for k in INHERITED_GENERATION if source.get(k) is not None},
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    if decoder_tag(config.lang_tag_style):
        # the generic model starts each translation with the target tag as a prompt; here it is a forced first
        # token, so it counts as a new token: one more keeps the same budget for the translation itself
        generation.forced_bos_token_id = config.lang_tag_token_ids[tgt]
        if generation.max_new_tokens is not None:
            generation.max_new_tokens += 1
    plain.generation_config = generation


__all__ = ["Folded", "Specialized", "fold", "plain_target", "specialize", "specialize_tokenizer"]
