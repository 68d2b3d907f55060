"""HLT-MT's selective language-specific pool (SLP; Yang et al. 2022, equations 3-10), at the `dec_top` point.

After the last decoder layer each token's shared representation h goes through one of T adapters

    F_t(h) = LN_t(W^d_t act(W^u_t h) + h)                                   (equation 4)

chosen by a gate over the target language's tag embedding, alpha = softmax(W_g E[L_k]) (equation 7):

* stage 1 (high-resource directions): in training each batch is, with probability
  `hlt_hard_probability`, routed hard (the argmax adapter, equations 3 and 5), otherwise soft (the
  alpha-weighted sum of all adapters, equation 6); the disparity loss (equation 10) over the
  high-resource languages' alpha is returned as an auxiliary loss. At inference, hard.
* stage 2 (all directions): each high-resource target uses the adapter fixed at the end of stage 1
  (`fix_assignment`, stored in the checkpoint); every other target uses the universal adapter
  (equation 9). The gate is no longer used.

Routing is per example, so mixed-direction batches work (the original needs one direction per batch).
Choices from the authors' code (../shared/notes/reference_implementations.md): post-norm adapters,
the gate on the unscaled tag embedding, hard/soft alternation with p = 0.5; the paper's ReLU is the
default activation (`hlt_activation="gelu"` is the code's), and the disparity loss of equation 10
(pairs of different languages) is the default (`hlt_disparity="all"`: the code's sum of all entries of
A A^T, diagonal included).
"""

from __future__ import annotations

import torch
from torch import nn

from .module_adapter import BottleneckAdapters
from .routing import LanguageContext, LanguageRouter, host_flag, tag_embeddings, weights_stamp


class SelectiveLanguagePool(nn.Module):
    """T adapters plus the universal one (index T), the gate, and the stage-2 assignment."""

    def __init__(self, config):
        super().__init__()
        d, n = config.d_model, config.hlt_num_adapters + 1
        self.num_adapters = config.hlt_num_adapters
        # equation 4: post-norm adapters, the adapter family's shared module (one slot, T + 1 keys)
        self.adapters = BottleneckAdapters(
            1, n, d, config.hlt_hidden_dim, norm="post", activation=config.hlt_activation
        )
        self.gate = nn.Linear(d, config.hlt_num_adapters, bias=False)
        # the adapter of each language in stage 2 (-1: not a high-resource language / not fixed yet)
        self.register_buffer("assignment", torch.full((config.num_languages,), -1, dtype=torch.long))
        self.languages = list(config.languages)
        self.high = [self.languages.index(code) for code in config.high_resource_languages]
        self.tag_ids = list(config.lang_tag_token_ids or [])
        self.stage = config.hlt_stage
        self.hard_probability = config.hlt_hard_probability
        self.disparity = config.hlt_disparity
        self.aux_loss: torch.Tensor | None = None  # the disparity loss of the last forward (stage 1, training)
        self._route: tuple[tuple, torch.Tensor] | None = None

    def identity_problem(self) -> str | None:
        """HLT-MT's adapters are post-norm (equation 4, `LN(h + F(h))`): a LayerNorm on the stream."""
        return "HLT-MT's adapters are post-norm (eq. 4, LN(h + F(h))): a LayerNorm on the stream"

    def start_as_identity(self) -> None:
        raise ValueError(self.identity_problem())

    # ------------------------------------------------------------------ pieces
    def tag_embeddings(self, embed_tokens: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        """E[L] of the tag tokens of `ids` (unscaled)."""
        return tag_embeddings(embed_tokens, self.tag_ids, ids)

    def probabilities(self, embed_tokens: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        """alpha (equation 7): `[len(ids), T]`."""
        return self.gate(self.tag_embeddings(embed_tokens, ids)).softmax(-1)

    def adapter(self, hidden: torch.Tensor, adapter_ids: torch.Tensor, strategy: str = "auto") -> torch.Tensor:
        """F_t(h) (equation 4) with each example's adapter `adapter_ids[b]`."""
        return self.adapters(hidden, LanguageRouter(adapter_ids, self.num_adapters + 1, strategy))

    def disparity_loss(self, embed_tokens: nn.Embedding, device: torch.device) -> torch.Tensor:
        """Equation 10 over the high-resource languages (or the code's all-entries variant)."""
        alpha = self.probabilities(embed_tokens, torch.tensor(self.high, device=device))
        products = alpha @ alpha.T
        if self.disparity == "all":
            return products.sum()
        return torch.triu(products, diagonal=1).sum()

    @torch.no_grad()
    def fix_assignment(self, embed_tokens: nn.Embedding) -> dict[str, int]:
        """End of stage 1: each high-resource language keeps its argmax adapter for stage 2."""
        ids = torch.tensor(self.high, device=self.assignment.device)
        chosen = self.probabilities(embed_tokens, ids).argmax(-1)
        self.assignment.fill_(-1)
        self.assignment[ids] = chosen
        return {self.languages[i]: int(t) for i, t in zip(self.high, chosen.tolist(), strict=True)}

    def route_table(self) -> torch.Tensor:
        """Stage 2: `[L]` adapter of every target language (its fixed one, or the universal one).

        Built once per assignment (checked then, not at every decoding step: no host synchronisation); under
        torch.compile built in the graph, unchecked (the check and the cache key read the device).
        """
        if torch.compiler.is_compiling():
            return self._route_of(self._high_mask())
        key = weights_stamp(self.assignment)
        if self._route is None or self._route[0] != key:
            high = self._high_mask()
            if bool((high & (self.assignment < 0)).any()):
                raise ValueError(
                    "hlt_stage=2 but the adapter assignment of some high-resource languages is not fixed; call "
                    "HLTForConditionalGeneration.fix_assignment() at the end of stage 1."
                )
            self._route = (key, self._route_of(high))
        return self._route[1]

    def _high_mask(self) -> torch.Tensor:
        high = torch.zeros_like(self.assignment, dtype=torch.bool)
        high[self.high] = True
        return high

    def _route_of(self, high: torch.Tensor) -> torch.Tensor:
        """High-resource languages to their assigned adapter, the others to the universal one."""
        return torch.where(high, self.assignment, torch.full_like(self.assignment, self.num_adapters))

    # ------------------------------------------------------------------ forward
    def prepare(self, lang: LanguageContext, hidden: torch.Tensor) -> None:
        self.aux_loss = None

    def forward(self, hidden: torch.Tensor, lang: LanguageContext, layer_idx: int | None = None) -> torch.Tensor:
        tgt = lang.ids("target", needed_by="HLT-MT's language-specific pool (the target language)")
        embed_tokens = lang.scratch["embed_tokens"]
        if self.stage == 2:
            return self.adapter(hidden, self.route_table().index_select(0, tgt))
        alpha = self.probabilities(embed_tokens, tgt)
        if self.training:
            self.aux_loss = self.disparity_loss(embed_tokens, tgt.device)
            # a graph (compiled, or a recorded CUDA graph: training.cuda_graph_step) has no data-dependent branch:
            # both, then the draw, made on the device (a host draw would be fixed in the graph), picks
            in_graph = torch.compiler.is_compiling() or (hidden.is_cuda and torch.cuda.is_current_stream_capturing())
            soft = torch.rand((), device=hidden.device if in_graph else "cpu") >= self.hard_probability  # equation 6
            if in_graph:
                return torch.where(soft, self._soft(hidden, tgt, alpha), self.adapter(hidden, alpha.argmax(-1)))
            if host_flag(soft):  # drawn on the host: no device read, also in a GPU step
                return self._soft(hidden, tgt, alpha)
        return self.adapter(hidden, alpha.argmax(-1))  # hard (equations 3 and 5)

    def _soft(self, hidden: torch.Tensor, tgt: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        every = torch.stack([self.adapter(hidden, torch.full_like(tgt, t)) for t in range(self.num_adapters)])
        return torch.einsum("tbsd,bt->bsd", every, alpha)


__all__ = ["SelectiveLanguagePool"]
