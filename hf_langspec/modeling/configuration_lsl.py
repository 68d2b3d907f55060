"""Configuration of language-specific Transformer layers (LSL; Pires et al. 2023)."""

from __future__ import annotations

from collections.abc import Sequence

from .configuration_langspec import LangSpecConfig

# The placement the paper's architecture search found for its 16-layer encoder (3-layer decoder): source-indexed
# LSLs at layers 3 and 4 and target-indexed ones at 13, 14 and 15, the others shared (numbered from 1 as in the
# paper; indices from 0 here). Taken from the reading of the paper: its text is not in ../shared/papers.
PAPER_PLACEMENT = {"encoder_layers": 16, "source": [2, 3], "target": [12, 13, 14]}
LSL_FIELDS = (
    "lsl_encoder_source_layers",
    "lsl_encoder_target_layers",
    "lsl_decoder_source_layers",
    "lsl_decoder_target_layers",
)


class LSLConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus language-specific Transformer layers (LSL; Pires et al. 2023, "Learning Language-Specific
    Layers for Multilingual Machine Translation", ACL): the layers at the listed positions are one layer per
    language, chosen per example by its source or its target language; the other layers stay shared. Compute per
    token is the shared model's; each LSL position holds `L` layers (`L - 1` added).

    Args:
        lsl_encoder_source_layers (`list[int]`, *optional*, defaults to `[]`): encoder layers (from 0) indexed by the
            source language.
        lsl_encoder_target_layers (`list[int]`, *optional*, defaults to `[]`): encoder layers indexed by the target
            language (the paper's best placement puts these at the top of the encoder).
        lsl_decoder_source_layers (`list[int]`, *optional*, defaults to `[]`): decoder layers indexed by the source.
        lsl_decoder_target_layers (`list[int]`, *optional*, defaults to `[]`): decoder layers indexed by the target.
        lsl_preset (`str`, *optional*): `"paper"`: the paper's searched placement for its 16-layer encoder (source
            layers 2-3, target layers 12-14 from 0; the paper's 3-4 and 13-15), refused at another depth; the
            lists above must then be empty.
        lsl_search (`bool`, *optional*, defaults to `False`): the paper's architecture search as an analysis: every
            encoder layer is `a_shared Layer(x) + a_source LSL_source(x) + a_target LSL_target(x)` with
            `a = softmax(alpha)` learned per layer (three times the compute), trained once; then
            `LSLForConditionalGeneration.searched_placement()` reads each layer's largest weight as its placement.
            The lists and the preset must then be empty.
        **kwargs: every [`LangSpecConfig`] argument; `languages` must be given.
    """

    model_type = "langspec_lsl"

    def __init__(
        self,
        lsl_encoder_source_layers: Sequence[int] | None = None,
        lsl_encoder_target_layers: Sequence[int] | None = None,
        lsl_decoder_source_layers: Sequence[int] | None = None,
        lsl_decoder_target_layers: Sequence[int] | None = None,
        lsl_preset: str | None = None,
        lsl_search: bool = False,
        **kwargs,
    ):
        self.lsl_preset = lsl_preset
        self.lsl_search = lsl_search
        lists = [lsl_encoder_source_layers, lsl_encoder_target_layers, lsl_decoder_source_layers,
                 lsl_decoder_target_layers]  # fmt: skip
        for name, value in zip(LSL_FIELDS, lists, strict=True):
            setattr(self, name, _layer_list(name, value))
        super().__init__(**kwargs)
        self._check_lsl()

    def _check_lsl(self) -> None:
        if not isinstance(self.lsl_search, bool):
            raise ValueError(f"lsl_search={self.lsl_search!r} must be true or false.")
        if self.lsl_search and (self.lsl_preset is not None or any(getattr(self, name) for name in LSL_FIELDS)):
            raise ValueError(
                "lsl_search=True searches the placement itself (every encoder layer a weighted mix of a shared, a "
                "source- and a target-indexed layer); leave the layer lists and lsl_preset empty."
            )
        if self.lsl_preset is not None:
            if self.lsl_preset != "paper":
                raise ValueError(f"lsl_preset={self.lsl_preset!r} is unknown; the preset is 'paper' (or none).")
            given = [name for name in LSL_FIELDS if getattr(self, name)]
            placed = (self.lsl_encoder_source_layers, self.lsl_encoder_target_layers)
            if given and placed != (PAPER_PLACEMENT["source"], PAPER_PLACEMENT["target"]):
                raise ValueError(
                    f"lsl_preset='paper' sets the placement itself; leave {given} empty or drop the preset."
                )
            if self.encoder_layers != PAPER_PLACEMENT["encoder_layers"]:
                raise ValueError(
                    f"lsl_preset='paper' is the placement searched for a 16-layer encoder; this one has "
                    f"{self.encoder_layers}. List the layers yourself (lsl_encoder_source_layers, "
                    "lsl_encoder_target_layers), for example the lowest source-indexed and the top target-indexed."
                )
            self.lsl_encoder_source_layers = list(PAPER_PLACEMENT["source"])
            self.lsl_encoder_target_layers = list(PAPER_PLACEMENT["target"])
        if not self.lsl_search and not any(getattr(self, name) for name in LSL_FIELDS):
            raise ValueError(
                "LSL needs at least one language-specific layer: list layer indices (from 0) in "
                "lsl_encoder_source_layers / lsl_encoder_target_layers (or the decoder's), or set lsl_preset='paper'."
            )
        for stack, depth in (("encoder", self.encoder_layers), ("decoder", self.decoder_layers)):
            source, target = getattr(self, f"lsl_{stack}_source_layers"), getattr(self, f"lsl_{stack}_target_layers")
            outside = sorted(i for i in source + target if not 0 <= i < depth)
            if outside:
                raise ValueError(f"LSL {stack} layers {outside} do not exist: the {stack} has layers 0-{depth - 1}.")
            both = sorted(set(source) & set(target))
            if both:
                raise ValueError(
                    f"{stack} layers {both} are listed as source- and as target-indexed; a layer is one or the other."
                )
        if not self.languages:
            raise ValueError("LSL needs `languages`: one layer per language at each LSL position.")

    def lsl_side(self, stack: str, index: int) -> str | None:
        """`"source"`, `"target"` or None (shared) for layer `index` of `stack` ("encoder" or "decoder")."""
        for side in ("source", "target"):
            if index in getattr(self, f"lsl_{stack}_{side}_layers"):
                return side
        return None

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        lines = []
        for stack in ("encoder", "decoder"):
            for side in ("source", "target"):
                layers = getattr(self, f"lsl_{stack}_{side}_layers")
                if layers:
                    lines.append(f"- {stack.capitalize()} layers {layers} (from 0): one per {side} language")
        preset = " (the paper's searched placement)" if self.lsl_preset == "paper" else ""
        return "\n".join(lines) + f"\n- Other layers shared{preset}; {self.num_languages} languages"


def _layer_list(name: str, value: Sequence[int] | None) -> list[int]:
    layers = list(value or [])
    bad = [i for i in layers if isinstance(i, bool) or not isinstance(i, int)]
    if bad:
        raise ValueError(f"{name} lists {bad}; give layer indices as whole numbers from 0.")
    if len(set(layers)) != len(layers):
        raise ValueError(f"{name} lists a layer more than once: {layers}.")
    return sorted(layers)


__all__ = ["LSL_FIELDS", "PAPER_PLACEMENT", "LSLConfig"]
