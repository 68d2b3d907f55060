"""Specialization: one direction folded into a plain MarianMTModel / M2M100ForConditionalGeneration."""

from __future__ import annotations

import pytest
import torch
from conftest import LANGUAGES, random_batch, run_without_package, tiny_config
from transformers import M2M100ForConditionalGeneration, MarianMTModel

from hf_langspec import (
    AdapterConfig,
    AdapterForConditionalGeneration,
    CLLConfig,
    CLLForConditionalGeneration,
    CLMConfig,
    CLMForConditionalGeneration,
    HLTConfig,
    HLTForConditionalGeneration,
    LAAConfig,
    LAAForConditionalGeneration,
    LangSpecConfig,
    LangSpecForConditionalGeneration,
    XLPForConditionalGeneration,
    XLPMTConfig,
)
from hf_langspec.export import specialize
from hf_langspec.export.ct2 import export_direction, translate_ctranslate2

ctranslate2 = pytest.importorskip("ctranslate2")

MARIAN = {"normalize_before": False, "position_embedding_type": "sinusoidal_marian"}
M2M = {"normalize_before": True, "position_embedding_type": "sinusoidal"}
LAA_ALL = {"laa_points": ["enc_self_attn", "dec_self_attn", "dec_cross_attn"]}
# (name, config class, model class, settings, target class)
FOLDABLE = [
    ("baseline-marian", LangSpecConfig, LangSpecForConditionalGeneration, MARIAN, MarianMTModel),
    ("baseline-m2m100", LangSpecConfig, LangSpecForConditionalGeneration, M2M, M2M100ForConditionalGeneration),
    ("additive-marian", LangSpecConfig, LangSpecForConditionalGeneration, MARIAN | {"language_embedding": "additive"}, MarianMTModel),
    ("xlp-marian", XLPMTConfig, XLPForConditionalGeneration, MARIAN, MarianMTModel),
    ("laa-marian", LAAConfig, LAAForConditionalGeneration, MARIAN | LAA_ALL, MarianMTModel),
    ("laa-per-layer-m2m100", LAAConfig, LAAForConditionalGeneration, M2M | LAA_ALL | {"laa_per_layer": True}, M2M100ForConditionalGeneration),
    ("lee-all-marian", LAAConfig, LAAForConditionalGeneration, MARIAN | {"laa_points": [], "lee_points": [1, 2, 3, 4, 5, 6]}, MarianMTModel),
    ("lee-table-m2m100", LAAConfig, LAAForConditionalGeneration, M2M | {"laa_points": [], "lee_points": [1, 3, 4, 6], "lee_embedding": "table"}, M2M100ForConditionalGeneration),
    ("laa+lee-target-tag-m2m100", LAAConfig, LAAForConditionalGeneration, M2M | {"lee_points": [4], "lang_tag_style": "target"}, M2M100ForConditionalGeneration),
    ("laa-nllb-tags-m2m100", LAAConfig, LAAForConditionalGeneration, M2M | LAA_ALL | {"lang_tag_style": "both"}, M2M100ForConditionalGeneration),
    ("fcll-marian", CLLConfig, CLLForConditionalGeneration, MARIAN | {"central_language": "en", "cll_inner_dim": 8}, MarianMTModel),
    ("cll-one-layer-m2m100", CLLConfig, CLLForConditionalGeneration, M2M | {"cll_layers": [1], "cll_inner_dim": 8}, M2M100ForConditionalGeneration),
]  # fmt: skip


def build(config_class, model_class, settings, seed: int = 0):
    torch.manual_seed(seed)
    model = model_class(tiny_config(config_class, **settings)).eval()
    with torch.no_grad():  # identity / zero initialisations would hide a wrong fold: make every module matter
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model


def direction_batch(src: str, tgt: str, batch: int = 3) -> dict[str, torch.Tensor]:
    data = random_batch(batch=batch)
    data["src_lang_ids"] = torch.full((batch,), LANGUAGES.index(src))
    data["tgt_lang_ids"] = torch.full((batch,), LANGUAGES.index(tgt))
    return data


def plain_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if not k.endswith("lang_ids")}


@pytest.mark.parametrize(
    ("name", "config_class", "model_class", "settings", "target"), FOLDABLE, ids=[f[0] for f in FOLDABLE]
)
@pytest.mark.parametrize(("src", "tgt"), [("en", "de"), ("fr", "en")])
def test_the_specialized_model_gives_the_generic_logits_and_outputs(
    name, config_class, model_class, settings, target, src, tgt
):
    model = build(config_class, model_class, settings)
    plain = specialize(model, src, tgt).model
    assert type(plain) is target
    batch = direction_batch(src, tgt)
    expected = model(**batch).logits
    torch.testing.assert_close(plain(**plain_inputs(batch)).logits, expected, atol=1e-4, rtol=1e-4)
    inputs = {k: v for k, v in batch.items() if not k.startswith("decoder_")}
    forced_tag = int(model.config.lang_tag_style in ("target", "both"))  # a forced first token counts as a new one
    # a decoder tag is a prompt to the generic model and a forced token to the plain one: transformers' beam search
    # divides a hypothesis's score by its length without the prompt, so with a length penalty the two rank finished
    # hypotheses differently (a known difference, in the notes); without one they must agree token for token
    penalty = {"length_penalty": 0.0} if forced_tag else {}
    for beams in (1, 4):
        generic = model.generate(**inputs, num_beams=beams, max_new_tokens=8, do_sample=False, **penalty)
        out = plain.generate(**plain_inputs(inputs), num_beams=beams, max_new_tokens=8 + forced_tag, do_sample=False,
                             **penalty)  # fmt: skip
        assert out.tolist() == generic.tolist()


def test_each_direction_folds_its_own_languages():
    model = build(LAAConfig, LAAForConditionalGeneration, MARIAN | LAA_ALL | {"lee_points": [4, 5]})
    en_de, en_fr = specialize(model, "en", "de").model, specialize(model, "en", "fr").model
    batch = plain_inputs(direction_batch("en", "de"))
    assert not torch.allclose(en_de(**batch).logits, en_fr(**batch).logits, atol=1e-3)


@pytest.mark.parametrize(
    ("config_class", "model_class", "settings", "message"),
    [
        (CLMConfig, CLMForConditionalGeneration, MARIAN | {"clm_num_features": 4}, "softmax of each token itself"),
        (HLTConfig, HLTForConditionalGeneration, MARIAN | {"high_resource_languages": ["de"], "hlt_hidden_dim": 8}, "HLT-MT's pool"),
        (AdapterConfig, AdapterForConditionalGeneration, MARIAN | {"adapter_preset": "monolingual", "adapter_dim": 8}, "ReLU bottleneck"),
        (LAAConfig, LAAForConditionalGeneration, MARIAN | {"laa_random": True}, r"LAA\^R"),
        (LangSpecConfig, LangSpecForConditionalGeneration, MARIAN | {"layernorm_embedding": True}, "layernorm_embedding=True"),
        (LangSpecConfig, LangSpecForConditionalGeneration, {"normalize_before": False}, "numbers sinusoids from 0: 'sinusoidal_marian'"),
        (CLLConfig, CLLForConditionalGeneration, MARIAN | {"cll_layers": "sd", "cll_inner_dim": 8}, r"encoder_drop_residual=\[\[1, 'ffn'\]\]"),
        (XLPMTConfig, XLPForConditionalGeneration, M2M, "M2M100 shares one matrix"),
    ],
)  # fmt: skip
def test_what_cannot_fold_is_refused_with_the_reason(config_class, model_class, settings, message):
    with pytest.raises(ValueError, match=message):
        specialize(build(config_class, model_class, settings), "en", "de")


def test_specialize_is_part_of_the_package_api():
    import hf_langspec

    assert hf_langspec.specialize is specialize


def test_unknown_languages_are_named():
    with pytest.raises(ValueError, match="Unknown language code 'xx'"):
        specialize(build(LangSpecConfig, LangSpecForConditionalGeneration, MARIAN), "en", "xx")


PLAIN_LOAD = """
import json, sys, torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1]).double().eval()
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
batch = tokenizer(json.loads(sys.argv[2]), return_tensors="pt", padding=True)
out = model.generate(**batch, num_beams=4, max_new_tokens=12)
print(json.dumps({"class": type(model).__name__, "ids": batch["input_ids"].tolist(), "out": out.tolist()}))
"""


BIBLE_METHODS = {
    "laa+lee": {"class": "laa", "laa_points": ["dec_self_attn"], "lee_points": [4], **M2M},
    "lee-all-points": {"class": "laa", "laa_points": [], "lee_points": [1, 2, 3, 4, 5, 6], **MARIAN},
    "xlp": {"class": "xlp", **MARIAN},
    "fcll": {"class": "cll", "central_language": "en", "cll_inner_dim": 16, **M2M},
    "baseline": {"class": "baseline", **MARIAN},
    # the papers' own backbones, which no plain transformers class holds: CTranslate2 only
    "laa-ted (post-norm, fairseq positions, embedding LayerNorm)": {
        "class": "laa", "laa_points": ["dec_self_attn"], "lee_points": [1], "normalize_before": False,
        "position_embedding_type": "sinusoidal", "layernorm_embedding": True},
    "baseline-opus100 (post-norm, fairseq positions)": {
        "class": "baseline", "normalize_before": False, "position_embedding_type": "sinusoidal"},
}  # fmt: skip
PLAIN_CLASSES = {
    (False, "sinusoidal_marian", False): "MarianMTModel",
    (True, "sinusoidal", False): "M2M100ForConditionalGeneration",
}


@pytest.mark.slow
@pytest.mark.parametrize("method", list(BIBLE_METHODS))
def test_a_specialized_bible_model_loads_without_the_package_and_translates_alike(tmp_path, method):
    import json

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec import LangSpecTokenizer
    from hf_langspec.training.experiment import run_experiment

    config = {
        "output_dir": str(tmp_path / "run"),
        "data": {"bible": {"languages": ["en", "de", "fr"], "books": [41, 57, 59], "valid_chapters": 2, "test_chapters": 2}},
        "tokenizer": {"vocab_size": 600},
        "model": {"d_model": 32, "encoder_layers": 1, "decoder_layers": 2, "encoder_attention_heads": 2,
                  "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, **BIBLE_METHODS[method]},
        "training": {"max_steps": 200, "per_device_train_batch_size": 16, "learning_rate": 0.003, "report_to": "none",
                     "use_cpu": True, "save_strategy": "no", "disable_tqdm": True},
        "evaluation": {"splits": []},
    }  # fmt: skip
    outcome = run_experiment(config)
    model = AutoModelForSeq2SeqLM.from_pretrained(outcome["model_dir"]).eval()
    tokenizer = LangSpecTokenizer.from_pretrained(outcome["model_dir"])
    with open(tmp_path / "run" / "data" / "test.jsonl") as f:
        rows = [json.loads(line) for line in f]
    sentences = [r["src"] for r in rows if r["src_lang"] == "en" and r["tgt_lang"] == "de"][:6]
    settings = BIBLE_METHODS[method]
    plain_class = PLAIN_CLASSES.get(
        (settings["normalize_before"], settings["position_embedding_type"], settings.get("layernorm_embedding", False))
    )
    paths = export_direction(model, tokenizer, "en", "de", tmp_path / "export")
    generic = tokenizer(sentences, src_lang="en", tgt_lang="de", padding=True, return_tensors="pt")
    # beam search in float64: float32 rounding could flip a near-tie between two hypotheses of this barely
    # trained model, and the folded weights differ from the generic ones only by rounding
    expected = model.double().generate(**generic, num_beams=4, max_new_tokens=12)
    if plain_class is None:
        assert "transformers" not in paths
        assert paths["transformers_skipped"].startswith("Cannot specialize a post-norm model into marian")
    else:
        result = json.loads(
            run_without_package(PLAIN_LOAD, paths["transformers"], json.dumps(sentences), cwd=tmp_path)
            .strip()
            .splitlines()[-1]
        )
        assert result["class"] == plain_class
        assert result["ids"] == generic["input_ids"].tolist()  # the plain tokenizer adds the direction's tag itself
        assert result["out"] == expected.tolist()
    # greedy and beam 4 through the generic model and through its CTranslate2 export (float32)
    model = model.float()
    greedy = model.generate(**generic, num_beams=1, max_new_tokens=12)
    translator = ctranslate2.Translator(str(paths["ctranslate2"]))
    plain_tokenizer = AutoTokenizer.from_pretrained(paths["ctranslate2"])
    ct2 = translate_ctranslate2(translator, plain_tokenizer, sentences, beam_size=1, max_new_tokens=12)
    assert_greedy_alike(model, generic, greedy, ct2)
    assert any(len(row) > 3 for row in ct2)  # real translations, not empty ones
    ct2_beam = translate_ctranslate2(translator, plain_tokenizer, sentences, beam_size=4, max_new_tokens=12)
    assert ct2_beam == [strip_output(row) for row in expected.tolist()]


def strip_output(ids: list[int]) -> list[int]:
    """transformers' output without the start token, the first </s> and what follows."""
    ids = ids[1:]
    return ids[: ids.index(2)] if 2 in ids else ids


def assert_greedy_alike(model, batch: dict, greedy: torch.Tensor, other: list[list[int]], tolerance: float = 1e-3):
    """`other` (CTranslate2's greedy tokens) equals `greedy`, or first differs where the model's two choices tie.

    Two implementations round differently, which flips an argmax only where two log-probabilities are within
    rounding of each other; a real difference in the network shows as a clear gap at the first difference.
    """
    for row, (want, have) in enumerate(zip([strip_output(r) for r in greedy.tolist()], other, strict=True)):
        if want == have:
            continue
        step = next(i for i, (a, b) in enumerate(zip([*want, 2], [*have, 2], strict=False)) if a != b)
        prefix = greedy[row : row + 1, : step + 1]  # the start token and the common part
        inputs = {k: v[row : row + 1] for k, v in batch.items()}
        with torch.no_grad():
            scores = model(**inputs, decoder_input_ids=prefix).logits[0, -1].double().log_softmax(-1)
        a, b = ([*want, 2][step], [*have, 2][step])
        assert abs(scores[a] - scores[b]) < tolerance, (
            f"row {row} differs at step {step}: {want} vs {have}; log-probs {scores[a]:.6f} vs {scores[b]:.6f}"
        )


def tiny_tokenizer():
    from test_training import synthetic_pairs

    from hf_langspec.tokenization import train_tokenizer

    texts: dict[str, list[str]] = {}
    for row in synthetic_pairs(96):
        texts.setdefault(row["src_lang"], []).append(row["src"])
    return train_tokenizer(texts, languages=["de", "en", "fr"], vocab_size=120, show_progress=False)


@pytest.mark.parametrize(
    ("settings", "tag_style"), [(MARIAN, "source"), (M2M, "source"), (M2M, "target"), (M2M, "both")]
)
def test_the_cli_exports_both_models_and_ctranslate2_decodes_greedily_alike(tmp_path, settings, tag_style, capsys):
    from hf_langspec_cli import main

    tokenizer = tiny_tokenizer()
    tokenizer.lang_tag_style = tag_style
    config = LAAConfig(**tokenizer.model_config_kwargs(), **settings, **LAA_ALL, lee_points=[4], d_model=32,
                       encoder_layers=1, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                       encoder_ffn_dim=64, decoder_ffn_dim=64)  # fmt: skip
    torch.manual_seed(0)
    model = LAAForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * (0.3 if ".insertions." in name else 0.1))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    command = ["export", "--model", str(tmp_path / "model"), "--src-lang", "en", "--tgt-lang", "de"]
    command += ["--output-dir", str(tmp_path / "out")]
    main(command)
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    plain = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out" / "transformers")
    plain_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out" / "transformers")
    sentences = ["alpha beta gamma", "delta alpha beta beta", "gamma"]
    generic = model.generate(**tokenizer(sentences, src_lang="en", tgt_lang="de", padding=True, return_tensors="pt"),
                             num_beams=1, max_new_tokens=10)  # fmt: skip
    forced = tokenizer.lang_tag("de") if tag_style in ("target", "both") else None
    plain_out = plain.generate(
        **plain_tokenizer(sentences, padding=True, return_tensors="pt"), num_beams=1, max_new_tokens=10 + bool(forced)
    )
    assert plain_out.tolist() == generic.tolist()
    translator = ctranslate2.Translator(str(tmp_path / "out" / "ctranslate2"))
    ct2 = translate_ctranslate2(
        translator,
        plain_tokenizer,
        sentences,
        beam_size=1,
        max_new_tokens=10 + bool(forced),
        forced_first_token=forced,
    )
    assert_greedy_alike(model, tokenizer(sentences, src_lang="en", tgt_lang="de", padding=True, return_tensors="pt"),
                        generic, ct2)  # fmt: skip
    assert main(command) == 2  # an existing export: one line, not a FileExistsError traceback
    assert "is not empty; pass force=True (--force) to overwrite it" in capsys.readouterr().err


def test_a_tokenizer_of_another_model_is_refused():
    tokenizer = tiny_tokenizer()  # 3 languages and its own vocabulary; the model has 4 and 120 ids
    with pytest.raises(ValueError, match=r"does not match the model \(vocab_size: model has 120, tokenizer has"):
        specialize(build(LangSpecConfig, LangSpecForConditionalGeneration, MARIAN), "en", "de", tokenizer)
