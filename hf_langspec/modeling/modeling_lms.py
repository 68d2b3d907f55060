"""LMS and fuse distillation in translation: low-rank language-specific matrices on the backbone's projections."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_langspec import LangSpecConfig, backbone_fields
from .configuration_lms import LMSConfig
from .modeling_langspec import LangSpecForConditionalGeneration, LangSpecModel
from .module_lms import LanguageMatrixSynthesis

_ATTENTION = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


def symmetric_kl(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Eq. 4's `1/2 (KL(p || q) + KL(q || p)) = 1/2 sum_v (p - q)(log p - log q)` per position, from two passes'
    logits `[..., V]`: in float32 for half-precision logits (their softmax would underflow), in the logits' own
    precision otherwise (float64 stays float64; float32, what the published runs trained, is unchanged)."""
    dtype = torch.promote_types(logits_p.dtype, torch.float32)
    (p, log_p), (q, log_q) = _probabilities_and_logs(logits_p.to(dtype)), _probabilities_and_logs(logits_q.to(dtype))
    return 0.5 * ((p - q) * (log_p - log_q)).sum(-1)


def _probabilities_and_logs(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`softmax` and its log, the log taken of the probabilities clamped at float32's smallest normal number (its log
    is -87.3). Below it (a logit about 87 under its row's largest) `log(softmax)`, as the published runs computed it,
    gave -inf (eq. 4's term inf, or NaN where both passes underflow on one token) and a gradient `1 / p` that
    overflows; clamped, both stay finite and that token's term is understated, never overstated. Every value and
    gradient is unchanged to the bit where the probabilities are normal numbers. An exact `log_softmax` for those
    entries cost 210 ms more per forward and backward of a [32, 40, 6000] batch on a 2-core CPU, the clamp 45 ms."""
    probs = F.softmax(logits, dim=-1)
    return probs, torch.log(probs.clamp_min(torch.finfo(probs.dtype).tiny))


class LMSModel(LangSpecModel):
    """[`LangSpecModel`] with a [`LanguageMatrixSynthesis`] at each stack's FFN point (`enc_ffn_proj`,
    `dec_ffn_proj`) and/or self-attention point (`enc_self_attn`, `dec_self_attn`)."""

    config_class = LMSConfig

    @staticmethod
    def build_insertions(config: LMSConfig) -> tuple[dict[str, nn.Module], dict[str, nn.Module]]:
        encoder, decoder = LangSpecModel.build_insertions(config)
        d = config.d_model
        for side, insertions in (("encoder", encoder), ("decoder", decoder)):
            prefix = "enc" if side == "encoder" else "dec"
            layers = config.lms_layers(config.encoder_layers if side == "encoder" else config.decoder_layers)
            if "ffn" in config.lms_points:
                ffn = config.encoder_ffn_dim if side == "encoder" else config.decoder_ffn_dim
                projections = {"fc1": (d, ffn), "fc2": (ffn, d)}
                insertions[f"{prefix}_ffn_proj"] = LanguageMatrixSynthesis(config, side, projections, layers)
            if "self_attn" in config.lms_points:
                projections = dict.fromkeys(_ATTENTION, (d, d))
                insertions[f"{prefix}_self_attn"] = LanguageMatrixSynthesis(config, side, projections, layers)
        return encoder, decoder


class LMSForConditionalGeneration(LangSpecForConditionalGeneration):
    """Multilingual translation with LMS (and fuse distillation): `forward`/`generate` need the language ids.

    With `lms_fuse_distillation`, a training forward runs the batch twice, through the languages' matrices and
    through the shared ones, and returns the first pass's logits, the second's as `extra_logits` (which the package's
    Trainer scores against the same labels, with its label smoothing) and `aux_loss` = `lms_fd_weight` times the
    symmetric KL between the two passes' distributions, averaged over the target tokens (eq. 4; the authors' code
    sums it over tokens and divides by the token count, as it does the cross-entropy). The model's own `loss`
    (labels given, no label smoothing) is eq. 3: `1/2 (CE_l + CE_s) + aux_loss`. At inference the configured route
    (`lms_inference_route`) alone runs.
    """

    config_class = LMSConfig
    model_class = LMSModel

    def lms_modules(self) -> list[LanguageMatrixSynthesis]:
        return [m for stack in (self.model.encoder, self.model.decoder) for m in stack.insertions.values()
                if isinstance(m, LanguageMatrixSynthesis)]  # fmt: skip

    @contextlib.contextmanager
    def lms_route(self, route: str):
        """Within it, every LMS module uses `route` (`"language"` or `"shared"`), in training as at inference."""
        modules = self.lms_modules()
        if route == "shared" and not self.config.lms_fuse_distillation:
            raise ValueError("The shared route exists with fuse distillation only (lms_fuse_distillation=True).")
        try:
            for module in modules:
                module.route = route
            yield
        finally:
            for module in modules:
                module.route = None

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        src_lang_ids: torch.LongTensor | None = None,
        tgt_lang_ids: torch.LongTensor | None = None,
        **kwargs,
    ):
        r"""As [`LangSpecForConditionalGeneration.forward`]; in training with fuse distillation, both passes (above)."""
        kwargs = dict(
            input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask, src_lang_ids=src_lang_ids, tgt_lang_ids=tgt_lang_ids,
            **kwargs,
        )  # fmt: skip
        if not (self.training and self.config.lms_fuse_distillation):
            return super().forward(labels=labels, **kwargs)
        with self.lms_route("language"):
            specific = super().forward(labels=labels, **kwargs)
        with self.lms_route("shared"):
            shared = super().forward(labels=labels, **kwargs)
        valid = self._target_tokens(labels, kwargs)
        symmetric = symmetric_kl(specific.logits, shared.logits)
        fd = self.config.lms_fd_weight * (symmetric * valid).sum() / valid.sum().clamp(min=1)
        # the model's own loss (eq. 3; LMS modules add no other auxiliary loss): both passes' cross-entropy halved
        loss = None if labels is None else 0.5 * (specific.loss + shared.loss) + fd
        specific.loss, specific.aux_loss, specific.extra_logits = loss, fd, (shared.logits,)
        return specific

    def _target_tokens(self, labels: torch.Tensor | None, inputs: dict) -> torch.Tensor:
        """`[B, T]` 1.0 where a target token is scored: the labels that are not -100, or (the Trainer keeps the
        labels when it smooths them) the decoder inputs that are not padding."""
        if labels is not None:
            return labels.ne(-100).float()
        mask = inputs.get("decoder_attention_mask")
        if mask is not None:
            return mask.float()
        return inputs["decoder_input_ids"].ne(self.config.pad_token_id).float()

    @torch.no_grad()
    def condense(self) -> LangSpecForConditionalGeneration:
        """The model that LMS+FD-Share runs at inference, as a plain baseline (`LangSpecForConditionalGeneration`):
        every projection with LMS gets the shared synthesised matrix, `W <- W + W_v^shared W_f^shared`; nothing of it
        depends on the language any more, so it is one multilingual Transformer for every direction."""
        if not self.config.lms_fuse_distillation:
            raise ValueError(
                "condense() folds the shared matrices that fuse distillation trains; this model has none "
                "(lms_fuse_distillation=False). Fold one direction instead (hf_langspec.specialize)."
            )
        plain = LangSpecForConditionalGeneration(LangSpecConfig(**backbone_fields(self.config)))
        state = {k: v for k, v in self.state_dict().items() if ".insertions." not in k}
        for side in ("encoder", "decoder"):
            stack = getattr(self.model, side)
            for point, module in stack.insertions.items():
                if not isinstance(module, LanguageMatrixSynthesis):
                    continue
                for slot, layer in enumerate(module.layers):
                    for projection in module.projections:
                        flat = getattr(module, f"{projection}_flat")[slot, -1]
                        vertical = getattr(module, f"{projection}_vertical")[slot, -1]
                        where = f"self_attn.{_ATTENTION[projection]}" if point.endswith("self_attn") else projection
                        key = f"model.{side}.layers.{layer}.{where}.weight"
                        state[key] = state[key] + (flat @ vertical).t()
        missing, unexpected = plain.load_state_dict(state, strict=False)
        if unexpected or any(not k.endswith("lm_head.weight") for k in missing):
            raise ValueError(f"condense(): the backbone's weights do not match ({missing[:3]}, {unexpected[:3]}).")
        plain.tie_weights()
        plain.generation_config = self.generation_config
        return plain.eval()


__all__ = ["LMSForConditionalGeneration", "LMSModel", "symmetric_kl"]
