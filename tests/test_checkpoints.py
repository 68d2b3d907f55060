"""Checkpoints: Auto classes, safetensors, remote code in a fresh process without hf_langspec."""

from __future__ import annotations

import json
import os

import pytest
import torch
from conftest import generation_inputs, random_batch, run_without_package, tiny_model
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from hf_langspec import LangSpecForConditionalGeneration, LangSpecModel

FRESH_PROCESS = """
import json, sys, torch
from transformers import AutoModelForSeq2SeqLM

checkpoint, batch_file, out_file = sys.argv[1:]
model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint, trust_remote_code=True).eval()
batch = {k: torch.tensor(v) for k, v in json.load(open(batch_file)).items()}
logits = model(**batch).logits
encoder = {k: batch[k] for k in ("input_ids", "attention_mask", "src_lang_ids", "tgt_lang_ids")}
beams = model.generate(**encoder, num_beams=4, max_new_tokens=6)
json.dump({"class": type(model).__module__ + "." + type(model).__name__,
           "logits": logits.tolist(), "beams": beams.tolist()}, open(out_file, "w"))
"""


@pytest.mark.slow
def test_checkpoint_loads_as_remote_code_in_a_fresh_process(tmp_path):
    model = tiny_model(language_embedding="additive", lang_tag_style="target", normalize_before=True)
    model.save_pretrained(tmp_path / "ckpt")
    files = sorted(os.listdir(tmp_path / "ckpt"))
    assert "model.safetensors" in files and "modeling_langspec.py" in files and "routing.py" in files
    assert json.loads((tmp_path / "ckpt" / "config.json").read_text())["auto_map"]["AutoModelForSeq2SeqLM"] == (
        "modeling_langspec.LangSpecForConditionalGeneration"
    )
    batch = random_batch(batch=3, seed=11)
    (tmp_path / "batch.json").write_text(json.dumps({k: v.tolist() for k, v in batch.items()}))
    run_without_package(FRESH_PROCESS, tmp_path / "ckpt", tmp_path / "batch.json", tmp_path / "out.json", cwd=tmp_path)
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["class"].startswith("transformers_modules.")  # the checkpoint's own code ran
    torch.testing.assert_close(torch.tensor(result["logits"]), model(**batch).logits, atol=1e-6, rtol=0)
    encoder = generation_inputs(batch)
    assert result["beams"] == model.generate(**encoder, num_beams=4, max_new_tokens=6).tolist()


def test_auto_classes_load_the_local_classes(tmp_path):
    model = tiny_model(language_embedding="additive")
    model.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "langspec_base"
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is LangSpecForConditionalGeneration
    assert loaded.lm_head.weight.data_ptr() == loaded.model.shared.weight.data_ptr()
    batch = random_batch()
    torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits, atol=0, rtol=0)
    assert type(AutoModel.from_pretrained(tmp_path)) is LangSpecModel


def test_corrupt_checkpoint_is_reported(tmp_path):
    tiny_model().save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(Exception, match=r"(?i)safetensors|header|incomplete|deserializ"):
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
