"""Weight conversion between the baseline and transformers' reference translation models.

* `MarianMTModel`: post-norm, Marian sinusoids (positions from 0), no final layer norms.
  Matches a baseline built with `normalize_before=False, position_embedding_type="sinusoidal_marian"`.
* `M2M100ForConditionalGeneration`: pre-norm with a final layer norm per stack, fairseq
  sinusoids (positions from `pad_token_id + 1`, padding-aware). Matches `normalize_before=True,
  position_embedding_type="sinusoidal"`.

Parameter names of the backbone are those of Marian/M2M100, so a conversion copies tensors by
name; every other difference is checked and reported, never approximated. Logit equality with
both reference models is the correctness proof of the backbone (tests/test_interop.py).

Language tags stay ordinary vocabulary entries; the language contract (`languages`, tag ids,
tag style) is not part of Marian/M2M100 configs, so pass it to the `from_*` functions.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    M2M100Config,
    M2M100ForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    PreTrainedModel,
)

from .modeling import LangSpecConfig, LangSpecForConditionalGeneration
from .modeling.configuration_langspec import backbone_fields
from .modeling.modeling_langspec import language_module_parameter
from .modeling.registry import variant

_SHARED_FIELDS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "max_position_embeddings",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "activation_function",
    "scale_embedding",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)

TARGETS: dict[str, dict[str, Any]] = {
    "marian": {"normalize_before": False, "position_embedding_type": "sinusoidal_marian"},
    "m2m100": {"normalize_before": True, "position_embedding_type": "sinusoidal"},
}


# why each target's position numbering is what it is (an error names it next to the setting it needs)
_POSITION_NUMBERING = {
    "marian": "Marian numbers sinusoids from 0",
    "m2m100": "M2M100 numbers fairseq sinusoids from pad + 1",
}


def backbone_problems(config: LangSpecConfig, target: str) -> list[str]:
    """What in `config`'s backbone the reference model `target` ("marian" or "m2m100") cannot represent.

    These are fixed when a model is built; conversion and specialization both refuse them.
    """
    problems = []
    needed = TARGETS[target]
    if config.normalize_before != needed["normalize_before"]:
        problems.append(f"normalize_before={config.normalize_before!r} (needs {needed['normalize_before']!r})")
    if config.position_embedding_type != needed["position_embedding_type"]:
        problems.append(
            f"position_embedding_type={config.position_embedding_type!r} "
            f"({_POSITION_NUMBERING[target]}: {needed['position_embedding_type']!r})"
        )
    if config.layernorm_embedding:
        problems.append("layernorm_embedding=True (the reference model has no embedding layer norm)")
    if config.encoder_drop_residual:
        problems.append(
            f"encoder_drop_residual={config.encoder_drop_residual} (the reference model keeps every residual)"
        )
    return problems


def _check_convertible(model: LangSpecForConditionalGeneration, target: str) -> None:
    problems = backbone_problems(model.config, target)
    modules = {
        f"{stack}.{point}": type(module).__name__
        for stack in ("encoder", "decoder")
        for point, module in getattr(model.model, stack).insertions.items()
    }
    if modules:
        problems.append(f"language-specific modules {modules} (the reference model has none)")
    if problems:
        raise ValueError(
            f"Cannot convert {type(model).__name__} to {target}: " + "; ".join(problems) + ". Build the baseline "
            f"with normalize_before={TARGETS[target]['normalize_before']} and position_embedding_type="
            f"{TARGETS[target]['position_embedding_type']!r}, no layer norm on embeddings and no language modules."
        )


def copy_state(
    state: dict[str, torch.Tensor], target: PreTrainedModel, ignore: tuple[str, ...] = (), source: str = "the weights"
) -> None:
    """Copy every tensor of `state` into `target` by name; missing or unexpected names (except `ignore`) and
    shapes that differ are an error."""
    source_state = {k: v for k, v in state.items() if not k.endswith(ignore)}
    target_state = target.state_dict()
    target_keys = {k for k in target_state if not k.endswith(ignore)}
    missing, unexpected = target_keys - set(source_state), set(source_state) - target_keys
    if missing or unexpected:
        raise ValueError(
            f"Weight names do not line up between {source} and {type(target).__name__}: "
            f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}."
        )
    with torch.no_grad():
        for name, tensor in source_state.items():
            if target_state[name].shape != tensor.shape:
                raise ValueError(f"{name}: {tuple(tensor.shape)} does not fit {tuple(target_state[name].shape)}.")
            target_state[name].copy_(tensor)
    target.tie_weights()


def _copy_weights(source: PreTrainedModel, target: PreTrainedModel, ignore: tuple[str, ...] = ()) -> None:
    """Copy every tensor of `source` into `target` by name (see :func:`copy_state`)."""
    copy_state(source.state_dict(), target, ignore, source=type(source).__name__)


def backbone_kwargs(config) -> dict[str, Any]:
    return {field: getattr(config, field) for field in _SHARED_FIELDS}


def reference_kwargs(config: LangSpecConfig) -> dict[str, Any]:
    return backbone_kwargs(config) | {"tie_word_embeddings": True, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0}


def to_marian(model: LangSpecForConditionalGeneration) -> MarianMTModel:
    """The same network as a `MarianMTModel` (post-norm, `position_embedding_type="sinusoidal_marian"`)."""
    _check_convertible(model, "marian")
    config = MarianConfig(
        **reference_kwargs(model.config),
        decoder_vocab_size=model.config.vocab_size,
        share_encoder_decoder_embeddings=True,
        forced_eos_token_id=None,
    )
    marian = MarianMTModel(config)
    _copy_weights(model, marian, ignore=("final_logits_bias", "embed_positions.weight"))
    return marian.train(model.training)


def to_m2m100(model: LangSpecForConditionalGeneration) -> M2M100ForConditionalGeneration:
    """The same network as an `M2M100ForConditionalGeneration` (pre-norm, fairseq sinusoids)."""
    _check_convertible(model, "m2m100")
    m2m = M2M100ForConditionalGeneration(M2M100Config(**reference_kwargs(model.config)))
    _copy_weights(model, m2m)
    return m2m.train(model.training)


def _check_reference(model: PreTrainedModel, extra_problems: list[str]) -> None:
    config = model.config
    problems = list(extra_problems)
    if not config.tie_word_embeddings:
        problems.append("tie_word_embeddings=False (the baseline ties the output projection to the embeddings)")
    for field in ("encoder_layerdrop", "decoder_layerdrop"):
        if getattr(config, field, 0.0):
            problems.append(
                f"{field}={getattr(config, field)} (the baseline has no LayerDrop, which only acts in training; "
                f"set model.config.{field} = 0.0 before converting)"
            )
    if problems:
        raise ValueError(f"Cannot convert {type(model).__name__}: " + "; ".join(problems) + ".")


def from_marian(marian: MarianMTModel, **language_contract: Any) -> LangSpecForConditionalGeneration:
    """A baseline holding the weights of `marian`; `language_contract` are extra `LangSpecConfig` fields
    (`languages`, `lang_tag_token_ids`, `lang_tag_style`, ...)."""
    problems = []
    if not marian.config.share_encoder_decoder_embeddings:
        problems.append("share_encoder_decoder_embeddings=False (the baseline shares one embedding matrix)")
    if bool(marian.final_logits_bias.any()):
        problems.append("a non-zero final_logits_bias (the baseline's output projection has no bias)")
    _check_reference(marian, problems)
    config = LangSpecConfig(**backbone_kwargs(marian.config), **TARGETS["marian"], **language_contract)
    model = LangSpecForConditionalGeneration(config)
    _copy_weights(marian, model, ignore=("final_logits_bias", "embed_positions.weight"))
    return model.train(marian.training)


def from_m2m100(m2m: M2M100ForConditionalGeneration, **language_contract: Any) -> LangSpecForConditionalGeneration:
    """A baseline holding the weights of `m2m`; see :func:`from_marian` for `language_contract`."""
    _check_reference(m2m, [])
    config = LangSpecConfig(**backbone_kwargs(m2m.config), **TARGETS["m2m100"], **language_contract)
    model = LangSpecForConditionalGeneration(config)
    _copy_weights(m2m, model)
    return model.train(m2m.training)


def adapt(source: PreTrainedModel, kind: str, **fields: Any) -> PreTrainedModel:
    """A `kind` model (a config's `[model] class`: `"xlp"`, `"laa"`, `"cll"`, `"clm"`, `"adapter"`, ...) holding the
    weights of `source` (a `MarianMTModel`, an `M2M100ForConditionalGeneration` such as NLLB-200 dense, or a
    baseline), with its language modules started as the identity, so that it computes what `source` computes
    before any training (issue 45; `LangSpecPreTrainedModel.start_as_identity` says which modules cannot).

    `fields` are the method's config fields and the language contract (`languages`, `lang_tag_token_ids`,
    `lang_tag_style`, ...). The result is checked: its logits on a probe batch of every language must equal the
    source's, else a ValueError (a module that does not start where it says it does)."""
    contract = {k: fields[k] for k in ("languages", "lang_tag_token_ids", "lang_tag_style") if k in fields}
    if isinstance(source, MarianMTModel):
        base = from_marian(source, **contract)
    elif isinstance(source, M2M100ForConditionalGeneration):
        base = from_m2m100(source, **contract)
    elif isinstance(source, LangSpecForConditionalGeneration):
        base = source
    else:
        raise ValueError(f"adapt() starts from a MarianMTModel, an M2M100ForConditionalGeneration or a baseline, "
                         f"not a {type(source).__name__}.")  # fmt: skip
    config_class, model_class = variant(kind).config_class, variant(kind).translation_class
    model = model_class(config_class(**{**backbone_fields(base.config), **fields}))
    state = base.state_dict()
    # LSL: each language's layer starts as the shared one (dense pre-training); the rest loads by name
    if hasattr(model, "load_shared_layers"):
        state = model.load_shared_layers(state)
    missing, unexpected = model.load_state_dict(state, strict=False)
    stray = [k for k in missing if not language_module_parameter(k) and not k.endswith("lm_head.weight")]
    if unexpected or stray:
        raise ValueError(f"The {kind} model does not hold the source's weights: missing {stray[:5]}, "
                         f"unexpected {unexpected[:5]}.")  # fmt: skip
    model.tie_weights()
    model.start_as_identity()
    _check_same_logits(base, model.train(False), type(source).__name__)
    inherit_generation(source, model)
    return model.train(source.training)


# how a checkpoint decodes by default, kept by a model adapted from it (OPUS-MT's generation_config.json: beams,
# `<pad>` never generated, `</s>` forced at the length limit, renormalised scores)
INHERITED_GENERATION = ("num_beams", "max_length", "max_new_tokens", "length_penalty", "early_stopping",
                        "no_repeat_ngram_size", "bad_words_ids", "forced_eos_token_id", "renormalize_logits")  # fmt: skip


def inherit_generation(source: PreTrainedModel, model: PreTrainedModel) -> None:
    """Give `model` the decoding defaults `source`'s generation config sets (`INHERITED_GENERATION`, those that
    differ from transformers' defaults), so that `model.generate(**inputs)` decodes as the checkpoint did."""

    defaults = GenerationConfig()
    for field in INHERITED_GENERATION:
        value = getattr(source.generation_config, field, None)
        if value is not None and value != getattr(defaults, field, None):
            setattr(model.generation_config, field, copy.deepcopy(value))


def _check_same_logits(
    source: LangSpecForConditionalGeneration, model: PreTrainedModel, source_name: str = ""
) -> None:
    """Both models' logits on a probe batch covering every language as source and as target."""
    languages = max(len(model.config.languages or []), 1)
    generator = torch.Generator().manual_seed(0)
    first = max(getattr(model.config, "eos_token_id", 2) or 2, 3) + 1
    vocab = model.config.vocab_size
    batch = max(languages, 2)
    ids = torch.randint(first, vocab, (batch, 6), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "decoder_input_ids": torch.randint(first, vocab, (batch, 5), generator=generator)}  # fmt: skip
    if model.config.languages:
        inputs |= {
            "src_lang_ids": torch.arange(batch) % languages,
            "tgt_lang_ids": (torch.arange(batch) + 1) % languages,
        }
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in inputs.items()}
    was_training = source.training
    with torch.no_grad():
        expected = source.eval()(**inputs).logits
        got = model(**inputs).logits
    source.train(was_training)
    if not torch.allclose(got, expected, atol=1e-4, rtol=1e-4):
        raise ValueError(f"The adapted model does not start equal to {source_name or 'its source'}: logits differ by "
                         f"{float((got - expected).abs().max()):.3g}.")  # fmt: skip


__all__ = ["adapt", "backbone_problems", "copy_state", "from_m2m100", "from_marian", "to_m2m100", "to_marian"]
