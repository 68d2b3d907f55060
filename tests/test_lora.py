"""Language-specific LoRA (issue 45, item 3): per-example routing, identity start, folding, reload.

The method: `h = W x + (alpha / r) B_l A_l x` on the attention projections and, where asked, the FFN's fc1 and fc2
(Hu et al. 2022, eq. 3), `l` each
example's language (the encoder's source, the decoder's target). Checked against that formula written out per
example, and through the package's own paths: `adapt` (starts as the checkpoint), `specialize` (folds into one
direction's plain weights), `save_pretrained` / `from_pretrained`.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import random_batch, tiny_config, with_diverse_outputs

from hf_langspec.modeling.configuration_lora import LoRAConfig
from hf_langspec.modeling.modeling_lora import LoRAForConditionalGeneration


def lora_model(**overrides) -> LoRAForConditionalGeneration:
    torch.manual_seed(0)
    model = LoRAForConditionalGeneration(tiny_config(LoRAConfig, lora_rank=3, **overrides))
    with torch.no_grad():  # B starts at zero: give every LoRA a delta to check
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.normal_(0.0, 0.3)
    return model.eval()


def test_each_example_gets_its_own_languages_low_rank_delta():
    """The routed LoRA equals, example by example, `W x + (alpha / r) x A_l B_l` written out with plain matmuls."""
    model = lora_model(lora_alpha=6.0)
    module = model.model.encoder.insertions["enc_self_attn"]
    x = torch.randn(4, 5, 32)
    from hf_langspec.modeling.routing import LanguageContext

    src = torch.tensor([0, 2, 1, 2])
    lang = LanguageContext(src, torch.tensor([1, 0, 0, 3]), num_languages=4, batch_size=4)
    for p, name in enumerate(["q", "k", "v", "o"]):
        got = module(x, lang, 1, name)
        for b in range(4):
            expected = x[b] @ module.a[1, p, src[b]] @ module.b[1, p, src[b]] * (6.0 / 3)
            torch.testing.assert_close(got[b], expected, atol=1e-5, rtol=1e-5)


def test_the_decoder_is_keyed_by_the_target_and_the_encoder_by_the_source():
    model = lora_model()
    batch = random_batch(batch=2, seed=4)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([0, 0]), torch.tensor([1, 1])
    with torch.no_grad():
        before = model(**batch).logits
        model.model.decoder.insertions["dec_self_attn"].b[:, :, 2].mul_(5)  # another target's delta: no change
        model.model.encoder.insertions["enc_self_attn"].b[:, :, 1].mul_(5)  # another source's: no change
        torch.testing.assert_close(model(**batch).logits, before)
        model.model.decoder.insertions["dec_self_attn"].b[:, :, 1].mul_(5)  # this target's: a change
        assert (model(**batch).logits - before).abs().max() > 1e-3


def test_a_new_lora_model_computes_what_its_backbone_computes():
    from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration

    torch.manual_seed(0)
    base = with_diverse_outputs(LangSpecForConditionalGeneration(tiny_config(LangSpecConfig))).eval()
    from hf_langspec.interop import adapt

    model = adapt(base, "lora", lora_rank=4).eval()  # B = 0: adapt checks the logits itself
    assert model.model.encoder.insertions["enc_self_attn"].a.abs().sum() > 0  # A is not zero: training moves B


FFN_POINTS = ["enc_self_attn", "enc_ffn_proj", "dec_ffn_proj"]


def test_the_ffn_lora_adds_its_languages_delta_to_fc1_and_fc2():
    """At an FFN point: `fc2(act(fc1 x + s x A1 B1)) + s h A2 B2`, `h` the activation, written out per example."""
    from hf_langspec.modeling.routing import LanguageContext

    model = lora_model(lora_points=FFN_POINTS, lora_alpha=6.0)
    layer = model.model.decoder.layers[1]
    module = model.model.decoder.insertions["dec_ffn_proj"]
    x = torch.randn(3, 4, 32)
    tgt = torch.tensor([2, 0, 2])
    lang = LanguageContext(torch.tensor([0, 1, 3]), tgt, num_languages=4, batch_size=3)
    got = layer.feed_forward(x, module, lang)
    for b in range(3):
        inner = layer.fc1(x[b]) + x[b] @ module.a1[1, tgt[b]] @ module.b1[1, tgt[b]] * 2.0
        inner = layer.activation_fn(inner)
        expected = layer.fc2(inner) + inner @ module.a2[1, tgt[b]] @ module.b2[1, tgt[b]] * 2.0
        torch.testing.assert_close(got[b], expected, atol=1e-5, rtol=1e-5)
    ffn = model.config.decoder_ffn_dim
    assert module.a1.shape == (3, 4, 32, 3) and module.b1.shape == (3, 4, 3, ffn) and module.a2.shape == (3, 4, ffn, 3)


def test_an_ffn_lora_starts_as_its_checkpoint_and_reloads_with_the_same_outputs(tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration
    from hf_langspec.interop import adapt

    torch.manual_seed(0)
    base = with_diverse_outputs(LangSpecForConditionalGeneration(tiny_config(LangSpecConfig))).eval()
    adapt(base, "lora", lora_rank=2, lora_points=FFN_POINTS)  # checks its logits against the base's itself
    model = lora_model(lora_points=FFN_POINTS)
    model.save_pretrained(tmp_path)
    again = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    batch = random_batch(batch=2, seed=9)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([1, 3]), torch.tensor([0, 2])
    torch.testing.assert_close(again(**batch).logits, model(**batch).logits)


@pytest.mark.parametrize("points", [None, ["dec_cross_attn"], FFN_POINTS])
def test_one_direction_folds_into_a_plain_model(points):
    from hf_langspec.export import specialize

    model = lora_model(lora_points=points, normalize_before=True, position_embedding_type="sinusoidal")
    batch = random_batch(batch=3, seed=2)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.full((3,), 2), torch.full((3,), 0)
    plain = specialize(model, "fr", "en").model
    plain_inputs = {k: v for k, v in batch.items() if not k.endswith("lang_ids")}
    torch.testing.assert_close(plain(**plain_inputs).logits, model(**batch).logits, atol=1e-4, rtol=1e-4)


def test_it_reloads_in_a_fresh_model_with_the_same_outputs(tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    model = lora_model(lora_projections=["q", "v"], lora_dropout=0.1)
    model.save_pretrained(tmp_path)
    again = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(again).__name__ == "LoRAForConditionalGeneration" and again.config.lora_projections == ["q", "v"]
    batch = random_batch(batch=2, seed=9)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([1, 3]), torch.tensor([0, 2])
    torch.testing.assert_close(again(**batch).logits, model(**batch).logits)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"lora_rank": 0}, "lora_rank=0"), ({"lora_points": ["enc_ffn"]}, "Unknown LoRA points"),
     ({"languages": [], "lang_tag_token_ids": None, "lang_tag_style": "none"}, "needs `languages`")],
)  # fmt: skip
def test_impossible_lora_settings_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(LoRAConfig, **overrides)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("lora_rank", 2.5, "whole number of at least 1"), ("lora_rank", 0, "whole number of at least 1"),
     ("lora_rank", True, "whole number"), ("lora_rank", "8", "whole number"),
     ("lora_alpha", 0, "positive number"), ("lora_alpha", float("nan"), "positive number"),
     ("lora_dropout", 1.0, r"in \[0, 1\)"), ("lora_dropout", -0.1, r"in \[0, 1\)")],
)  # fmt: skip
def test_every_lora_setting_is_checked_with_its_fix(field, value, message):
    """Issue 59: `lora_rank: 2.5` was a torch traceback (a float reached a tensor shape)."""
    with pytest.raises(ValueError, match=rf"{field}={re.escape(repr(value))} must be .*{message}"):
        tiny_config(LoRAConfig, **{field: value})


@pytest.mark.reliability
@pytest.mark.parametrize("value", [2.5, 0, "128"])
def test_the_adapter_size_is_a_positive_whole_number(value):
    from hf_langspec.modeling.configuration_adapter import AdapterConfig

    with pytest.raises(ValueError, match=r"adapter_dim=.* must be a positive whole number"):
        tiny_config(AdapterConfig, adapter_dim=value)
