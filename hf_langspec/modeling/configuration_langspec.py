"""Configuration of the shared multilingual encoder-decoder and of the baseline model.

Every variant of hf_langspec (XLP, CLM, LEE/LAA, CLL, HLT-MT) subclasses :class:`LangSpecConfig`:
the backbone fields follow Marian/M2M100, the language contract (DESIGN.md section 3) lives
beside them, and a variant only adds the fields of its own modules.

This file is copied next to a saved checkpoint as remote code: it imports only torch-free
standard modules and transformers.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

LANG_TAG_STYLES = ("source", "target", "both", "none")


def source_tag_side(style: str) -> str | None:
    """Whose tag precedes the source under a tag style: the target language's (`"source"`, Johnson et al.), the
    source language's own (`"both"`, NLLB-200 and M2M-100), or none."""
    return {"source": "target", "both": "source"}.get(style)


def decoder_tag(style: str) -> bool:
    """Whether the decoder starts with the target language's tag (`"target"`, and `"both"` as NLLB's forced BOS)."""
    return style in ("target", "both")


POSITION_EMBEDDING_TYPES = ("sinusoidal", "sinusoidal_marian", "learned")
LANGUAGE_EMBEDDING_TYPES = ("none", "additive")
ROUTING_STRATEGIES = ("auto", "gather", "group", "dense")


class LangSpecConfig(PretrainedConfig):
    r"""
    Configuration of [`LangSpecForConditionalGeneration`]: the multilingual Transformer of Johnson et
    al. (2017) as trained by the five papers (fairseq's `transformer` architecture), plus the
    language contract every language-specific module reads.

    Defaults are Transformer-base with the papers' fairseq settings: post-norm, shared embeddings
    scaled by sqrt(d_model), fairseq sinusoidal positions, ReLU, dropout 0.1.

    Args:
        vocab_size (`int`, *optional*, defaults to 32000):
            Size of the joint vocabulary, language tags included.
        d_model (`int`, *optional*, defaults to 512):
            Width of the model (d in the papers).
        encoder_layers (`int`, *optional*, defaults to 6): Number of encoder layers.
        decoder_layers (`int`, *optional*, defaults to 6): Number of decoder layers.
        encoder_attention_heads (`int`, *optional*, defaults to 8): Heads per encoder attention; must divide `d_model`.
        decoder_attention_heads (`int`, *optional*, defaults to 8): Heads per decoder attention; must divide `d_model`.
        encoder_ffn_dim (`int`, *optional*, defaults to 2048): Inner size of the encoder FFNs.
        decoder_ffn_dim (`int`, *optional*, defaults to 2048): Inner size of the decoder FFNs.
        max_position_embeddings (`int`, *optional*, defaults to 1024):
            Longest sequence the position table covers. Longer inputs raise a ValueError.
        position_embedding_type (`str`, *optional*, defaults to `"sinusoidal"`):
            `"sinusoidal"`: fairseq's table (the papers' code and M2M100): positions start at
            `pad_token_id + 1` and padding tokens get a zero vector. `"sinusoidal_marian"`: Marian's
            table and numbering (positions from 0), needed for an exact conversion to `MarianMTModel`.
            `"learned"`: fairseq's learned positions (same numbering as `"sinusoidal"`).
        normalize_before (`bool`, *optional*, defaults to `False`):
            Pre-norm (layer norm before each sublayer and a final layer norm per stack) instead of
            post-norm, the papers' fairseq default.
        layernorm_embedding (`bool`, *optional*, defaults to `False`):
            Layer norm on the embeddings after positions are added (the LEE/LAA authors' setting).
        scale_embedding (`bool`, *optional*, defaults to `True`): Multiply token embeddings by sqrt(d_model).
        dropout (`float`, *optional*, defaults to 0.1): Dropout on embeddings and sublayer outputs.
        attention_dropout (`float`, *optional*, defaults to 0.0): Dropout on attention probabilities.
        activation_dropout (`float`, *optional*, defaults to 0.0): Dropout after the FFN activation.
        activation_function (`str`, *optional*, defaults to `"relu"`): FFN activation, a key of `transformers.activations.ACT2FN`.
        languages (`list[str]`, *optional*, defaults to `[]`):
            Ordered language codes; a language id is an index into this list.
        lang_tag_token_ids (`list[int]`, *optional*):
            Vocabulary id of each language's tag token, aligned with `languages`.
        lang_tag_style (`str`, *optional*, defaults to `"source"`):
            `"source"`: the target-language tag is prepended to the source (Johnson et al.);
            `"target"`: the tag is the decoder's first token after the start token (the model
            inserts it in `generate`); `"both"`: NLLB-200's and M2M-100's convention, the source
            language's tag before the source and the target language's tag first in the decoder;
            `"none"`: no tag, the language modules alone steer.
        language_embedding (`str`, *optional*, defaults to `"none"`):
            `"additive"` adds a learned vector of the source language to every encoder token
            embedding and one of the target language to every decoder token embedding (XLM; the
            "additive" baseline of the XLP paper, Table 2).
        central_language (`str`, *optional*): The central language of CLL (Qu & Watanabe), if any.
        high_resource_languages (`list[str]`, *optional*, defaults to `[]`): HLT-MT's high-resource targets.
        language_pairs (`list[list[str]]`, *optional*, defaults to `[]`):
            Ordered `[src, tgt]` pairs for modules keyed by direction (mCLM). `"src-tgt"` strings are accepted.
        routing_strategy (`str`, *optional*, defaults to `"auto"`):
            How per-language parameters are applied to a mixed batch: `"gather"` (per-example weights
            and a batched matmul), `"group"` (rows grouped by language), `"dense"` (every language's
            weight in one matmul, each row keeping its own) or `"auto"` (chosen per call from the
            batch size, the languages present, the weight size and whether decoding can reuse gathered weights).
        encoder_drop_residual (`list[[int, str]]`, *optional*, defaults to `[]`):
            Residual connections removed in the encoder, as `[layer, sublayer]` with sublayer `"self_attn"` or
            `"ffn"`: `[[N // 2, "self_attn"]]` is the Residual baseline of Liu et al. (2021) for zero-shot
            translation; CLL's SD removes `[[N // 2, "ffn"]]`.
        **kwargs:
            [`PretrainedConfig`]'s arguments; the special ids `pad_token_id`, `bos_token_id`, `eos_token_id` and
            `decoder_start_token_id` default to fairseq's dictionary layout (`<s>`=0, `<pad>`=1, `</s>`=2;
            decoding starts from `</s>`).
    """

    model_type = "langspec_base"
    keys_to_ignore_at_inference = ["past_key_values", "cache"]
    # the variants cannot be built without `languages`: transformers before 5.2x builds `cls()` to diff a
    # config against its defaults (saving, and generate()'s check of generation parameters) unless told so
    has_no_defaults_at_init = True
    attribute_map = {
        "num_attention_heads": "encoder_attention_heads",
        "hidden_size": "d_model",
        "num_hidden_layers": "encoder_layers",
    }

    def __init__(
        self,
        vocab_size: int = 32000,
        d_model: int = 512,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        encoder_attention_heads: int = 8,
        decoder_attention_heads: int = 8,
        encoder_ffn_dim: int = 2048,
        decoder_ffn_dim: int = 2048,
        max_position_embeddings: int = 1024,
        position_embedding_type: str = "sinusoidal",
        normalize_before: bool = False,
        layernorm_embedding: bool = False,
        scale_embedding: bool = True,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation_function: str = "relu",
        languages: Sequence[str] | None = None,
        lang_tag_token_ids: Sequence[int] | None = None,
        lang_tag_style: str = "source",
        language_embedding: str = "none",
        central_language: str | None = None,
        high_resource_languages: Sequence[str] | None = None,
        language_pairs: Sequence[Sequence[str] | str] | None = None,
        routing_strategy: str = "auto",
        encoder_drop_residual: Sequence[Sequence[int | str]] | None = None,
        use_cache: bool = True,
        pad_token_id: int = 1,
        bos_token_id: int = 0,
        eos_token_id: int = 2,
        decoder_start_token_id: int = 2,
        tie_word_embeddings: bool = True,
        is_encoder_decoder: bool = True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_ffn_dim = encoder_ffn_dim
        self.decoder_ffn_dim = decoder_ffn_dim
        self.max_position_embeddings = max_position_embeddings
        self.position_embedding_type = position_embedding_type
        self.normalize_before = normalize_before
        self.layernorm_embedding = layernorm_embedding
        self.scale_embedding = scale_embedding
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation_function = activation_function
        self.languages = list(languages or [])
        self.lang_tag_token_ids = None if lang_tag_token_ids is None else [int(i) for i in lang_tag_token_ids]
        self.lang_tag_style = lang_tag_style
        self.language_embedding = language_embedding
        self.central_language = central_language
        self.high_resource_languages = list(high_resource_languages or [])
        self.language_pairs = [split_language_pair(p) for p in (language_pairs or [])]
        self.routing_strategy = routing_strategy
        self.encoder_drop_residual = [[int(layer), str(sublayer)] for layer, sublayer in (encoder_drop_residual or [])]
        self.use_cache = use_cache
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            tie_word_embeddings=tie_word_embeddings,
            is_encoder_decoder=is_encoder_decoder,
            **kwargs,
        )
        self.validate_langspec()

    # ------------------------------------------------------------------ language contract
    def card_settings(self) -> str:
        """The method's own settings as a Markdown list, for its model card (none for the plain Transformer)."""
        return ""

    @property
    def num_languages(self) -> int:
        return len(self.languages)

    def language_id(self, code: str) -> int:
        """Index of `code` in `config.languages`; a ValueError names the known codes otherwise."""
        try:
            return self.languages.index(code)
        except ValueError:
            raise ValueError(
                f"Unknown language code {code!r}: config.languages is {self.languages}. Use one of these "
                "codes, or build the model with a config whose `languages` list includes it."
            ) from None

    def language_ids(self, codes: str | Iterable[str]) -> list[int]:
        """Ids of a code or of a list of codes (see :meth:`language_id`)."""
        if isinstance(codes, str):
            return [self.language_id(codes)]
        return [self.language_id(c) for c in codes]

    def pair_id(self, src: str, tgt: str) -> int:
        """Index of the direction `src -> tgt` in `config.language_pairs`."""
        try:
            return self.language_pairs.index([src, tgt])
        except ValueError:
            raise ValueError(
                f"Direction {src}->{tgt} is not in config.language_pairs ({len(self.language_pairs)} pairs); "
                "add it to `language_pairs` when building the config."
            ) from None

    # ------------------------------------------------------------------ validation
    def validate_langspec(self) -> None:
        """Raise a ValueError naming the field and the fix for any impossible setting."""
        check_choice("lang_tag_style", self.lang_tag_style, LANG_TAG_STYLES)
        check_choice("position_embedding_type", self.position_embedding_type, POSITION_EMBEDDING_TYPES)
        check_choice("language_embedding", self.language_embedding, LANGUAGE_EMBEDDING_TYPES)
        check_choice("routing_strategy", self.routing_strategy, ROUTING_STRATEGIES)
        if self.activation_function not in ACT2FN:
            raise ValueError(
                f"activation_function={self.activation_function!r} is unknown; use one of "
                f"{sorted(ACT2FN)} (the papers use 'relu')."
            )
        for field in ("vocab_size", "d_model", "max_position_embeddings", "encoder_ffn_dim", "decoder_ffn_dim"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive, got {getattr(self, field)}.")
        for stack in ("encoder", "decoder"):
            heads = getattr(self, f"{stack}_attention_heads")
            if heads <= 0 or self.d_model % heads:
                raise ValueError(
                    f"{stack}_attention_heads={heads} does not divide d_model={self.d_model}; choose a head "
                    f"count that divides d_model (e.g. {_divisor_hint(self.d_model)})."
                )
            if getattr(self, f"{stack}_layers") < 1:  # 0 built a model whose stack was its embeddings alone
                raise ValueError(
                    f"{stack}_layers={getattr(self, f'{stack}_layers')} must be at least 1: every method inserts "
                    f"its modules into the layers of both stacks."
                )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)} must be in [0, 1).")
        if not self.tie_word_embeddings:
            raise ValueError(
                "tie_word_embeddings=False is not supported: the backbone shares one embedding matrix "
                "between encoder, decoder and output projection, as in the papers (fairseq's "
                "--share-all-embeddings). Leave tie_word_embeddings=True."
            )
        for tok in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, tok)
            if value is None or not 0 <= value < self.vocab_size:
                raise ValueError(f"{tok}={value} must be an id in [0, vocab_size={self.vocab_size}).")
        self._validate_languages()

    def _validate_languages(self) -> None:
        langs = self.languages
        if any(not isinstance(c, str) or not c for c in langs):
            raise ValueError(f"languages must be non-empty strings, got {langs}.")
        duplicates = sorted({c for c in langs if langs.count(c) > 1})
        if duplicates:
            raise ValueError(f"languages lists {duplicates} more than once; each code must appear once.")
        if self.lang_tag_token_ids is not None:
            if len(self.lang_tag_token_ids) != len(langs):
                raise ValueError(
                    f"lang_tag_token_ids has {len(self.lang_tag_token_ids)} ids for {len(langs)} languages; give "
                    "one tag id per entry of `languages` (LangSpecTokenizer.lang_tag_token_ids has them)."
                )
            bad = [i for i in self.lang_tag_token_ids if not 0 <= i < self.vocab_size]
            if bad:
                raise ValueError(f"lang_tag_token_ids {bad} are outside the vocabulary [0, {self.vocab_size}).")
        if decoder_tag(self.lang_tag_style) and self.lang_tag_token_ids is None:
            raise ValueError(
                f"lang_tag_style={self.lang_tag_style!r} needs lang_tag_token_ids: the decoder starts with the target "
                "language's tag. Pass lang_tag_token_ids (one per language) or use lang_tag_style='source'."
            )
        if self.language_embedding != "none" and not langs:
            raise ValueError(
                f"language_embedding={self.language_embedding!r} needs the `languages` list to size its table."
            )
        known = set(langs)
        if self.central_language is not None and self.central_language not in known:
            raise ValueError(f"central_language={self.central_language!r} is not in languages={langs}.")
        unknown = [c for c in self.high_resource_languages if c not in known]
        if unknown:
            raise ValueError(f"high_resource_languages {unknown} are not in languages={langs}.")
        unknown_pairs = [p for p in self.language_pairs if p[0] not in known or p[1] not in known]
        if unknown_pairs:
            raise ValueError(f"language_pairs {unknown_pairs} use codes that are not in languages={langs}.")
        for layer, sublayer in self.encoder_drop_residual:
            if not 0 <= layer < self.encoder_layers or sublayer not in ("self_attn", "ffn"):
                raise ValueError(
                    f"encoder_drop_residual entry [{layer}, {sublayer!r}] must name an encoder layer in "
                    f"[0, {self.encoder_layers}) and a sublayer 'self_attn' or 'ffn'."
                )


def backbone_fields(config: PretrainedConfig) -> dict:
    """The fields of `config` that `LangSpecConfig` itself takes (the backbone and the language contract): a variant's
    config without its method's fields, or a converted checkpoint's, as keyword arguments of another config."""
    names = [n for n in inspect.signature(LangSpecConfig.__init__).parameters if n not in ("self", "kwargs")]
    return {n: getattr(config, n) for n in names if hasattr(config, n)}


def check_choice(field: str, value: object, allowed: Sequence[str]) -> None:
    """A ValueError naming `field` and the allowed values when `value` is not one of them."""
    if value not in allowed:
        raise ValueError(f"{field}={value!r} is not supported; use one of {list(allowed)}.")


def _divisor_hint(d_model: int) -> list[int]:
    return [h for h in (1, 2, 4, 8, 16) if d_model % h == 0]


def split_language_pair(pair: Sequence[str] | str) -> list[str]:
    """`[src, tgt]` of a pair written `"src-tgt"` or `[src, tgt]`; a string with more than one `-` is refused."""
    if isinstance(pair, str):
        parts = pair.split("-")
        if len(parts) != 2:
            raise ValueError(f"language pair {pair!r} is ambiguous: write it as [src, tgt] (codes may contain '-').")
        return parts
    src, tgt = pair
    return [src, tgt]


__all__ = ["LangSpecConfig"]
