"""Serving one direction: CTranslate2 models built from the folded weights, for every backbone.

`export_ctranslate2` writes a CTranslate2 `TransformerSpec` directly from :func:`~hf_langspec.export.specialize.fold`:
post- or pre-norm, fairseq / Marian / learned positions, with or without the embedding LayerNorm, tied
or (after folding) per-stack embeddings. No transformers class sits in between, so the papers'
post-norm configs with fairseq positions (and LAA's embedding LayerNorm) export too; the plain
transformers model (`MarianMTModel` / `M2M100ForConditionalGeneration`) is written beside it only where
one holds the backbone exactly (docs/DECISIONS.md, "Serving").

Positions: CTranslate2 numbers the tokens of a (right-padded) sentence 0, 1, 2, ... and reads row i of
the spec's table; fairseq numbering starts at `pad_token_id + 1`, so the table is the backbone's from
that row on (what CTranslate2's own M2M100 / BART loaders do), Marian's from row 0.

`export_direction` writes `OUT/ctranslate2` (+ the direction's plain tokenizer and `direction.json`,
which says how to decode it) and, where a plain class matches, `OUT/transformers`; `export_directions`
does that for a list of directions, one folder each (`OUT/<src>-<tgt>`), for `hf-langspec serve`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..data.schema import check_direction
from ..files import refuse_to_overwrite, write_atomic
from ..modeling.configuration_langspec import decoder_tag
from ..modeling.positions import fairseq_sinusoidal_table, marian_sinusoidal_table
from ..tokenization.tokenization_langspec import encode_with_template
from .specialize import build_plain_model, fold, plain_target, set_plain_generation, specialize_tokenizer

CT2_MISSING = (
    "CTranslate2 export needs the `ctranslate2` package: pip install 'hf_langspec[export]' (or ctranslate2>=4)."
)
DIRECTION_FILE = "direction.json"  # how to decode an exported direction (read by the server)
UNUSED_ROW = "<hf_langspec_unused_row_{}>"  # the token of an embedding row past the tokenizer (`engine_vocabulary`)
_UNUSED_ROW = re.compile(r"<hf_langspec_unused_row_(\d+)>")


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError(CT2_MISSING) from None
    return ctranslate2


def ctranslate2_problems(config: Any) -> list[str]:
    """What in `config`'s backbone a CTranslate2 Transformer cannot represent (empty for the papers' settings)."""
    from ctranslate2.converters.transformers import _SUPPORTED_ACTIVATIONS

    problems = []
    if config.encoder_drop_residual:
        problems.append(f"encoder_drop_residual={config.encoder_drop_residual} (CTranslate2 keeps every residual)")
    if config.activation_function not in _SUPPORTED_ACTIVATIONS:
        problems.append(
            f"activation_function={config.activation_function!r} (CTranslate2 has {sorted(_SUPPORTED_ACTIVATIONS)})"
        )
    return problems


def ctranslate2_spec(folded: Any, tokens: list[str], special: dict[str, str], quantization: str | None = None):
    """The CTranslate2 `TransformerSpec` of a folded direction, vocabulary `tokens`, ready to `save`."""
    _ctranslate2()
    from ctranslate2.converters.transformers import _SUPPORTED_ACTIVATIONS
    from ctranslate2.specs import transformer_spec

    config, state = folded.config, folded.state
    problems = ctranslate2_problems(config)
    if problems:
        raise ValueError("Cannot export to CTranslate2: " + "; ".join(problems) + ".")
    activation = _SUPPORTED_ACTIVATIONS[config.activation_function]
    common = {"pre_norm": config.normalize_before, "activation": activation,
              "layernorm_embedding": config.layernorm_embedding}  # fmt: skip
    encoder = transformer_spec.TransformerEncoderSpec(config.encoder_layers, config.encoder_attention_heads, **common)
    decoder = transformer_spec.TransformerDecoderSpec(config.decoder_layers, config.decoder_attention_heads, **common)
    shared = state["shared.weight"]
    for side, stack in (("encoder", encoder), ("decoder", decoder)):
        weights = _Weights(state, side)
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = _array(folded.embeddings.get(side, shared))
        stack.scale_embeddings = config.scale_embedding  # by sqrt(d_model), as the backbone
        stack.position_encodings.encodings = _array(_position_table(config, state, side))
        if config.layernorm_embedding:
            weights.layer_norm(stack.layernorm_embedding, "layernorm_embedding")
        if config.normalize_before:
            weights.layer_norm(stack.layer_norm, "layer_norm")
        for index, layer in enumerate(stack.layer):
            prefix = f"layers.{index}"
            weights.attention(layer.self_attention, f"{prefix}.self_attn", fused=("q", "k", "v"))
            weights.layer_norm(layer.self_attention.layer_norm, f"{prefix}.self_attn_layer_norm")
            if side == "decoder":
                weights.attention(layer.attention, f"{prefix}.encoder_attn", fused=("q",), then=("k", "v"))
                weights.layer_norm(layer.attention.layer_norm, f"{prefix}.encoder_attn_layer_norm")
            weights.linear(layer.ffn.linear_0, f"{prefix}.fc1")
            weights.linear(layer.ffn.linear_1, f"{prefix}.fc2")
            weights.layer_norm(layer.ffn.layer_norm, f"{prefix}.final_layer_norm")
    decoder.projection.weight = _array(shared)  # the output projection keeps the shared matrix (tied)
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = 1e-5  # torch.nn.LayerNorm's, as the backbone's
    for key, token in special.items():
        if token is not None:  # a vocabulary without <s> (Marian's) keeps CTranslate2's default, never used
            setattr(spec.config, key, token)
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.validate()
    spec.optimize(quantization=quantization)
    return spec


class _Weights:
    """Reads one stack's folded weights (`encoder.` / `decoder.` names) into CTranslate2 layer specs."""

    def __init__(self, state: dict, side: str):
        self.state, self.side = state, side

    def get(self, name: str):
        return _array(self.state[f"{self.side}.{name}"])

    def linear(self, spec, name: str) -> None:
        spec.weight, spec.bias = self.get(f"{name}.weight"), self.get(f"{name}.bias")

    def layer_norm(self, spec, name: str) -> None:
        spec.gamma, spec.beta = self.get(f"{name}.weight"), self.get(f"{name}.bias")

    def attention(self, spec, name: str, fused: tuple[str, ...], then: tuple[str, ...] = ()) -> None:
        """Self-attention: one fused q|k|v linear; cross-attention: q, then a fused k|v linear; then the output."""
        groups = [fused, then] if then else [fused]
        for linear, group in zip(spec.linear, groups, strict=False):
            linear.weight = np.concatenate([self.get(f"{name}.{p}_proj.weight") for p in group])
            linear.bias = np.concatenate([self.get(f"{name}.{p}_proj.bias") for p in group])
        self.linear(spec.linear[-1], f"{name}.out_proj")


def _array(tensor):
    return tensor.detach().float().contiguous().numpy()


def _position_table(config: Any, state: dict, side: str):
    """Row i = the position vector of the i-th token of a sentence (see the module docstring)."""

    rows, offset = config.max_position_embeddings, config.pad_token_id + 1
    if config.position_embedding_type == "sinusoidal_marian":
        return marian_sinusoidal_table(rows, config.d_model)
    if config.position_embedding_type == "learned":
        return state[f"{side}.embed_positions.embedding.weight"][offset:]
    return fairseq_sinusoidal_table(rows + offset, config.d_model, config.pad_token_id)[offset:]


def engine_token_ids(tokenizer: Any, tokens: list[str]) -> list[int]:
    """Ids of tokens a CTranslate2 model produced: a spare row's placeholder is that row again (the generic model
    gives the row's id, which decoding skips; the tokenizer would read the placeholder as `<unk>`)."""
    ids = tokenizer.convert_tokens_to_ids(tokens)
    return [
        int(m.group(1)) if (m := _UNUSED_ROW.fullmatch(token)) else i for token, i in zip(tokens, ids, strict=True)
    ]


def engine_vocabulary(tokenizer: Any, rows: int) -> list[str]:
    """The token of each of the model's `rows` embedding rows, as CTranslate2 needs a string for every one: a row past
    the tokenizer's vocabulary (a pretrained checkpoint's spare rows: NLLB-200 and M2M-100 have some) gets a
    placeholder that no text can produce (before, `null`, which CTranslate2 refused to load)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(rows)))
    known = {token for token in tokens if token is not None}
    placeholders = {i: UNUSED_ROW.format(i) for i, token in enumerate(tokens) if token is None}
    clash = sorted(set(placeholders.values()) & known)
    if clash:
        raise ValueError(f"The vocabulary already holds {clash[0]}, the placeholder for an embedding row it lacks.")
    return [placeholders.get(i, token) for i, token in enumerate(tokens)]


def export_ctranslate2(
    folded: Any, tokenizer: Any, output_dir: str | os.PathLike, quantization: str | None = None, force: bool = False
) -> Path:
    """Write a folded direction (`fold(...)`) as a CTranslate2 model; `tokenizer` is its plain tokenizer."""
    output_dir = Path(output_dir)
    refuse_to_overwrite(output_dir, force)
    config = folded.config
    tokens = engine_vocabulary(tokenizer, config.vocab_size)
    special = {
        "bos_token": tokenizer.bos_token,
        "eos_token": tokenizer.eos_token,
        "unk_token": tokenizer.unk_token,
        "decoder_start_token": tokenizer.convert_ids_to_tokens(config.decoder_start_token_id),
    }
    spec = ctranslate2_spec(folded, tokens, special, quantization)
    # written beside the target and renamed into place: an interrupted export leaves no half model behind
    partial = output_dir.with_name(output_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    spec.save(str(partial))
    tokenizer.save_pretrained(partial)  # the tokenizer travels with the engine's model
    shutil.rmtree(output_dir, ignore_errors=True)
    partial.rename(output_dir)
    return output_dir


def export_direction(
    model: Any,
    tokenizer: Any,
    src_lang: str,
    tgt_lang: str,
    output_dir: str | os.PathLike,
    ctranslate2: bool = True,
    transformers: bool | None = None,
    quantization: str | None = None,
    force: bool = False,
) -> dict[str, Path | str]:
    """Fold `src_lang -> tgt_lang` of `model` and write it under `output_dir`.

    Writes `ctranslate2/` (unless `ctranslate2=False`) and `transformers/` where a plain transformers class
    holds the backbone (`transformers=None`; `True` requires it, `False` skips it). Where none does, the
    result's `"transformers_skipped"` says why; without `ctranslate2` the transformers folder is all that was
    asked for, so then it is required. Nothing is written if an output folder is not empty and `force` is False.
    """

    if not ctranslate2 and transformers is False:
        raise ValueError("export_direction with ctranslate2=False and transformers=False would write nothing.")
    if not ctranslate2:
        transformers = True  # an export that writes nothing must not succeed
    output_dir = Path(output_dir)
    writes = [
        name for name, wanted in (("ctranslate2", ctranslate2), ("transformers", transformers is not False)) if wanted
    ]
    for name in writes:
        refuse_to_overwrite(output_dir / name, force)
    tokenizer.check_model(model)  # the vocabulary, languages and tags must be the model's
    check_direction(src_lang, tgt_lang, model.config)
    folded = fold(model, src_lang, tgt_lang)
    plain_tokenizer = specialize_tokenizer(tokenizer, src_lang, tgt_lang)
    paths: dict[str, Path | str] = {}
    if transformers is not False:
        try:
            plain = build_plain_model(folded, plain_target(model.config))
        except ValueError as error:  # no transformers class holds this backbone or this direction's embeddings
            if transformers:
                raise
            paths["transformers_skipped"] = str(error)
        else:
            set_plain_generation(plain, model, model.config.language_id(tgt_lang))
            plain.save_pretrained(output_dir / "transformers")
            plain_tokenizer.save_pretrained(output_dir / "transformers")
            paths["transformers"] = output_dir / "transformers"
    if ctranslate2:
        folder = export_ctranslate2(folded, plain_tokenizer, output_dir / "ctranslate2", quantization, force=True)
        write_atomic(
            folder / DIRECTION_FILE, json.dumps(decoding_settings(model, tokenizer, src_lang, tgt_lang), indent=2)
        )
        paths["ctranslate2"] = folder
    return paths


def generation_budget(model: Any) -> dict[str, Any]:
    """Beams, new tokens and length penalty from the model's generation config; the budget fits the decoder's
    position table (one position per token after the start token, the target tag included)."""
    generation = model.generation_config
    tag = decoder_tag(model.config.lang_tag_style)
    return {
        "num_beams": generation.num_beams or 1,
        "max_new_tokens": min(generation.max_new_tokens or 256, model.config.max_position_embeddings - 1 - tag),
        "length_penalty": generation.length_penalty if generation.length_penalty is not None else 1.0,
    }


def decoding_settings(model: Any, tokenizer: Any, src_lang: str, tgt_lang: str) -> dict[str, Any]:
    """What a CTranslate2 translator needs besides the weights: the forced first token and the search budget."""
    budget = generation_budget(model)
    forced = tokenizer.lang_tag(tgt_lang) if decoder_tag(model.config.lang_tag_style) else None
    generation = model.generation_config
    # tokens the model must not generate: a checkpoint's bad words (Marian's <pad>, its decoder start) and the
    # codes of added languages, but the one this direction forces first
    first = tokenizer.convert_tokens_to_ids(forced) if forced else None
    banned = [*(generation.bad_words_ids or []), *([i] for i in generation.suppress_tokens or [] if i != first)]
    return {
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "forced_first_token": forced,
        "beam_size": budget["num_beams"],
        # the forced tag counts as a decoded token in CTranslate2, as in the plain model's generation config
        "max_new_tokens": budget["max_new_tokens"] + bool(forced),
        "length_penalty": budget["length_penalty"],
        "max_source_tokens": model.config.max_position_embeddings,  # longer inputs are refused, never cut
        "suppress_sequences": [tokenizer.convert_ids_to_tokens(list(ids)) for ids in banned],
        "no_repeat_ngram_size": generation.no_repeat_ngram_size or 0,
    }


def export_directions(
    model: Any,
    tokenizer: Any,
    directions: list[tuple[str, str]],
    output_dir: str | os.PathLike,
    quantization: str | None = None,
    force: bool = False,
) -> dict[str, Path]:
    """One CTranslate2 model per direction under `output_dir/<src>-<tgt>/ctranslate2` (what `serve` loads).

    Every direction is checked (known languages, a foldable model, free folders) before anything is written.
    """
    output_dir = Path(output_dir)
    for src, tgt in directions:
        check_direction(src, tgt, model.config)  # unknown codes and xx -> xx fail here, as everywhere
        refuse_to_overwrite(output_dir / f"{src}-{tgt}" / "ctranslate2", force)
    return {
        f"{src}-{tgt}": export_direction(
            model, tokenizer, src, tgt, output_dir / f"{src}-{tgt}", transformers=False,
            quantization=quantization, force=force,
        )["ctranslate2"]
        for src, tgt in directions
    }  # fmt: skip


def translate_ctranslate2(
    translator: Any,
    tokenizer: Any,
    texts: list[str],
    beam_size: int = 4,
    max_new_tokens: int = 128,
    forced_first_token: str | None = None,
    **options: Any,
) -> list[list[int]]:
    """Token ids (`</s>`-free, no start token) that a CTranslate2 `Translator` produces for `texts`.

    `tokenizer` is the specialized model's plain tokenizer; `forced_first_token` is the target tag of a model
    trained with target tags (the generation config's `forced_bos_token_id`). For speed on CPU, build the
    translator with one worker per core (`inter_threads=cores, intra_threads=1`) and pass
    `max_batch_size=ceil(len(texts) / cores)`: on 2 cores that halved beam-4 decoding of 32 sentences
    (benchmarks/bench_serving.py).
    """
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in encode_with_template(tokenizer, texts)]
    prefix = [[forced_first_token]] * len(texts) if forced_first_token else None
    options.setdefault("min_decoding_length", 0)  # as transformers: </s> may come first (CTranslate2's default is 1)
    results = translator.translate_batch(
        sources, target_prefix=prefix, beam_size=beam_size, max_decoding_length=max_new_tokens, **options
    )
    return [engine_token_ids(tokenizer, result.hypotheses[0]) for result in results]


__all__ = [
    "ctranslate2_problems",
    "ctranslate2_spec",
    "decoding_settings",
    "export_ctranslate2",
    "export_direction",
    "export_directions",
    "generation_budget",
    "translate_ctranslate2",
]
