"""The backbone equals transformers' reference models with the same weights (the correctness proof)."""

from __future__ import annotations

import pytest
import torch
from conftest import random_batch, tiny_model

from hf_langspec.interop import from_m2m100, from_marian, to_m2m100, to_marian

CASES = [
    pytest.param(
        dict(normalize_before=False, position_embedding_type="sinusoidal_marian"), to_marian, from_marian, id="marian"
    ),
    pytest.param(
        dict(normalize_before=True, position_embedding_type="sinusoidal"), to_m2m100, from_m2m100, id="m2m100"
    ),
]
REFERENCE_INPUTS = ("input_ids", "attention_mask", "decoder_input_ids", "decoder_attention_mask")


def _logits(model, batch):
    return model(**{k: batch[k] for k in REFERENCE_INPUTS}).logits


@pytest.mark.parametrize(("shape", "to_reference", "from_reference"), CASES)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_logits_match_reference_model(shape, to_reference, from_reference, activation):
    model = tiny_model(activation_function=activation, **shape)
    reference = to_reference(model).eval()
    batch = random_batch(batch=4, seed=3)
    assert batch["attention_mask"].min() == 0 and batch["decoder_attention_mask"].min() == 0  # padding is exercised
    torch.testing.assert_close(_logits(model, batch), _logits(reference, batch), atol=1e-5, rtol=0)
    back = from_reference(reference, languages=model.config.languages)
    torch.testing.assert_close(_logits(back.eval(), batch), _logits(model, batch), atol=0, rtol=0)


@pytest.mark.parametrize(("shape", "to_reference", "from_reference"), CASES)
def test_beam_search_matches_reference_model(shape, to_reference, from_reference):
    model = tiny_model(seed=1, **shape)
    reference = to_reference(model).eval()
    batch = random_batch(batch=3, seed=5)
    kwargs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=4, max_new_tokens=12)
    ours = model.generate(**kwargs)
    theirs = reference.generate(**kwargs)
    assert torch.equal(ours, theirs)


def test_conversion_refuses_what_the_reference_cannot_represent():
    with pytest.raises(ValueError, match=r"normalize_before=True.*needs False"):
        to_marian(tiny_model(normalize_before=True, position_embedding_type="sinusoidal_marian"))
    with pytest.raises(ValueError, match="position_embedding_type='sinusoidal'"):
        to_marian(tiny_model())
    with pytest.raises(ValueError, match="language-specific modules"):
        to_m2m100(tiny_model(normalize_before=True, language_embedding="additive"))
    with pytest.raises(ValueError, match="layernorm_embedding"):
        to_m2m100(tiny_model(normalize_before=True, layernorm_embedding=True))
    with pytest.raises(ValueError, match=r"encoder_drop_residual=\[\[1, 'self_attn'\]\]"):
        to_m2m100(tiny_model(normalize_before=True, encoder_drop_residual=[[1, "self_attn"]]))


def test_reference_features_the_baseline_lacks_are_reported():
    marian = to_marian(tiny_model(position_embedding_type="sinusoidal_marian"))
    marian.final_logits_bias[0, 3] = 1.0
    with pytest.raises(ValueError, match="final_logits_bias"):
        from_marian(marian)
    m2m = to_m2m100(tiny_model(normalize_before=True))
    m2m.config.encoder_layerdrop = 0.05
    with pytest.raises(ValueError, match=r"encoder_layerdrop=0.05.*set model.config.encoder_layerdrop = 0.0"):
        from_m2m100(m2m)
