"""Configuration of LEE and LAA (Jin & Xiong 2022): informative language representations."""

from __future__ import annotations

from collections.abc import Sequence

from .configuration_langspec import LangSpecConfig
from .module_laa import LAA_POINTS
from .module_lee import LEE_POSITIONS


class LAAConfig(LangSpecConfig):
    r"""
    [`LangSpecConfig`] plus language embedding embodiment (LEE) and/or language-aware attention (LAA).

    The paper's systems as settings (Tables 2-5):

    | paper | settings |
    |---|---|
    | Token_src / Token_tgt | `lang_tag_style="source"` / `"target"`, `laa_points=[]` |
    | LEE_{4,5} (and every other subset) | `lee_points=[4, 5]` (or the point names), `laa_points=[]` |
    | LAA enc.self / dec.self / dec.cross | `laa_points=["enc_self_attn"]`, `["dec_self_attn"]`, `["dec_cross_attn"]` |
    | LAA + LEE | both lists |
    | LAA^R (section 5.5) | `laa_random=True` with a tag style |

    Args:
        lee_points (`list`, *optional*, defaults to `[]`): LEE switching points, as Figure 1's numbers (1-6) or
            names (`enc_ffn_in`, `enc_self_in`, `dec_ffn_in`, `dec_cross_in`, `dec_self_in`, `enc_out`).
        lee_embedding (`str`, *optional*, defaults to `"tag"`): `"tag"`: the target tag token's embedding row
            (the authors' code; no new parameters); `"table"`: a separate language-embedding table per stack.
        laa_points (`list[str]`, *optional*, defaults to `["dec_self_attn"]`): attention modules with LAA (the
            released configuration is decoder self-attention).
        laa_per_layer (`bool`, *optional*, defaults to `False`): one matrix per language per layer instead of
            per stack.
        laa_encoder_language (`str`, *optional*, defaults to `"target"`): the language of the encoder's LAA
            matrices (the authors' code uses the target language everywhere).
        laa_random (`bool`, *optional*, defaults to `False`): LAA^R, a random language per example.
        laa_random_seed (`int`, *optional*, defaults to 0): the seed of LAA^R's draws at inference.
    """

    model_type = "langspec_laa"

    def __init__(
        self,
        lee_points: Sequence[int | str] | None = None,
        lee_embedding: str = "tag",
        laa_points: Sequence[str] | None = ("dec_self_attn",),
        laa_per_layer: bool = False,
        laa_encoder_language: str = "target",
        laa_random: bool = False,
        laa_random_seed: int = 0,
        **kwargs,
    ):
        self.lee_points = [_lee_point(p) for p in (lee_points or [])]
        self.lee_embedding = lee_embedding
        self.laa_points = list(laa_points or [])
        self.laa_per_layer = laa_per_layer
        self.laa_encoder_language = laa_encoder_language
        self.laa_random = laa_random
        self.laa_random_seed = laa_random_seed
        super().__init__(**kwargs)
        self._check_lee_laa()

    def _check_lee_laa(self) -> None:
        if self.lee_embedding not in ("tag", "table"):
            raise ValueError(f"lee_embedding={self.lee_embedding!r} is not supported; use 'tag' or 'table'.")
        unknown = [p for p in self.laa_points if p not in LAA_POINTS]
        if unknown:
            raise ValueError(f"laa_points {unknown} are not attention points; use some of {list(LAA_POINTS)}.")
        if self.laa_encoder_language not in ("source", "target"):
            raise ValueError(f"laa_encoder_language={self.laa_encoder_language!r} must be 'source' or 'target'.")
        if (self.lee_points or self.laa_points) and not self.languages:
            raise ValueError("LEE and LAA need `languages`: one embedding or matrix per language.")
        if self.lee_points and self.lee_embedding == "tag" and self.lang_tag_token_ids is None:
            raise ValueError(
                "lee_embedding='tag' reads each language's tag-token embedding, so the config needs "
                "lang_tag_token_ids (LangSpecTokenizer.model_config_kwargs() gives them), or use lee_embedding='table'."
            )
        if self.laa_random and not self.laa_points:
            raise ValueError("laa_random=True (LAA^R) randomises LAA matrices, so it needs laa_points.")

    def card_settings(self) -> str:
        """The method's settings as a Markdown list, for its model card."""
        return "\n".join([
            f"- LEE points: {', '.join(self.lee_points) or 'none'} ({self.lee_embedding} embeddings)",
            f"- LAA in: {', '.join(self.laa_points) or 'none'}"
            + (" (one matrix per language per layer)" if self.laa_per_layer else " (one matrix per language per stack)")
            + ("; LAA^R: random matrices" if self.laa_random else ""),
        ])  # fmt: skip


def _lee_point(point: int | str) -> str:
    if isinstance(point, int) and point in LEE_POSITIONS:
        return LEE_POSITIONS[point]
    if isinstance(point, str) and point in LEE_POSITIONS.values():
        return point
    raise ValueError(
        f"LEE point {point!r} is not one of Figure 1's positions {LEE_POSITIONS} (give the number or the name)."
    )


__all__ = ["LAAConfig"]
