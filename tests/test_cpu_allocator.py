"""CPU training's malloc setting (hf_langspec.training.cpu_allocator): freed memory is reused without page faults,
and training computes the same bits with it as without it. Each case runs in a fresh process: the setting is the
process's, for its whole life."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

FAULTS = """
import json, resource, sys, torch
from hf_langspec.training.cpu_allocator import keep_freed_memory
setting = keep_freed_memory() if sys.argv[1] == "keep" else None
def faults_of_a_fresh_64_mib_tensor():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(16 << 20).fill_(1.0)  # 64 MiB, freed at once: a training step's logits and their gradient
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"setting": setting, "faults": [faults_of_a_fresh_64_mib_tensor() for _ in range(8)]}))
"""

TRAIN = """
import hashlib, json, sys, torch
from hf_langspec.modeling.configuration_lms import LMSConfig
from hf_langspec.modeling.modeling_lms import LMSForConditionalGeneration
from hf_langspec.training.cpu_allocator import keep_freed_memory
if sys.argv[1] == "keep":
    keep_freed_memory()
torch.set_num_threads(1)
torch.manual_seed(0)
config = LMSConfig(vocab_size=3000, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                   decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, languages=["en", "de", "fr"],
                   lms_rank=4, lms_fuse_distillation=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                   decoder_start_token_id=2)
model = LMSForConditionalGeneration(config).train()  # two passes and a symmetric KL over [8, 24, 3000] logits
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
g = torch.Generator().manual_seed(0)
for step in range(4):
    source, target = torch.randint(5, 3000, (8, 16 + 4 * step), generator=g), torch.randint(5, 3000, (8, 24), generator=g)
    languages = torch.randint(0, 3, (2, 8), generator=g)
    loss = model(input_ids=source, labels=target, src_lang_ids=languages[0], tgt_lang_ids=languages[1]).loss
    loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
print(json.dumps({"loss": loss.item(), "parameters": digest}))
"""


def _fresh_process(script: str, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HF_LANGSPEC_GLIBC_MALLOC"}
    command = [sys.executable, "-c", script, mode]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=300).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_freed_64_mib_tensor_is_reused_without_page_faults():
    kept, default = _fresh_process(FAULTS, "keep"), _fresh_process(FAULTS, "default")
    assert kept["setting"] == "glibc malloc keeping freed memory (mallopt: no mmap, no trimming)"
    assert min(default["faults"]) >= 16_000  # glibc's default: a fresh mmap each time, a fault per 4 KiB page
    assert sum(kept["faults"][4:]) < 100  # kept: once the heap has settled (a few allocations), no fault at all


def test_training_computes_the_same_bits_with_the_setting_as_without():
    kept, default = _fresh_process(TRAIN, "keep"), _fresh_process(TRAIN, "default")
    assert kept == default


def test_the_variable_keeps_glibcs_defaults(monkeypatch):
    from hf_langspec.training import cpu_allocator

    monkeypatch.setattr(cpu_allocator, "_state", None)
    monkeypatch.setenv("HF_LANGSPEC_GLIBC_MALLOC", "1")
    assert cpu_allocator.keep_freed_memory() == "glibc's default malloc (HF_LANGSPEC_GLIBC_MALLOC=1)"
    assert cpu_allocator.allocator_setting() == "glibc's default malloc (HF_LANGSPEC_GLIBC_MALLOC=1)"


def test_the_benchmarks_name_their_flag_only_where_the_setting_took(monkeypatch):
    """benchmarks/_report.keep_freed_memory: a kept allocator is reported with how to measure without it; glibc's
    defaults (the variable) are reported as they are, with no flag to turn off what is not on."""
    from pathlib import Path

    from hf_langspec.training import cpu_allocator

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import _report

    monkeypatch.setattr(cpu_allocator, "_state", cpu_allocator.KEPT)
    assert _report.keep_freed_memory() == f"{cpu_allocator.KEPT}; `--glibc-defaults` to measure without"
    monkeypatch.setattr(cpu_allocator, "_state", None)
    monkeypatch.setenv("HF_LANGSPEC_GLIBC_MALLOC", "1")
    assert _report.keep_freed_memory() == "glibc's default malloc (HF_LANGSPEC_GLIBC_MALLOC=1)"
