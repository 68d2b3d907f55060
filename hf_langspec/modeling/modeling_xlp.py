"""The XLP encoder family: `XLPModel`, `XLPForMaskedLM`, `XLPForSequenceClassification`.

XLM-style encoders (Lample & Conneau 2019) where every sentence carries its language id
(`src_lang_ids`, [B]) and the word embeddings are projected into that language's space before
positions are added (XLP, Luo et al., Algorithm 1). The encoder is the shared backbone's
`LangSpecEncoder`; the language signal sits at its `embed` insertion point.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput, SequenceClassifierOutput

from .backbone import LangSpecEncoder
from .configuration_xlp import XLPConfig
from .modeling_langspec import LangSpecPreTrainedModel
from .module_language_embedding import AdditiveLanguageEmbedding
from .module_xlp import LanguageProjection


class XLPPreTrainedModel(LangSpecPreTrainedModel):
    config: XLPConfig
    config_class = XLPConfig
    _no_split_modules = ["LangSpecEncoderLayer"]


class XLPModel(XLPPreTrainedModel):
    """Token embeddings + the shared encoder with the language encoding of `config.language_encoding`."""

    _tied_weights_keys = {"encoder.embed_tokens.weight": "shared.weight"}

    def __init__(self, config: XLPConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        insertions: dict[str, nn.Module] = {}
        if config.language_encoding == "projection":
            insertions["embed"] = LanguageProjection(config.num_languages, config.d_model, "source")
        elif config.language_encoding == "additive":
            insertions["embed"] = AdditiveLanguageEmbedding(config.num_languages, config.d_model, "source")
        embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.encoder = LangSpecEncoder(config, embed_tokens, insertions)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.shared

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.shared = value
        self.encoder.embed_tokens = value

    def language_projection(self) -> LanguageProjection | None:
        """XLP's projections (None with an additive or no language encoding)."""
        for module in self.encoder.insertions.values():
            if isinstance(module, LanguageProjection):
                return module
        return None

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput:
        r"""
        src_lang_ids (`torch.LongTensor` of shape `(batch_size,)`):
            The language of each sentence, an index into `config.languages`.
        """
        return self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds,
            src_lang_ids=src_lang_ids, output_hidden_states=output_hidden_states,
        )  # fmt: skip


class XLPForMaskedLM(XLPPreTrainedModel):
    """XLM's masked language modelling (15% of tokens, 80/10/10; transformers' DataCollatorForLanguageModeling)."""

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}
    accepts_loss_kwargs = False

    def __init__(self, config: XLPConfig):
        super().__init__(config)
        self.model = XLPModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    def forward(self, input_ids=None, attention_mask=None, src_lang_ids=None, labels=None, inputs_embeds=None,
                output_hidden_states=None, return_dict=None) -> MaskedLMOutput:  # fmt: skip
        r"""labels (`torch.LongTensor` of shape `(batch_size, length)`): original ids of masked tokens, -100 elsewhere."""
        out = self.model(input_ids, attention_mask, src_lang_ids, inputs_embeds, output_hidden_states)
        logits = self.lm_head(out.last_hidden_state)
        loss = None if labels is None else F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


class XLPForSequenceClassification(XLPPreTrainedModel):
    """Sentence(-pair) classification on the first token's state (XLM's summary), e.g. XNLI.

    With `config.freeze_language_projections` (the default, as in the paper) the projections get no
    gradient during fine-tuning, also after `from_pretrained` (which would reset `requires_grad`).
    """

    accepts_loss_kwargs = False

    def __init__(self, config: XLPConfig):
        super().__init__(config)
        self.model = XLPModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()
        projection = self.model.language_projection()
        if projection is not None:
            projection.frozen = config.freeze_language_projections

    def forward(self, input_ids=None, attention_mask=None, src_lang_ids=None, labels=None, inputs_embeds=None,
                output_hidden_states=None, return_dict=None) -> SequenceClassifierOutput:  # fmt: skip
        r"""labels (`torch.LongTensor` of shape `(batch_size,)`): class indexes."""
        out = self.model(input_ids, attention_mask, src_lang_ids, inputs_embeds, output_hidden_states)
        logits = self.classifier(self.dropout(out.last_hidden_state[:, 0]))
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


__all__ = ["XLPForMaskedLM", "XLPForSequenceClassification", "XLPModel", "XLPPreTrainedModel"]
