"""Configuration of HLT-MT (Yang et al. 2022): high-resource language-specific training with the SLP."""

from __future__ import annotations

from .configuration_langspec import LangSpecConfig


class HLTConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus the selective language-specific pool after the decoder (see `module_slp.py`).

    Args:
        hlt_num_adapters (`int`, *optional*, defaults to 3): T, the adapters of the pool (the authors' code uses 3
            on WMT-10), plus one universal adapter for the other targets.
        hlt_hidden_dim (`int`, *optional*, defaults to 3072): the adapters' inner size d_h (> d; code: 3072 at 768).
        hlt_stage (`int`, *optional*, defaults to 1): 1: high-resource training with the gate and the disparity loss;
            2: all directions with the fixed assignment and the universal adapter.
        hlt_hard_probability (`float`, *optional*, defaults to 0.5): share of stage-1 training forwards routed hard.
        hlt_disparity (`str`, *optional*, defaults to `"pairs"`): equation 10 (`"pairs"`) or the code's `"all"`.
        hlt_activation (`str`, *optional*, defaults to `"relu"`): the paper's ReLU, or the code's `"gelu"`.
        high_resource_languages (`list[str]`): the targets with a pool adapter (the others use the universal one).
    """

    model_type = "langspec_hlt"

    def __init__(
        self,
        hlt_num_adapters: int = 3,
        hlt_hidden_dim: int = 3072,
        hlt_stage: int = 1,
        hlt_hard_probability: float = 0.5,
        hlt_disparity: str = "pairs",
        hlt_activation: str = "relu",
        **kwargs,
    ):
        self.hlt_num_adapters = hlt_num_adapters
        self.hlt_hidden_dim = hlt_hidden_dim
        self.hlt_stage = hlt_stage
        self.hlt_hard_probability = hlt_hard_probability
        self.hlt_disparity = hlt_disparity
        self.hlt_activation = hlt_activation
        super().__init__(**kwargs)
        if hlt_stage not in (1, 2):
            raise ValueError(f"hlt_stage={hlt_stage} must be 1 (high-resource training) or 2 (all directions).")
        if hlt_disparity not in ("pairs", "all") or hlt_activation not in ("relu", "gelu"):
            raise ValueError("hlt_disparity must be 'pairs' or 'all', and hlt_activation 'relu' or 'gelu'.")
        if not 0 <= hlt_hard_probability <= 1 or hlt_num_adapters < 1:
            raise ValueError("hlt_hard_probability must be in [0, 1] and hlt_num_adapters at least 1.")
        if not self.high_resource_languages:
            raise ValueError("HLT-MT needs high_resource_languages: the targets that get a pool adapter.")
        if self.lang_tag_token_ids is None:
            raise ValueError("The SLP gate reads the target tag's embedding: the config needs lang_tag_token_ids.")

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        return "\n".join([
            f"- High-resource targets (pool adapters): {', '.join(self.high_resource_languages)}; others: the universal adapter",
            f"- {self.hlt_num_adapters} adapters of inner size {self.hlt_hidden_dim} ({self.hlt_activation}); stage {self.hlt_stage}",
        ])  # fmt: skip


__all__ = ["HLTConfig"]
