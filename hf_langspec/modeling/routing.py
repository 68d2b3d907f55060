"""Language routing: the one place where per-language parameters meet a mixed-language batch.

Every language-specific module (XLP's projections, LAA's matrices, CLL's LSLs, adapters, ...)
stores its parameters stacked along a leading language axis, ``[L, ...]``, and applies them
through :class:`LanguageRouter`. The router takes the ``[B]`` tensor of language ids once per
forward and offers two ways to apply a ``[L, d_in, d_out]`` weight to ``[B, T, d_in]`` rows:

* ``gather``: index the ``B`` weights and run one batched matmul. No host synchronisation and
  one kernel, but it copies ``B * d_in * d_out`` weight values: good for small batches.
* ``group``: sort rows by language and run one matmul per language present. It reads each
  weight once, so a batch that mixes many languages costs about what a one-language batch costs;
  it needs the per-language row counts on the host (one synchronisation per router, cached).

* ``dense``: one matmul of all rows against every language's weight side by side, then each row
  keeps its own language's block. L times the FLOPs, but one kernel and no weight copies (explicit
  choice only: measured slower than ``group`` at every decoding shape tried, even with 2 languages).

``auto`` picks ``gather`` for a single example and under ``torch.compile`` (static shapes, no graph
break); otherwise ``group`` when the batch holds at most half as many distinct languages as examples or
when the gathered weights would exceed the device's budget (:func:`gather_budget`) times the number of
matmuls one gather serves (``uses``: LAA's shared matrices serve two per layer); otherwise ``gather``
(at inference, modules with a cache gather once per generation and reuse the weights every decoding step).
Measured on the 2-core CPU, one decoding step of 32 rows (256 x 1024 weights, 4 languages, 2 present):
dense 0.75 ms, group 0.23 ms, uncached gather 16 ms (the copy of 32 weights). On a GPU, copying is cheap
and each of ``group``'s matmuls is a kernel launch: on an H100 at Transformer-base with 50 languages
(22 present in a batch of 32, bf16; BENCHMARKS.md "routing"), gathering up to 32 x 512 x 2048 weights
trained FCLL 2.2x, XLP 1.2x and LS-MNMT 1.25x faster than grouping, hence the larger CUDA budget.
Modules never loop over examples in Python.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator

import torch

GATHER_BUDGET_ELEMENTS = 1 << 22  # 16 MiB of float32 gathered weights per call (CPU and other devices)
GATHER_BUDGET_ELEMENTS_CUDA = 1 << 26  # 256 MiB: on a GPU one copy beats one matmul launch per language
SIDES = ("source", "target")
_ACCELERATOR_PATH_ON_CPU = [False]  # set by `accelerator_path()`: a CPU takes the accelerator's path (tests)


def sync_free(tensor: torch.Tensor) -> bool:
    """Whether this forward must not read device values back to the host (`.item()`, `int(t)`, `bool(t)`,
    `.tolist()`, `nonzero()`).

    True under torch.compile (a read is a graph break) and in a training forward (autograd on) on an
    accelerator, where each read stalls the host until the device catches up and rules out CUDA graphs
    (13-19 reads per step stalled every model class on an H100: BENCHMARKS.md "loop-cuda-before"). There the id range
    checks are left to the data's maker (the tokenizer, `tokenizer.check_model` at the start of training) and
    to the device's own index asserts, padding masks are applied without asking whether anything is padded,
    CLL masks the central language's rows instead of selecting the others, and routing gathers instead of
    grouping. At inference and on a CPU a read costs little and buys clear errors and the data-dependent
    fast paths, which stay as they were (CPU runs compute exactly what they did).
    """
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and on_accelerator(tensor)


def on_accelerator(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is on an accelerator, or on a CPU inside `accelerator_path()` (which stands in for one)."""
    return tensor.device.type != "cpu" or standing_in(tensor.device)


def standing_in(device: torch.device) -> bool:
    """A CPU inside `accelerator_path()`: it takes a GPU's paths."""
    return device.type == "cpu" and _ACCELERATOR_PATH_ON_CPU[0]


def host_flag(flag: torch.Tensor) -> bool:
    """`bool(flag)` of a tensor that lives on the host (a draw from torch's CPU generator): nothing to wait for,
    also in a GPU step, so it is hidden from the host-sync census (`training.host_syncs`), which cannot tell a
    host tensor from a device one on a CPU."""
    if flag.device.type != "cpu":
        raise ValueError(f"host_flag reads host tensors only; this one is on {flag.device}.")
    with torch._C.DisableTorchFunction():
        return bool(flag)


@contextlib.contextmanager
def accelerator_path() -> Iterator[None]:
    """Within it, a CPU takes a GPU's paths (`sync_free` training forwards, CUDA's gather budget, the Trainer's
    fused label-smoothed loss): how the tests check on a CPU that a GPU's training step never waits for the device, and
    how `benchmarks/bench_step_census.py` counts a GPU step's ops on a CPU."""
    previous = _ACCELERATOR_PATH_ON_CPU[0]
    _ACCELERATOR_PATH_ON_CPU[0] = True
    try:
        yield
    finally:
        _ACCELERATOR_PATH_ON_CPU[0] = previous


class GatheredWeights:
    """Per-example weights gathered once and reused while the language ids and the weights are unchanged.

    Incremental decoding calls a module once per step with the same ids, so the ``[B, d_in, d_out]``
    gather can be paid once per generation instead of once per step. Used only without autograd and
    within the device's :func:`gather_budget`; a hit needs equal ids (compared by value) and the same
    weight storage at the same version (in-place updates bump it), so a stale entry is never returned.
    """

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._ids: torch.Tensor | None = None
        self._value: torch.Tensor | None = None

    def get(self, weight: torch.Tensor, ids: torch.Tensor, uses: int = 1) -> torch.Tensor | None:
        if torch.is_grad_enabled() or ids.numel() * weight[0].numel() > gather_budget(ids.device) * uses:
            return None
        if torch.compiler.is_compiling():  # the cache's key is storage addresses, which a graph cannot compare
            return None
        # the storage address, not id(): modules pass a fresh view of a stacked parameter on every call
        key = (weights_stamp(weight), tuple(weight.shape))
        if key != self._key or self._ids is None or self._ids.shape != ids.shape or not torch.equal(self._ids, ids):
            self._key, self._ids, self._value = key, ids.clone(), weight.index_select(0, ids)
        return self._value


def decoding_cache(store: dict, key: Hashable) -> GatheredWeights | None:
    """`store[key]` (a module's own dict of decoding caches), made on first use; None under autograd or compilation.

    `GatheredWeights.get` never reads a cache there, and creating one inside a compiled training step changed the
    dict that the graph guards on, so the second step compiled the model again (about 30 s per model on an H200).
    """
    if torch.is_grad_enabled() or torch.compiler.is_compiling():
        return None
    return store.setdefault(key, GatheredWeights())


def gather_budget(device: torch.device) -> int:
    """Weight elements one gather may copy per matmul it serves: larger on CUDA (module docstring), whose
    budget a CPU inside `accelerator_path()` stands in for too."""
    if device.type == "cuda" or standing_in(device):
        return GATHER_BUDGET_ELEMENTS_CUDA
    return GATHER_BUDGET_ELEMENTS


def weights_stamp(*tensors: torch.Tensor) -> tuple:
    """Storage address and version of each tensor: changes when a weight is replaced or updated in place.

    Caches of weights derived at inference (gathered, folded) compare stamps so they are never stale.
    """
    return tuple((t.data_ptr(), t._version) for t in tensors)


def layer_slice(parameter: torch.Tensor, index: int, scratch: dict | None) -> torch.Tensor:
    """`parameter[index]` of a parameter stacked over layers, split once per forward under autograd.

    Indexing `[layers, ...]` layer by layer makes autograd allocate and zero a full-size gradient for
    every layer and sum them (measured: a third of FCLL's backward with 50 languages); `unbind` once
    per forward, cached in the forward's `scratch`, gives one. Without autograd, plain indexing (a view).
    """
    if scratch is None or not (torch.is_grad_enabled() and parameter.requires_grad):
        return parameter[index]
    key = ("layer_slices", id(parameter))
    if key not in scratch:
        scratch[key] = parameter.unbind(0)
    return scratch[key][index]


class LanguageRouter:
    """Applies per-language parameters to a batch whose examples carry language ids ``[B]``."""

    def __init__(self, lang_ids: torch.LongTensor, num_languages: int, strategy: str = "auto"):
        self.lang_ids = lang_ids
        self.num_languages = num_languages
        self.strategy = strategy
        self._groups: tuple[torch.Tensor, torch.Tensor, list[int]] | None = None
        self._present: list[int] = []  # the ids with at least one example, set with _groups
        self.presorted = False  # rows come sorted by language: `group` splits them without reordering

    def sorted_by_language(self) -> tuple[LanguageRouter, torch.Tensor, torch.Tensor]:
        """`(router, order, inverse)`: a `group` router for this batch's rows put in language order (`x[order]`),
        which splits its rows in place, and the orders to get there and back. A layer whose every matmul is routed
        (LSL) reorders its input once and its output once instead of at each of its matmuls."""
        order, inverse, counts = self._group_index()
        router = LanguageRouter(self.lang_ids.index_select(0, order), self.num_languages, "group")
        router._groups, router._present, router.presorted = (order, inverse, counts), self._present, True
        return router, order, inverse

    def lookup(self, table: torch.Tensor) -> torch.Tensor:
        """Rows of a ``[L, ...]`` table for every example: ``[B, ...]``."""
        return table.index_select(0, self.lang_ids)

    def _group_index(self) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        if self._groups is None:
            order = torch.argsort(self.lang_ids, stable=True)
            inverse = torch.empty_like(order)
            inverse[order] = torch.arange(order.numel(), device=order.device)
            counts = torch.bincount(self.lang_ids, minlength=self.num_languages).tolist()
            self._groups = (order, inverse, counts)
            self._present = [language for language, count in enumerate(counts) if count]
        return self._groups

    def languages_present(self) -> int:
        self._group_index()
        return len(self._present)

    def single_language(self) -> int | None:
        """The id every example shares, or None when the batch mixes languages (asked once per layer).
        Under torch.compile always None: the answer is read back from the device (a graph break)."""
        if torch.compiler.is_compiling():
            return None
        self._group_index()
        return self._present[0] if len(self._present) == 1 else None

    def choose(self, d_in: int, d_out: int, uses: int = 1) -> str:
        """The strategy for a `[d_in, d_out]` weight whose gather would serve `uses` matmuls (module docstring)."""
        if self.strategy != "auto":
            return self.strategy
        if torch.compiler.is_compiling():  # `group` sizes its matmuls by counts read back from the device
            return "gather"
        batch = self.lang_ids.numel()
        if batch == 1:
            return "gather"
        if batch * d_in * d_out > gather_budget(self.lang_ids.device) * uses:
            return "group"  # a sync-free step too: past the budget, the memory of the copies decides
        if sync_free(self.lang_ids):  # counting the languages present would read the device
            return "gather"
        return "group" if 2 * self.languages_present() <= batch else "gather"

    def matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        cache: GatheredWeights | None = None,
    ) -> torch.Tensor:
        """``y[b] = x[b] @ weight[lang[b]] (+ bias[lang[b]])`` for ``x`` of shape ``[B, ..., d_in]``.

        ``weight`` is ``[L, d_in, d_out]``; ``bias`` is ``[L, d_out]`` or None. With a ``cache`` (one
        per module), inference reuses the gathered weights across calls (see :class:`GatheredWeights`).
        """
        d_in, d_out = weight.shape[-2:]
        batch = x.shape[0]
        if batch != self.lang_ids.numel():
            raise ValueError(
                f"Language routing got {batch} examples but {self.lang_ids.numel()} language ids; "
                "src_lang_ids / tgt_lang_ids must have one id per example ([B])."
            )
        rows = x.reshape(batch, -1, d_in)
        strategy = self.choose(d_in, d_out)
        if strategy == "gather":
            gathered = cache.get(weight, self.lang_ids) if cache is not None else None
            gathered = gathered if gathered is not None else weight.index_select(0, self.lang_ids)
            out = torch.bmm(rows, gathered)
            if bias is not None:
                out = out + bias.index_select(0, self.lang_ids).unsqueeze(1)
        elif strategy == "dense":
            every = (rows @ weight.permute(1, 0, 2).reshape(d_in, -1)).view(batch, -1, self.num_languages, d_out)
            index = self.lang_ids.view(batch, 1, 1, 1).expand(batch, rows.shape[1], 1, d_out)
            out = every.gather(2, index).squeeze(2)
            if bias is not None:
                out = out + bias.index_select(0, self.lang_ids).unsqueeze(1)
        elif (single := self.single_language()) is not None:  # one language: no reordering of the rows
            out = rows @ weight[single]
            if bias is not None:
                out = out + bias[single]
        else:
            order, inverse, counts = self._group_index()
            # split once: indexing per language would zero-fill a full-size gradient for every language present
            weights = weight.unbind(0)
            biases = bias.unbind(0) if bias is not None else None
            pieces = []
            for lang, chunk in enumerate((rows if self.presorted else rows.index_select(0, order)).split(counts)):
                if chunk.shape[0] == 0:
                    continue
                if self.presorted and biases is not None:  # LSL's layers: one fused kernel, as nn.Linear's
                    flat = torch.addmm(biases[lang], chunk.reshape(-1, d_in), weights[lang])
                    pieces.append(flat.view(chunk.shape[0], -1, d_out))
                    continue
                piece = chunk @ weights[lang]  # the published runs' arithmetic, kept as it was
                pieces.append(piece if biases is None else piece + biases[lang])
            out = torch.cat(pieces)
            out = out if self.presorted else out.index_select(0, inverse)
        return out.reshape(*x.shape[:-1], d_out)


class PairIndex:
    """Direction keys: each `(source, target)` pair's index in `config.language_pairs`, -1 for an untrained one.

    The `[L, L]` lookup table is built per device on first use (not a buffer: `from_pretrained`
    materialises non-persistent buffers without their values).
    """

    def __init__(self, languages: list[str], language_pairs: list[list[str]]):
        self.languages = list(languages)
        self.pairs = [(self.languages.index(s), self.languages.index(t)) for s, t in language_pairs]
        self._tables: dict[torch.device, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.pairs)

    def ids(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """`[B]` pair index of each example (-1: not a trained direction)."""
        if src.device not in self._tables:
            n = len(self.languages)
            table = torch.full((n, n), -1, dtype=torch.long)
            for i, (s, t) in enumerate(self.pairs):
                table[s, t] = i
            self._tables[src.device] = table.to(src.device)
        return self._tables[src.device][src, tgt]

    def names(self, src: torch.Tensor, tgt: torch.Tensor) -> list[str]:
        """The sorted `"src-tgt"` names of the examples' directions (for error messages)."""
        pairs = zip(src.tolist(), tgt.tolist(), strict=True)
        return sorted({f"{self.languages[s]}-{self.languages[t]}" for s, t in pairs})


class MissingLanguageIds(ValueError):
    """A module needs the language ids of `side` ("source" or "target") and the forward was given none."""

    def __init__(self, side: str, message: str):
        super().__init__(message)
        self.side = side


class LanguageContext:
    """The language ids of one forward pass, handed to every insertion-point module.

    Holds the validated ``src_lang_ids`` / ``tgt_lang_ids`` ([B] LongTensors), one router per
    side (so grouping is computed once and shared by all layers), and ``scratch``, a per-forward
    cache modules use for work that must happen once per forward (for example LAA gathering its
    ``[B, d, d]`` matrices once for all layers).
    """

    def __init__(
        self,
        src_lang_ids: torch.Tensor | None,
        tgt_lang_ids: torch.Tensor | None,
        num_languages: int,
        batch_size: int,
        routing_strategy: str = "auto",
    ):
        self.num_languages = num_languages
        self.routing_strategy = routing_strategy
        self._ids = {
            "source": check_language_ids(src_lang_ids, "src_lang_ids", num_languages, batch_size),
            "target": check_language_ids(tgt_lang_ids, "tgt_lang_ids", num_languages, batch_size),
        }
        self._routers: dict[str, LanguageRouter] = {}
        self.scratch: dict[object, object] = {}

    def has(self, side: str) -> bool:
        return self._ids[side] is not None

    def sorted_by(self, side: str) -> tuple[LanguageContext, torch.Tensor, torch.Tensor]:
        """`(context, order, inverse)`: this forward's languages with the examples in the order of their `side`
        language (`x[order]`, `sorted_by_language`), sharing this context's scratch; `y[inverse]` puts a result back.
        Only for work that reads no per-example state prepared in the batch's order (LSL's layers without other
        modules inside them)."""
        router, order, inverse = self.router(side).sorted_by_language()
        context = LanguageContext.__new__(LanguageContext)
        context.num_languages, context.routing_strategy, context.scratch = (
            self.num_languages,
            self.routing_strategy,
            self.scratch,
        )
        context._ids = {s: None if ids is None else ids.index_select(0, order) for s, ids in self._ids.items()}
        context._routers = {side: router}
        return context, order, inverse

    def ids(self, side: str, needed_by: str = "this model") -> torch.LongTensor:
        """The ids of ``side`` ("source" or "target"); a ValueError explains how to pass them."""
        ids = self._ids[side]
        if ids is None:
            name = "src_lang_ids" if side == "source" else "tgt_lang_ids"
            raise MissingLanguageIds(
                side,
                f"{needed_by} needs `{name}`, a LongTensor of shape [batch] with indexes into "
                f"config.languages, and none was passed. LangSpecTokenizer returns it with every batch; "
                f"to build it by hand use torch.tensor(config.language_ids([...])).",
            )
        return ids

    def router(self, side: str, needed_by: str = "this model") -> LanguageRouter:
        if side not in self._routers:
            self._routers[side] = LanguageRouter(self.ids(side, needed_by), self.num_languages, self.routing_strategy)
        return self._routers[side]


def tag_embeddings(embed_tokens: torch.nn.Embedding, tag_ids: list[int], ids: torch.Tensor) -> torch.Tensor:
    """`[B, d]`: the (unscaled) shared-embedding rows of the language tags of `ids` (LEE, HLT-MT's gate)."""
    return embed_tokens(torch.tensor(tag_ids, device=ids.device).index_select(0, ids))


def check_language_ids(
    ids: torch.Tensor | None, name: str, num_languages: int, batch_size: int
) -> torch.LongTensor | None:
    """Validate a ``[B]`` tensor of language ids: shape, integer dtype, range. Never clamps."""
    if ids is None:
        return None
    if not isinstance(ids, torch.Tensor):
        raise ValueError(f"{name} must be a LongTensor of shape [batch], got {type(ids).__name__}.")
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"{name} must hold integer language ids, got dtype {ids.dtype}.")
    if ids.dim() != 1 or ids.numel() != batch_size:
        raise ValueError(
            f"{name} must have shape [batch]=[{batch_size}] (one id per example), got {tuple(ids.shape)}."
        )
    if num_languages == 0:
        raise ValueError(
            f"{name} was passed but config.languages is empty: set `languages` in the config to use language ids."
        )
    if sync_free(ids):  # the range check reads the ids back; the device's index kernels assert instead
        return ids.long()
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= num_languages:
        bad = low if low < 0 else high
        raise ValueError(
            f"{name} contains {bad}, outside [0, {num_languages}) = range(len(config.languages)); "
            "ids index config.languages. Map codes with config.language_ids([...])."
        )
    return ids.long()


__all__ = [
    "GatheredWeights",
    "LanguageContext",
    "LanguageRouter",
    "MissingLanguageIds",
    "PairIndex",
    "accelerator_path",
    "check_language_ids",
    "host_flag",
    "layer_slice",
    "on_accelerator",
    "sync_free",
    "weights_stamp",
]
