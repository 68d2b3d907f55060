"""A method on a pretrained checkpoint starts equal to it (issue 45, item 2).

`interop.adapt` loads an `M2M100ForConditionalGeneration` (NLLB-200 dense's config fields: scaled embeddings,
relu, tied, no LayerDrop) or a `MarianMTModel` into a method's model with the language modules started as the
identity; the adapted model's logits must equal the checkpoint's own (computed by transformers, not by the
package). Methods whose modules renormalise the stream cannot start that way and say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import CODES, LANGUAGES, MARIAN_CODES, SHAPE, TAG_IDS, TEXTS, VOCAB, nllb_checkpoint, nllb_shaped
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import M2M100Config, M2M100ForConditionalGeneration, MarianConfig, MarianMTModel

from hf_langspec.interop import adapt
from hf_langspec.modeling.modeling_langspec import language_module_parameter

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
    "language-specific lora": ("lora", {"lora_rank": 4}),
    "lms with fuse distillation": ("lms", {"lms_rank": 2, "lms_points": ["ffn", "self_attn"],
                                           "lms_fuse_distillation": True}),
    "lsl (dense start)": ("lsl", {"lsl_encoder_source_layers": [0], "lsl_encoder_target_layers": [1],
                                  "lsl_decoder_target_layers": [1]}),
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
    assert (
        any(language_module_parameter(n) for n, _ in model.named_parameters()) or name == "additive language embedding"
    )
    # the modules are live: one step of training moves the logits away from the checkpoint's
    model.train()
    loss = model(**probe(), **LANGUAGE_IDS, labels=probe()["decoder_input_ids"]).loss
    loss.backward()
    modules = [p for n, p in model.named_parameters() if language_module_parameter(n) or "language_embedding" in n]
    assert any(p.grad is not None and bool(p.grad.abs().sum()) for p in modules), "no gradient reaches the modules"


@pytest.mark.parametrize("name", list(CANNOT))
def test_a_method_that_renormalises_the_stream_says_it_cannot_start_as_the_checkpoint(name):
    (kind, fields), reason = CANNOT[name]
    with pytest.raises(ValueError, match=f"cannot start as its backbone: .*{reason}"):
        adapt(nllb_shaped(), kind, **CONTRACT, **fields)


def test_adapt_refuses_what_it_cannot_load():
    from transformers import BartConfig, BartForConditionalGeneration

    with pytest.raises(ValueError, match="Unknown method 'prompt_tuning'"):
        adapt(nllb_shaped(), "prompt_tuning", **CONTRACT)
    bart = BartForConditionalGeneration(BartConfig(**{**SHAPE, "vocab_size": VOCAB}))
    with pytest.raises(ValueError, match="not a BartForConditionalGeneration"):
        adapt(bart, "laa", **CONTRACT)
    with pytest.raises(ValueError, match=r"encoder_layerdrop=0\.05"):
        adapt(M2M100ForConditionalGeneration(M2M100Config(**SHAPE)), "laa", **CONTRACT)


# ---------------------------------------------------------------- a local NLLB-convention checkpoint
@pytest.fixture(scope="module")
def nllb_folder(tmp_path_factory):
    return nllb_checkpoint(tmp_path_factory.mktemp("nllb"))


def test_a_local_nllb_checkpoint_loads_with_its_codes_and_starts_as_it_translates(nllb_folder):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec.pretrained import load_pretrained

    model, tokenizer = load_pretrained(nllb_folder, "laa", languages=CODES[:3], laa_points=["dec_self_attn"])
    original = AutoTokenizer.from_pretrained(nllb_folder)
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(nllb_folder).eval()
    assert model.config.languages == CODES[:3] and model.config.lang_tag_style == "both"
    for src, tgt, text, target in [(0, 1, TEXTS[0], TEXTS[1]), (2, 0, TEXTS[2], TEXTS[0])]:
        original.src_lang, original.tgt_lang = CODES[src], CODES[tgt]
        expected = original(text, text_target=target)
        ours = tokenizer(text, text_target=target, src_lang=CODES[src], tgt_lang=CODES[tgt])
        assert ours["input_ids"] == expected["input_ids"] and ours["labels"] == expected["labels"]
        inputs = tokenizer(text, src_lang=CODES[src], tgt_lang=CODES[tgt], return_tensors="pt")
        forced = original.convert_tokens_to_ids(CODES[tgt])
        reference = pretrained.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                        forced_bos_token_id=forced, max_new_tokens=7, num_beams=1)  # fmt: skip
        got = model.eval().generate(**inputs, max_new_tokens=6, num_beams=1)  # the code is a prompt, not a new token
        assert got.tolist() == reference.tolist()


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def m2m100_folder(request, tmp_path_factory):
    from conftest import m2m100_checkpoint

    return m2m100_checkpoint(tmp_path_factory.mktemp(f"m2m100_{request.param}"), request.param)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.lists(st.sampled_from([*"the cat sat mat Katze ü é—“”123,.!?\t ", "Anfang", "  "]), max_size=25).map(
        "".join
    )
)
def test_m2m100s_sentencepiece_tokenizer_is_wrapped_to_encode_as_it_does(m2m100_folder, text):
    """M2M-100's tokenizer is a sentencepiece (Python) tokenizer whose pieces go through fairseq's dictionary:
    `checkpoint_tokenizer` rebuilds it on the `tokenizers` backend, keyed by the dictionary's ids, and encodes
    source and target as it does (`__de__` before the source, `__fr__` first in the labels), BPE or Unigram."""
    from transformers import AutoTokenizer

    from hf_langspec.tokenization.checkpoint_tokenizer import checkpoint_tokenizer

    original = AutoTokenizer.from_pretrained(m2m100_folder)
    original.src_lang, original.tgt_lang = "de", "fr"
    ours = checkpoint_tokenizer(original, ["de", "en", "fr"])
    expected = original(text, text_target=text)
    got = ours(text, text_target=text, src_lang="de", tgt_lang="fr")
    assert got["input_ids"] == expected["input_ids"] and got["labels"] == expected["labels"]


def test_a_local_m2m100_checkpoint_loads_with_its_codes_and_starts_as_it_translates(m2m100_folder, tmp_path):
    """Item 1 for M2M-100 (`__en__` codes): `load_pretrained` from the folder, the checkpoint's own tokenizer
    wrapped (and saved and reloaded as a LangSpecTokenizer), a method on top that generates exactly what the
    checkpoint generates with `forced_bos_token_id`."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec.pretrained import load_pretrained
    from hf_langspec.tokenization import LangSpecTokenizer

    model, tokenizer = load_pretrained(m2m100_folder, "lora", languages=["de", "en", "fr"], lora_rank=2)
    tokenizer.save_pretrained(tmp_path)
    tokenizer = LangSpecTokenizer.from_pretrained(tmp_path)
    original = AutoTokenizer.from_pretrained(m2m100_folder)
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(m2m100_folder).eval()
    assert model.config.lang_tag_style == "both" and tokenizer.convert_tokens_to_ids("__fr__") == original.get_lang_id(
        "fr"
    )
    for src, tgt, text in [("en", "de", TEXTS[0]), ("fr", "en", TEXTS[2])]:
        inputs = tokenizer([text, TEXTS[1]], src_lang=src, tgt_lang=tgt, padding=True, return_tensors="pt")
        reference = pretrained.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                        forced_bos_token_id=original.get_lang_id(tgt), max_new_tokens=7,
                                        num_beams=2)  # fmt: skip
        got = model.eval().generate(**inputs, max_new_tokens=6, num_beams=2)
        assert got.tolist() == reference.tolist()


def test_train_adapts_an_m2m100_checkpoint_from_its_config(m2m100_folder, tmp_path, capsys):
    """`model.init_from_pretrained` on an M2M-100 folder: its codes are the corpus's own (`en`, written `__en__`),
    its sentencepiece tokenizer is wrapped, LoRA trains with the base frozen, and the saved model reloads."""
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.training.experiment import run_experiment

    config = _pretrained_config(m2m100_folder, tmp_path, **{"class": "lora", "lora_rank": 2})
    config["data"].pop("language_codes")
    outcome = run_experiment(config)
    assert "tokenizer: the checkpoint's" in capsys.readouterr().out
    saved = AutoModelForSeq2SeqLM.from_pretrained(outcome["model_dir"], trust_remote_code=True)
    assert saved.config.languages == ["de", "en", "es", "fr"] and saved.config.lang_tag_style == "both"
    assert set(outcome["results"]["directions"]) == {"en-de", "fr-en", "es-fr"}


@pytest.fixture(scope="module", params=["unigram", "bpe"])
def marian_folder(request, tmp_path_factory):
    from conftest import marian_checkpoint

    return marian_checkpoint(tmp_path_factory.mktemp(f"marian_{request.param}"), request.param)


def _spm_score(processor, pieces: list[str]) -> float:
    """A segmentation's score under a Unigram SentencePiece model (an unknown piece: the model's unknown penalty)."""
    scores = {processor.id_to_piece(i): processor.get_score(i) for i in range(processor.get_piece_size())}
    unknown = min(scores.values()) - 10.0
    return sum(scores.get(piece, unknown) for piece in pieces)


def _marian_ids(processor, vocab: dict[str, int], text: str, runs_whole: bool) -> list[int]:
    """MarianTokenizer's algorithm written out: SentencePiece's pieces looked up in `vocab.json`, `<unk>` where it
    lacks one. SentencePiece passes a run of characters it does not know on as one piece; `runs_whole=False` looks
    each of its characters up instead (what `keyed_spm_backend` does; one `<unk>` for neighbours it lacks)."""
    known = {processor.id_to_piece(i) for i in range(processor.get_piece_size()) if i != processor.unk_id()}
    unk, ids = vocab["<unk>"], []
    for piece in processor.encode(text, out_type=str):
        parts = [piece] if runs_whole or piece in known else list(piece)
        for part in parts:
            index = vocab.get(part, unk)
            if not (index == unk and ids and ids[-1] == unk and piece not in known):
                ids.append(index)
    return ids


# words whose characters one side's model lacks, alone or in runs (“q for the target's model), runs no vocabulary
# has (漢字) and repeats (Unigram ties: "..." is ".." "." or "." "..")
MARIAN_WORDS = ["the", "cat", "sat", "on", "dog", "mat", "Katze", "Anfang", "Numbers", "die", "le", "chat", "gato",
                "Gott", "und", "9", "—", "“quotes”", "...", "..", "漢字", "ø", "tapis"]  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.sampled_from(MARIAN_WORDS), max_size=12).map(" ".join), target=st.sampled_from(MARIAN_CODES))
def test_marians_two_sentencepiece_models_are_wrapped_to_encode_as_it_does(marian_folder, text, target):
    """Multilingual Marian cuts sources with `source.spm`, targets with `target.spm`, and looks the pieces up in one
    `vocab.json` (the other side's pieces in it too): `checkpoint_tokenizer` keeps both models on the `tokenizers`
    backend and encodes as MarianTokenizer does (`>>fra<<` before the source, none in the labels), but for the two
    documented differences: a run of characters a model lacks is looked up character by character (Marian looks it
    up whole), and a Unigram tie may break the other way (as in transformers' converted fast tokenizers; then both
    cuts score the same)."""
    import json

    from transformers import AutoTokenizer

    from hf_langspec.tokenization.checkpoint_tokenizer import checkpoint_tokenizer
    from hf_langspec.tokenization.tokenization_langspec import target_backend

    original = AutoTokenizer.from_pretrained(marian_folder)
    vocab = json.loads((marian_folder / "vocab.json").read_text())
    ours = checkpoint_tokenizer(original, MARIAN_CODES)
    expected = original(f">>{target}<< {text}", text_target=text)
    got = ours(text, text_target=text, tgt_lang=target)
    code, eos = vocab[f">>{target}<<"], vocab["</s>"]
    sides = [("input_ids", [code], original.spm_source, ours.backend_tokenizer),
             ("labels", [], original.spm_target, target_backend(ours))]  # fmt: skip
    for key, prefix, processor, backend in sides:
        assert prefix + _marian_ids(processor, vocab, text, runs_whole=True) + [eos] == expected[key]  # the reference
        reference = prefix + _marian_ids(processor, vocab, text, runs_whole=False) + [eos]
        if got[key] != reference:  # a tie
            assert "unigram" in str(marian_folder), f"{key}: {got[key]} against {reference}"
            mine, theirs = backend.encode(text).tokens, processor.encode(text, out_type=str)
            assert _spm_score(processor, mine) == pytest.approx(_spm_score(processor, theirs), abs=1e-4)
        elif reference == expected[key]:
            assert got[key] == expected[key]
    decoded = ours.decode(got["labels"], skip_special_tokens=True)  # MarianTokenizer strips the string's ends
    if got["labels"] == expected["labels"]:
        assert decoded.strip() == original.decode(expected["labels"], skip_special_tokens=True)


def test_a_local_marian_checkpoint_loads_with_its_codes_and_starts_as_it_translates(marian_folder, tmp_path):
    """Item 1 for multilingual Marian (`>>fra<<` before the source, decoding from `<pad>`): `load_pretrained` from
    the folder, its two SentencePiece models kept (saved as tokenizer.json and target_tokenizer.json, reloaded as a
    LangSpecTokenizer), a method on top that generates what the checkpoint generates (its generation config too:
    `</s>` forced at the length limit, no repeated token) and decodes it as MarianTokenizer does."""
    import re

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec.pretrained import load_pretrained
    from hf_langspec.tokenization import LangSpecTokenizer

    model, tokenizer = load_pretrained(marian_folder, "lora", languages=MARIAN_CODES, lora_rank=2)
    fingerprint = tokenizer.vocabulary_fingerprint()
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "target_tokenizer.json").is_file()
    tokenizer = LangSpecTokenizer.from_pretrained(tmp_path)
    assert tokenizer.vocabulary_fingerprint() == fingerprint
    original = AutoTokenizer.from_pretrained(marian_folder)
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(marian_folder).eval()
    assert model.config.lang_tag_style == "source" and model.config.decoder_start_token_id == original.pad_token_id
    pretrained.generation_config.no_repeat_ngram_size = 1  # a random checkpoint that says more than one token
    model = load_pretrained_from(pretrained, tokenizer)
    texts = ["the cat sat on the mat", "a dog and Katze"]
    for src, tgt in [("eng", "fra"), ("eng", "deu")]:
        ours = tokenizer(texts, text_target=texts, src_lang=src, tgt_lang=tgt, padding=True, return_tensors="pt")
        theirs = original([f">>{tgt}<< {t}" for t in texts], text_target=texts, padding=True, return_tensors="pt")
        labels = ours["labels"].masked_fill(ours["labels"] == -100, original.pad_token_id)  # padded as Marian pads
        assert torch.equal(ours["input_ids"], theirs["input_ids"]) and torch.equal(labels, theirs["labels"])
        reference = pretrained.generate(input_ids=theirs["input_ids"], attention_mask=theirs["attention_mask"],
                                        max_new_tokens=8, num_beams=2)  # fmt: skip
        got = model.eval().generate(input_ids=ours["input_ids"], attention_mask=ours["attention_mask"],
                                    src_lang_ids=ours["src_lang_ids"], tgt_lang_ids=ours["tgt_lang_ids"],
                                    max_new_tokens=8, num_beams=2)  # fmt: skip
        assert got.tolist() == reference.tolist() and len(set(got[0].tolist())) > 3
        decoded = tokenizer.batch_decode(got, skip_special_tokens=True)  # a code is never text here; Marian's is
        assert decoded == [
            re.sub(">>[a-z]+<<", "", t) for t in original.batch_decode(reference, skip_special_tokens=True)
        ]


def test_train_adapts_a_marian_checkpoint_from_its_config(marian_folder, tmp_path, capsys):
    """`model.init_from_pretrained` on a multilingual Marian folder: the corpus's codes renamed to Marian's (`en` ->
    `eng`, written `>>eng<<`), both SentencePiece models kept, adapters trained with the base frozen, and the saved
    model and tokenizer (its target model too, the fingerprint the model records) reload through the Auto classes
    and decode from `<pad>`, as Marian does."""
    import json

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec.training.experiment import run_experiment

    config = _pretrained_config(marian_folder, tmp_path, **{"class": "adapter", "adapter_preset": "monolingual",
                                                             "adapter_dim": 4})  # fmt: skip
    config["data"]["language_codes"] = {"en": "eng", "de": "deu", "fr": "fra", "es": "spa"}
    outcome = run_experiment(config)
    assert "tokenizer: the checkpoint's" in capsys.readouterr().out
    folder = Path(outcome["model_dir"])
    saved = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    assert saved.config.languages == ["deu", "eng", "fra", "spa"] and saved.config.lang_tag_style == "source"
    assert (folder / "target_tokenizer.json").is_file() and tokenizer.vocabulary_fingerprint() == (
        saved.config.vocabulary_fingerprint
    )
    assert set(outcome["results"]["directions"]) == {"eng-deu", "fra-eng", "spa-fra"}
    rows = [json.loads(line) for line in Path(config["data"]["test_files"]["supervised"]).read_text().splitlines()]
    row = next(r for r in rows if r["src_lang"] == "en")
    inputs = tokenizer(row["src"], src_lang="eng", tgt_lang="deu", return_tensors="pt")
    output = saved.generate(**inputs, num_beams=1, max_new_tokens=5)
    assert output[0, 0].item() == saved.config.decoder_start_token_id == tokenizer.pad_token_id


def test_an_adapted_marian_direction_folds_into_a_plain_marian_that_its_own_tokenizer_drives(marian_folder):
    """Item 6 for Marian: one direction of language-specific LoRA (perturbed, as if trained) folded into a plain
    `MarianMTModel`, driven by the checkpoint's own `MarianTokenizer` (`>>deu<<` written before the text), and by
    the plain tokenizer `specialize` writes (which adds the code itself), translates as the adapted model does."""
    from transformers import AutoTokenizer

    from hf_langspec.export import specialize
    from hf_langspec.pretrained import load_pretrained

    model, tokenizer = load_pretrained(marian_folder, "lora", languages=MARIAN_CODES, lora_rank=4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.add_(torch.randn_like(p) * 0.3)
    model.eval()
    folded = specialize(model, "eng", "deu", tokenizer)
    assert type(folded.model) is MarianMTModel
    original = AutoTokenizer.from_pretrained(marian_folder)
    texts = ["the cat sat on the mat", "a dog and Katze"]
    ours = tokenizer(texts, src_lang="eng", tgt_lang="deu", padding=True, return_tensors="pt")
    theirs = original([f">>deu<< {t}" for t in texts], padding=True, return_tensors="pt")
    plain = folded.tokenizer(texts, padding=True, return_tensors="pt")
    assert torch.equal(ours["input_ids"], theirs["input_ids"]) and torch.equal(plain["input_ids"], theirs["input_ids"])
    settings = {"max_new_tokens": 7, "num_beams": 1, "no_repeat_ngram_size": 1}
    adapted = model.generate(**ours, **settings)
    assert folded.model.generate(**theirs, **settings).tolist() == adapted.tolist()
    assert folded.tokenizer.batch_decode(adapted, skip_special_tokens=True) == tokenizer.batch_decode(
        adapted, skip_special_tokens=True
    )


def test_a_marian_source_language_without_a_code_is_named_by_adding_it(marian_folder):
    """An `opus-mt-en-mul`-style model has codes for its targets only; a source language without one is added
    (`add_languages`): its code token exists for the contract (and its source modules) but never enters a Marian
    input, which stays `>>deu<< text </s>`, and the model still translates as the checkpoint."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec.pretrained import adapt_pretrained, pretrained_tokenizer

    tokenizer = pretrained_tokenizer(marian_folder, ["deu", "fra", "ita"], new_languages=["ita"])
    model = adapt_pretrained(marian_folder, "lora", tokenizer, new_languages=["ita"], lora_rank=2).eval()
    original = AutoTokenizer.from_pretrained(marian_folder)
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(marian_folder).eval()
    text = "the cat sat on the mat"
    ours = tokenizer([text], src_lang="ita", tgt_lang="deu", return_tensors="pt")
    theirs = original([f">>deu<< {text}"], return_tensors="pt")
    assert torch.equal(ours["input_ids"], theirs["input_ids"])
    settings = {"max_new_tokens": 6, "num_beams": 2, "no_repeat_ngram_size": 1}
    reference = pretrained.generate(**theirs, **settings)
    assert model.generate(**ours, **settings).tolist() == reference.tolist()


def test_an_adapted_marian_direction_exports_to_ctranslate2_and_decodes_as_the_model(marian_folder, tmp_path):
    """`export_direction` of an adapted Marian direction (no `<s>` in its vocabulary, `<pad>` its decoder start and
    a bad word): CTranslate2 loads it, never generates `<pad>` (the bad words travel as `suppress_sequences`) and,
    greedy, gives the adapted model's tokens (its `</s>` forced at the length limit aside)."""
    import json

    import ctranslate2
    from transformers import AutoTokenizer

    from hf_langspec.export.ct2 import DIRECTION_FILE, export_direction, translate_ctranslate2
    from hf_langspec.pretrained import load_pretrained

    model, tokenizer = load_pretrained(marian_folder, "lora", languages=MARIAN_CODES, lora_rank=2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.add_(torch.randn_like(p) * 0.3)
    pad = tokenizer.pad_token_id
    model.generation_config.bad_words_ids = [[pad]]  # as OPUS-MT's generation_config.json has it
    model.generation_config.no_repeat_ngram_size = 1
    folder = export_direction(model.eval(), tokenizer, "eng", "deu", tmp_path)["ctranslate2"]
    settings = json.loads((folder / DIRECTION_FILE).read_text())
    assert settings["suppress_sequences"] == [["<pad>"]] and settings["no_repeat_ngram_size"] == 1
    plain = AutoTokenizer.from_pretrained(folder)
    texts = ["the cat sat on the mat", "a dog and Katze"]
    got = translate_ctranslate2(ctranslate2.Translator(str(folder)), plain, texts, beam_size=1, max_new_tokens=6,
                                suppress_sequences=settings["suppress_sequences"], no_repeat_ngram_size=1)  # fmt: skip
    inputs = tokenizer(texts, src_lang="eng", tgt_lang="deu", padding=True, return_tensors="pt")
    expected = model.generate(**inputs, num_beams=1, max_new_tokens=7)[:, 1:-1].tolist()  # no start, no forced </s>
    assert got == expected and all(pad not in ids for ids in got)


def test_an_adapted_nllb_direction_with_spare_rows_exports_to_ctranslate2_and_decodes_as_the_model(
    nllb_folder, tmp_path
):
    """Issue 58, item 4: an NLLB-shaped checkpoint has embedding rows past its tokenizer (NLLB-200 and M2M-100 do);
    the CTranslate2 export gave them `null` and CTranslate2 refused to load it. Each now gets a placeholder token, the
    engine loads, and greedy it gives the adapted model's tokens, its target code forced first."""
    import ctranslate2
    from transformers import AutoTokenizer

    from hf_langspec.export.ct2 import DIRECTION_FILE, export_direction, translate_ctranslate2
    from hf_langspec.pretrained import load_pretrained

    torch.manual_seed(3)  # the LoRA start and the perturbation: the model then generates spare rows too
    model, tokenizer = load_pretrained(nllb_folder, "lora", languages=CODES, lora_rank=2)
    assert len(tokenizer) < model.config.vocab_size  # spare rows, as in the real checkpoints
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.add_(torch.randn_like(p) * 0.3)
    folder = export_direction(model.eval(), tokenizer, "eng_Latn", "deu_Latn", tmp_path)["ctranslate2"]
    settings = json.loads((folder / DIRECTION_FILE).read_text())
    assert settings["forced_first_token"] == "deu_Latn"
    plain = AutoTokenizer.from_pretrained(folder)
    texts = ["the cat sat on the mat", "el gato"]
    got = translate_ctranslate2(ctranslate2.Translator(str(folder)), plain, texts, beam_size=1, max_new_tokens=7,
                                forced_first_token="deu_Latn")  # fmt: skip
    inputs = tokenizer(texts, src_lang="eng_Latn", tgt_lang="deu_Latn", padding=True, return_tensors="pt")
    expected = model.generate(**inputs, num_beams=1, max_new_tokens=6, min_new_tokens=6)[:, 1:].tolist()
    assert [ids[: len(want)] for ids, want in zip(got, expected, strict=True)] == expected
    assert any(i >= len(tokenizer) for ids in expected for i in ids)  # the spare rows' placeholders came back as rows


def test_a_token_added_to_a_two_model_tokenizer_reaches_both_sides_and_survives_a_reload(marian_folder, tmp_path):
    """`add_tokens` on a LangSpecTokenizer with a target subword model adds the token to both, at one id (the
    targets are cut with it too), and the saved pair reloads with the same fingerprint and encoding."""
    from transformers import AutoTokenizer

    from hf_langspec.tokenization import LangSpecTokenizer
    from hf_langspec.tokenization.checkpoint_tokenizer import checkpoint_tokenizer
    from hf_langspec.tokenization.tokenization_langspec import target_backend

    tokenizer = checkpoint_tokenizer(AutoTokenizer.from_pretrained(marian_folder), MARIAN_CODES)
    size = len(tokenizer)
    assert tokenizer.add_tokens(["Katzenwort"]) == 1
    assert tokenizer.backend_tokenizer.token_to_id("Katzenwort") == target_backend(tokenizer).token_to_id(
        "Katzenwort"
    ) == size  # fmt: skip
    encoded = tokenizer("Katzenwort", text_target="die Katzenwort", tgt_lang="deu")
    assert size in encoded["input_ids"] and size in encoded["labels"]
    tokenizer.save_pretrained(tmp_path)
    reloaded = LangSpecTokenizer.from_pretrained(tmp_path)
    assert reloaded.vocabulary_fingerprint() == tokenizer.vocabulary_fingerprint()
    assert reloaded("Katzenwort", text_target="die Katzenwort", tgt_lang="deu") == encoded
    # growing one of the two subword models (CLL's add-language) would leave the other behind: refused
    from hf_langspec.tokenization import extend_tokenizer

    with pytest.raises(ValueError, match=r"two subword models .* model\.add_languages"):
        extend_tokenizer(reloaded, ["ein Text"], "ita", vocab_size=20, show_progress=False)


def test_a_marian_model_without_codes_adapts_with_no_tag_and_its_languages_added(tmp_path):
    """A Marian model with one target language (opus-mt-mul-en, or a bilingual one) has no codes: its inputs are
    the text alone (`lang_tag_style="none"`), and the languages, added (`add_languages`) for the contract, only route
    the modules; the adapted model starts as the checkpoint translates."""
    from conftest import marian_checkpoint
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec.pretrained import adapt_pretrained, pretrained_tokenizer

    folder = marian_checkpoint(tmp_path / "mul-en", codes=[])
    languages = ["deu", "eng", "fra"]
    with pytest.raises(ValueError, match="it knows 0 codes"):
        pretrained_tokenizer(folder, languages)
    tokenizer = pretrained_tokenizer(folder, languages, new_languages=languages)
    assert tokenizer.lang_tag_style == "none"
    model = adapt_pretrained(folder, "lora", tokenizer, new_languages=languages, lora_rank=2).eval()
    original = AutoTokenizer.from_pretrained(folder)
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    texts = ["the cat sat on the mat", "a dog and Katze"]
    ours = tokenizer(texts, src_lang="deu", tgt_lang="eng", padding=True, return_tensors="pt")
    theirs = original(texts, padding=True, return_tensors="pt")
    assert torch.equal(ours["input_ids"], theirs["input_ids"])
    settings = {"max_new_tokens": 6, "num_beams": 2, "no_repeat_ngram_size": 1}
    assert model.generate(**ours, **settings).tolist() == pretrained.generate(**theirs, **settings).tolist()


def load_pretrained_from(pretrained, tokenizer):
    """`adapt` of an in-memory checkpoint for `tokenizer`'s contract (as `adapt_pretrained` does from a folder)."""
    contract = tokenizer.model_config_kwargs()
    keys = ("languages", "lang_tag_token_ids", "lang_tag_style", "vocabulary_fingerprint")
    model = adapt(pretrained, "lora", lora_rank=2, **{k: contract[k] for k in keys})
    tokenizer.check_model(model)
    return model


def test_the_prepared_training_set_cuts_marians_targets_with_its_target_model(marian_folder, tmp_path):
    """The on-disk data path encodes each side with its own model, as the tokenizer does, and measures target
    lengths with the target model (a source-model cut of the targets would differ: checked)."""
    import json

    from transformers import AutoTokenizer

    from hf_langspec.data.corpus_store import prepare_training_set, read_corpus
    from hf_langspec.tokenization.checkpoint_tokenizer import checkpoint_tokenizer

    tokenizer = checkpoint_tokenizer(AutoTokenizer.from_pretrained(marian_folder), MARIAN_CODES)
    rows = [{"src_lang": "eng", "tgt_lang": tgt, "src": src, "tgt": t}
            for tgt, t in [("deu", "die Katze sass auf der Matte"), ("fra", "le chat etait sur le tapis"),
                           ("spa", "el gato")] for src in ["the cat sat on the mat", "a dog and a cat"]]  # fmt: skip
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = read_corpus([path], cache_dir=tmp_path, show_progress=False)
    prepared = prepare_training_set(corpus, tokenizer, 100, None, cache_dir=tmp_path, show_progress=False)
    expected = tokenizer([r["src"] for r in rows], text_target=[r["tgt"] for r in rows],
                         src_lang=[r["src_lang"] for r in rows], tgt_lang=[r["tgt_lang"] for r in rows])  # fmt: skip
    assert prepared.dataset["input_ids"][:] == expected["input_ids"]
    assert prepared.dataset["labels"][:] == expected["labels"]
    assert [ids[:-1] for ids in expected["labels"]] != tokenizer.encode_text([r["tgt"] for r in rows])


def test_a_code_the_checkpoint_does_not_know_is_refused_with_the_codes_it_knows(nllb_folder):
    from hf_langspec.pretrained import load_pretrained

    with pytest.raises(ValueError, match=r"does not know \['ita_Latn'\]; it knows 4 codes: deu_Latn, eng_Latn"):
        load_pretrained(nllb_folder, "laa", languages=["eng_Latn", "ita_Latn"])


@pytest.mark.reliability
def test_an_iso_code_for_a_language_the_checkpoint_knows_is_pointed_to_its_code_not_to_adding_it(nllb_folder):
    """Issue 59: `fr` for NLLB's `fra_Latn` was told to use add_languages, and following that added a second, untrained
    French beside the checkpoint's. The error names the checkpoint's code and `data.language_codes`; adding it is
    refused the same way."""
    from hf_langspec.pretrained import load_pretrained
    from hf_langspec.tokenization.checkpoint_tokenizer import checkpoint_tokenizer

    with pytest.raises(
        ValueError,
        match=r"does not know \['fr'\]; these are the checkpoint's fra_Latn \(fr\): "
        r"rename the data's codes with data\.language_codes: \{fr: fra_Latn\}",
    ):
        load_pretrained(nllb_folder, "laa", languages=["eng_Latn", "fr"])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(nllb_folder)
    with pytest.raises(
        ValueError, match=r"add_languages names \['fra'\], which are the checkpoint's fra_Latn \(fra\)"
    ):
        checkpoint_tokenizer(tokenizer, ["eng_Latn", "fra"], new_languages=["fra"])


@pytest.mark.reliability
def test_a_checkpoint_without_its_tokenizer_is_refused_with_the_fix(nllb_folder, tmp_path):
    """Issue 59: a checkpoint folder without tokenizer files was accepted; transformers' default tokenizer turned all
    text into <unk>, training ran, and only evaluation warned."""
    import shutil

    from hf_langspec.pretrained import load_pretrained

    bare = tmp_path / "weights-only"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        if (nllb_folder / name).exists():
            shutil.copy(nllb_folder / name, bare / name)
    with pytest.raises(ValueError, match=r"holds no tokenizer files .*tokenizer\.save_pretrained\(folder\)"):
        load_pretrained(bare, "laa", languages=["eng_Latn", "deu_Latn"])


def test_with_the_base_frozen_untrained_directions_decode_exactly_as_the_checkpoint(nllb_folder, tmp_path):
    """Item 4: train eng->deu only, base frozen (weight decay on): the base stays bit for bit, eng->deu changes,
    and fra->spa, whose adapters were never trained, decodes exactly as before (greedy: as the checkpoint with
    forced_bos_token_id; beam search: as the adapted model before training)."""
    import copy

    from datasets import Dataset
    from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq

    from hf_langspec.pretrained import freeze_base, load_pretrained
    from hf_langspec.training import LangSpecSeq2SeqTrainer, LangSpecTrainingArguments

    model, tokenizer = load_pretrained(nllb_folder, "adapter", languages=CODES, adapter_preset="monolingual",
                                       adapter_dim=8)  # fmt: skip
    before = copy.deepcopy(model).eval()
    trainable, total = freeze_base(model)
    assert trainable == sum(p.numel() for n, p in model.named_parameters() if ".insertions." in n) < total / 2
    rows = tokenizer([TEXTS[0], TEXTS[2]] * 8, text_target=[TEXTS[1], TEXTS[3]] * 8, src_lang="eng_Latn",
                     tgt_lang="deu_Latn")  # fmt: skip
    args = LangSpecTrainingArguments(output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=4,
                                     learning_rate=1e-2, weight_decay=0.01, warmup_steps=0, report_to="none",
                                     use_cpu=True, save_strategy="no", disable_tqdm=True)  # fmt: skip
    trainer = LangSpecSeq2SeqTrainer(model=model, args=args, train_dataset=Dataset.from_dict(dict(rows)),
                                     data_collator=DataCollatorForSeq2Seq(tokenizer, model=model))  # fmt: skip
    trainer.train()
    model.eval()
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(nllb_folder).eval()
    for (name, p), (_, q) in zip(model.named_parameters(), before.named_parameters(), strict=True):
        if ".insertions." not in name:
            assert torch.equal(p, q), f"the frozen {name} moved"

    def logits(m, src, tgt):
        inputs = tokenizer(TEXTS[2], text_target=TEXTS[3], src_lang=src, tgt_lang=tgt, return_tensors="pt")
        inputs["decoder_input_ids"] = m.prepare_decoder_input_ids_from_labels(labels=inputs.pop("labels"))
        with torch.no_grad():
            return m(**inputs).logits

    assert not torch.allclose(logits(model, "eng_Latn", "deu_Latn"), logits(before, "eng_Latn", "deu_Latn"))
    assert torch.equal(logits(model, "fra_Latn", "spa_Latn"), logits(before, "fra_Latn", "spa_Latn"))
    inputs = tokenizer(TEXTS[2:4], src_lang="fra_Latn", tgt_lang="spa_Latn", padding=True, return_tensors="pt")
    spa = tokenizer.convert_tokens_to_ids("spa_Latn")
    reference = pretrained.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    forced_bos_token_id=spa, max_new_tokens=7, num_beams=1)  # fmt: skip
    assert model.generate(**inputs, max_new_tokens=6, num_beams=1).tolist() == reference.tolist()
    beams = {"max_new_tokens": 6, "num_beams": 4}
    assert model.generate(**inputs, **beams).tolist() == before.generate(**inputs, **beams).tolist()


@pytest.mark.parametrize("method", [("lora", {"lora_rank": 4}), ("laa", {"laa_points": ["dec_self_attn"]})])
def test_an_adapted_direction_folds_into_a_plain_m2m100_that_the_original_tokenizer_drives(nllb_folder, method):
    """Item 6: one direction of the adapted model (modules trained: here perturbed) folded into a plain
    `M2M100ForConditionalGeneration`; driven by the checkpoint's own `NllbTokenizer` (src_lang set) and the folded
    model's generation config (the target code forced first), it translates as the adapted model does."""
    from transformers import AutoTokenizer

    from hf_langspec.export import specialize
    from hf_langspec.pretrained import load_pretrained

    kind, fields = method
    model, tokenizer = load_pretrained(nllb_folder, kind, languages=CODES, **fields)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.eval()
    plain = specialize(model, "fra_Latn", "deu_Latn", tokenizer).model
    assert type(plain) is M2M100ForConditionalGeneration
    original = AutoTokenizer.from_pretrained(nllb_folder, src_lang="fra_Latn")
    texts = [TEXTS[2], TEXTS[0]]
    ours = tokenizer(texts, src_lang="fra_Latn", tgt_lang="deu_Latn", padding=True, return_tensors="pt")
    theirs = original(texts, padding=True, return_tensors="pt")
    assert torch.equal(ours["input_ids"], theirs["input_ids"])
    adapted = model.generate(**ours, max_new_tokens=6, num_beams=1)
    folded = plain.generate(**theirs, max_new_tokens=7, num_beams=1)
    assert plain.generation_config.forced_bos_token_id == original.convert_tokens_to_ids("deu_Latn")
    assert folded.tolist() == adapted.tolist()


def test_the_budget_script_counts_what_a_built_model_holds():
    """scripts/pretrained_budget.py builds each method on the meta device (NLLB-600M cannot be downloaded here):
    its counts equal those of the same models built with real weights, at a tiny shape."""
    import importlib.util
    from pathlib import Path

    from hf_langspec.modeling.modeling_langspec import language_module_parameter
    from hf_langspec.modeling.registry import model_classes

    path = Path(__file__).resolve().parents[1] / "scripts" / "pretrained_budget.py"
    spec = importlib.util.spec_from_file_location("pretrained_budget", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    shape = script.SHAPES["tiny"]
    rows = script.budget(shape)
    assert [r["method"] for r in rows] == [m[0] for m in script.METHODS]
    _, kind, method = script.METHODS[0]  # LoRA, built for real
    fields = {k: v for k, v in shape.items() if k != "languages"}
    codes = [f"l{i:03d}" for i in range(shape["languages"])]
    tags = list(range(shape["vocab_size"] - len(codes), shape["vocab_size"]))
    config_class, model_class = model_classes()[kind]
    model = model_class(
        config_class(
            **fields, **method, languages=codes, lang_tag_token_ids=tags, lang_tag_style="both", normalize_before=True
        )
    )  # M2M-100 / NLLB: pre-norm
    modules = sum(p.numel() for n, p in model.named_parameters() if language_module_parameter(n))
    assert rows[0]["total"] == model.num_parameters() and rows[0]["language modules"] == modules
    r, d, layers = method["lora_rank"], shape["d_model"], shape["encoder_layers"]
    assert modules == len(codes) * 3 * layers * 4 * 2 * d * r  # three attentions x q k v o x (A, B)


# ---------------------------------------------------------------- from a config: `model.init_from_pretrained`
def _rows(pairs, variant):
    """Rows of the checkpoint's languages in the data's own codes (en, de, fr), each sentence's words turned by
    `variant` so that training and test text differ."""
    out = []
    for (src, source), (tgt, target) in pairs:
        for turn in variant:
            s, t = source.split(), target.split()
            out.append({"src_lang": src, "tgt_lang": tgt, "src": " ".join(s[turn % len(s) :] + s[: turn % len(s)]),
                        "tgt": " ".join(t[turn % len(t) :] + t[: turn % len(t)])})  # fmt: skip
    return out


def _pretrained_config(folder, tmp_path, **model):
    import json

    en, de, fr = ("en", TEXTS[0]), ("de", TEXTS[1]), ("fr", TEXTS[2])
    es = ("es", TEXTS[3])
    files = {}
    reverse = {"train": None, "test": [(en, de), (fr, en)], "zero-shot": [(es, fr)]}  # held out: words reversed
    for split, pairs in reverse.items():
        if pairs is None:
            rows = _rows([(en, de), (de, en), (fr, en)], range(6)) * 4
        else:
            rows = [{**r, "src": " ".join(reversed(r["src"].split()))} for r in _rows(pairs, [0])]
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        files[split] = str(path)
    return {
        "output_dir": str(tmp_path / "run"),
        "data": {"train_files": [files["train"]], "max_length": 60,  # the checkpoint has 64 positions
                 "test_files": {"supervised": files["test"], "zero-shot": files["zero-shot"]},
                 "language_codes": {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn", "es": "spa_Latn"}},
        "model": {"init_from_pretrained": str(folder), **model},
        "training": {"max_steps": 4, "per_device_train_batch_size": 8, "learning_rate": 0.01, "warmup_steps": 0,
                     "report_to": "none", "use_cpu": True, "save_strategy": "no", "disable_tqdm": True},
        "evaluation": {"num_beams": 1, "max_new_tokens": 5, "off_target": False},
    }  # fmt: skip


def test_train_adapts_a_pretrained_checkpoint_from_its_config(nllb_folder, tmp_path, capsys):
    """`hf-langspec train` with `model.init_from_pretrained`: the data's codes renamed to the checkpoint's
    (`data.language_codes`), the checkpoint's tokenizer, LoRA on top with the base frozen and the trainable count
    printed; the saved model holds the checkpoint's weights unchanged and trained LoRA deltas, and reloads."""
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.tokenization import LangSpecTokenizer
    from hf_langspec.training.experiment import run_experiment

    outcome = run_experiment(_pretrained_config(nllb_folder, tmp_path, **{"class": "lora", "lora_rank": 4}))
    out = capsys.readouterr().out
    saved = AutoModelForSeq2SeqLM.from_pretrained(outcome["model_dir"], trust_remote_code=True)
    assert saved.config.lang_tag_style == "both"
    lora = {n: p.detach() for n, p in saved.named_parameters() if ".insertions." in n}
    trainable = sum(p.numel() for p in lora.values())
    assert f"{trainable:,} trainable" in out and "tokenizer: the checkpoint's" in out
    assert any(float(p.abs().sum()) > 0 for n, p in lora.items() if n.endswith(".b")), "nothing trained"
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(nllb_folder)
    base = pretrained.state_dict()
    for name, tensor in saved.state_dict().items():
        if ".insertions." not in name and name in base:
            assert torch.equal(tensor, base[name]), f"the frozen {name} moved"
    assert set(outcome["results"]["directions"]) == {"eng_Latn-deu_Latn", "fra_Latn-eng_Latn", "spa_Latn-fra_Latn"}
    # a language of the test sets alone (spa_Latn) is in the model; spa -> fra, whose modules were never trained
    # (fra only as a source, spa not at all), translates exactly as the checkpoint
    assert saved.config.languages == ["deu_Latn", "eng_Latn", "fra_Latn", "spa_Latn"]
    tokenizer = LangSpecTokenizer.from_pretrained(outcome["model_dir"])
    inputs = tokenizer(
        [TEXTS[3], TEXTS[1]], src_lang="spa_Latn", tgt_lang="fra_Latn", padding=True, return_tensors="pt"
    )
    fra = tokenizer.convert_tokens_to_ids("fra_Latn")
    reference = pretrained.eval().generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                           forced_bos_token_id=fra, max_new_tokens=7, num_beams=1)  # fmt: skip
    assert saved.eval().generate(**inputs, max_new_tokens=6, num_beams=1).tolist() == reference.tolist()


@pytest.mark.reliability
def test_a_corpus_longer_than_the_checkpoints_positions_is_refused_before_training(nllb_folder, tmp_path):
    """data.max_length lets in sequences the checkpoint has no positions for (its 64; the default keeps 100): the
    first long batch would stop the run. Refused when the model is built, before a step, naming both numbers."""
    from hf_langspec.training.experiment import run_experiment
    from hf_langspec_cli.config_file import ConfigError

    config = _pretrained_config(nllb_folder, tmp_path, **{"class": "lora", "lora_rank": 4})
    del config["data"]["max_length"]
    with pytest.raises(ConfigError, match=r"data.max_length is 100 subwords but the checkpoint .* has 64 positions "
                                          r"\(max_position_embeddings\); set data.max_length to 64 or less"):  # fmt: skip
        run_experiment(config)
    assert not list((tmp_path / "run").rglob("checkpoint-*")) and not (tmp_path / "run" / "model").exists()


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": {"freeze_pretrained": True, "init_from_pretrained": None}}, "apply to a pretrained start"),
        ({"tokenizer": {"vocab_size": 100}}, r"uses the checkpoint's own tokenizer; drop \['vocab_size'\]"),
        ({"model": {"freeze_pretrained": True}}, "a baseline has no language modules"),
        ({"model": {"class": "clm", "clm_num_features": 4}}, r"cannot start as its backbone: .*LN\(h \+ mix\)"),
        ({"model": {"init_from_pretrained": "MISSING"}}, "MISSING does not exist here, and is not a model on a"),
        ({"model": {"init_from_pretrained": "."}}, r"\. is not a model checkpoint"),
        ({"model": {"init_from": "somewhere"}}, r"init_from_pretrained and \['init_from'\] are two starts"),
        ({"data": {"language_codes": {"en": "eng_Latn", "de": "eng_Latn"}}}, r"are all renamed to \['eng_Latn'\]"),
        ({"data": {"language_codes": {"en": "de", "de": "deu_Latn"}}}, r"\['de'\] are both renamed and the new"),
    ],
)
def test_a_pretrained_start_that_cannot_work_is_refused_before_any_data_is_read(
    nllb_folder, tmp_path, change, message
):
    from hf_langspec.training.experiment import run_experiment
    from hf_langspec_cli.config_file import ConfigError

    config = _pretrained_config(nllb_folder, tmp_path)
    for section, values in change.items():
        config[section] = {**config.get(section, {}), **values}
        config[section] = {k: v for k, v in config[section].items() if v is not None}
    config["model"] = {k: (str(tmp_path / v) if v == "MISSING" else v) for k, v in config["model"].items()}
    with pytest.raises(ConfigError, match=message):
        run_experiment(config)
    assert not (tmp_path / "run" / "data").exists() and not any((tmp_path / "run").glob("**/*.arrow"))


def test_flores_codes_count_as_their_language_for_off_target():
    from hf_langspec.evaluation.language_id import detected_as

    assert detected_as("eng_Latn") == ("eng_Latn", "en")
    assert detected_as("arb_Arab") == ("arb_Arab", "ar")  # an individual language under its macrolanguage
    assert detected_as("zho_Hant") == ("zho_Hant", "zh") and detected_as("pt-br") == ("pt",)
    assert detected_as("qqq_Latn") == ("qqq_Latn",)


# ---------------------------------------------------------------- a trained baseline as a plain NLLB checkpoint
def test_a_trained_baseline_saves_as_a_plain_nllb_checkpoint_that_starts_a_method(tmp_path):
    """`hf-langspec export --multilingual` (`save_as_checkpoint`): a baseline with NLLB's tag convention becomes an
    `M2M100ForConditionalGeneration` + `NllbTokenizerFast` that plain transformers drives exactly as the package's
    model translates (beam search, every direction), and that `load_pretrained` starts a method from."""
    from conftest import cli_exit_code
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, NllbTokenizerFast

    from hf_langspec.modeling import LangSpecConfig, LangSpecForConditionalGeneration
    from hf_langspec.pretrained import load_pretrained, save_as_checkpoint
    from hf_langspec.tokenization import train_tokenizer

    codes = CODES[:3]
    tokenizer = train_tokenizer({code: TEXTS[i::4] for i, code in enumerate(codes)}, vocab_size=60, model_type="bpe",
                                lang_tag_style="both", lang_tag_template="{}", show_progress=False)  # fmt: skip
    torch.manual_seed(0)
    model = LangSpecForConditionalGeneration(LangSpecConfig(
        **tokenizer.model_config_kwargs(), d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, normalize_before=True,
    )).eval()  # fmt: skip
    folder = tmp_path / "standin"
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert cli_exit_code(["export", "--model", str(tmp_path / "model"), "--multilingual", "--output-dir",
                          str(folder)]) == 0  # fmt: skip
    plain = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    nllb = AutoTokenizer.from_pretrained(folder)
    assert type(plain) is M2M100ForConditionalGeneration and isinstance(nllb, NllbTokenizerFast)
    for src, tgt in [(codes[0], codes[1]), (codes[2], codes[0])]:
        nllb.src_lang = src
        theirs = nllb([TEXTS[0], TEXTS[2]], padding=True, return_tensors="pt")
        ours = tokenizer([TEXTS[0], TEXTS[2]], src_lang=src, tgt_lang=tgt, padding=True, return_tensors="pt")
        assert torch.equal(theirs["input_ids"], ours["input_ids"])
        forced = nllb.convert_tokens_to_ids(tgt)
        expected = model.generate(**ours, max_new_tokens=6, num_beams=1)
        got = plain.generate(**theirs, forced_bos_token_id=forced, max_new_tokens=7, num_beams=1)
        assert got.tolist() == expected.tolist()
    adapted, adapted_tokenizer = load_pretrained(folder, "lora", languages=codes, lora_rank=2)
    assert adapted_tokenizer.languages == codes
    inputs = adapted_tokenizer(TEXTS[1], src_lang=codes[1], tgt_lang=codes[2], return_tensors="pt")
    beams = {"max_new_tokens": 6, "num_beams": 3}
    assert adapted.eval().generate(**inputs, **beams).tolist() == model.generate(**inputs, **beams).tolist()
    with pytest.raises(ValueError, match="language modules"):
        save_as_checkpoint(adapted, adapted_tokenizer, tmp_path / "other")
    assert (
        cli_exit_code(["export", "--model", str(tmp_path / "model"), "--multilingual", "--output-dir", str(folder)])
        == 2
    )  # fmt: skip  (nothing a user owns is overwritten)


def test_a_baseline_tuned_on_some_of_a_checkpoints_languages_saves_with_the_whole_code_list(nllb_folder, tmp_path):
    """Issue 58, item 4: a baseline started from an NLLB-shaped checkpoint (with a `<mask>` and spare rows) and
    fine-tuned on 2 of its 4 codes: `save_as_checkpoint` refused it (its NllbTokenizer lacked `<mask>`, so one entry
    short); now the saved tokenizer keeps every code of the checkpoint as a code, and plain transformers translates
    as the package's model does."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_langspec.pretrained import load_pretrained, save_as_checkpoint

    model, tokenizer = load_pretrained(nllb_folder, "baseline", languages=CODES[:2])
    save_as_checkpoint(model.eval(), tokenizer, tmp_path / "out")
    nllb = AutoTokenizer.from_pretrained(tmp_path / "out")
    plain = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()
    assert len(nllb) == len(tokenizer) and set(CODES) <= set(nllb.all_special_tokens)
    assert nllb.tokenize("fra_Latn") == ["fra_Latn"]  # still one code, not pieces
    nllb.src_lang = CODES[0]
    theirs = nllb([TEXTS[0], TEXTS[3]], padding=True, return_tensors="pt")
    ours = tokenizer([TEXTS[0], TEXTS[3]], src_lang=CODES[0], tgt_lang=CODES[1], padding=True, return_tensors="pt")
    assert torch.equal(theirs["input_ids"], ours["input_ids"])
    expected = model.generate(**ours, max_new_tokens=6, num_beams=2)
    got = plain.generate(**theirs, forced_bos_token_id=nllb.convert_tokens_to_ids(CODES[1]), max_new_tokens=7,
                         num_beams=2)  # fmt: skip
    assert got.tolist() == expected.tolist()


def test_a_language_the_checkpoint_lacks_is_added_with_its_code_row_and_modules_the_rest_frozen(
    nllb_folder, tmp_path, capsys
):
    """Item 5: `model.add_languages: [ita_Latn]`: a new code token after the checkpoint's vocabulary, its embedding
    row started at the mean of the real rows and trained alone (weight decay on: the other rows stay exact), its
    adapters trained; the checkpoint's weights and every other row unchanged."""
    import json
    from pathlib import Path

    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.tokenization import LangSpecTokenizer
    from hf_langspec.training.experiment import run_experiment

    config = _pretrained_config(nllb_folder, tmp_path, **{"class": "adapter", "adapter_preset": "monolingual",
                                                           "adapter_dim": 8, "add_languages": ["ita_Latn"]})  # fmt: skip
    train = config["data"]["train_files"][0]
    extra = _rows([(("it", TEXTS[2]), ("en", TEXTS[0])), (("en", TEXTS[0]), ("it", TEXTS[2]))], range(6)) * 4
    with open(train, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in extra))
    config["data"]["language_codes"]["it"] = "ita_Latn"
    config["training"]["weight_decay"] = 0.1
    outcome = run_experiment(config)
    assert "['ita_Latn'] added" in capsys.readouterr().out
    tokenizer = LangSpecTokenizer.from_pretrained(outcome["model_dir"])
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(nllb_folder)
    old_rows = pretrained.get_input_embeddings().weight.detach()
    row = tokenizer.convert_tokens_to_ids("ita_Latn")
    assert tokenizer.languages == ["deu_Latn", "eng_Latn", "fra_Latn", "ita_Latn", "spa_Latn"]
    assert row == len(tokenizer) - 1  # after every id of the checkpoint
    saved = AutoModelForSeq2SeqLM.from_pretrained(outcome["model_dir"], trust_remote_code=True)
    embeddings = saved.get_input_embeddings().weight.detach()
    others = [i for i in range(old_rows.shape[0]) if i != row]
    assert torch.equal(embeddings[others], old_rows[others]), "a row of the checkpoint moved"
    mean = old_rows[:row].mean(0)
    assert not torch.allclose(embeddings[row], mean), "the new code's row was not trained"
    base = pretrained.state_dict()
    tied = ("embed_tokens", "shared", "lm_head")  # the embedding matrix, checked row by row above
    for name, tensor in saved.state_dict().items():
        if ".insertions." not in name and name in base and not any(part in name for part in tied):
            assert torch.equal(tensor, base[name]), f"the frozen {name} moved"
    info = json.loads((Path(outcome["model_dir"]).parent / "run_info.json").read_text())
    adapters = sum(p.numel() for n, p in saved.named_parameters() if ".insertions." in n)
    assert info["parameters"]["trainable"] == adapters + saved.config.d_model  # the modules and one code row
    ita = tokenizer.language_id("ita_Latn")
    assert saved.model.encoder.insertions["ffn_out"].adapters.fc2[:, ita].abs().sum() > 0, "its adapter is untrained"
    # a direction without Italian decodes as the checkpoint, step by step: the new code is suppressed (a code is
    # never generated). Its row is a spare row of this checkpoint (as NLLB-200 has two), so the checkpoint is
    # asked to suppress that row too; where the matrix grew, the checkpoint had no such entry at all
    assert saved.generation_config.suppress_tokens == [row]
    inputs = tokenizer(
        [TEXTS[3], TEXTS[1]], src_lang="spa_Latn", tgt_lang="fra_Latn", padding=True, return_tensors="pt"
    )
    fra = tokenizer.convert_tokens_to_ids("fra_Latn")
    kwargs = dict(max_new_tokens=6, num_beams=3, return_dict_in_generate=True)
    reference = pretrained.eval().generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                           forced_bos_token_id=fra, suppress_tokens=[row],
                                           **{**kwargs, "max_new_tokens": 7})  # fmt: skip
    ours = saved.eval().generate(**inputs, **kwargs)
    assert ours.sequences.tolist() == reference.sequences.tolist()
    # along that output, every old token's logit is the checkpoint's (the suppressed row aside)
    with torch.no_grad():
        mine = saved(**inputs, decoder_input_ids=ours.sequences).logits
        theirs = pretrained(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                            decoder_input_ids=ours.sequences).logits  # fmt: skip
    old = [i for i in range(theirs.shape[-1]) if i != row]
    torch.testing.assert_close(mine[..., old], theirs[..., old], atol=1e-5, rtol=1e-5)
    # and Italian itself still decodes (its code starts the decoder; it is never a generated token)
    italian = tokenizer([TEXTS[0]], src_lang="eng_Latn", tgt_lang="ita_Latn", return_tensors="pt")
    assert saved.generate(**italian, max_new_tokens=4, num_beams=2)[0].tolist().count(row) == 1


def test_with_a_language_added_untouched_directions_keep_the_checkpoints_beam_scores(m2m100_folder, tmp_path):
    """Where the embedding matrix grows for a new code (the stand-in has no spare row; here the checkpoint's rows
    are cut to its tokenizer), the adapted model's old logits are the checkpoint's and its new code is suppressed;
    beam search takes log-probabilities before suppressing, so the scores are renormalised: every beam's score is
    the checkpoint's (they would keep the new row's share of the softmax at each step otherwise; checked)."""
    import shutil

    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.pretrained import adapt_pretrained, pretrained_tokenizer

    folder = tmp_path / "checkpoint"
    shutil.copytree(m2m100_folder, folder)
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(folder)
    pretrained.resize_token_embeddings(len(pretrained_tokenizer(folder, ["en"])))  # no spare row left
    pretrained.save_pretrained(folder)
    pretrained.eval()
    tokenizer = pretrained_tokenizer(folder, ["de", "en", "fr", "xx"], new_languages=["xx"])
    model = adapt_pretrained(folder, "lora", tokenizer, new_languages=["xx"], lora_rank=2).eval()
    row = tokenizer.convert_tokens_to_ids("__xx__")
    assert row == pretrained.config.vocab_size == model.config.vocab_size - 1  # the matrix grew
    inputs = tokenizer([TEXTS[0], TEXTS[2]], src_lang="en", tgt_lang="fr", padding=True, return_tensors="pt")
    fr = tokenizer.convert_tokens_to_ids("__fr__")
    beams = dict(num_beams=3, return_dict_in_generate=True, output_scores=True, length_penalty=0.0)
    reference = pretrained.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    forced_bos_token_id=fr, max_new_tokens=7, **beams)  # fmt: skip
    ours = model.generate(**inputs, max_new_tokens=6, **beams)
    assert ours.sequences.tolist() == reference.sequences.tolist()
    torch.testing.assert_close(ours.sequences_scores, reference.sequences_scores, atol=1e-5, rtol=0)
    with torch.no_grad():  # the share the scores would keep without renormalising: well above the tolerance
        logits = model(**inputs, decoder_input_ids=ours.sequences[:, :-1]).logits
    assert torch.log_softmax(logits, -1)[..., row].exp().sum(-1).mean() > 1e-3


def test_the_nllb200_example_runs_on_a_tiny_checkpoint_with_nllbs_fields(nllb_folder, tmp_path):
    """examples/configs/nllb200_lora.yaml, as shipped but for what needs the Hub and a GPU: the checkpoint (a tiny
    random M2M-100 with NLLB's config fields and codes), the data (the same rows as above) and the budget."""
    from pathlib import Path

    from hf_langspec.training.config import load_config
    from hf_langspec.training.experiment import run_experiment

    config = load_config(Path(__file__).parents[1] / "examples" / "configs" / "nllb200_lora.yaml")
    assert config["model"]["init_from_pretrained"] == "facebook/nllb-200-distilled-600M"
    small = _pretrained_config(nllb_folder, tmp_path)
    config["output_dir"], config["data"] = small["output_dir"], small["data"]
    config["model"]["init_from_pretrained"] = str(nllb_folder)
    config["training"] |= {"max_steps": 2, "per_device_train_batch_size": 8, "bf16": False, "use_cpu": True,
                           "save_strategy": "no", "disable_tqdm": True}  # fmt: skip
    config["evaluation"] |= {"num_beams": 1, "max_new_tokens": 5, "max_sentences_per_direction": 2}
    config["translate"] |= {"tgt_lang": "deu_Latn"}
    outcome = run_experiment(config)
    assert outcome["example"] and (Path(outcome["model_dir"]) / "config.json").exists()


def test_the_pretrained_table_sets_each_system_against_the_checkpoint():
    """scripts/pretrained_table.py's row: means over seeds on the trained directions only, the checkpoint's on the
    same directions, and the share of untouched directions' outputs (no language trained) equal to the
    checkpoint's, counted against an independent count."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "pretrained_table.py"
    spec = importlib.util.spec_from_file_location("pretrained_table", path)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    train_sizes = {"en-ru": 10, "ru-en": 10}

    def run(bleu_en_ru, bleu_ru_en, trainable):
        sets = {"supervised": {"en-ru": {"bleu": bleu_en_ru, "chrf": 30.0, "off_target": 0.1},
                               "ru-en": {"bleu": bleu_ru_en, "chrf": 40.0, "off_target": 0.0},
                               "en-de": {"bleu": 99.0, "chrf": 99.0}},  # untrained: not in the means
                "zero-shot": {"de-fr": {"bleu": 5.0, "chrf": 20.0}, "ru-de": {"bleu": 1.0, "chrf": 9.0}}}  # fmt: skip
        return {"train_sizes": train_sizes, "sets": sets, "parameters": {"total": 100, "trainable": trainable},
                "training": {"seconds": 10.0}}  # fmt: skip

    checkpoint = {"sets": {"supervised": {"en-ru": {"bleu": 2.0, "chrf": 1.0}, "ru-en": {"bleu": 3.0, "chrf": 1.0}}}}
    base_outputs = {"zero-shot": {"de-fr": ["a", "b", "c", "d"], "ru-de": ["x", "y"]}}
    outputs = [{"zero-shot": {"de-fr": ["a", "b", "c", "d"], "ru-de": ["q", "q"]}},
               {"zero-shot": {"de-fr": ["a", "B", "c", "d"], "ru-de": ["x", "y"]}}]  # fmt: skip
    row = table.summarize([run(4.0, 6.0, 10), run(6.0, 8.0, 10)], outputs, checkpoint, base_outputs, "en")
    assert row["en-xx bleu"] == 5.0 and row["xx-en bleu"] == 7.0 and row["en-xx bleu checkpoint"] == 2.0
    assert row["en-xx off_target"] == pytest.approx(0.1) and row["trainable"] == 10 and row["seeds"] == 2
    # de-fr is untouched (neither language trained; ru-de is not): 7 of its 8 outputs equal the checkpoint's
    assert row["untouched identical"] == 7 / 8 and row["untouched sentences"] == 4
    assert table.untouched("de-fr", train_sizes) and not table.untouched("ru-de", train_sizes)


def test_the_pretrained_table_decodes_untouched_directions_again_from_a_runs_saved_model(nllb_folder, tmp_path):
    """`pretrained_table.py --redecode`: a run's saved model (here the checkpoint adapted, untrained) decodes the
    untouched directions again with the suite's settings and is counted against the checkpoint's outputs: all equal,
    and one changed output of the checkpoint's is one fewer; trained directions are not decoded."""
    import importlib.util
    import json
    from types import SimpleNamespace

    from hf_langspec.evaluation import evaluate_model
    from hf_langspec.pretrained import load_pretrained

    path = Path(__file__).resolve().parents[1] / "scripts" / "pretrained_table.py"
    spec = importlib.util.spec_from_file_location("pretrained_table", path)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    model, tokenizer = load_pretrained(nllb_folder, "lora", languages=CODES, lora_rank=2)
    folder = tmp_path / "out" / "runs" / "lora" / "seed1" / "model"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    results = tmp_path / "results"
    (results / "lora").mkdir(parents=True)
    (results / "lora" / "seed1.json").write_text(json.dumps({"train_sizes": {"eng_Latn-deu_Latn": 8}}))
    references = {"sets": {"zero-shot": {
        "fra_Latn-spa_Latn": {"src": [TEXTS[2], TEXTS[0]], "ref": [TEXTS[3], TEXTS[3]]},  # untouched
        "eng_Latn-fra_Latn": {"src": [TEXTS[0]], "ref": [TEXTS[2]]},  # English was trained: not decoded again
    }}}  # fmt: skip
    evaluation = {"batch_size": 2, "num_beams": 2, "max_new_tokens": 5}
    rows = [
        {"src_lang": "fra_Latn", "tgt_lang": "spa_Latn", "src": src, "tgt": TEXTS[3]} for src in (TEXTS[2], TEXTS[0])
    ]
    own = evaluate_model(model.eval(), tokenizer, {"zero-shot": rows}, off_target=False, show_progress=False,
                         **evaluation)["hypotheses"]["fra_Latn-spa_Latn"]  # fmt: skip
    suite = SimpleNamespace(results_dir=results, output_dir=tmp_path / "out", base={"evaluation": evaluation})
    checkpoint = {"zero-shot": {"fra_Latn-spa_Latn": own, "eng_Latn-fra_Latn": ["x"]}}
    assert table.redecode_untouched(suite, "lora", 1, checkpoint, references) == [2, 2]
    checkpoint["zero-shot"]["fra_Latn-spa_Latn"] = [own[0], own[1] + " changed"]
    assert table.redecode_untouched(suite, "lora", 1, checkpoint, references) == [1, 2]


def test_a_reports_budget_line_names_the_checkpoints_shape(nllb_folder, tmp_path):
    """A suite's model section that starts from a checkpoint has no d_model of its own: the report's budget line
    reads the shape its runs recorded, else the checkpoint's config (it said `d None, None+None layers`)."""
    import json

    from hf_langspec.compare.report import budget_shape

    config = json.loads((nllb_folder / "config.json").read_text())
    shape = f"d {config['d_model']}, {config['encoder_layers']}+{config['decoder_layers']} layers"
    assert budget_shape({"init_from_pretrained": str(nllb_folder)}, {}) == f"{shape}, started from {nllb_folder}"
    assert budget_shape({"init_from_pretrained": str(tmp_path)}, {}) == f"started from {tmp_path}"  # not there (yet)
    recorded = {("full_ft", 1): {"shape": {"d_model": 64, "encoder_layers": 1, "decoder_layers": 2}}}
    assert (
        budget_shape({"init_from_pretrained": str(tmp_path)}, recorded) == f"d 64, 1+2 layers, started from {tmp_path}"
    )
    assert budget_shape({"d_model": 128, "encoder_layers": 2, "decoder_layers": 3}, {}) == "d 128, 2+3 layers"


@pytest.mark.slow
def test_serve_translates_an_adapted_models_directions_with_the_checkpoints_codes(nllb_folder, tmp_path):
    """Item 6: `hf-langspec serve --model` over a model adapted from an NLLB-convention checkpoint (LoRA, base
    frozen): one mixed request of a trained direction and an untouched one (spa_Latn -> fra_Latn) answers what
    `translate()` gives, through the checkpoint's own tokenizer and codes."""
    import json
    import subprocess
    import sys
    import urllib.request

    from hf_langspec.cli.inputs import load_model
    from hf_langspec.evaluation.translate import translate
    from hf_langspec.export.ct2 import generation_budget
    from hf_langspec.training.experiment import run_experiment

    model_dir = run_experiment(_pretrained_config(nllb_folder, tmp_path, **{"class": "lora", "lora_rank": 4}))[
        "model_dir"
    ]
    items = [{"text": TEXTS[0], "src_lang": "eng_Latn", "tgt_lang": "deu_Latn"},
             {"text": TEXTS[3], "src_lang": "spa_Latn", "tgt_lang": "fra_Latn"},
             {"text": TEXTS[1], "src_lang": "eng_Latn", "tgt_lang": "deu_Latn"}]  # fmt: skip
    model, tokenizer = load_model(str(model_dir), None)
    want = [translate(model, tokenizer, [i["text"]], i["src_lang"], i["tgt_lang"], show_progress=False,
                      **generation_budget(model))[0] for i in items]  # fmt: skip
    command = [sys.executable, "-m", "hf_langspec.cli", "serve", "--model", str(model_dir), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert "directions (transformers) at http://" in line, line
        url = line.split(" at ")[1].split(": GET")[0]
        with urllib.request.urlopen(f"{url}/health", timeout=60) as response:
            assert {"eng_Latn-deu_Latn", "spa_Latn-fra_Latn"} <= set(json.loads(response.read())["directions"])
        request = urllib.request.Request(f"{url}/translate", data=json.dumps(items).encode(),
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as response:
            answers = json.loads(response.read())
        assert [a["translation"] for a in answers] == want and all(want), want
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_load_pretrained_adds_languages_and_freezes_as_train_does(nllb_folder):
    """Issue 59: `load_pretrained` could not add a language and left every weight trainable until `freeze_base` was
    called; it now builds what `train`'s model stage builds from the same settings, trainable flags included."""
    from hf_langspec.pretrained import load_pretrained, pretrained_tokenizer
    from hf_langspec.training.steps.model import pretrained_model

    model, tokenizer = load_pretrained(nllb_folder, "lora", languages=["eng_Latn"], add_languages=["tgl_Latn"],
                                       lora_rank=4)  # fmt: skip
    assert tokenizer.languages == ["eng_Latn", "tgl_Latn"] and model.config.languages == tokenizer.languages
    reference_tokenizer = pretrained_tokenizer(nllb_folder, ["eng_Latn", "tgl_Latn"], new_languages=["tgl_Latn"])
    fields = {"lora_rank": 4, "add_languages": ["tgl_Latn"]}
    reference = pretrained_model(str(nllb_folder), "lora", reference_tokenizer, fields, say=lambda _: None)
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    assert flags == {n: p.requires_grad for n, p in reference.named_parameters()}
    assert any(flags.values()) and not all(flags.values())
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters(), strict=True):
        if ".insertions." not in name:  # the modules are drawn at random; the base and the new row are not
            assert torch.equal(p, q), name
    batch = tokenizer(TEXTS[:2], text_target=TEXTS[1:3], src_lang="tgl_Latn", tgt_lang="eng_Latn", padding=True,
                      return_tensors="pt")  # fmt: skip
    model(**batch).loss.backward()
    grad = model.get_input_embeddings().weight.grad
    row = tokenizer.lang_tag_token_ids[1]
    assert grad[row].abs().sum() > 0 and grad[torch.arange(grad.shape[0]) != row].abs().sum() == 0
    plain, _ = load_pretrained(nllb_folder, "baseline", languages=["eng_Latn", "deu_Latn"])
    assert all(p.requires_grad for p in plain.parameters())  # a baseline fine-tunes the whole checkpoint
    unfrozen, _ = load_pretrained(nllb_folder, "lora", languages=["eng_Latn", "deu_Latn"], freeze=False, lora_rank=4)
    assert all(p.requires_grad for p in unfrozen.parameters())
