"""Integrating a new language into a CLL model (Qu & Watanabe 2022, section 4.4): vocabulary, tag, LSLs."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import generation_inputs

from hf_langspec import CLLConfig, CLLForConditionalGeneration, train_tokenizer
from hf_langspec.files import write_jsonl
from hf_langspec.tokenization import LangSpecTokenizer
from hf_langspec.training.new_language import add_language
from hf_langspec_cli import main

OLD = {
    "en": ["the man saw a dog", "a woman in the house", "the river near the house", "a cat and a dog"],
    "de": ["der mann sah einen hund", "eine frau im haus", "der fluss nahe dem haus", "eine katze und ein hund"],
    "fr": ["le homme vit un chien", "une femme dans la maison", "le fleuve près de la maison", "un chat et un chien"],
}
RU = ["человек видел собаку", "женщина в доме", "река возле дома", "кошка и собака"]


def build() -> tuple[CLLForConditionalGeneration, LangSpecTokenizer]:
    tok = train_tokenizer(OLD, languages=list(OLD), vocab_size=90, show_progress=False)
    config = CLLConfig(
        **tok.model_config_kwargs(), d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, central_language="en",
        cll_inner_dim=8, cll_dropout=0.0, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return CLLForConditionalGeneration(config).eval(), tok


def old_batch(tok):
    return tok(OLD["de"], text_target=OLD["fr"], src_lang="de", tgt_lang="fr", padding=True, return_tensors="pt")


def test_integration_appends_ids_and_leaves_the_old_languages_outputs_exact():
    model, tok = build()
    batch = old_batch(tok)
    logits = model(**batch).logits
    greedy = model.generate(**generation_inputs(batch), num_beams=1, max_new_tokens=6)
    old_vocab = tok.convert_ids_to_tokens(list(range(len(tok))))
    model, new_tok, report = add_language(model, tok, "ru", RU * 3, vocab_size=60, old_texts=OLD, show_progress=False)

    assert new_tok.convert_ids_to_tokens(list(range(len(tok)))) == old_vocab  # old ids unchanged
    assert new_tok.languages == ["en", "de", "fr", "ru"] and report["tag_id"] == len(new_tok) - 1
    assert report["changed_segmentations"] == {"en": 0, "de": 0, "fr": 0}
    assert model.config.cll_frozen_languages == ["de", "fr"] and model.cll().specific == ["de", "fr", "ru"]
    new_rows = model.get_input_embeddings().weight[len(tok) :]
    assert new_rows.shape[0] == report["new_pieces"] + 1 and model.lm_head.weight.shape[0] == len(new_tok)
    mean = model.get_input_embeddings().weight[: len(tok)].mean(0)
    assert (new_rows - mean).abs().max() < 0.1  # the mean of the old rows plus small noise
    torch.testing.assert_close(model.cll().fc1[:, 2], model.cll().fc1[:, :2].mean(1))  # LSL: mean of the old ones

    # the old languages' logits over the old vocabulary are bit-identical, and so is greedy decoding
    assert torch.equal(model(**batch).logits[..., : len(tok)], logits)
    assert torch.equal(model.generate(**generation_inputs(batch), num_beams=1, max_new_tokens=6), greedy)
    ru = new_tok(RU, text_target=OLD["en"], src_lang="ru", tgt_lang="en")
    assert all(tok.unk_token_id not in ids for ids in ru["input_ids"])  # the new pieces cover the new script


def test_fine_tuning_trains_the_new_language_and_keeps_the_old_lsls_bit_identical(tmp_path):
    model, tok = build()
    model, tok, _ = add_language(model, tok, "ru", RU * 3, vocab_size=60, show_progress=False)
    model.save_pretrained(tmp_path / "m")  # reloaded, as `hf-langspec train` with model.init_from does
    model = CLLForConditionalGeneration.from_pretrained(tmp_path / "m").train()
    cll = model.cll()
    frozen_before = {n: p[:, :2].detach().clone() for n, p in cll.named_parameters()}
    new_before = cll.fc1[:, 2].detach().clone()
    to_ru = tok(OLD["en"], text_target=RU, src_lang="en", tgt_lang="ru", padding=True, return_tensors="pt")
    mixed = tok(OLD["en"] * 2, text_target=RU + OLD["de"], src_lang="en", tgt_lang=["ru"] * 4 + ["de"] * 4,
                padding=True, return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        start = model(**to_ru).loss.item()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    for _ in range(30):
        model(**mixed).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    with torch.no_grad():
        assert model(**to_ru).loss.item() < 0.7 * start
    for name, parameter in cll.named_parameters():
        assert torch.equal(parameter[:, :2], frozen_before[name]), name  # de, fr: untouched
    assert not torch.equal(cll.fc1[:, 2], new_before)  # ru: trained


def test_only_cll_and_plain_models_take_a_new_language():
    from conftest import tiny_model

    model = tiny_model(language_embedding="additive")
    tok = train_tokenizer({c: ["a b c d e f g"] for c in ["en", "de", "fr", "es"]}, vocab_size=40, show_progress=False)
    with pytest.raises(ValueError, match="does not match the model"):
        add_language(model, tok, "ru", RU, show_progress=False)
    model, tok = build()
    with pytest.raises(ValueError, match="'de' is already one of"):
        add_language(model, tok, "de", RU, show_progress=False)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("code", "noise_std", "message"),
    [
        ("RU", 0.01, r"'RU' is not a language code; use ISO 639 in lowercase"),  # was tagged <2RU> as it stood
        ("ru", float("nan"), r"noise_std=nan must be a finite number of 0 or more"),  # made the new rows NaN
        ("ru", -1.0, r"noise_std=-1.0 must be a finite number"),
    ],
)
def test_a_bad_new_language_is_refused_before_the_vocabulary_is_extended(code, noise_std, message):
    model, tok = build()
    rows = model.get_input_embeddings().weight.shape[0]
    with pytest.raises(ValueError, match=message):
        add_language(model, tok, code, RU, noise_std=noise_std, show_progress=False)
    assert model.get_input_embeddings().weight.shape[0] == rows and "ru" not in model.config.languages


def test_cli_add_language_writes_a_model_that_training_continues(tmp_path, capsys):
    from test_training import tiny_run_config

    from hf_langspec.training.config import validate_config
    from hf_langspec.training.experiment import run_experiment
    from hf_langspec_cli.config_file import ConfigError

    model, tok = build()
    model.save_pretrained(tmp_path / "old")
    tok.save_pretrained(tmp_path / "old")
    (tmp_path / "ru.txt").write_text("\n".join(RU * 3) + "\n")
    write_jsonl(tmp_path / "old.jsonl", [{"src_lang": "de", "tgt_lang": "en", "src": s, "tgt": t}
                                         for s, t in zip(OLD["de"], OLD["en"], strict=True)])  # fmt: skip
    code = main(["add-language", "--model", str(tmp_path / "old"), "--language", "ru", "--texts",
                 str(tmp_path / "ru.txt"), "--vocab-size", "60", "--old-texts", str(tmp_path / "old.jsonl"),
                 "--output-dir", str(tmp_path / "new")])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    report, _ = json.JSONDecoder().raw_decode(out)
    assert report["changed_segmentations"] == {"de": 0} and report["frozen_languages"] == ["de", "fr"]
    assert "model.init_from=" in out

    rows = [{"src_lang": "en", "tgt_lang": "ru", "src": s, "tgt": t} for s, t in zip(OLD["en"], RU, strict=True)]
    rows += [
        {"src_lang": "de", "tgt_lang": "en", "src": s, "tgt": t} for s, t in zip(OLD["de"], OLD["en"], strict=True)
    ]
    write_jsonl(tmp_path / "train.jsonl", rows * 3)
    config = tiny_run_config(tmp_path, model={}, tokenizer={}, evaluation={"max_sentences_per_direction": 2})
    config["data"]["train_files"] = [str(tmp_path / "train.jsonl")]
    held_out = [{"src_lang": "en", "tgt_lang": "ru", "src": "A sentence not in training.", "tgt": RU[0]}]
    write_jsonl(tmp_path / "test.jsonl", held_out)  # the training file as a test set would be refused
    config["data"]["test_files"] = {"supervised": str(tmp_path / "test.jsonl")}
    config["model"] = {"init_from": str(tmp_path / "new")}
    config["tokenizer"] = {"path": str(tmp_path / "new")}
    outcome = run_experiment(config)
    saved = json.loads((outcome["model_dir"] / "config.json").read_text())
    assert saved["languages"][-1] == "ru" and saved["cll_frozen_languages"] == ["de", "fr"]
    with pytest.raises(ConfigError, match="drop \\['d_model'\\]"):
        validate_config(config | {"model": {"init_from": "x", "d_model": 8}})
    config["training"] = config["training"] | {"weight_decay": 0.01}
    config["output_dir"] = str(tmp_path / "run2")
    with pytest.raises(ConfigError, match=r"weight_decay=0\.01 would still shrink them"):
        run_experiment(config)
