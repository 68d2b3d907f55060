"""The package's language-specific LoRA against peft's LoRA on the same checkpoint: restricted to one direction (one
source language in the encoder, one target language in the decoder) with peft's factors, the logits are peft's."""

from __future__ import annotations

import peft
import torch
from conftest import CODES, TEXTS, nllb_checkpoint

RANK, ALPHA = 4, 8.0
PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
# the package's attention points and where peft finds the same projections in transformers' M2M100
POINTS = {"enc_self_attn": ("encoder", "self_attn"), "dec_self_attn": ("decoder", "self_attn"),
          "dec_cross_attn": ("decoder", "encoder_attn")}  # fmt: skip


def peft_model(folder):
    from transformers import AutoModelForSeq2SeqLM

    base = AutoModelForSeq2SeqLM.from_pretrained(folder)
    config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0,
                             target_modules=r".*(self_attn|encoder_attn)\.(q_proj|k_proj|v_proj|out_proj)")  # fmt: skip
    return peft.get_peft_model(base, config)


def copy_factors(ours, theirs, source: int, target: int) -> int:
    """peft's A and B for each projection set to the package's for `source` (encoder) and `target` (decoder):
    the package computes `x A B` with A [d, r], peft `B(A(x))` with weights [r, d] and [d, r]. Returns the count."""
    modules, copied = dict(theirs.named_modules()), 0
    for point, (stack, attention) in POINTS.items():
        insertion = getattr(ours.model, stack).insertions[point]
        language = source if stack == "encoder" else target
        for layer in range(insertion.a.shape[0]):
            for p, name in enumerate(insertion.projections):
                lora = modules[f"base_model.model.model.{stack}.layers.{layer}.{attention}.{PROJECTIONS[name]}"]
                lora.lora_A["default"].weight.data.copy_(insertion.a[layer, p, language].T)
                lora.lora_B["default"].weight.data.copy_(insertion.b[layer, p, language].T)
                copied += 1
    return copied


def test_one_directions_lora_is_pefts_lora_with_the_same_factors(tmp_path):
    from hf_langspec.pretrained import load_pretrained

    folder = nllb_checkpoint(tmp_path / "nllb")
    ours, tokenizer = load_pretrained(folder, "lora", languages=CODES, lora_rank=RANK, lora_alpha=ALPHA)
    torch.manual_seed(0)
    with torch.no_grad():  # trained factors: B away from its zero start, every language its own
        for name, parameter in ours.named_parameters():
            if name.endswith((".a", ".b")):
                parameter.normal_(0, 0.2)
    theirs = peft_model(folder)
    source, target = tokenizer.language_id("eng_Latn"), tokenizer.language_id("deu_Latn")
    projections = 4 * (
        ours.config.encoder_layers + 2 * ours.config.decoder_layers
    )  # q,k,v,o x enc self, dec self+cross
    assert copy_factors(ours, theirs, source, target) == projections
    # the same trainable count as peft's for one language: r (d + d) per projection
    d = ours.config.d_model
    assert sum(p.numel() for n, p in theirs.named_parameters() if "lora_" in n) == projections * RANK * 2 * d

    batch = tokenizer(TEXTS[:3], text_target=TEXTS[1:4], src_lang="eng_Latn", tgt_lang="deu_Latn",
                      return_tensors="pt", padding=True)  # fmt: skip
    ours.eval(), theirs.eval()
    with torch.no_grad():
        mine = ours(**batch).logits
        peft_logits = theirs(**batch).logits
        plain = theirs.get_base_model()
        with theirs.disable_adapter():
            untouched = plain(**batch).logits
    assert (mine - untouched).abs().max() > 1e-2  # the factors change the output ...
    torch.testing.assert_close(mine, peft_logits, rtol=1e-4, atol=1e-4)  # ... exactly as peft's do
    # another target language routes the decoder to its own factors: no longer peft's (one adapter per language)
    other = tokenizer(TEXTS[:3], text_target=TEXTS[1:4], src_lang="eng_Latn", tgt_lang="fra_Latn",
                      return_tensors="pt", padding=True)  # fmt: skip
    with torch.no_grad():
        assert (ours(**other).logits - theirs(**other).logits).abs().max() > 1e-2
