"""`training.cuda_graph_step` (issue 57): the whole training step recorded as one CUDA graph per bucket.

The recording needs CUDA (the device test at the end, run by the GPU plan's `tests` step); everything around it
is checked on the CPU standing in for a GPU (`routing.accelerator_path()`), where the same step function runs
eagerly: it must train exactly as the Trainer's own step does (loss, the gradients' norm before clipping, the
optimizer's step with the scheduler's learning rate, the weights after), and its conditions are checked before
any step.
"""

from __future__ import annotations

import pytest
import test_gpu_loop
import torch
from conftest import DEVICE
from test_gpu_loop import dataset, trainer_for
from transformers import TrainerCallback

from hf_langspec.modeling.routing import accelerator_path
from hf_langspec.training.graph_step import OptimizerState, StepTakenInGraph, check_capturable

tokenizer = test_gpu_loop.tokenizer  # the fixture: a small tokenizer of the test languages


class Logged(TrainerCallback):
    def __init__(self):
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.logs.append(logs)


def train(trainer) -> tuple[list[float], list[float], dict[str, torch.Tensor]]:
    logged = Logged()
    trainer.add_callback(logged)
    trainer.train()
    weights = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    return [e["loss"] for e in logged.logs], [e["grad_norm"] for e in logged.logs], weights


def assert_same_weights(found: dict, expected: dict, atol: float = 3e-5) -> None:
    """Every weight equal within rounding (most agree to 2e-7; 3e-5 is 3% of one step at the learning rate of
    1e-3, so a missed or doubled update, a wrong rate or clipping fails), but the attention keys' biases: their
    gradient is zero up to rounding (softmax ignores a constant added to one query's scores), and Adam scales that
    rounding noise to steps of the learning rate's size. HLT-MT's adapters reach 1.4e-5 the same way."""
    for key, value in expected.items():
        if not key.endswith("k_proj.bias"):
            torch.testing.assert_close(found[key], value, atol=atol, rtol=1e-5, msg=key)


@pytest.mark.parametrize(("name", "max_grad_norm"), [("baseline", 1.0), ("baseline", 0.0), ("cll", 1.0), ("hlt", 1.0)])
def test_the_recorded_step_trains_as_the_trainers_own_step(tokenizer, tmp_path, name, max_grad_norm):
    """Over an epoch boundary (44 examples, batches of 8), with the inverse square-root schedule's warm-up moving
    the learning rate every step, clipped or not: the same losses, gradient norms and final weights."""
    common = dict(max_steps=9, logging_steps=1, data=dataset(tokenizer, n=44), warmup_steps=4,
                  max_grad_norm=max_grad_norm, static_shapes=[[8, 8], [16, 16]])  # fmt: skip
    with accelerator_path():
        reference = train(trainer_for(tokenizer, tmp_path / "eager", name, **common))
        graphed_trainer = trainer_for(tokenizer, tmp_path / "graph", name, cuda_graph_step=True, **common)
        graphed = train(graphed_trainer)
    assert len(graphed[0]) == 9
    assert graphed[0] == pytest.approx(reference[0], rel=1e-5)
    assert graphed[1] == pytest.approx(reference[1], rel=1e-4)
    assert_same_weights(graphed[2], reference[2])
    assert not isinstance(graphed_trainer.optimizer, StepTakenInGraph)  # the Trainer's optimizer again after train


def test_a_checkpoint_of_the_recorded_step_resumes_as_an_uninterrupted_run(tokenizer, tmp_path):
    """The optimizer state and step count the recorded step keeps are the ones checkpoints save: a run stopped at
    step 4 and resumed ends with the weights of a run that went through."""
    common = dict(max_steps=8, logging_steps=1, data=dataset(tokenizer, n=44), cuda_graph_step=True,
                  save_strategy="steps", save_steps=4, static_shapes=[[16, 16]])  # fmt: skip
    with accelerator_path():
        whole = train(trainer_for(tokenizer, tmp_path / "whole", "baseline", **common))
        first = trainer_for(tokenizer, tmp_path / "resumed", "baseline", **common | {"max_steps": 4})
        first.train()
        resumed = trainer_for(tokenizer, tmp_path / "resumed", "baseline", **common)
        logged = Logged()
        resumed.add_callback(logged)
        resumed.train(resume_from_checkpoint=True)
    assert [e["loss"] for e in logged.logs] == pytest.approx(whole[0][4:], rel=1e-5)
    assert_same_weights({name: p.detach() for name, p in resumed.model.named_parameters()}, whole[2])


@pytest.mark.parametrize(
    ("settings", "message"),
    [({}, "trains on cpu"), ({"gradient_accumulation_steps": 2}, "gradient_accumulation_steps: 1"),
     ({"static_shapes": "off"}, "needs static shapes"), ({"optim": "adamw_torch"}, "optim: adamw_torch_fused"),
     ({"torch_compile": True, "torch_compile_backend": "aot_eager", "torch_compile_mode": "reduce-overhead"},
      "torch_compile_mode: default")],
)  # fmt: skip
def test_each_unmet_condition_is_refused_when_the_trainer_is_made(tokenizer, tmp_path, settings, message):
    standing_in = accelerator_path() if settings else torch.autograd.grad_mode.enable_grad()
    with standing_in, pytest.raises(ValueError, match=r"training\.cuda_graph_step cannot be used: .*" + message):
        trainer_for(tokenizer, tmp_path, "baseline", cuda_graph_step=True, **settings)


def test_only_the_fused_adamw_is_recorded():
    params = [torch.nn.Parameter(torch.ones(3))]
    check_capturable(torch.optim.AdamW(params, fused=True))
    for optimizer in (torch.optim.AdamW(params), torch.optim.SGD(params, lr=0.1)):
        with pytest.raises(ValueError, match=r"needs the fused AdamW.*adamw_torch_fused"):
            check_capturable(optimizer)


def test_the_warm_ups_optimizer_steps_are_undone():
    """The warm-up iterations before recording step the optimizer for real; `OptimizerState.restore` puts the
    weights back and zeroes the state they created, so the next step is the run's first."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    fresh = torch.nn.Linear(4, 3)
    fresh.load_state_dict(model.state_dict())
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=0.1, fused=True)
    snapshot = OptimizerState(optimizer)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    snapshot.restore()
    batch = torch.randn(2, 4)
    for m, o in ((model, optimizer), (fresh, fresh_optimizer)):
        m(batch).sum().backward()
        o.step()
    torch.testing.assert_close(model.weight, fresh.weight)


@pytest.mark.device  # the recording itself: CUDA only (the GPU plan's `tests` step runs it)
@pytest.mark.parametrize("name", ["baseline", "cll", "hlt"])
def test_on_cuda_the_recorded_step_trains_as_the_eager_step(tokenizer, tmp_path, name):
    if DEVICE.type != "cuda":
        pytest.skip("records CUDA graphs: needs HF_LANGSPEC_TEST_DEVICE=cuda")
    common = dict(max_steps=9, logging_steps=1, data=dataset(tokenizer, n=44), use_cpu=False,
                  static_shapes=[[8, 8], [16, 16]], dataloader_num_workers=0)  # fmt: skip
    reference = train(trainer_for(tokenizer, tmp_path / "eager", name, **common))
    recorded_trainer = trainer_for(tokenizer, tmp_path / "graph", name, cuda_graph_step=True, **common)
    recorded = train(recorded_trainer)
    assert recorded_trainer.static_capture["graph_buckets"] == [[8, 8], [16, 16]]
    tolerance = 1e-2 if name == "hlt" else 1e-4  # HLT-MT draws soft/hard on the device in a graph, on the host eagerly
    assert recorded[0] == pytest.approx(reference[0], rel=tolerance)
    if name != "hlt":
        assert_same_weights(recorded[2], reference[2], atol=1e-5)
