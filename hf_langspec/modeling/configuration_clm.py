"""Configuration of CLM (Liu et al. 2023): token-level cross-lingual feature mixing."""

from __future__ import annotations

from .configuration_langspec import LangSpecConfig, check_choice
from .module_clm import CLM_KEYS, CLM_MAP_INITS, CLM_NORMS, CLM_VARIANTS, UNSEEN_PAIR_RULES


class CLMConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus CLM modules in the encoder and/or the decoder (see `module_clm.py`).

    Every variant of the paper's tables is a setting:

    | paper | settings |
    |---|---|
    | sCLM / mCLM (Table 1) | `clm_encoder = clm_decoder = "sclm"` / `"mclm"` |
    | sCLM-E, mCLM-D, ... (Table 3) | the other stack `"none"` |
    | Dedicated (Table 3) | `clm_encoder="sclm", clm_decoder="mclm"` |
    | zero-shot sCLM-E + mCLM-D (Table 6) | `clm_encoder="sclm", clm_decoder="mclm", clm_decoder_key="target"` |
    | LS (Table 3) | `"ls"`: no gate, one map per pair (or language) |
    | CLM-top (Table 9) | `clm_sublayers="ffn"` |
    | sparsity (Figure 4) | `clm_top_w=w` at inference |

    Args:
        clm_encoder / clm_decoder (`str`, *optional*, defaults to `"sclm"`): `"sclm"` (one gate P per layer),
            `"mclm"` (one P per layer and key), `"ls"` (no gate; one language-specific map per key) or `"none"`.
            At a small budget (bible11: d 128, 3,000 steps) sCLM in the encoder left models that ignore their
            source, pre- and post-norm alike, where `clm_encoder="none"` (sCLM-D) did not: check a short run
            with `hf_langspec.evaluation.source_use` (docs/DECISIONS.md, CLM).
        clm_encoder_key / clm_decoder_key (`str`, *optional*, defaults to `"pair"`): what mCLM and LS
            parameters are per: `"pair"` (`language_pairs`, the paper), `"source"` or `"target"` language.
        clm_sublayers (`str`, *optional*, defaults to `"all"`): `"all"` sublayers (the paper's CLM) or `"ffn"`
            sublayers only (CLM-top, appendix C.1).
        clm_num_features (`int`, *optional*, defaults to 194): k, the number of maps W_j (Table 9; Table 1 uses
            280/560 for sCLM and 194/388 for mCLM, Table 2 35/70, Figure 2 74-194).
        clm_alpha (`float`, *optional*, defaults to 0.05): the smoothing alpha of equation 1.
        clm_dropout (`float`, *optional*): dropout on the mix before the residual; defaults to `dropout`.
        clm_top_w (`int`, *optional*): keep only the w largest proportions per token (section 5.4).
        clm_top_w_renormalize (`bool`, *optional*, defaults to `True`): rescale the kept proportions to sum to 1.
        clm_unseen_pair (`str`, *optional*, defaults to `"error"`): a pair outside `language_pairs` under a
            pair-keyed module raises (`"error"`) or uses the mean over trained pairs into its target language
            (`"target_mean"`).
        clm_map_init (`str`, *optional*, defaults to `"xavier"`): how the maps W_j start, where the paper is silent:
            `"xavier"` (fairseq's `Linear`: the mix starts as large as h) or `"zeros"` (the module starts as
            `z = LN(h)`, the way this package's other inserted modules start near the identity; docs/DECISIONS.md
            "CLM" compares them).
        clm_norm (`str`, *optional*, defaults to `"post"`): where eq. 3's LayerNorm sits. `"post"`: `z = LN(h +
            h~)`, the paper's form in its post-norm Transformer; `"pre"`: `z = h + h~(LN(h))`, the same parameters in
            the pre-norm form, for a pre-norm backbone (`normalize_before=True`), where `"post"` renormalises the
            stream after every sublayer and makes the CLM model a post-LN network beside a pre-LN control
            (`module_clm.py`; docs/DECISIONS.md "CLM").
        clm_implementation (`str`, *optional*, defaults to `"fast"`): `"fast"` (activation memory flat in k) or
            `"naive"` (equation 2 as written; keeps a [tokens, k, d] tensor per module).
    """

    model_type = "langspec_clm"

    def __init__(
        self,
        clm_encoder: str = "sclm",
        clm_decoder: str = "sclm",
        clm_encoder_key: str = "pair",
        clm_decoder_key: str = "pair",
        clm_sublayers: str = "all",
        clm_num_features: int = 194,
        clm_alpha: float = 0.05,
        clm_dropout: float | None = None,
        clm_top_w: int | None = None,
        clm_top_w_renormalize: bool = True,
        clm_unseen_pair: str = "error",
        clm_map_init: str = "xavier",
        clm_norm: str = "post",
        clm_implementation: str = "fast",
        **kwargs,
    ):
        self.clm_encoder = clm_encoder
        self.clm_decoder = clm_decoder
        self.clm_encoder_key = clm_encoder_key
        self.clm_decoder_key = clm_decoder_key
        self.clm_sublayers = clm_sublayers
        self.clm_num_features = clm_num_features
        self.clm_alpha = clm_alpha
        self.clm_dropout = clm_dropout
        self.clm_top_w = clm_top_w
        self.clm_top_w_renormalize = clm_top_w_renormalize
        self.clm_unseen_pair = clm_unseen_pair
        self.clm_map_init = clm_map_init
        self.clm_norm = clm_norm
        self.clm_implementation = clm_implementation
        super().__init__(**kwargs)
        self._check_clm()

    def _check_clm(self) -> None:
        choices = {
            "clm_encoder": CLM_VARIANTS, "clm_decoder": CLM_VARIANTS, "clm_encoder_key": CLM_KEYS,
            "clm_decoder_key": CLM_KEYS, "clm_sublayers": ("all", "ffn"), "clm_unseen_pair": UNSEEN_PAIR_RULES,
            "clm_map_init": CLM_MAP_INITS, "clm_norm": CLM_NORMS, "clm_implementation": ("fast", "naive"),
        }  # fmt: skip
        for field, allowed in choices.items():
            check_choice(field, getattr(self, field), allowed)
        if self.clm_num_features < 1:
            raise ValueError(f"clm_num_features={self.clm_num_features} must be at least 1 (the paper uses 35-560).")
        if not 0 <= self.clm_alpha <= 1:  # 1: uniform proportions (a hand-checkable case)
            raise ValueError(f"clm_alpha={self.clm_alpha} must be in [0, 1] (equation 1; the paper uses 0.05).")
        if self.clm_top_w is not None and not 1 <= self.clm_top_w <= self.clm_num_features:
            raise ValueError(
                f"clm_top_w={self.clm_top_w} must be between 1 and clm_num_features={self.clm_num_features}."
            )
        for side in ("encoder", "decoder"):
            variant, key = getattr(self, f"clm_{side}"), getattr(self, f"clm_{side}_key")
            if variant in ("mclm", "ls"):
                if key == "pair" and not self.language_pairs:
                    raise ValueError(
                        f"clm_{side}={variant!r} keyed by pair needs `language_pairs` (the trained directions, "
                        f"e.g. ['en-de', 'de-en']), or set clm_{side}_key='source' / 'target'."
                    )
                if not self.languages:
                    raise ValueError(f"clm_{side}={variant!r} needs `languages`.")


__all__ = ["CLMConfig"]
