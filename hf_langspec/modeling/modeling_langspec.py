"""The baseline multilingual Transformer and the `PreTrainedModel` base every variant shares.

[`LangSpecForConditionalGeneration`] is the multilingual NMT model of Johnson et al. (2017) as
the five papers train it (fairseq `transformer`, shared embeddings), with three tag styles
(`config.lang_tag_style`) and the XLM additive language embedding as an option
(`config.language_embedding="additive"`). Variants subclass it and override
:meth:`LangSpecModel.build_insertions` to place their modules at the backbone's insertion points.

fairseq's initialisation: Xavier-uniform linear layers (gain 1/sqrt(2) for q/k/v), zero biases,
embeddings N(0, d^-1/2) with a zero padding row. A language module initialises its own parameters
in `initialize(init, config)`, using `transformers.initialization` so loaded weights are never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput

from .backbone import LangSpecDecoder, LangSpecDecoderLayer, LangSpecEncoder, LangSpecEncoderLayer
from .configuration_langspec import LangSpecConfig, decoder_tag
from .decoding_cache import cache_of, cache_output, resolve_cache
from .module_language_embedding import AdditiveLanguageEmbedding
from .positions import LangSpecPositionalEmbedding
from .routing import check_language_ids


@dataclass
class LangSpecSeq2SeqLMOutput(Seq2SeqLMOutput):
    """`Seq2SeqLMOutput` plus `aux_loss`: the language modules' auxiliary losses, already included in `loss`; and
    `extra_logits`: the logits of more passes of the same batch that the loss scores against the same labels (LMS's
    fuse distillation, whose second pass runs the shared matrices)."""

    aux_loss: torch.FloatTensor | None = None
    extra_logits: tuple[torch.FloatTensor, ...] | None = None


# Arguments some transformers versions pass to every forward and that this model has no use for: the
# positions follow from the cache's length, and the loss is a plain mean (`accepts_loss_kwargs = False`).
IGNORED_FORWARD_ARGUMENTS = frozenset({"cache_position", "num_items_in_batch"})


def _refuse_unknown_arguments(model_name: str, kwargs: dict) -> None:
    """A forward must not swallow what it does not know: an argument renamed upstream would be lost silently
    (transformers 5.24's `cache` was, and every decoding step started from an empty cache)."""
    unknown = sorted(set(kwargs) - IGNORED_FORWARD_ARGUMENTS)
    if unknown:
        raise TypeError(f"{model_name}.forward() got unexpected keyword argument(s): {', '.join(unknown)}")


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs from labels: prepend the start token, drop the last label, -100 -> pad."""
    shifted = labels.new_zeros(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


# the attribute that marks a parameter trained in some rows only (its other rows' gradient masked): how many rows
# (set by `pretrained.freeze_base` for added languages' embedding rows; the Trainer masks the rest and skips decay)
ROWS_ONLY = "_hf_langspec_rows_only"


def language_module_parameter(name: str) -> bool:
    """Whether a parameter is language-specific: in a module a method inserts (`.insertions.` in its name) or
    stacked over the languages in a language-specific layer (LSL's `per_language_weight` / `per_language_bias`)."""
    return ".insertions." in f".{name}" or ".per_language_" in f".{name}"


def added_parameters(model: nn.Module) -> int:
    """The parameters a method adds to the plain backbone: its inserted modules', and for each language-specific
    layer (LSL) its `L` languages' weights less the one shared layer they replace."""
    languages = max(getattr(model.config, "num_languages", 0), 1)
    added = 0
    for name, parameter in model.named_parameters():
        if ".insertions." in f".{name}":
            added += parameter.numel()
        elif ".per_language_" in f".{name}":
            added += parameter.numel() - parameter.numel() // languages
    return added


class LangSpecPreTrainedModel(PreTrainedModel):
    config: LangSpecConfig
    config_class = LangSpecConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["LangSpecEncoderLayer", "LangSpecDecoderLayer"]
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        std = self.config.d_model**-0.5
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight, gain=getattr(module, "init_gain", 1.0))
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, LangSpecPositionalEmbedding) and module.kind != "learned":
            init.copy_(module.weight, module.sinusoidal_table())
        elif hasattr(module, "initialize"):  # language modules set their own parameters (identity, zeros, ...)
            module.initialize(init, self.config)

    def start_as_identity(self) -> LangSpecPreTrainedModel:
        """Set every language module so that the model computes what its backbone alone computes (a method added
        to a pretrained checkpoint then starts equal to it; `interop.adapt`). Each module zeroes what its residual
        branch adds (adapters' and CLL's output matrices, LAA's matrices, CLM's maps in the pre-LN form, LEE's
        table, the additive language embedding) or sets it to the identity (XLP); modules that renormalise the
        stream cannot (HLT-MT's post-norm adapters, CLM's paper form `LN(h + mix)`, LEE's tag mode) and are named in
        one ValueError, before any is changed."""
        owners = []
        for name, module in self.named_modules():
            if module is self or not hasattr(module, "start_as_identity"):
                continue
            if not any(name.startswith(owner + ".") for owner, _ in owners):  # a pool's own adapters: the pool's
                owners.append((name, module))
        problems = []
        for name, module in owners:
            reason = getattr(module, "identity_problem", lambda: None)()
            if reason:
                problems.append(f"{name}: {reason}")
        if problems:
            raise ValueError(f"{type(self).__name__} cannot start as its backbone: " + "; ".join(problems) + ".")
        for _, module in owners:
            module.start_as_identity()
        return self


class LangSpecModel(LangSpecPreTrainedModel):
    """The bare encoder-decoder: shared embeddings, encoder, decoder, and their insertion-point modules."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: LangSpecConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        encoder_insertions, decoder_insertions = self.build_insertions(config)
        self.encoder = LangSpecEncoder(
            config,
            nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id),
            encoder_insertions,
            self.build_layer,
        )
        self.decoder = LangSpecDecoder(
            config,
            nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id),
            decoder_insertions,
            self.build_layer,
        )
        self.post_init()

    @staticmethod
    def build_layer(config: LangSpecConfig, side: str, index: int) -> nn.Module:
        """Layer `index` of the `side` stack ("encoder" or "decoder"): the shared layer. Variants that replace
        whole layers (LSL) override this."""
        return LangSpecEncoderLayer(config, index) if side == "encoder" else LangSpecDecoderLayer(config, index)

    @staticmethod
    def build_insertions(config: LangSpecConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        """Modules of the encoder and of the decoder, keyed by insertion point. Variants override this."""
        if config.language_embedding == "additive":
            return (
                {"embed": AdditiveLanguageEmbedding(config.num_languages, config.d_model, "source")},
                {"embed": AdditiveLanguageEmbedding(config.num_languages, config.d_model, "target")},
            )
        return {}, {}

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.shared = value
        self.encoder.embed_tokens = self.shared
        self.decoder.embed_tokens = self.shared

    def get_encoder(self) -> LangSpecEncoder:
        return self.encoder

    def get_decoder(self) -> LangSpecDecoder:
        return self.decoder

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        tgt_lang_ids: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: Cache | None = None,
    ) -> Seq2SeqModelOutput:
        r"""
        src_lang_ids (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Source language of each example, an index into `config.languages`.
        tgt_lang_ids (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Target language of each example. Required when a module or the tag style needs it.
        cache (`EncoderDecoderCache`, *optional*):
            The decoding cache; `past_key_values` is its name before transformers 5.24, and either is accepted.
        """
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                src_lang_ids=src_lang_ids,
                tgt_lang_ids=tgt_lang_ids,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
            )
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=resolve_cache(cache, past_key_values),
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache if use_cache is not None else self.config.use_cache,
            src_lang_ids=src_lang_ids,
            tgt_lang_ids=tgt_lang_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **cache_output(cache_of(decoder_outputs)),
            decoder_hidden_states=decoder_outputs.hidden_states,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
        )


class LangSpecForConditionalGeneration(LangSpecPreTrainedModel, GenerationMixin):
    """Multilingual translation model: [`LangSpecModel`] plus the output projection tied to the embeddings.

    `forward` and `generate` take `src_lang_ids` / `tgt_lang_ids` ([B] LongTensors) next to the
    usual inputs; generate() repeats them per beam. With `lang_tag_style="target"` generate()
    starts every hypothesis with `[decoder_start, <tag of its target language>]`.
    """

    model_class = LangSpecModel
    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
    accepts_loss_kwargs = False

    def __init__(self, config: LangSpecConfig):
        super().__init__(config)
        self.model = self.model_class(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_encoder(self) -> LangSpecEncoder:
        return self.model.encoder

    def get_decoder(self) -> LangSpecDecoder:
        return self.model.decoder

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def _auxiliary_loss(self) -> torch.Tensor | None:
        """The sum of the `aux_loss` that insertion modules set in this forward (e.g. HLT-MT's disparity loss)."""
        losses = [
            module.aux_loss
            for stack in (self.model.encoder, self.model.decoder)
            for module in stack.insertions.values()
            if getattr(module, "aux_loss", None) is not None
        ]
        return sum(losses) if losses else None

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        tgt_lang_ids: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, target_length)`, *optional*):
            Target token ids; -100 is ignored by the loss. `decoder_input_ids` are derived from them
            when not given. The loss is the mean token cross-entropy (label smoothing is the Trainer's).
        src_lang_ids, tgt_lang_ids (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            See [`LangSpecModel.forward`].
        """
        _refuse_unknown_arguments(type(self).__name__, kwargs)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=resolve_cache(cache, past_key_values),
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            src_lang_ids=src_lang_ids,
            tgt_lang_ids=tgt_lang_ids,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
        )
        logits = self.lm_head(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        aux = self._auxiliary_loss()
        if loss is not None and aux is not None:
            loss = loss + aux
        return LangSpecSeq2SeqLMOutput(
            loss=loss,
            aux_loss=aux,
            logits=logits,
            **cache_output(cache_of(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
        )

    @torch.no_grad()
    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, **kwargs):
        """`GenerationMixin.generate`, plus the per-example target tag prefix for `lang_tag_style="target"`."""
        if decoder_tag(self.config.lang_tag_style) and kwargs.get("decoder_input_ids") is None:
            kwargs["decoder_input_ids"] = self._target_tag_prefix(kwargs.get("tgt_lang_ids"), generation_config)
        return super().generate(inputs, generation_config=generation_config, **kwargs)

    def _target_tag_prefix(self, tgt_lang_ids: torch.Tensor | None, generation_config) -> torch.Tensor:
        if tgt_lang_ids is None:
            raise ValueError(
                f"lang_tag_style={self.config.lang_tag_style!r} starts each translation with its target-language tag, so generate() "
                "needs `tgt_lang_ids` ([batch] LongTensor). LangSpecTokenizer returns it; or pass "
                "torch.tensor(model.config.language_ids([...]))."
            )
        config = generation_config if generation_config is not None else self.generation_config
        start = config.decoder_start_token_id
        if start is None:
            start = self.config.decoder_start_token_id
        tags = torch.tensor(self.config.lang_tag_token_ids, device=tgt_lang_ids.device)
        ids = torch.as_tensor(tgt_lang_ids, device=tgt_lang_ids.device)
        ids = check_language_ids(ids, "tgt_lang_ids", self.config.num_languages, ids.numel())
        return torch.stack([torch.full_like(ids, start), tags[ids]], dim=1)


__all__ = ["LangSpecForConditionalGeneration", "LangSpecModel", "LangSpecPreTrainedModel"]
