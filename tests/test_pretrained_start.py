"""A method on a pretrained checkpoint starts equal to it (issue 45, item 2).

`interop.adapt` loads an `M2M100ForConditionalGeneration` (NLLB-200 dense's config fields: scaled embeddings,
relu, tied, no LayerDrop) or a `MarianMTModel` into a method's model with the language modules started as the
identity; the adapted model's logits must equal the checkpoint's own (computed by transformers, not by the
package). Methods whose modules renormalise the stream cannot start that way and say so.
"""

from __future__ import annotations

import pytest
import torch
from conftest import LANGUAGES, TAG_IDS, VOCAB
from transformers import M2M100Config, M2M100ForConditionalGeneration, MarianConfig, MarianMTModel

from hf_langspec.interop import adapt

CONTRACT = {"languages": LANGUAGES, "lang_tag_token_ids": TAG_IDS}
PAIRS = [[s, t] for s in LANGUAGES for t in LANGUAGES if s != t]
# every method and form that can start as the identity
# fmt: off
STARTS = {
    "xlp": ("xlp", {}),
    "laa": ("laa", {"laa_points": ["enc_self_attn", "dec_self_attn", "dec_cross_attn"], "lang_tag_style": "none"}),
    "lee table": ("laa", {"laa_points": [], "lee_points": [2, 4], "lee_embedding": "table"}),
    "fcll": ("cll", {"central_language": "en", "cll_inner_dim": 8}),
    "sclm pre-LN": ("clm", {"clm_norm": "pre", "clm_encoder": "sclm", "clm_decoder": "sclm", "clm_num_features": 4}),
    "mclm pre-LN": ("clm", {"clm_norm": "pre", "clm_encoder": "none", "clm_decoder": "mclm", "clm_num_features": 4,
                            "clm_decoder_key": "target"}),
    "monolingual adapters": ("adapter", {"adapter_preset": "monolingual", "adapter_dim": 8}),
    "pair adapters": ("adapter", {"adapter_preset": "bapna_firat", "adapter_dim": 8, "language_pairs": PAIRS}),
    "matrix adapters": ("adapter", {"adapter_preset": "monolingual_matrix", "adapter_stacks": ["encoder"]}),
    "ls_mnmt with a pre-norm layer": ("adapter", {"adapter_preset": "ls_mnmt", "adapter_norm": "pre"}),
    "additive language embedding": ("baseline", {"language_embedding": "additive"}),
}
# fmt: on
CANNOT = {
    "hlt": (
        ("hlt", {"high_resource_languages": ["en", "de"], "hlt_hidden_dim": 16}),
        "HLT-MT's adapters are post-norm",
    ),
    "clm paper form": (("clm", {"clm_num_features": 4}), r"LN\(h \+ mix\)"),
    "lee tag": (("laa", {"laa_points": [], "lee_points": [2]}), "tag mode"),
    "ls_mnmt": (("adapter", {"adapter_preset": "ls_mnmt"}), "post-norm adapters"),
}
SHAPE = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, activation_function="relu",
             scale_embedding=True, dropout=0.1)  # fmt: skip


def nllb_shaped() -> M2M100ForConditionalGeneration:
    """A tiny random M2M100 with NLLB-200 dense's config fields (no LayerDrop, tied, relu, scaled embeddings)."""
    torch.manual_seed(0)
    config = M2M100Config(**SHAPE, encoder_layerdrop=0.0, decoder_layerdrop=0.0, tie_word_embeddings=True)
    return M2M100ForConditionalGeneration(config).eval()


def marian() -> MarianMTModel:
    torch.manual_seed(0)
    return MarianMTModel(MarianConfig(**SHAPE, share_encoder_decoder_embeddings=True)).eval()


def probe() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(8, VOCAB, (4, 7), generator=g)
    ids[1, 5:] = 1  # padded
    return {"input_ids": ids, "attention_mask": ids.ne(1).long(),
            "decoder_input_ids": torch.randint(8, VOCAB, (4, 5), generator=g)}  # fmt: skip


LANGUAGE_IDS = {"src_lang_ids": torch.tensor([0, 1, 2, 3]), "tgt_lang_ids": torch.tensor([1, 0, 3, 0])}


@pytest.mark.parametrize("source", [nllb_shaped, marian], ids=["nllb-shaped m2m100", "marian"])
@pytest.mark.parametrize("name", list(STARTS))
def test_an_adapted_checkpoint_starts_with_the_checkpoints_logits(source, name):
    kind, fields = STARTS[name]
    pretrained = source()
    with torch.no_grad():
        expected = pretrained(**probe()).logits
    model = adapt(pretrained, kind, **CONTRACT, **fields).eval()
    with torch.no_grad():
        got = model(**probe(), **LANGUAGE_IDS).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert any(".insertions." in n for n, _ in model.named_parameters()) or name == "additive language embedding"
    # the modules are live: one step of training moves the logits away from the checkpoint's
    model.train()
    loss = model(**probe(), **LANGUAGE_IDS, labels=probe()["decoder_input_ids"]).loss
    loss.backward()
    modules = [p for n, p in model.named_parameters() if ".insertions." in f".{n}" or "language_embedding" in n]
    assert any(p.grad is not None and bool(p.grad.abs().sum()) for p in modules), "no gradient reaches the modules"


@pytest.mark.parametrize("name", list(CANNOT))
def test_a_method_that_renormalises_the_stream_says_it_cannot_start_as_the_checkpoint(name):
    (kind, fields), reason = CANNOT[name]
    with pytest.raises(ValueError, match=f"cannot start as its backbone: .*{reason}"):
        adapt(nllb_shaped(), kind, **CONTRACT, **fields)


def test_adapt_refuses_what_it_cannot_load():
    from transformers import BartConfig, BartForConditionalGeneration

    with pytest.raises(ValueError, match="Unknown method 'lora'"):
        adapt(nllb_shaped(), "lora", **CONTRACT)
    bart = BartForConditionalGeneration(BartConfig(**{**SHAPE, "vocab_size": VOCAB}))
    with pytest.raises(ValueError, match="not a BartForConditionalGeneration"):
        adapt(bart, "laa", **CONTRACT)
    with pytest.raises(ValueError, match=r"encoder_layerdrop=0\.05"):
        adapt(M2M100ForConditionalGeneration(M2M100Config(**SHAPE)), "laa", **CONTRACT)
