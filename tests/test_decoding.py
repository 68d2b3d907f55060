"""Decoding with the cache is decoding: every model class, every transformers version of the matrix.

transformers 5.24 renamed the cache argument (`past_key_values` -> `cache`); a forward that missed the
new name decoded every step from an empty cache and produced loops, silently. These tests fail on that:
cached decoding must equal uncached decoding token for token, and a trained model must reproduce its
committed outputs (tests/fixtures/make_trained_tiny.py), here and as remote code.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import DEVICE, generation_inputs, random_batch, run_without_package, tiny_config, with_diverse_outputs
from test_variants import VARIANTS
from transformers import AutoModelForSeq2SeqLM

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration

TRAINED = Path(__file__).parent / "fixtures" / "trained_tiny"
CLASSES = {"baseline": (LangSpecConfig, LangSpecForConditionalGeneration, {"language_embedding": "additive"})}
CLASSES.update(VARIANTS)


def mixed_direction_model(name: str):
    config_class, model_class, overrides = CLASSES[name]
    torch.manual_seed(0)
    return with_diverse_outputs(model_class(tiny_config(config_class, **overrides)).eval()).to(DEVICE)


@pytest.mark.device  # on the device of HF_LANGSPEC_TEST_DEVICE too (tests/test_device.py)
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("name", list(CLASSES))
def test_cached_decoding_equals_uncached_decoding(name, num_beams):
    model = mixed_direction_model(name)
    batch = generation_inputs(random_batch(batch=4, seed=11))
    batch["src_lang_ids"] = torch.tensor([0, 1, 2, 3])
    batch["tgt_lang_ids"] = torch.tensor([1, 2, 3, 0])  # four directions in one batch
    batch = {k: v.to(DEVICE) for k, v in batch.items()}
    kwargs = dict(
        num_beams=num_beams, max_new_tokens=10, min_new_tokens=10, output_scores=True, return_dict_in_generate=True
    )
    cached = model.generate(**batch, use_cache=True, **kwargs)
    uncached = model.generate(**batch, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, uncached.sequences)
    # every step's scores, not only the argmax: a random model repeats one token whatever its context
    assert len(cached.scores) == len(uncached.scores) == 10
    for step, (with_cache, without) in enumerate(zip(cached.scores, uncached.scores, strict=True)):
        torch.testing.assert_close(with_cache, without, atol=1e-4, rtol=1e-4, msg=f"step {step}")


STATIC_CASES = [*((name, {}) for name in CLASSES),
                *(("baseline", {"position_embedding_type": kind}) for kind in ("sinusoidal_marian", "learned")),
                ("baseline", {"normalize_before": False, "layernorm_embedding": True})]  # fmt: skip


@pytest.mark.device
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize(("name", "fields"), STATIC_CASES)
def test_a_static_cache_decodes_as_the_growing_cache(name, fields, num_beams):
    """`generate(cache_implementation="static")`: transformers' StaticCache (fixed slots, its length on the
    device, the shape CUDA graphs need) gives the growing cache's tokens and every step's scores, for every class
    in a mixed-direction batch, with each kind of position embedding (their offsets come from a device tensor)."""
    config_class, model_class, overrides = CLASSES[name]
    torch.manual_seed(0)
    model = with_diverse_outputs(model_class(tiny_config(config_class, **overrides, **fields)).eval()).to(DEVICE)
    batch = generation_inputs(random_batch(batch=4, seed=11))
    batch["src_lang_ids"] = torch.tensor([0, 1, 2, 3])
    batch["tgt_lang_ids"] = torch.tensor([1, 2, 3, 0])
    batch = {k: v.to(DEVICE) for k, v in batch.items()}
    kwargs = dict(
        num_beams=num_beams, max_new_tokens=10, min_new_tokens=10, output_scores=True, return_dict_in_generate=True
    )
    growing = model.generate(**batch, **kwargs)
    static = model.generate(**batch, cache_implementation="static", **kwargs)
    cache = getattr(static, "past_key_values", None) or getattr(static, "cache", None)  # renamed in 5.24's outputs
    assert type(cache.self_attention_cache).__name__ == "StaticCache"
    assert torch.equal(static.sequences, growing.sequences)
    for step, (fixed, grown) in enumerate(zip(static.scores, growing.scores, strict=True)):
        torch.testing.assert_close(fixed, grown, atol=1e-4, rtol=1e-4, msg=f"step {step}")


def trained_inputs(expected: dict) -> dict[str, torch.Tensor]:
    test = expected["test"]
    width = max(len(e["src"]) for e in test)
    input_ids = torch.tensor([e["src"] + [1] * (width - len(e["src"])) for e in test])
    return {
        "input_ids": input_ids,
        "attention_mask": input_ids.ne(1).long(),
        "src_lang_ids": torch.tensor([e["src_lang"] for e in test]),
        "tgt_lang_ids": torch.tensor([e["tgt_lang"] for e in test]),
    }


def generated(model, inputs: dict, num_beams: int) -> list[list[int]]:
    out = model.generate(**inputs, num_beams=num_beams, max_new_tokens=10)
    return [[t for t in row if t != 1] for row in out.tolist()]


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_trained_model_reproduces_its_committed_translations(num_beams):
    expected = json.loads((TRAINED / "expected.json").read_text())
    model = AutoModelForSeq2SeqLM.from_pretrained(TRAINED).eval()
    outputs = generated(model, trained_inputs(expected), num_beams)
    assert outputs == expected["outputs"][f"num_beams={num_beams}"]
    # and the committed outputs are the task's answers (the model was trained to translate, not to loop)
    assert [row[1:] for row in outputs] == [e["tgt"] for e in expected["test"]]


REMOTE_GENERATE = """
import json, sys, torch
from transformers import AutoModelForSeq2SeqLM

model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
inputs = {k: torch.tensor(v) for k, v in json.loads(sys.argv[2]).items()}
out = {b: model.generate(**inputs, num_beams=b, max_new_tokens=10).tolist() for b in (1, 4)}
print(json.dumps({"class": type(model).__module__, "outputs": out}))
"""


@pytest.mark.slow
def test_remote_code_checkpoints_decode_with_the_cache(tmp_path):
    """The files a checkpoint carries hold the fix: decoded in a process without hf_langspec."""
    expected = json.loads((TRAINED / "expected.json").read_text())
    AutoModelForSeq2SeqLM.from_pretrained(TRAINED).save_pretrained(tmp_path / "ckpt")
    inputs = {k: v.tolist() for k, v in trained_inputs(expected).items()}
    result = json.loads(run_without_package(REMOTE_GENERATE, tmp_path / "ckpt", json.dumps(inputs), cwd=tmp_path))
    assert result["class"].startswith("transformers_modules.")
    for beams in (1, 4):
        outputs = [[t for t in row if t != 1] for row in result["outputs"][str(beams)]]
        assert outputs == expected["outputs"][f"num_beams={beams}"]
