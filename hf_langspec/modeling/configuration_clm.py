"""Configuration of CLM (Liu et al. 2023): token-level cross-lingual feature mixing."""

from __future__ import annotations

import inspect
from typing import Any

from .configuration_langspec import LangSpecConfig, check_choice
from .module_clm import CLM_KEYS, CLM_MAP_INITS, CLM_NORMS, CLM_VARIANTS, UNSEEN_PAIR_RULES

# what a card calls each CLM variant
CLM_VARIANT_NAMES = {"sclm": "sCLM (one gate per layer)", "mclm": "mCLM (a gate per layer and {key})",
                     "ls": "LS ablation (one map per {key}, no gate)", "none": "none"}  # fmt: skip


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

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        lines = [
            f"- Encoder CLM: {CLM_VARIANT_NAMES[self.clm_encoder].format(key=self.clm_encoder_key)}",
            f"- Decoder CLM: {CLM_VARIANT_NAMES[self.clm_decoder].format(key=self.clm_decoder_key)}",
            f"- Placement: {'every sublayer' if self.clm_sublayers == 'all' else 'FFN sublayers only (CLM-top)'}",
            "- Normalisation: "
            + (
                "pre-LN form, z = h + mix(LN(h))"
                if getattr(self, "clm_norm", "post") == "pre"
                else "eq. 3, z = LN(h + mix(h))"
            ),
            f"- Features k = {self.clm_num_features}, smoothing alpha = {self.clm_alpha}"
            + (f", inference pruned to the top {self.clm_top_w}" if self.clm_top_w else ""),
            f"- Directions without trained parameters (zero-shot, pair-keyed mCLM): {self.clm_unseen_pair}",
        ]
        return "\n".join(lines)


# ---------------------------------------------------------------------------- settings measured to fail
CLM_RISKY_RATE = 1e-3  # at or above, with fewer than CLM_SAFE_WARMUP warm-up steps: the setting that collapsed
CLM_SAFE_WARMUP = 1000


def _clm_model(model: dict[str, Any]) -> dict[str, Any] | None:
    """An experiment config's model section over `CLMConfig`'s own defaults (None for any class but `clm`): the
    risks below read a field the user left out as the model will build it."""
    if model.get("class") != "clm":
        return None
    parameters = inspect.signature(CLMConfig.__init__).parameters.values()
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty} | model


def clm_collapse_risk(model: dict[str, Any], training: dict[str, Any]) -> str | None:
    """The warning for the measured CLM failure, from an experiment config's model and training sections: CLM in
    the encoder of a pre-norm model in eq. 3's post form (its LayerNorm after every sublayer) at a high learning
    rate after a short warm-up trained encoders that ignore their source (bible6 and bible11, every seed); None for
    any other setting."""
    model = _clm_model(model)
    if model is None or model["clm_encoder"] == "none":
        return None
    if not model.get("normalize_before", False) or model["clm_norm"] != "post":
        return None
    rate, warmup = training.get("learning_rate", 5e-5), training.get("warmup_steps", 0)
    if not isinstance(rate, (int, float)) or rate < CLM_RISKY_RATE or warmup >= CLM_SAFE_WARMUP:
        return None
    return (
        f"CLM in the encoder of a pre-norm model with eq. 3's LayerNorm after every sublayer, at learning rate "
        f"{rate} after {warmup} warm-up steps: this setting trained encoders that ignore their source (bible6 and "
        "bible11, every seed; docs/DECISIONS.md CLM). Use model.clm_norm: pre (the pre-LN form), or the paper's "
        "schedule (learning_rate 5e-4, warmup_steps 4000, lr_scheduler_type inverse_sqrt), or clm_encoder: none; "
        "check a run with hf_langspec.evaluation.source_use."
    )


CLM_PAPER_SMALLEST_K = 35  # the paper's smallest k (Table 2, WMT-14 en-xx); at k = 8 the Xavier start measured 0.53


def clm_map_start_risk(model: dict[str, Any]) -> str | None:
    """The warning for CLM in the encoder with few Xavier-started maps, from an experiment config's model section:
    at k = 8 each CLM starts as a random distortion about half the size of its input (|h~|/|h| = 0.53; 0.11-0.20 at
    the paper's k 94-280), and on bible6 that start cost 1.4-1.5 en->xx / 2.3-2.5 xx->en BLEU against the control at
    either norm placement, where maps from zero gave -0.19 en->xx (the wrong direction, significant over sentences
    only) and +0.38 xx->en in the post-norm pair (3 seeds each, bible6_clm_norm); None for any other setting. CLM in
    the decoder alone is not warned about: the encoder's CLM held three quarters of the deficit (sCLM-E, one seed),
    and sCLM-D in the pre-norm model gained en->xx +0.33 BLEU over three seeds on bible6 (significant over sentences
    only), though one post-norm seed of it lost en->xx (-0.69)."""
    model = _clm_model(model)
    if model is None or model["clm_encoder"] not in ("sclm", "mclm"):
        return None
    k = model["clm_num_features"]
    if model["clm_map_init"] != "xavier" or not isinstance(k, int) or k >= CLM_PAPER_SMALLEST_K:
        return None
    return (
        f"CLM in the encoder with k = {k} maps started Xavier-uniform (model.clm_map_init: xavier, the default; the "
        f"paper's k is {CLM_PAPER_SMALLEST_K}-560): with few maps each CLM starts as a large random distortion of its "
        "input (half its size at k = 8), which cost 1.4-2.5 BLEU against the control on bible6, where maps from zero "
        "cost 0.19 en->xx and gained 0.38 xx->en in the paper's post-norm setting (3 seeds; docs/methods/clm.md). "
        "Use model.clm_map_init: zeros."
    )


__all__ = ["CLMConfig", "clm_collapse_risk", "clm_map_start_risk"]
