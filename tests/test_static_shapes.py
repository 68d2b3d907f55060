"""Static batch shapes (issue 57): a few buckets, compiled once each, padding that changes no loss or gradient.

What a GPU run relies on, checked on the CPU: padding a batch to a bucket (longer source and target, extra rows
whose labels are all -100) gives the unpadded batch's loss and gradients for every model class, on the CPU's path
and on the accelerator's; the Trainer with static shapes trains as it trains without them (same batches, same
losses); a compiled step compiles once per bucket over a run that meets every length, and the warm-up that
compiles the buckets before the first step leaves weights, optimizer, RNG and data order untouched.
"""

from __future__ import annotations

import json

import pytest
import test_gpu_loop
import torch
from conftest import PAD
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compile import loss_and_grads, training_batch
from test_gpu_loop import MODELS, assert_same_step, dataset, model_named, trainer_for
from transformers import TrainerCallback

from hf_langspec.modeling.routing import accelerator_path
from hf_langspec.training.static_shapes import (
    StaticShapeCollator,
    auto_buckets,
    choose_bucket,
    pad_batch,
    parse_buckets,
    resolve_buckets,
)

tokenizer = test_gpu_loop.tokenizer  # the fixture: a small tokenizer of the test languages


@given(st.integers(1, 1024))
def test_auto_buckets_cover_the_longest_example_in_at_most_four_multiples_of_8(longest):
    buckets = auto_buckets(longest)
    assert 1 <= len(buckets) <= 4
    assert all(s == t and s % 8 == 0 for s, t in buckets)
    assert buckets == sorted(set(buckets))
    assert buckets[-1][0] >= longest > buckets[-1][0] - 8  # the largest is the longest, rounded up to 8
    assert auto_buckets(48) == [(16, 16), (24, 24), (40, 40), (48, 48)]  # bible11_gpu's max_length


@given(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), min_size=1, max_size=6),
       st.integers(1, 64), st.integers(1, 64))  # fmt: skip
def test_a_batch_goes_to_the_smallest_bucket_that_holds_it(declared, source, target):
    buckets = parse_buckets([list(b) for b in declared])
    fitting = [b for b in buckets if b[0] >= source and b[1] >= target]
    if not fitting:
        with pytest.raises(ValueError, match=r"fits no training\.static_shapes bucket"):
            choose_bucket(buckets, source, target)
        return
    chosen = choose_bucket(buckets, source, target)
    assert chosen[0] * chosen[1] == min(b[0] * b[1] for b in fitting)


@pytest.mark.parametrize(
    ("setting", "compiled", "expected"),
    [("auto", False, None), ("auto", True, [(24, 24), (48, 48), (64, 64), (88, 88)]), ("off", True, None),
     (None, True, None), ([[48, 32], [16, 16]], False, [(16, 16), (48, 32)])],
)  # fmt: skip
def test_the_setting_resolves_to_buckets(setting, compiled, expected):
    assert resolve_buckets(setting, compiled, lambda: 85) == expected


@pytest.mark.parametrize("bad", ["sometimes", [], [[48]], [[48, 0]], [[48, 2.5]], [48, 48]])
def test_a_malformed_setting_is_one_clear_error(bad):
    with pytest.raises(ValueError, match=r"static_shapes.*(\[source, target\]|'auto')"):
        resolve_buckets(bad, True, lambda: 48)


def without_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        for name, value in vars(module).items():
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, 0.0)
    return model


def padded(batch: dict[str, torch.Tensor], rows: int, bucket: tuple[int, int]) -> dict[str, torch.Tensor]:
    return pad_batch(batch, bucket, rows, PAD)


@pytest.mark.parametrize("path", ["cpu", "accelerator"])
@pytest.mark.parametrize("name", MODELS)
def test_padding_to_a_bucket_changes_neither_the_loss_nor_the_gradients(name, path):
    """Longer source and target and two extra rows (labels all -100, source masked out): the same loss and the same
    gradients, for every model class (routed modules see the extra rows' language ids; HLT-MT's disparity loss).
    In float64: in float32 the longer sums round differently (1e-5 of the largest gradient)."""
    model = without_dropout(model_named(name).train().double())  # masks are drawn per shape
    batch = training_batch(9, 6)
    big = padded(batch, rows=6, bucket=(16, 16))
    assert big["input_ids"].shape == (6, 16) and big["labels"].shape == (6, 16)
    assert big["attention_mask"][4:].sum() == 0 and (big["labels"][4:] == -100).all()
    context = accelerator_path() if path == "accelerator" else torch.autograd.grad_mode.enable_grad()
    with context:
        assert_same_step(loss_and_grads(model, big), loss_and_grads(model, batch), atol=1e-12, rtol=1e-9)


def test_the_collator_pads_rows_and_lengths_and_refuses_a_field_it_does_not_know():
    def inner(features):
        return {k: torch.tensor([f[k] for f in features]) for k in features[0]}

    features = [{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "labels": [9, 9], "src_lang_ids": 2,
                 "tgt_lang_ids": 0}] * 3  # fmt: skip
    batch = StaticShapeCollator(inner, [(4, 4), (8, 8)], rows=5, pad_token_id=PAD)(features)
    assert batch["input_ids"].tolist()[0] == [5, 6, 7, PAD] and batch["input_ids"].shape == (5, 4)
    assert batch["labels"][3:].eq(-100).all() and batch["labels"][0].tolist() == [9, 9, -100, -100]
    assert batch["src_lang_ids"].tolist() == [2] * 5  # extra rows copy the first row's languages
    with pytest.raises(ValueError, match="cannot pad the batch field 'token_type_ids'"):
        StaticShapeCollator(inner, [(4, 4)], rows=5, pad_token_id=PAD)(
            [{"input_ids": [1], "labels": [1], "token_type_ids": [0]}]
        )


class Batches(TrainerCallback):
    """The losses the Trainer logs, one per step."""

    def __init__(self):
        self.losses: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


def losses_of(trainer) -> list[float]:
    probe = Batches()
    trainer.add_callback(probe)
    trainer.train()
    return probe.losses


def test_the_trainer_with_static_shapes_trains_as_without_them(tokenizer, tmp_path):
    """44 examples in batches of 8: the epoch's last batch has 4 rows, filled to 8 with rows that train nothing;
    every batch is the same as without static shapes (the same seed draws the same batches), and so every loss."""
    data = dataset(tokenizer, n=44)
    common = dict(max_steps=9, logging_steps=1, data=data)
    plain = losses_of(trainer_for(tokenizer, tmp_path / "plain", "cll", **common))
    static = trainer_for(tokenizer, tmp_path / "static", "cll", static_shapes=[[8, 8], [16, 16]], **common)
    shapes = {tuple(b["input_ids"].shape) for b in static.get_train_dataloader()}
    assert shapes <= {(8, 8), (8, 16)} and len(shapes) == 2
    assert losses_of(static) == pytest.approx(plain, rel=1e-5)
    assert static.static_capture is None  # not compiled: nothing to capture


def test_a_bucket_too_small_for_the_data_is_refused_before_training(tokenizer, tmp_path):
    with pytest.raises(
        ValueError, match=r"source length 10 and target length 12, but the largest bucket holds \[8, 8\].*add a bucket"
    ):
        trainer_for(tokenizer, tmp_path, "baseline", static_shapes=[[8, 8]])


def test_a_compiled_run_compiles_once_per_bucket_and_its_warm_up_changes_nothing(tokenizer, tmp_path):
    """Every length from 4 to 12 in both source and target, batches padded to three buckets: dynamo compiles the
    step once per bucket (all before the first step), never per length, and never with symbolic lengths (that would
    be two graphs for three buckets); the losses are the eager run's, so the warm-up left weights, optimizer state,
    RNG and data order as they were."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    common = dict(max_steps=12, logging_steps=1, data=dataset(tokenizer, n=60))
    eager = losses_of(trainer_for(tokenizer, tmp_path / "eager", "hlt", **common))
    compiled = trainer_for(tokenizer, tmp_path / "compiled", "hlt", torch_compile=True,
                           torch_compile_backend="aot_eager", static_shapes=[[16, 16], [8, 8], [12, 12]], **common)  # fmt: skip
    losses = losses_of(compiled)
    assert compiled.static_capture["static_buckets"] == [[8, 8], [12, 12], [16, 16]]
    assert compiled.static_capture["compile_s"] > 0 and len(compiled.static_capture["per_bucket"]) == 3
    assert counters["stats"]["unique_graphs"] == 3, dict(counters["stats"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert losses == pytest.approx(eager, rel=1e-4)
    logged = [e for e in compiled.state.log_history if "static_compile_s" in e]
    assert len(logged) == 1 and logged[0]["static_capture_s"] >= 0


def test_auto_buckets_of_a_compiled_run_come_from_the_training_set(tokenizer, tmp_path):
    compiled = trainer_for(tokenizer, tmp_path, "baseline", torch_compile=True, torch_compile_backend="aot_eager")
    assert compiled.static_buckets == [(8, 8), (16, 16)]  # the longest example has 12 tokens
    assert compiled.accelerator.state.dynamo_plugin.to_kwargs()["dynamic"] is False
    eager = trainer_for(tokenizer, tmp_path, "baseline")
    assert eager.static_buckets is None  # auto: nothing compiled, batches as the collator makes them


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 7), st.integers(1, 12), st.integers(1, 12))
def test_padding_any_batch_keeps_every_real_value(rows, source, target):
    batch = training_batch(max(source, 3), max(target, 3))
    batch = {k: v[: min(rows, 4)] for k, v in batch.items()}
    bucket = (max(source, 3) + 5, max(target, 3) + 2)
    out = padded(batch, rows=8, bucket=bucket)
    for name, value in batch.items():
        if value.dim() == 2:
            assert torch.equal(out[name][: value.shape[0], : value.shape[1]], value)
        else:
            assert torch.equal(out[name][: value.shape[0]], value)
    assert json.dumps({k: list(v.shape) for k, v in out.items()})  # every field has the static rows
    assert all(v.shape[0] == 8 for v in out.values())


@pytest.mark.parametrize("bad", ["sometimes", [[48]], [[0, 8]]])
def test_a_malformed_setting_in_a_config_is_refused_before_any_data_is_built(tmp_path, bad):
    from test_training import tiny_run_config

    from hf_langspec.training.config import validate_config
    from hf_langspec_cli.config_file import ConfigError

    config = tiny_run_config(tmp_path, training={"max_steps": 2, "static_shapes": bad})
    with pytest.raises(ConfigError, match=r"\[training\]: training\.static_shapes"):
        validate_config(config)


def test_a_suites_compiled_runs_share_one_compile_cache(tmp_path):
    """The compare runner gives every compiled run of a suite the suite's inductor cache (compile once per suite)."""
    from conftest import tiny_suite

    from hf_langspec.compare.runner import run_config
    from hf_langspec.compare.suite import load_suite

    suite = load_suite(str(tiny_suite(tmp_path)))
    system = suite.baseline
    suite.base.setdefault("training", {})["torch_compile"] = True
    shared = {"data": {}, "tokenizer": str(tmp_path / "tokenizer")}
    first, second = (run_config(suite, system, seed, shared)["training"] for seed in (1, 2))
    assert first["compile_cache_dir"] == second["compile_cache_dir"] == str(suite.output_dir / "compile_cache")


@pytest.mark.slow  # two inductor compilations of a tiny model, each in its own process
def test_a_second_run_compiles_from_the_first_runs_cache(tmp_path):
    """`training.compile_cache_dir`: a run in a fresh process finds the graphs the first run compiled (inductor's
    FX-graph cache hits, no misses), as a suite's later runs and workers do."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "run.py"
    script.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from torch._dynamo.utils import counters\n"
        "from test_gpu_loop import dataset, trainer_for\n"
        "from hf_langspec import train_tokenizer\n"
        "from conftest import LANGUAGES\n"
        "texts = {c: [f'w{i} w{i + 1} w{i + 2}' for i in range(30)] for c in LANGUAGES}\n"
        "tokenizer = train_tokenizer(texts, languages=LANGUAGES, vocab_size=60, show_progress=False)\n"
        f"trainer = trainer_for(tokenizer, {str(tmp_path / 'run')!r} + sys.argv[1], 'baseline', max_steps=2,\n"
        f"    torch_compile=True, static_shapes=[[16, 16]], compile_cache_dir={str(tmp_path / 'cache')!r})\n"
        "trainer.train()\n"
        "print(json.dumps({k: v for k, v in counters['inductor'].items() if k.startswith('fxgraph_cache')}))\n"
    )
    found = []
    for run in ("1", "2"):
        out = subprocess.run([sys.executable, str(script), run], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        found.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = found
    assert first.get("fxgraph_cache_miss", 0) >= 2  # forward and backward compiled
    assert second.get("fxgraph_cache_hit", 0) >= 2 and second.get("fxgraph_cache_miss", 0) == 0, found
    assert any((tmp_path / "cache").iterdir())
