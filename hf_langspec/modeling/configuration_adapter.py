"""Configuration of the adapter-family baselines: Bapna & Firat (2019), Philip et al. (2020), LS-MNMT (Fan et al.)."""

from __future__ import annotations

from collections.abc import Sequence

from .configuration_langspec import LangSpecConfig, check_choice
from .module_adapter import ADAPTER_FORMS, ADAPTER_NORMS

ADAPTER_STACKS = ("encoder", "decoder")
ADAPTER_POSITIONS = ("layers", "top")
ADAPTER_KEYS = ("language", "pair")

# The papers' baselines as settings; explicit fields override a preset's.
ADAPTER_PRESETS: dict[str, dict[str, object]] = {
    # Bapna & Firat 2019 as the CLM paper trains it (Tables 1, 2, 9): a language-pair adapter after every
    # encoder and decoder layer, LN -> down (128) -> ReLU -> up -> residual, trained from scratch.
    "bapna_firat": {"adapter_stacks": ["encoder", "decoder"], "adapter_position": "layers", "adapter_key": "pair",
                    "adapter_form": "bottleneck", "adapter_dim": 128, "adapter_norm": "pre"},
    # Philip et al. 2020: monolingual adapters, the source language's in the encoder and the target
    # language's in the decoder, so unseen (zero-shot) directions compose.
    "monolingual": {"adapter_stacks": ["encoder", "decoder"], "adapter_position": "layers", "adapter_key": "language",
                    "adapter_form": "bottleneck", "adapter_dim": 128, "adapter_norm": "pre"},
    # The LAA paper's monolingual adapter (section 5.3, Table 3 rows 8-11): one d x d matrix per language,
    # no bottleneck or activation, shared by all layers (the parameter count of LAA); choose the stacks.
    "monolingual_matrix": {"adapter_stacks": ["decoder"], "adapter_position": "layers", "adapter_key": "language",
                           "adapter_form": "matrix", "adapter_share_layers": True, "adapter_norm": "none"},
    # LS-MNMT (Fan et al.) as HLT-MT compares with it: a language-specific layer per target language at the
    # end of the decoder, in the form of HLT-MT's equation 4 (FFN, residual, LayerNorm) with the FFN's width.
    "ls_mnmt": {"adapter_stacks": ["decoder"], "adapter_position": "top", "adapter_key": "language",
                "adapter_form": "bottleneck", "adapter_dim": None, "adapter_norm": "post"},
}  # fmt: skip

DEFAULTS: dict[str, object] = ADAPTER_PRESETS["bapna_firat"] | {
    "adapter_share_layers": False,
    "adapter_activation": "relu",
}


class AdapterConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus per-language (or per-direction) adapters (see `module_adapter.py`): the adapter
    baselines the papers compare with.

    | paper baseline | settings |
    |---|---|
    | +Adapter (Bapna & Firat; CLM paper, bottleneck 128) | `adapter_preset="bapna_firat"` (the default) |
    | monolingual adapters (Philip et al.) | `adapter_preset="monolingual"` |
    | Adapter_enc / _dec / _enc,dec of the LAA paper | `adapter_preset="monolingual_matrix"`, `adapter_stacks=[...]` |
    | LS-MNMT (Fan et al.; HLT-MT's Table 1) | `adapter_preset="ls_mnmt"` |

    Args:
        adapter_preset (`str`, *optional*): one of `ADAPTER_PRESETS`; fills every field not given explicitly.
        adapter_stacks (`list[str]`, *optional*, defaults to `["encoder", "decoder"]`): the stacks with adapters.
        adapter_position (`str`, *optional*, defaults to `"layers"`): `"layers"`: after every layer (the `ffn_out`
            point); `"top"`: once after the stack (`enc_out` / `dec_top`).
        adapter_key (`str`, *optional*, defaults to `"pair"`): `"pair"`: one adapter per direction in
            `language_pairs`; `"language"`: the source language's in the encoder, the target's in the decoder.
        adapter_form (`str`, *optional*, defaults to `"bottleneck"`): `"bottleneck"` or `"matrix"` (d x d).
        adapter_dim (`int`, *optional*, defaults to 128): the bottleneck size; `None` takes the stack's FFN size.
        adapter_norm (`str`, *optional*, defaults to `"pre"`): LayerNorm before the adapter (`"pre"`, Bapna & Firat),
            after the residual (`"post"`, HLT-MT's equation 4) or none.
        adapter_share_layers (`bool`, *optional*, defaults to `False`): one adapter per key for all layers.
        adapter_activation (`str`, *optional*, defaults to `"relu"`): `"relu"` or `"gelu"`.
    """

    model_type = "langspec_adapter"

    def __init__(
        self,
        adapter_preset: str | None = None,
        adapter_stacks: Sequence[str] | None = None,
        adapter_position: str | None = None,
        adapter_key: str | None = None,
        adapter_form: str | None = None,
        adapter_dim: int | None = None,
        adapter_norm: str | None = None,
        adapter_share_layers: bool | None = None,
        adapter_activation: str | None = None,
        **kwargs,
    ):
        if adapter_preset is not None and adapter_preset not in ADAPTER_PRESETS:
            raise ValueError(f"adapter_preset={adapter_preset!r} is unknown; use one of {sorted(ADAPTER_PRESETS)}.")
        given = {
            "adapter_stacks": adapter_stacks, "adapter_position": adapter_position, "adapter_key": adapter_key,
            "adapter_form": adapter_form, "adapter_dim": adapter_dim, "adapter_norm": adapter_norm,
            "adapter_share_layers": adapter_share_layers, "adapter_activation": adapter_activation,
        }  # fmt: skip
        preset = DEFAULTS | ADAPTER_PRESETS.get(adapter_preset, {})
        self.adapter_preset = adapter_preset
        for name, value in given.items():
            setattr(self, name, value if value is not None else preset.get(name))
        self.adapter_stacks = list(self.adapter_stacks)
        super().__init__(**kwargs)
        if self.adapter_dim is None:  # LS-MNMT: a full-width language-specific FFN layer
            self.adapter_dim = self.decoder_ffn_dim
        self._check_adapters()

    def _check_adapters(self) -> None:
        choices = {
            "adapter_position": ADAPTER_POSITIONS, "adapter_key": ADAPTER_KEYS,
            "adapter_form": ADAPTER_FORMS, "adapter_norm": ADAPTER_NORMS, "adapter_activation": ("relu", "gelu"),
        }  # fmt: skip
        for field, allowed in choices.items():
            check_choice(field, getattr(self, field), allowed)
        if not self.adapter_stacks or any(s not in ADAPTER_STACKS for s in self.adapter_stacks):
            raise ValueError(f"adapter_stacks={self.adapter_stacks} must list one or both of {list(ADAPTER_STACKS)}.")
        if isinstance(self.adapter_dim, bool) or not isinstance(self.adapter_dim, int) or self.adapter_dim < 1:
            raise ValueError(
                f"adapter_dim={self.adapter_dim!r} must be a positive whole number (Bapna & Firat's is 128)."
            )
        if not self.languages:
            raise ValueError("Adapters need `languages`: one adapter per language or per direction.")
        if self.adapter_key == "pair" and not self.language_pairs:
            raise ValueError(
                "adapter_key='pair' needs language_pairs (the trained directions; the training pipeline fills them "
                "in), or use adapter_key='language' for monolingual adapters."
            )

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        form = "a d x d matrix" if self.adapter_form == "matrix" else f"bottleneck {self.adapter_dim}"
        return "\n".join([
            f"- Preset: {self.adapter_preset or 'none (fields set one by one)'}",
            f"- Adapters in: {', '.join(self.adapter_stacks)}, "
            + ("after every layer" if self.adapter_position == "layers" else "once after the stack")
            + (" (one per key shared by all layers)" if self.adapter_share_layers else ""),
            f"- One adapter per {'direction' if self.adapter_key == 'pair' else 'language (source in the encoder, target in the decoder)'}",
            f"- Form: {form}, LayerNorm {self.adapter_norm}, {self.adapter_activation}",
        ])  # fmt: skip


__all__ = ["ADAPTER_PRESETS", "AdapterConfig"]
