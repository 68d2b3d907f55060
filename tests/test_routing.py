"""The routing primitive: every strategy equals a per-example loop, in values and gradients."""

from __future__ import annotations

import pytest
import torch
from conftest import DEVICE
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_langspec.modeling.routing import (
    GATHER_BUDGET_ELEMENTS,
    GATHER_BUDGET_ELEMENTS_CUDA,
    LanguageContext,
    LanguageRouter,
    gather_budget,
)


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 9),
    tokens=st.integers(1, 5),
    num_languages=st.integers(1, 6),
    d_in=st.integers(1, 7),
    d_out=st.integers(1, 7),
    with_bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_strategies_equal_a_per_example_loop(batch, tokens, num_languages, d_in, d_out, with_bias, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, num_languages, (batch,), generator=g)
    x = torch.randn(batch, tokens, d_in, generator=g, dtype=torch.float64)
    weight = torch.randn(num_languages, d_in, d_out, generator=g, dtype=torch.float64)
    bias = torch.randn(num_languages, d_out, generator=g, dtype=torch.float64) if with_bias else None
    upstream = torch.randn(batch, tokens, d_out, generator=g, dtype=torch.float64)

    def run(strategy):
        xs, ws = x.clone().requires_grad_(), weight.clone().requires_grad_()
        bs = bias.clone().requires_grad_() if bias is not None else None
        if strategy == "loop":
            out = torch.stack([xs[b] @ ws[ids[b]] + (bs[ids[b]] if bs is not None else 0) for b in range(batch)])
        else:
            out = LanguageRouter(ids, num_languages, strategy).matmul(xs, ws, bs)
        (out * upstream).sum().backward()
        return [out, xs.grad, ws.grad] + ([bs.grad] if bs is not None else [])

    expected = run("loop")
    for strategy in ("gather", "group", "dense", "auto"):
        for got, want in zip(run(strategy), expected, strict=True):
            torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_auto_strategy_choices():
    same = LanguageRouter(torch.zeros(8, dtype=torch.long), 4)
    assert same.choose(16, 16) == "group"
    mixed = LanguageRouter(torch.arange(8) % 8, 8)
    assert mixed.choose(16, 16) == "gather"
    assert mixed.choose(4096, 4096) == "group"  # gathered weights would exceed the budget
    assert mixed.choose(1024, 1024) == "group" and mixed.choose(1024, 1024, uses=2) == "gather"  # serving 2 matmuls
    assert same.choose(256, 256) == "group"  # decoding one language: one matmul, never dense
    assert LanguageRouter(torch.tensor([3]), 4).choose(4096, 4096) == "gather"  # one example: its own weight


@pytest.mark.device  # on the device of HF_LANGSPEC_TEST_DEVICE too (tests/test_device.py)
def test_auto_gathers_the_shapes_measured_faster_gathered_on_a_gpu():
    """H100, 50 languages, 22 present in 32 examples: gathering FCLL's 512 x 1024 and LS-MNMT's 512 x 2048
    trained 1.25-2.2x faster than grouping; on a CPU that gather stays over its 16 MiB budget (group)."""
    ids = (torch.arange(32) * 7 % 22).to(DEVICE)
    router = LanguageRouter(ids, 50)
    assert router.languages_present() == 22
    expected = "gather" if DEVICE.type == "cuda" else "group"
    assert router.choose(512, 1024) == router.choose(512, 2048) == expected
    assert router.choose(512, 128) == "gather"  # within either budget
    assert gather_budget(torch.device("cuda")) == GATHER_BUDGET_ELEMENTS_CUDA > 32 * 512 * 2048
    assert gather_budget(torch.device("cpu")) == GATHER_BUDGET_ELEMENTS < 32 * 512 * 1024


def test_a_cpu_standing_in_for_a_gpu_routes_a_training_step_as_the_gpu_does():
    """Inside `accelerator_path()` a CPU takes CUDA's gather budget too, so a training step past the CPU's budget
    (FCLL's 256 x 256 LSLs at bible11_gpu's batch of 128) gathers as on a GPU, reading nothing back, where the
    CPU itself groups (counts read back)."""
    from hf_langspec.modeling.routing import accelerator_path
    from hf_langspec.training.host_syncs import HostSyncCensus

    ids = torch.arange(128) % 11
    # float64: the two routes sum 256 products in different orders, which float32 rounds apart by a few 1e-5 on
    # some CPUs' kernels; the check is that they route the same, not how a float32 kernel rounds
    weight = torch.randn(11, 256, 256, dtype=torch.float64, requires_grad=True)
    x = torch.randn(128, 3, 256, dtype=torch.float64)
    expected = LanguageRouter(ids, 11).matmul(x, weight)
    assert LanguageRouter(ids, 11).choose(256, 256) == "group"
    with accelerator_path():
        assert gather_budget(torch.device("cpu")) == GATHER_BUDGET_ELEMENTS_CUDA
        router = LanguageRouter(ids, 11)
        with HostSyncCensus() as census:
            assert router.choose(256, 256) == "gather"
            got = router.matmul(x, weight)
    assert census.total == 0, dict(census.calls)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    assert gather_budget(torch.device("cpu")) == GATHER_BUDGET_ELEMENTS  # restored on leaving


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.tensor([0, 4, 1]), r"tgt_lang_ids contains 4, outside \[0, 4\)"),
        (torch.tensor([0, -1, 1]), r"contains -1"),
        (torch.tensor([0, 1]), r"shape \[batch\]=\[3\]"),
        (torch.tensor([0.0, 1.0, 2.0]), "integer language ids"),
        ([0, 1, 2], "must be a LongTensor"),
    ],
)
def test_bad_language_ids_are_rejected_never_clamped(ids, message):
    with pytest.raises(ValueError, match=message):
        LanguageContext(None, ids, num_languages=4, batch_size=3)


def test_missing_ids_error_says_how_to_get_them():
    context = LanguageContext(torch.tensor([0, 1]), None, num_languages=2, batch_size=2)
    assert context.has("source") and not context.has("target")
    with pytest.raises(ValueError, match=r"LAA needs `tgt_lang_ids`.*LangSpecTokenizer returns it"):
        context.ids("target", needed_by="LAA")


def test_gathered_weights_are_reused_only_while_ids_and_weights_are_unchanged():
    from hf_langspec.modeling.routing import GatheredWeights

    weight = torch.nn.Parameter(torch.randn(3, 4, 5))
    cache = GatheredWeights()
    ids = torch.tensor([2, 0, 2])
    x = torch.randn(3, 1, 4)
    expected = torch.stack([x[b] @ weight[ids[b]] for b in range(3)])
    with torch.no_grad():
        first = cache.get(weight, ids)
        assert cache.get(weight, ids.clone()) is first  # equal ids by value: reused
        torch.testing.assert_close(LanguageRouter(ids, 3).matmul(x, weight, cache=cache), expected)
        assert cache.get(weight, torch.tensor([1, 0, 2])) is not first  # other ids: gathered anew
        weight.mul_(2.0)  # an in-place update bumps the version: never stale
        torch.testing.assert_close(LanguageRouter(ids, 3).matmul(x, weight, cache=cache), 2 * expected)
    assert cache.get(weight, ids) is None  # with autograd on, nothing is cached


def test_layer_slices_give_the_gradients_of_indexing_once_per_forward():
    from hf_langspec.modeling.routing import layer_slice

    weight = torch.nn.Parameter(torch.randn(3, 2, 4))
    x = torch.randn(5, 4)
    scratch: dict = {}
    sliced = sum((x @ layer_slice(weight, i, scratch)[i % 2]).square().sum() for i in range(3))
    (expected,) = torch.autograd.grad(sum((x @ weight[i][i % 2]).square().sum() for i in range(3)), weight)
    sliced.backward()
    torch.testing.assert_close(weight.grad, expected)
    assert len(scratch) == 1  # one split for all layers
    with torch.no_grad():
        assert layer_slice(weight, 1, scratch).data_ptr() == weight[1].data_ptr() and len(scratch) == 1
