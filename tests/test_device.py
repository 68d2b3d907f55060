"""What every model class must do on the device users train on: the GPU plan's step 1 (`../shared/GPU_PLAN.md`).

The device comes from one setting, `HF_LANGSPEC_TEST_DEVICE` (default: cuda where present, cpu otherwise;
`conftest.DEVICE`), so these tests run as they are on a CPU in CI and on CUDA on a GPU machine:

    HF_LANGSPEC_TEST_DEVICE=cuda python -m pytest -m device

Every class trains a step (forward, backward, optimizer step) in float32 and under bf16 autocast; cached
decoding equals uncached decoding (tests/test_decoding.py, marked `device` as well); a batch mixing four directions decodes as each example alone; a model
saved as remote code reloads in a fresh process (without the package) and decodes the same tokens there.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import DEVICE, generation_inputs, random_batch, run_without_package, tiny_config, with_diverse_outputs
from test_decoding import CLASSES

from hf_langspec.modeling.modeling_langspec import language_module_parameter

pytestmark = pytest.mark.device


def on_device(name: str):
    config_class, model_class, overrides = CLASSES[name]
    torch.manual_seed(0)
    return with_diverse_outputs(model_class(tiny_config(config_class, **overrides))).to(DEVICE).eval()


def mixed_batch(seed: int = 11) -> dict[str, torch.Tensor]:
    batch = generation_inputs(random_batch(batch=4, seed=seed))
    batch["src_lang_ids"] = torch.tensor([0, 1, 2, 3])
    batch["tgt_lang_ids"] = torch.tensor([1, 2, 3, 0])  # four directions in one batch
    return {k: v.to(DEVICE) for k, v in batch.items()}


def training_step(model, autocast: bool) -> tuple[float, float]:
    """One optimizer step on a fixed batch; returns the loss before and after the step."""
    batch = random_batch(batch=4, seed=3)
    batch["labels"] = batch.pop("decoder_input_ids").roll(-1, 1)
    batch.pop("decoder_attention_mask")
    batch = {k: v.to(DEVICE) for k, v in batch.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    for _ in range(2):
        with torch.autocast(DEVICE.type, dtype=torch.bfloat16, enabled=autocast):
            loss = model(**batch).loss
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        grads = [
            p.grad for name, p in model.named_parameters() if language_module_parameter(name) and p.grad is not None
        ]
        assert grads or not any(language_module_parameter(n) for n, _ in model.named_parameters())  # they learn
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        optimizer.step()
    return losses[0], losses[1]


@pytest.mark.parametrize("name", list(CLASSES))
def test_every_class_trains_a_step_in_float32_and_under_bf16_autocast(name):
    full_before, full_after = training_step(on_device(name), autocast=False)
    mixed_before, mixed_after = training_step(on_device(name), autocast=True)
    assert full_after < full_before and mixed_after < mixed_before  # the step learns
    assert mixed_before == pytest.approx(full_before, rel=3e-2)  # bf16 computes the same loss, to its precision
    model = on_device(name)
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        out = model.generate(**mixed_batch(), num_beams=2, max_new_tokens=6)
    assert out.shape[0] == 4 and out.device.type == DEVICE.type


@pytest.mark.parametrize("name", list(CLASSES))
def test_a_mixed_direction_batch_decodes_as_each_example_alone(name):
    model = on_device(name)
    batch = mixed_batch(seed=7)
    kwargs = dict(num_beams=3, max_new_tokens=8, min_new_tokens=8)
    together = model.generate(**batch, **kwargs)
    for b in range(4):
        length = int(batch["attention_mask"][b].sum())
        alone = model.generate(
            input_ids=batch["input_ids"][b : b + 1, :length], src_lang_ids=batch["src_lang_ids"][b : b + 1],
            tgt_lang_ids=batch["tgt_lang_ids"][b : b + 1], **kwargs,
        )  # fmt: skip
        assert torch.equal(together[b], alone[0]), f"example {b}"


RELOAD_AND_DECODE = """
import json, sys, torch
from transformers import AutoModelForSeq2SeqLM
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).to(sys.argv[2]).eval()
batch = {k: torch.tensor(v, device=sys.argv[2]) for k, v in json.loads(sys.argv[3]).items()}
print(json.dumps(model.generate(**batch, num_beams=2, max_new_tokens=8, min_new_tokens=8).tolist()))
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CLASSES))
def test_a_saved_model_reloads_as_remote_code_and_decodes_the_same(name, tmp_path):
    model = on_device(name)
    batch = mixed_batch()
    expected = model.generate(**batch, num_beams=2, max_new_tokens=8, min_new_tokens=8).tolist()
    model.save_pretrained(tmp_path / "model")
    inputs = json.dumps({k: v.tolist() for k, v in batch.items()})
    out = run_without_package(RELOAD_AND_DECODE, tmp_path / "model", DEVICE.type, inputs, cwd=tmp_path)
    assert json.loads(out.strip().splitlines()[-1]) == expected
