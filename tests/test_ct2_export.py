"""CTranslate2 export for every backbone the package trains: the exported direction decodes as the generic model.

Post- and pre-norm x fairseq / Marian / learned positions x with and without the embedding LayerNorm, once
with the embeddings shared (LAA + LEE, whose first-layer constant joins the embeddings or their LayerNorm)
and once with per-stack embeddings after folding (XLP).
"""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from test_specialize import assert_greedy_alike, strip_output, tiny_tokenizer

from hf_langspec import (
    LAAConfig,
    LAAForConditionalGeneration,
    LMSConfig,
    LMSForConditionalGeneration,
    LSLConfig,
    LSLForConditionalGeneration,
    XLPForConditionalGeneration,
    XLPMTConfig,
)
from hf_langspec.export.ct2 import DIRECTION_FILE, export_direction, export_directions, translate_ctranslate2

ctranslate2 = pytest.importorskip("ctranslate2")

SHAPE = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
         "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 48}  # fmt: skip
METHODS = {
    "laa+lee (tied)": (LAAConfig, LAAForConditionalGeneration,
                       {"laa_points": ["enc_self_attn", "dec_cross_attn"], "lee_points": [1, 4]}),
    "xlp (per-stack embeddings)": (XLPMTConfig, XLPForConditionalGeneration, {}),
    "lms (pair-wise, ffn and self-attention)": (LMSConfig, LMSForConditionalGeneration,
                                                {"lms_rank": 2, "lms_points": ["ffn", "self_attn"]}),
    "lsl (source- and target-indexed layers)": (LSLConfig, LSLForConditionalGeneration,
                                                {"lsl_encoder_source_layers": [0], "lsl_decoder_target_layers": [1]}),
}  # fmt: skip
BACKBONES = [
    {"normalize_before": pre, "position_embedding_type": positions, "layernorm_embedding": norm}
    for pre, positions, norm in itertools.product((False, True), ("sinusoidal", "sinusoidal_marian", "learned"), (False, True))
]  # fmt: skip
SENTENCES = ["alpha beta gamma", "delta alpha beta beta", "gamma", "beta delta gamma alpha delta"]


def trained_like(method: str, backbone: dict, tokenizer, tag_style: str = "source"):
    config_class, model_class, settings = METHODS[method]
    tokenizer.lang_tag_style = tag_style
    config = config_class(**tokenizer.model_config_kwargs(), **SHAPE, **backbone, **settings)
    torch.manual_seed(0)
    model = model_class(config).eval()
    with torch.no_grad():  # identity / zero initialisations would hide a wrong fold: make every weight matter
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if ".insertions." in name else 0.1))
    return model


def backbone_id(backbone: dict) -> str:
    return "-".join([("pre" if backbone["normalize_before"] else "post"), backbone["position_embedding_type"],
                     "embln" if backbone["layernorm_embedding"] else "noln"])  # fmt: skip


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("backbone", BACKBONES, ids=backbone_id)
def test_every_backbone_exports_and_decodes_alike_greedy_and_beam(tmp_path, method, backbone):
    tokenizer = tiny_tokenizer()
    model = trained_like(method, backbone, tokenizer)
    paths = export_direction(model, tokenizer, "en", "de", tmp_path / "out")
    plain_class_exists = not backbone["layernorm_embedding"] and (
        (backbone["normalize_before"], backbone["position_embedding_type"])
        in ((False, "sinusoidal_marian"), (True, "sinusoidal"))
    )
    if method.startswith("xlp") and backbone["normalize_before"]:
        plain_class_exists = False  # M2M100 has one matrix for encoder, decoder and output
    assert ("transformers" in paths) == plain_class_exists
    assert ("transformers_skipped" in paths) == (not plain_class_exists)
    inputs = tokenizer(SENTENCES, src_lang="en", tgt_lang="de", padding=True, return_tensors="pt")
    translator = ctranslate2.Translator(str(paths["ctranslate2"]))
    plain_tokenizer = _plain_tokenizer(paths["ctranslate2"])
    greedy = model.generate(**inputs, num_beams=1, max_new_tokens=10)
    ct2 = translate_ctranslate2(translator, plain_tokenizer, SENTENCES, beam_size=1, max_new_tokens=10)
    assert_greedy_alike(model, inputs, greedy, ct2)
    beam = model.double().generate(**inputs, num_beams=4, max_new_tokens=10, early_stopping=True)
    ct2_beam = translate_ctranslate2(translator, plain_tokenizer, SENTENCES, beam_size=4, max_new_tokens=10)
    assert [strip_output(row) for row in beam.tolist()] == ct2_beam


def _plain_tokenizer(folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_target_tags_are_forced_and_recorded_for_the_server(tmp_path):
    tokenizer = tiny_tokenizer()
    backbone = {"normalize_before": False, "position_embedding_type": "sinusoidal", "layernorm_embedding": True}
    model = trained_like("laa+lee (tied)", backbone, tokenizer, tag_style="target")
    folder = export_direction(model, tokenizer, "fr", "en", tmp_path / "out")["ctranslate2"]
    settings = json.loads((folder / DIRECTION_FILE).read_text())
    assert settings["forced_first_token"] == tokenizer.lang_tag("en")
    inputs = tokenizer(SENTENCES, src_lang="fr", tgt_lang="en", padding=True, return_tensors="pt")
    greedy = model.generate(**inputs, num_beams=1, max_new_tokens=10)
    ct2 = translate_ctranslate2(ctranslate2.Translator(str(folder)), _plain_tokenizer(folder), SENTENCES,
                                beam_size=1, max_new_tokens=11, forced_first_token=settings["forced_first_token"])  # fmt: skip
    assert_greedy_alike(model, inputs, greedy, ct2)


def test_many_directions_export_one_model_each_and_refuse_before_writing(tmp_path):
    tokenizer = tiny_tokenizer()
    backbone = {"normalize_before": False, "position_embedding_type": "sinusoidal", "layernorm_embedding": False}
    model = trained_like("laa+lee (tied)", backbone, tokenizer)
    with pytest.raises(ValueError, match="xx"):
        export_directions(model, tokenizer, [("en", "de"), ("en", "xx")], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    folders = export_directions(model, tokenizer, [("en", "de"), ("de", "en"), ("fr", "de")], tmp_path / "serve")
    assert sorted(folders) == ["de-en", "en-de", "fr-de"]
    for name, folder in folders.items():
        src, tgt = name.split("-")
        inputs = tokenizer(SENTENCES, src_lang=src, tgt_lang=tgt, padding=True, return_tensors="pt")
        greedy = model.generate(**inputs, num_beams=1, max_new_tokens=10)
        ct2 = translate_ctranslate2(ctranslate2.Translator(str(folder)), _plain_tokenizer(folder), SENTENCES,
                                    beam_size=1, max_new_tokens=10)  # fmt: skip
        assert_greedy_alike(model, inputs, greedy, ct2)
    with pytest.raises(FileExistsError, match="--force"):
        export_directions(model, tokenizer, [("en", "de")], tmp_path / "serve")


def test_a_dropped_residual_is_refused_with_the_reason(tmp_path):
    tokenizer = tiny_tokenizer()
    backbone = {"normalize_before": False, "position_embedding_type": "sinusoidal", "layernorm_embedding": False}
    model = trained_like("laa+lee (tied)", backbone | {"encoder_drop_residual": [[1, "self_attn"]]}, tokenizer)
    with pytest.raises(ValueError, match=r"CTranslate2 keeps every residual"):
        export_direction(model, tokenizer, "en", "de", tmp_path / "out")
    assert not (tmp_path / "out" / "ctranslate2").exists()


@pytest.mark.reliability
def test_an_export_without_ctranslate2_that_cannot_write_transformers_is_an_error_not_an_empty_success(tmp_path):
    """`export --no-ctranslate2` of XLP on a pre-norm backbone (M2M100 cannot hold its per-stack embeddings) wrote
    nothing and exited 0; the transformers folder is then all that was asked for, so its reason is the error."""
    tokenizer = tiny_tokenizer()
    pre_norm = {"normalize_before": True, "position_embedding_type": "sinusoidal", "layernorm_embedding": False}
    model = trained_like("xlp (per-stack embeddings)", pre_norm, tokenizer)
    with pytest.raises(ValueError, match="Cannot specialize into M2M100"):
        export_direction(model, tokenizer, "en", "de", tmp_path / "out", ctranslate2=False)
    with pytest.raises(ValueError, match="would write nothing"):
        export_direction(model, tokenizer, "en", "de", tmp_path / "out", ctranslate2=False, transformers=False)
    assert not (tmp_path / "out").exists()
