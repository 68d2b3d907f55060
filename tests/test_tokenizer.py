"""LangSpecTokenizer and train_tokenizer."""

from __future__ import annotations

import functools
import json
import string
from collections import defaultdict

import pytest
import torch
from conftest import run_without_package
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration, LangSpecTokenizer, train_tokenizer
from hf_langspec.data.bible import BibleCorpusConfig, build_bible_corpus
from hf_langspec.files import read_jsonl
from hf_langspec.tokenization.tags import tag_template_problem
from hf_langspec.tokenization.training import covered_alphabet, temperature_sample
from hf_langspec.training.config import validate_config
from hf_langspec_cli.config_file import ConfigError

TEXTS = {
    "en": ["In the beginning God created the heavens and the earth.", "Jesus wept.", "The earth was formless."] * 20,
    "de": ["Im Anfang schuf Gott die Himmel und die Erde.", "Jesus vergoß Tränen."] * 10,
    "fr": ["Au commencement, Dieu créa les cieux et la terre.", "Jésus pleura."] * 5,
}


@pytest.fixture(scope="module")
def tok() -> LangSpecTokenizer:
    return train_tokenizer(TEXTS, languages=["en", "de", "fr"], vocab_size=90, show_progress=False)


@pytest.fixture(scope="module")
def bible(tmp_path_factory):
    config = BibleCorpusConfig(languages=["en", "de", "fr"], books=[40, 41, 42, 43], valid_chapters=5, test_chapters=5)
    return build_bible_corpus(tmp_path_factory.mktemp("bible"), config, show_progress=False)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_round_trip_on_the_bible_corpus(bible, model_type):
    texts = defaultdict(list)
    for row in read_jsonl(bible.files["train"]):
        texts[row["src_lang"]].append(row["src"])
    tok = train_tokenizer(texts, vocab_size=2000, model_type=model_type, show_progress=False)
    for code in ("en", "de", "fr"):
        lines = [r["texts"][code] for r in read_jsonl(bible.files["test.multiway"])]
        ids = tok(lines, src_lang=code, tgt_lang="en")["input_ids"]
        decoded = tok.batch_decode(ids, skip_special_tokens=True)
        rate = sum(d == x for d, x in zip(decoded, lines, strict=True)) / len(lines)
        assert rate >= 0.99, (code, rate)
        assert not any("<2" in d for d in tok.batch_decode(ids, skip_special_tokens=False))


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abcdefghijklmnopqrstuvwxyzéäüß<>2 .,")), max_size=40))
def test_tags_never_leak_into_decoded_text(text):
    tok = _module_tok()
    batch = tok([text], text_target=[text], src_lang="en", tgt_lang="fr")
    for ids in (batch["input_ids"][0], batch["labels"][0]):
        decoded = tok.decode(ids, skip_special_tokens=False)
        assert "<2fr>" not in decoded and "<2en>" not in decoded.replace(text, "")


@functools.cache
def _module_tok() -> LangSpecTokenizer:  # hypothesis cannot take function-scoped fixtures
    return train_tokenizer(TEXTS, languages=["en", "de", "fr"], vocab_size=90, show_progress=False)


@pytest.mark.parametrize("style", ["source", "target", "both", "none"])
def test_mixed_directions_get_the_right_tags_and_ids(tok, style):
    tok.lang_tag_style = style
    try:
        batch = tok(
            ["Jesus wept.", "Jésus pleura.", "Im Anfang"],
            text_target=["Jésus pleura.", "Im Anfang", "Jesus wept."],
            src_lang=["en", "fr", "de"],
            tgt_lang=["fr", "de", "en"],
        )
    finally:
        tok.lang_tag_style = "source"
    tags = [tok.convert_tokens_to_ids(t) for t in ("<2fr>", "<2de>", "<2en>")]
    source_tags = [tok.convert_tokens_to_ids(t) for t in ("<2en>", "<2fr>", "<2de>")]  # each source's own
    assert batch["src_lang_ids"] == [0, 2, 1] and batch["tgt_lang_ids"] == [2, 1, 0]
    for i, (tag, own) in enumerate(zip(tags, source_tags, strict=True)):
        assert batch["input_ids"][i][-1] == tok.eos_token_id and batch["labels"][i][-1] == tok.eos_token_id
        assert (batch["input_ids"][i][0] == tag) == (style == "source")
        assert (batch["input_ids"][i][0] == own) == (style == "both")  # NLLB-200 and M2M-100: the source's own code
        assert (batch["labels"][i][0] == tag) == (style in ("target", "both"))
        assert tag not in batch["input_ids"][i][1:] and tag not in batch["labels"][i][1:]


def test_padding_truncation_and_tensors(tok):
    batch = tok(["Jesus wept.", "In the beginning God created the heavens and the earth."], text_target=["a", "b c d e"],
                src_lang="en", tgt_lang="de", return_tensors="pt", truncation=True, max_length=6)  # fmt: skip
    assert batch["input_ids"].shape[1] <= 6 and batch["input_ids"][1, 0] == tok.convert_tokens_to_ids("<2de>")
    assert batch["input_ids"][1, -1] == tok.eos_token_id
    untruncated = len(tok("Jesus wept.", src_lang="en", tgt_lang="de")["input_ids"])
    assert batch["attention_mask"].sum(1).tolist() == [min(untruncated, 6), 6]
    assert (batch["labels"] == -100).sum() > 0 and batch["tgt_lang_ids"].tolist() == [1, 1]


@pytest.mark.reliability
def test_bad_input_is_refused(tok):
    with pytest.raises(ValueError, match=r"Unknown language code 'zz': this tokenizer knows \['en', 'de', 'fr'\]"):
        tok("x", src_lang="zz", tgt_lang="en")
    with pytest.raises(ValueError, match="pass tgt_lang=<code>"):
        tok("x")
    with pytest.raises(ValueError, match="tgt_lang has 1 codes for 2 texts"):
        tok(["a", "b"], tgt_lang=["en"])
    with pytest.raises(ValueError, match="Got 2 sources but 1 targets"):
        tok(["a", "b"], text_target=["a"], tgt_lang="en")
    with pytest.raises(TypeError, match="unsupported arguments"):
        tok("a", tgt_lang="en", add_special_tokens=False)


@pytest.mark.reliability
def test_tokenizer_refuses_a_model_it_does_not_match(tok):
    config = LangSpecConfig(**tok.model_config_kwargs(), d_model=16, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)  # fmt: skip
    tok.check_model(LangSpecForConditionalGeneration(config))
    wrong_vocab = LangSpecConfig(**{**tok.model_config_kwargs(), "vocab_size": 200})
    with pytest.raises(ValueError, match=rf"vocab_size: model has 200, tokenizer has {len(tok)}"):
        tok.check_model(wrong_vocab)
    wrong_languages = LangSpecConfig(**{**tok.model_config_kwargs(), "languages": ["en", "fr", "de"]})
    with pytest.raises(
        ValueError, match=r"languages: model has \['en', 'fr', 'de'\], tokenizer has \['en', 'de', 'fr'\]"
    ):
        tok.check_model(wrong_languages)


def test_save_and_reload_through_auto_tokenizer(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is LangSpecTokenizer and loaded.languages == tok.languages
    assert loaded.lang_tag_token_ids == tok.lang_tag_token_ids
    args = dict(
        text=["Jesus wept.", "Im Anfang"],
        text_target=["Jésus pleura.", "x"],
        src_lang=["en", "de"],
        tgt_lang=["fr", "en"],
    )
    assert loaded(**args) == tok(**args)
    loaded.save_pretrained(tmp_path / "again")  # a reloaded tokenizer saves what it is, not how it was loaded
    saved = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only"} & set(saved)


FRESH_PROCESS = """
import json, sys
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
batch = tok(["Jesus wept.", "Im Anfang"], text_target=["Jésus pleura.", "x"], src_lang=["en", "de"], tgt_lang=["fr", "en"])
print(json.dumps({"class": type(tok).__module__, "batch": dict(batch), "decoded": tok.decode(batch["input_ids"][0])}))
"""


@pytest.mark.slow
def test_tokenizer_loads_as_remote_code_in_a_fresh_process(tok, tmp_path):
    tok.save_pretrained(tmp_path / "tok")
    out = run_without_package(FRESH_PROCESS, tmp_path / "tok", cwd=tmp_path)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["class"].startswith("transformers_modules.")
    expected = tok(
        ["Jesus wept.", "Im Anfang"], text_target=["Jésus pleura.", "x"], src_lang=["en", "de"], tgt_lang=["fr", "en"]
    )
    assert result["batch"] == dict(expected)
    assert "<2" not in result["decoded"]


def test_temperature_sample_and_character_coverage():
    sentences = {"a": [f"a{i}" for i in range(900)], "b": [f"b{i}" for i in range(100)]}
    sample = temperature_sample(sentences, sample_size=1000, temperature=1.0)
    assert (len(sample["a"]), len(sample["b"])) == (900, 100)
    flat = temperature_sample(sentences, sample_size=1000, temperature=1e9)
    assert abs(len(flat["a"]) - 500) <= 1 and abs(len(flat["b"]) - 500) <= 1  # b is oversampled
    assert set(flat["b"]) == set(sentences["b"])
    alphabet, covered = covered_alphabet(["aaaa bb c"], 0.8)  # a=4, b=2, c=1 of 7: a+b = 6/7 >= 0.8
    assert alphabet == ["a", "b"] and covered == pytest.approx(6 / 7)
    tok = train_tokenizer(
        {"en": ["aaaa bb c"] * 5, "de": ["aaab"] * 5}, vocab_size=30, character_coverage=0.8, show_progress=False
    )
    assert tok.unk_token_id in tok("c", tgt_lang="en")["input_ids"]  # outside the 80% coverage
    assert tok.unk_token_id not in tok("ab ba", tgt_lang="en")["input_ids"]


def test_train_tokenizer_refuses_bad_input():
    with pytest.raises(ValueError, match=r"texts has languages \['fr'\] that are not in languages"):
        train_tokenizer({"en": ["a"], "fr": ["b"]}, languages=["en"], show_progress=False)
    with pytest.raises(ValueError, match=r"No sentences for languages \['de'\]"):
        train_tokenizer({"en": ["a"], "de": []}, show_progress=False)
    with pytest.raises(ValueError, match="leaves no room"):
        train_tokenizer({"en": ["a"]}, vocab_size=5, show_progress=False)
    # a repeated code gave a tokenizer with two tags for one language, which the model config then refused
    with pytest.raises(ValueError, match=r"languages lists \['en'\] more than once"):
        train_tokenizer({"en": ["a"], "de": ["b"]}, languages=["en", "de", "en"], show_progress=False)


TEMPLATES = st.one_of(
    st.sampled_from(["<2{}>", "__{}__", ">>{}<<", "{}", "<2x>", "{0}", "{code}", "{}{}", "<{}>", "{:>4}", "{", "}"]),
    st.text(st.sampled_from("<>_{}2x "), max_size=8),
)
CODES = st.lists(st.sampled_from(["en", "de", "s", "pad", "eng_Latn", "x1"]), min_size=1, max_size=4, unique=True)


@pytest.mark.reliability
@given(template=TEMPLATES, codes=CODES)
@settings(max_examples=150, deadline=None)
def test_a_tag_template_is_accepted_only_where_it_gives_every_language_its_own_tag(template, codes):
    """Issue 75: `lang_tag_template: "<2x>"` gave every language the same tag and trained. The class: a template is
    accepted exactly when it has one plain `{}` and its tags are distinct, not special tokens and not plain words;
    otherwise the tokenizer's training refuses it (before training) with the template and the fix."""
    try:
        tags = [template.format(code) for code in codes]
        fields = [f for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
        one_plain_field = len(fields) == 1 and fields[0] == "" and "{:" not in template and "{!" not in template
    except (ValueError, IndexError, KeyError):
        tags, one_plain_field = None, False
    meaningful = (
        one_plain_field
        and len(set(tags)) == len(tags)
        and not set(tags) & {"<s>", "</s>", "<pad>", "<unk>"}
        and not any(tag.isalnum() for tag in tags)
    )
    assert (tag_template_problem(template, codes) is None) == meaningful, (template, codes)
    if not meaningful:
        with pytest.raises(ValueError, match=r"lang_tag_template"):
            train_tokenizer({c: ["a b"] for c in codes}, lang_tag_template=template, show_progress=False)


@pytest.mark.reliability
@pytest.mark.parametrize(("template", "message"), [("<2x>", r"has no field: every language would get the same tag"),
                                                   ("{}", r"makes tags \['en', 'de', 'fr'\] that are plain words")])  # fmt: skip
def test_a_meaningless_tag_template_is_refused_as_the_config_is_read(tmp_path, template, message):
    from conftest import cli_exit_code

    config = {"output_dir": str(tmp_path / "run"), "data": {"bible": {"languages": ["en", "de", "fr"]}},
              "tokenizer": {"lang_tag_template": template}}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=message):
        validate_config(config)
    assert cli_exit_code(["train", "--config", str(path)]) == 2
    assert not (tmp_path / "run").exists()


def test_a_saved_tokenizer_that_repeats_a_language_is_refused(tok, tmp_path):
    tok.save_pretrained(tmp_path / "tok")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    config["languages"] = [*config["languages"], config["languages"][0]]
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"languages lists \['en'\] more than once"):
        LangSpecTokenizer.from_pretrained(tmp_path / "tok")


def test_labels_feed_the_model_loss_directly(tok):
    config = LangSpecConfig(**tok.model_config_kwargs(), d_model=16, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)  # fmt: skip
    model = LangSpecForConditionalGeneration(config).eval()
    batch = tok(["Jesus wept.", "Im Anfang schuf Gott"], text_target=["Jésus", "In the beginning God created"],
                src_lang=["en", "de"], tgt_lang=["fr", "en"], return_tensors="pt")  # fmt: skip
    loss = model(**batch).loss
    logits = model(**batch).logits
    manual = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    torch.testing.assert_close(loss, manual)


def test_translation_pipeline_with_the_langspec_tokenizer(tok):
    from transformers import pipeline

    config = LangSpecConfig(**tok.model_config_kwargs(), d_model=16, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)  # fmt: skip
    torch.manual_seed(0)
    model = LangSpecForConditionalGeneration(config).eval()
    translate = pipeline("langspec-translation", model=model, tokenizer=tok)
    result = translate("Jesus wept.", src_lang="en", tgt_lang="fr", max_new_tokens=5, min_new_tokens=5)
    direct = model.generate(**tok(["Jesus wept."], src_lang="en", tgt_lang="fr", return_tensors="pt"),
                            max_new_tokens=5, min_new_tokens=5)  # fmt: skip
    assert result[0]["translation_text"] == tok.decode(direct[0], skip_special_tokens=True)


DETERMINISM_SCRIPT = """
import json, sys
from hf_langspec.files import read_jsonl
from hf_langspec import train_tokenizer
rows = list(read_jsonl(sys.argv[1]))
tok = train_tokenizer(rows, vocab_size=int(sys.argv[2]), model_type=sys.argv[3], sample_size=20000, show_progress=False)
print(json.dumps([tok.vocabulary_fingerprint(), tok.backend_tokenizer.to_str()]))
"""


@pytest.mark.reliability
@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_training_twice_in_fresh_processes_gives_the_same_tokenizer(bible, model_type, tmp_path):
    """Unigram training returns equal-score pieces in hash order (28-30 of 600 ids differed before the fix):
    two processes with different hash seeds must produce the same file, ids and fingerprint."""
    import os
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(DETERMINISM_SCRIPT)
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        command = [sys.executable, str(script), str(bible.files["train"]), "600", model_type]
        outputs.append(json.loads(subprocess.run(command, capture_output=True, text=True, check=True, env=env).stdout))
    assert outputs[0][0] == outputs[1][0]
    assert outputs[0][1] == outputs[1][1]


def test_vocabulary_fingerprint_tells_vocabularies_apart(tok):
    same = train_tokenizer(TEXTS, languages=["en", "de", "fr"], vocab_size=90, show_progress=False)
    more = {**TEXTS, "en": [*TEXTS["en"], "Quickly, zealous wizards jumped over the lazy fox."]}
    other = train_tokenizer(more, languages=["en", "de", "fr"], vocab_size=90, show_progress=False)
    assert tok.vocabulary_fingerprint() == same.vocabulary_fingerprint() != other.vocabulary_fingerprint()
    reordered = LangSpecTokenizer(
        tokenizer_object=tok.backend_tokenizer, languages=["de", "en", "fr"],
        extra_special_tokens=["<2de>", "<2en>", "<2fr>"],
    )  # fmt: skip
    assert reordered.vocabulary_fingerprint() != tok.vocabulary_fingerprint()


@pytest.mark.reliability
def test_a_tokenizer_of_the_same_size_but_another_vocabulary_is_refused():
    """Same languages, tags and size, other pieces: before fingerprints this translated into garbage silently."""
    own = train_tokenizer(TEXTS, languages=["en", "de", "fr"], vocab_size=48, show_progress=False)
    other_texts = {code: [t[::-1] for t in texts] for code, texts in TEXTS.items()}
    other = train_tokenizer(other_texts, languages=["en", "de", "fr"], vocab_size=48, show_progress=False)
    assert len(other) == len(own) == 48 and other.lang_tag_token_ids == own.lang_tag_token_ids
    model = LangSpecForConditionalGeneration(LangSpecConfig(**own.model_config_kwargs(), d_model=16, encoder_layers=1,
                                                            decoder_layers=1, encoder_attention_heads=2,
                                                            decoder_attention_heads=2, encoder_ffn_dim=16,
                                                            decoder_ffn_dim=16))  # fmt: skip
    own.check_model(model)
    with pytest.raises(ValueError, match=r"vocabulary_fingerprint: model has '[0-9a-f]{16}', tokenizer has"):
        other.check_model(model)
    del model.config.vocabulary_fingerprint  # a model saved before fingerprints: size and languages only
    other.check_model(model)
