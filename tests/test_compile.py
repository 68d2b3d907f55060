"""torch.compile: every model class's training step is one graph, and compiled decoding decodes as eager does.

The data-dependent parts of the eager path (the range check of language ids, skipping an all-ones padding
mask, routing rows by language with counts read back from the device, CLL's selection of the non-central
rows, HLT-MT's per-step draw between hard and soft routing) take a static-shape path under compilation
(`torch.compiler.is_compiling()`), so `fullgraph=True` holds for the training step. Generation with the
dynamic cache compiles three graphs (the first step, the second, then one for every later length:
recompilations, not graph breaks). Tested with the `aot_eager` backend (dynamo's tracing and autograd, no
code generation: seconds); the Trainer's `torch_compile` (inductor) is tested on the baseline.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import generation_inputs, random_batch, tiny_config, with_diverse_outputs
from test_decoding import CLASSES

torch_dynamo = pytest.importorskip("torch._dynamo")


STAGES = [*CLASSES, "hlt stage 2"]  # HLT-MT's second stage routes by its fixed assignment


def build(name: str):
    config_class, model_class, overrides = CLASSES[name.removesuffix(" stage 2")]
    torch.manual_seed(0)
    model = with_diverse_outputs(model_class(tiny_config(config_class, **overrides)))
    if name.endswith("stage 2"):
        model.fix_assignment()
    return model


def training_batch(src_len: int = 9, tgt_len: int = 6) -> dict[str, torch.Tensor]:
    batch = random_batch(batch=4, src_len=src_len, tgt_len=tgt_len, seed=3)
    batch["src_lang_ids"] = torch.tensor([0, 1, 2, 3])
    batch["tgt_lang_ids"] = torch.tensor([1, 0, 3, 0])  # English (the central language of CLL) twice
    batch["labels"] = batch.pop("decoder_input_ids").roll(-1, 1)
    batch.pop("decoder_attention_mask")
    return batch


def decoding_batch() -> dict[str, torch.Tensor]:
    """Four sentences in four directions: generation inputs of a mixed-direction batch."""
    batch = generation_inputs(random_batch(batch=4, seed=11))
    batch["src_lang_ids"] = torch.tensor([0, 1, 2, 3])
    batch["tgt_lang_ids"] = torch.tensor([1, 2, 3, 0])
    return batch


def loss_and_grads(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(5)  # HLT-MT's hard/soft draw and dropout, if any, draw the same numbers
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    grads = {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize("name", STAGES)
def test_the_training_step_is_one_graph_equal_to_eager_and_one_recompilation_serves_every_batch_length(name):
    """One graph (`fullgraph`), reused by the next step, with eager's loss and gradients. Length-grouped batches
    change length every step: the second length recompiles once with symbolic lengths (dynamo's automatic dynamic
    shapes), still one graph, and every later length reuses it. A graph break there (SDPA's `is_causal` given a
    symbolic bool) made the Trainer's compiled step 30x slower than eager on an H100."""
    torch_dynamo.reset()
    model = build(name).train()
    batch = training_batch()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)  # a graph break fails here
    loss, grads = loss_and_grads(compiled, batch)
    # the second step reuses the graph: state a module keeps for decoding (its gathered-weights caches, CLL's
    # language rows) is not created inside the step, where it changed what the graph guards on
    with torch_dynamo.config.patch(error_on_recompile=True):
        second_loss, _ = loss_and_grads(compiled, batch)
    torch.testing.assert_close(second_loss, loss)
    eager_loss, eager_grads = loss_and_grads(model, batch)
    torch.testing.assert_close(loss, eager_loss, atol=1e-5, rtol=1e-5)
    assert grads.keys() == eager_grads.keys()
    for key, grad in eager_grads.items():
        torch.testing.assert_close(grads[key], grad, atol=1e-5, rtol=1e-4, msg=key)
    loss_and_grads(compiled, training_batch(12, 8))  # recompiles with symbolic lengths; fullgraph: no break
    batch = training_batch(16, 11)
    with torch_dynamo.config.patch(error_on_recompile=True):
        loss, _ = loss_and_grads(compiled, batch)
    torch.testing.assert_close(loss, loss_and_grads(model, batch)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.slow  # three compilations per class: 20-40 s each
@pytest.mark.parametrize("name", STAGES)
def test_compiled_decoding_decodes_as_eager_without_graph_breaks(name):
    from torch._dynamo.utils import counters

    torch_dynamo.reset()
    counters.clear()
    model = build(name).eval()
    batch = decoding_batch()
    kwargs = dict(num_beams=2, max_new_tokens=6, min_new_tokens=6)
    eager = model.generate(**batch, **kwargs)
    model.forward = torch.compile(model.forward, backend="aot_eager", dynamic=True)
    assert torch.equal(model.generate(**batch, **kwargs), eager)
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.slow  # two compilations per class
@pytest.mark.parametrize("name", STAGES)
def test_compiled_decoding_with_a_static_cache_is_two_graphs_reused_by_the_next_call(name):
    """With `cache_implementation="static"` every decoding step after the first has the same shapes (the cache's
    slots fixed, its length on the device), so a compiled forward is two graphs (the step that fills the
    cross-attention cache and every later one), no graph break, and a second `generate` compiles nothing:
    what `mode="reduce-overhead"` needs to replay a CUDA graph per step. It decodes as eager decoding does."""
    from torch._dynamo.utils import counters

    torch_dynamo.reset()
    counters.clear()
    model = build(name).eval()
    batch = decoding_batch()
    kwargs = dict(num_beams=2, max_new_tokens=6, min_new_tokens=6, cache_implementation="static")
    eager = model.generate(**batch, **{k: v for k, v in kwargs.items() if k != "cache_implementation"})
    model.forward = torch.compile(model.forward, backend="aot_eager", fullgraph=True)
    assert torch.equal(model.generate(**batch, **kwargs), eager)
    assert counters["stats"]["unique_graphs"] == 2
    with torch_dynamo.config.patch(error_on_recompile=True):
        assert torch.equal(model.generate(**batch, **kwargs), eager)
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.slow
def test_the_trainers_torch_compile_trains_the_baseline_as_eager_does(tmp_path):
    """`training.torch_compile: true` (inductor, the Trainer's default backend): the same losses as eager, over
    static shapes (`static_shapes: auto`, the default when compiled), whose compile and capture seconds the run's
    run_info.json records."""
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    losses = {}
    for compiled in (False, True):
        (tmp_path / str(compiled)).mkdir()
        config = tiny_run_config(tmp_path / str(compiled), evaluation={"splits": []},
                         model={"dropout": 0.0},  # inductor draws dropout masks with its own generator
                         training={"max_steps": 6, "logging_steps": 1, "save_strategy": "steps", "save_steps": 6,
                                   "torch_compile": compiled})  # fmt: skip
        run_experiment(config)
        state = json.loads(next((tmp_path / str(compiled)).rglob("trainer_state.json")).read_text())
        losses[compiled] = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses[True]) == 6
    assert losses[True] == pytest.approx(losses[False], rel=1e-3)
    info = json.loads(next((tmp_path / "True").rglob("run_info.json")).read_text())
    static = info["trained"][0]["static_shapes"]
    assert (
        static["static_buckets"]
        and static["compile_s"] > 0
        and len(static["per_bucket"]) == len(static["static_buckets"])
    )


@pytest.mark.parametrize(
    ("training", "warned"),
    [({"torch_compile": True, "torch_compile_mode": "reduce-overhead", "static_shapes": "off"}, "its own CUDA graph"),
     ({"torch_compile": True, "static_shapes": "off"}, "symbolic lengths"),
     ({"torch_compile": True, "torch_compile_mode": "reduce-overhead"}, None),  # static_shapes: auto, the default
     ({"torch_compile": True, "static_shapes": [[48, 48]]}, None),
     ({"torch_compile": True, "torch_compile_mode": "reduce-overhead", "pad_to_multiple_of": 16}, None),
     ({"pad_to_multiple_of": 8}, None), ({}, None)],
)  # fmt: skip
def test_compiling_over_unpadded_batches_is_warned_with_the_fix(training, warned):
    from hf_langspec.training.static_shapes import compiled_shapes_risk

    risk = compiled_shapes_risk({"training": training})
    if warned is None:
        assert risk is None
    else:
        assert warned in risk and "static_shapes at auto" in risk and "pad_to_multiple_of: 16" in risk
