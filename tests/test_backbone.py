"""Backbone behaviour: cached decoding, positions, insertion points, gradient checkpointing."""

from __future__ import annotations

import pytest
import torch
from conftest import PAD, enable_checkpointing, random_batch, tiny_config, tiny_model
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding
from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

from hf_langspec.modeling.backbone import INSERTION_POINTS
from hf_langspec.modeling.positions import fairseq_sinusoidal_table, marian_sinusoidal_table

SHAPES = [
    dict(),
    dict(normalize_before=True),
    dict(position_embedding_type="learned", layernorm_embedding=True),
    dict(position_embedding_type="sinusoidal_marian", language_embedding="additive"),
]


@pytest.mark.parametrize("overrides", SHAPES)
def test_incremental_decoding_equals_full_forward(overrides):
    model = tiny_model(**overrides)
    batch = random_batch(batch=3, tgt_len=7, seed=1)
    batch["decoder_input_ids"][batch["decoder_input_ids"] == PAD] = 9  # generation never feeds padding
    del batch["decoder_attention_mask"]
    full = model(**batch).logits
    encoder_outputs = model.get_encoder()(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        src_lang_ids=batch["src_lang_ids"],
        tgt_lang_ids=batch["tgt_lang_ids"],
    )
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    steps = []
    for t in range(batch["decoder_input_ids"].shape[1]):
        out = model(
            attention_mask=batch["attention_mask"],
            encoder_outputs=encoder_outputs,
            decoder_input_ids=batch["decoder_input_ids"][:, t : t + 1],
            past_key_values=cache,
            use_cache=True,
            src_lang_ids=batch["src_lang_ids"],
            tgt_lang_ids=batch["tgt_lang_ids"],
        )
        cache = out.past_key_values
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_sinusoidal_tables_equal_the_reference_implementations():
    for dim in (32, 33):
        fairseq = M2M100SinusoidalPositionalEmbedding.get_embedding(70, dim, padding_idx=1)
        torch.testing.assert_close(fairseq_sinusoidal_table(70, dim, 1), fairseq)
        marian = MarianSinusoidalPositionalEmbedding(70, dim).create_weight()
        torch.testing.assert_close(marian_sinusoidal_table(70, dim), marian)


def test_fairseq_positions_skip_padding():
    """Left padding must not shift positions (fairseq make_positions): same output as no padding."""
    model = tiny_model()
    positions = model.model.encoder.embed_positions
    ids = torch.tensor([[10, 11, 12, 13], [PAD, PAD, 12, 13]])
    vectors = positions(ids, ids.shape)
    torch.testing.assert_close(vectors[1, 2:], vectors[0, :2])
    assert torch.count_nonzero(vectors[1, :2]) == 0


def test_too_long_input_raises_instead_of_clamping():
    model = tiny_model(max_position_embeddings=8)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings=8"):
        model(input_ids=torch.full((1, 9), 10), decoder_input_ids=torch.full((1, 2), 2))


class _Recorder(nn.Module):
    """An insertion-point module that records its calls and leaves the computation unchanged."""

    def __init__(self, point: str, calls: list):
        super().__init__()
        self.point, self.calls = point, calls

    def forward(self, hidden, lang, layer_idx=None, extra=None):
        # extra: the projection (q k v o) at attention points, the sublayer at sublayer_out
        projection = None if self.point.endswith("sublayer_out") else extra
        self.calls.append((self.point, layer_idx, extra, tuple(hidden.shape)))
        if self.point.endswith("_ffn_proj"):  # additive, onto fc1 (ffn wide) or fc2 (d wide): a broadcast zero
            return hidden.new_zeros(())
        if self.point.endswith("dec_ffn") or projection is not None:  # additive terms
            return torch.zeros_like(hidden)
        return hidden


def test_every_insertion_point_is_called_where_documented():
    config = tiny_config()
    calls: list = []
    model = tiny_model()
    batch = random_batch(batch=2, src_len=5, tgt_len=4)
    baseline = model(**batch).logits
    for side in ("encoder", "decoder"):
        stack = getattr(model.model, side)
        stack.insertions.update({p: _Recorder(f"{side}:{p}", calls) for p in INSERTION_POINTS[side]})
    torch.testing.assert_close(model(**batch).logits, baseline)  # neutral modules change nothing

    def count(point):
        return sum(1 for c in calls if c[0] == point)

    e, d = config.encoder_layers, config.decoder_layers
    assert count("encoder:embed") == 1 and count("decoder:embed") == 1
    assert count("encoder:enc_out") == 1 and count("decoder:dec_top") == 1
    for point in ("enc_self_in", "enc_ffn_in", "ffn_out"):
        assert count(f"encoder:{point}") == e
    assert count("encoder:sublayer_out") == 2 * e and count("decoder:sublayer_out") == 3 * d
    for side, sublayers in (("encoder", ["self_attn", "ffn"]), ("decoder", ["self_attn", "cross_attn", "ffn"])):
        told = [(c[1], c[2]) for c in calls if c[0] == f"{side}:sublayer_out"]
        assert told == [(i, s) for i in range(e if side == "encoder" else d) for s in sublayers]
    for point in ("dec_self_in", "dec_cross_in", "dec_ffn_in", "dec_ffn", "ffn_out"):
        assert count(f"decoder:{point}") == d
    for point, n in (("encoder:enc_self_attn", e), ("decoder:dec_self_attn", d), ("decoder:dec_cross_attn", d)):
        assert sorted(c[2] for c in calls if c[0] == point) == sorted(["q", "k", "v", "o"] * n)
    for side, point, n, ffn in (("encoder", "enc_ffn_proj", e, config.encoder_ffn_dim),
                                ("decoder", "dec_ffn_proj", d, config.decoder_ffn_dim)):  # fmt: skip
        told = [(c[1], c[2], c[3][-1]) for c in calls if c[0] == f"{side}:{point}"]
        assert told == [(i, p, width) for i in range(n) for p, width in (("fc1", config.d_model), ("fc2", ffn))]
    # cross-attention keys/values are projected from the encoder output (source length 5)
    assert {c[3][1] for c in calls if c[0] == "decoder:dec_cross_attn" and c[2] in "kv"} == {5}


def test_unknown_insertion_point_is_rejected():
    from hf_langspec.modeling.backbone import LangSpecEncoder

    config = tiny_config()
    with pytest.raises(ValueError, match=r"\['dec_top'\] do not exist in the encoder"):
        LangSpecEncoder(config, nn.Embedding(config.vocab_size, config.d_model), {"dec_top": nn.Identity()})


def test_gradient_checkpointing_gives_the_same_gradients():
    batch = random_batch(batch=2)
    labels = batch.pop("decoder_input_ids")
    del batch["decoder_attention_mask"]
    grads, forwards = [], []
    for checkpointing in (False, True):
        model = tiny_model().train()
        if checkpointing:
            enable_checkpointing(model)
        calls = []
        model.model.decoder.layers[1].fc1.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        model(**batch, labels=labels).loss.backward()
        grads.append(model.model.encoder.layers[0].fc1.weight.grad.clone())
        forwards.append(len(calls))
    assert forwards == [1, 2]  # the checkpointed layer is recomputed during backward
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: {**b, "input_ids": b["input_ids"][0]}, r"input_ids has shape \(9,\); give \[batch, length\]"),
        (lambda b: {**b, "input_ids": b["input_ids"][None]}, r"input_ids has shape \(1, 3, 9\)"),
        (
            lambda b: {**b, "input_ids": b["input_ids"] + 1000},
            r"ids outside the vocabulary \(from \d+ to \d+, vocabulary size 120\)",
        ),
        (
            lambda b: {**b, "attention_mask": b["attention_mask"][:, :5]},
            r"attention_mask has shape \(3, 5\) but the input has \(3, 9\)",
        ),
    ],
)
def test_bad_model_inputs_are_one_clear_error(change, message):
    model = tiny_model(language_embedding="additive")
    batch = change(random_batch())
    with pytest.raises(ValueError, match=message):
        model(**batch)
