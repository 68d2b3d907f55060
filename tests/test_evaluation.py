"""Evaluation numbers against independent computations; model cards; the push helper."""

from __future__ import annotations

import copy
import json
import re

import pytest
import sacrebleu
import torch
import yaml
from conftest import with_diverse_outputs
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration, train_tokenizer
from hf_langspec.evaluation import (
    corpus_scores,
    direction_groups,
    evaluate_model,
    group_means,
    language_identifier,
    off_target_rate,
    resource_groups,
    save_results,
    source_use,
    translate,
    win_ratio,
)
from hf_langspec.evaluation.evaluate import copy_baseline, load_results
from hf_langspec.evaluation.metrics import is_degenerate
from hf_langspec.export import build_model_card, push_model

HYPS = ["The cat sat on the mat.", "A dog barked loudly at night.", "He went home."]
REFS = ["The cat is sitting on the mat.", "A dog barked loudly in the night.", "He went home early."]


def test_scores_equal_direct_sacrebleu_calls():
    scores = corpus_scores(HYPS, REFS)
    assert scores["bleu"] == sacrebleu.corpus_bleu(HYPS, [REFS]).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(HYPS, [REFS]).score
    assert scores["chrfpp"] == sacrebleu.metrics.CHRF(word_order=2).corpus_score(HYPS, [REFS]).score
    bleu = sacrebleu.corpus_bleu(HYPS, [REFS])
    assert scores["length_ratio"] == bleu.sys_len / bleu.ref_len
    assert scores["degenerate"] == 0
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    with pytest.raises(ValueError, match="empty test set"):
        corpus_scores([], [])


GERMAN = ["Im Anfang schuf Gott die Himmel und die Erde.", "Und die Erde war wüst und leer.",
          "Und Gott sprach: Es werde Licht!", "Und es ward Abend und es ward Morgen."]  # fmt: skip
ENGLISH = ["In the beginning God created the heavens and the earth."]


@pytest.mark.parametrize("identifier", ["lingua", "langid", "py3langid"])
def test_off_target_rate_on_known_languages(identifier):
    identify = language_identifier(identifier)
    assert identify(GERMAN + ENGLISH) == ["de"] * 4 + ["en"]
    assert off_target_rate(GERMAN + ENGLISH, "de", identify) == pytest.approx(1 / 5)
    assert off_target_rate(GERMAN, "fr", identify) == 1.0


# Bible sentences in languages lingua lacks, each measured by py3langid in the default identifier
AMHARIC = ["በመጀመሪያ እግዚአብሔር ሰማይንና ምድርን ፈጠረ።", "ምድርም ባዶ ነበረች፥ አንዳችም አልነበረባትም፤"]
PORTUGUESE = ["No princípio criou Deus os céus e a terra.", "E disse Deus: Haja luz; e houve luz."]


def test_each_language_is_measured_by_the_first_identifier_that_covers_it():
    default = language_identifier()
    assert default.name == "lingua+py3langid+langid"
    assert default.for_language("de").name == "lingua" and default.for_language("am").name == "py3langid"
    assert off_target_rate(AMHARIC + ENGLISH, "am", default) == pytest.approx(1 / 3)
    # corpus codes reported under another code: TED's pt-br is Portuguese, OPUS-100's sh any Serbo-Croatian standard
    assert off_target_rate(PORTUGUESE, "pt-br", default) == 0.0
    assert off_target_rate(["Na početku stvori Bog nebo i zemlju."], "sh", default) == 0.0
    assert off_target_rate(PORTUGUESE, "zh-tw", default) == 1.0


def test_a_language_no_identifier_covers_is_not_measured_with_a_warning_naming_it():
    with pytest.warns(UserWarning, match="Off-target rate for 'tlh' not measured: lingua does not cover it"):
        assert off_target_rate(GERMAN, "tlh", language_identifier("lingua")) is None
    assert language_identifier("lingua").for_language("am") is None  # so an explicit choice is kept as chosen


# run in a fresh interpreter: a thread pool this test process's other detections started would be inherited
LOADED_THEN_FORKED = """
import json, os, sys
from hf_langspec.evaluation.language_id import language_identifier, load_models
threads = lambda: len(os.listdir("/proc/self/task"))
megabytes = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20
before = threads()
load_models(sys.argv[1])
started = threads() - before
child = os.fork()
if child == 0:
    resident = megabytes()
    found = language_identifier("lingua")(json.loads(sys.argv[2]))
    print(json.dumps({"found": found, "grew": megabytes() - resident, "threads_started": started}), flush=True)
    os._exit(0)
os.waitpid(child, 0)
"""


@pytest.mark.slow
def test_lingua_models_loaded_before_a_fork_serve_the_child_without_a_thread_started():
    """What the compare fork server does before forking runs: `load_models` starts no thread (a forked child
    inherits a thread pool without its threads), and a child detects with the parent's models: what it detects is
    right and it loads none (lingua's models, about 1 GB, load at a process's first detection otherwise)."""
    import subprocess
    import sys

    texts = [*GERMAN, *ENGLISH, "В начале сотворил Бог небо и землю.", "tttt tttt aaaa"]
    done = subprocess.run([sys.executable, "-c", LOADED_THEN_FORKED, "lingua+py3langid", json.dumps(texts)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    child = json.loads(done.stdout)
    assert child["threads_started"] == 0
    assert child["found"][:6] == ["de"] * 4 + ["en", "ru"]
    assert child["grew"] < 100, child  # megabytes; a process that loads them grows by about 1,100


def test_models_are_loaded_for_lingua_only_and_where_it_is_chosen(monkeypatch):
    from hf_langspec.evaluation import language_id

    built = []
    monkeypatch.setattr(language_id.LinguaIdentifier, "load_models", lambda self: built.append(self))
    chosen = {"py3langid": 0, "langid+py3langid": 0, "lingua": 1, "py3langid+lingua": 1, None: 1}  # None: the default
    for prefer, loads in chosen.items():
        built.clear()
        language_id.load_models(prefer)
        assert len(built) == loads, prefer
    with pytest.raises(ValueError, match="unknown"):
        language_id.load_models("fasttext")


def test_the_coverage_table_in_data_md_holds():
    """Every corpus language the committed table says is measured is covered by that identifier today."""
    import re
    from pathlib import Path

    from hf_langspec.data.hub import CORPUS_LANGUAGES

    text = (Path(__file__).resolve().parents[1] / "docs" / "DATA.md").read_text()
    text = text.split("<!-- language-coverage -->")[1].split("<!-- /language-coverage -->")[0]
    rows = dict(re.findall(r"^\| ([a-z-]+)(?: \(as [^)]*\))? \|.*\| ([^|]+) \|$", text, flags=re.M))
    rows.pop("language")  # the header
    assert set(rows) == {code for codes in CORPUS_LANGUAGES.values() for code in codes}
    default = language_identifier()
    for code, measured_by in rows.items():
        if measured_by.strip() != "**not measured**":
            assert default.for_language(code).name == measured_by.strip(), code


@settings(max_examples=200, deadline=None)
@given(
    words=st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=20),
    n=st.integers(1, 4),
    copies=st.integers(1, 6),
)
def test_degenerate_means_an_ngram_repeated_four_times_in_a_row(words, n, copies):
    def brute_force(tokens):  # every n-gram and start, counted independently of the implementation
        return any(
            all(tokens[i + k * m : i + (k + 1) * m] == tokens[i : i + m] for k in range(4))
            and i + 4 * m <= len(tokens)
            for m in range(1, 5)
            for i in range(len(tokens))
        )

    loop = words[:n] * copies if len(words) >= n else []
    text = " ".join(words + loop)
    assert is_degenerate(text) == brute_force(text.split())
    if loop and copies >= 4:
        assert is_degenerate(text)


def test_degenerate_examples():
    assert is_degenerate("und und und und") and is_degenerate("he said he said he said he said that")
    assert not is_degenerate("Und Gott sprach: Es werde Licht! Und es ward Licht.")
    assert is_degenerate("ㅋ" * 20) and not is_degenerate("하나님이 가라사대 빛이 있으라 하시매 빛이 있었고")


def test_group_means_and_win_ratio_by_hand():
    results = {"en-de": {"bleu": 20.0}, "en-fr": {"bleu": 30.0}, "de-en": {"bleu": 24.0}, "fr-en": {"bleu": 28.0},
               "de-fr": {"bleu": 5.0}, "fr-de": {"bleu": 3.0}}  # fmt: skip
    reference = {"en-de": {"bleu": 19.0}, "en-fr": {"bleu": 31.0}, "de-en": {"bleu": 24.0}, "fr-en": {"bleu": 27.5},
                 "de-fr": {"bleu": 4.0}}  # fmt: skip
    groups = direction_groups(list(results), zero_shot=["de-fr", "fr-de"])
    assert groups == {"en-xx": ["en-de", "en-fr"], "xx-en": ["de-en", "fr-en"], "zero-shot": ["de-fr", "fr-de"]}
    assert group_means(results, groups) == {"en-xx": 25.0, "xx-en": 26.0, "zero-shot": 4.0}
    assert win_ratio(results, reference) == 3 / 5  # en-de, fr-en, de-fr win; en-fr loses; de-en ties
    sizes = {"en-de": 2_000_000, "en-fr": 500_000, "en-sw": 20_000}
    assert resource_groups(sizes) == {"de": "High", "fr": "Med", "sw": "Low"}
    assert resource_groups(sizes, low_below=600_000, high_from=3_000_000) == {"de": "Med", "fr": "Low", "sw": "Low"}


def test_win_ratio_against_a_results_file(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"directions": {"en-de": {"bleu": 10.0}, "de-en": {"bleu": 12.0}}}))
    assert win_ratio({"en-de": {"bleu": 11.0}, "de-en": {"bleu": 11.0}}, load_results(path)["directions"]) == 0.5
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a results file"):
        load_results(tmp_path / "bad.json")


@pytest.fixture(scope="module")
def model_and_tokenizer():
    texts = {
        "en": ENGLISH * 3 + ["The earth was formless and empty."] * 3,
        "de": GERMAN * 2,
        "fr": ["Au commencement, Dieu créa."] * 4,
    }
    tok = train_tokenizer(texts, vocab_size=80, show_progress=False)
    config = LangSpecConfig(**tok.model_config_kwargs(), d_model=32, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)  # fmt: skip
    torch.manual_seed(0)
    return LangSpecForConditionalGeneration(config).eval(), tok


def test_pipeline_scores_equal_sacrebleu_on_the_same_outputs(model_and_tokenizer, tmp_path):
    model, tok = model_and_tokenizer
    rows = [{"src_lang": "en", "tgt_lang": "de", "src": e, "tgt": g} for e, g in zip(ENGLISH * 4, GERMAN, strict=True)]
    zero = [{"src_lang": "de", "tgt_lang": "fr", "src": g, "tgt": "Au commencement, Dieu créa."} for g in GERMAN]
    results = evaluate_model(model, tok, {"supervised": rows, "zero-shot": zero}, num_beams=2, max_new_tokens=6,
                             identifier=language_identifier("langid"), show_progress=False)  # fmt: skip
    for direction, refs in (("en-de", GERMAN), ("de-fr", ["Au commencement, Dieu créa."] * 4)):
        hyps = results["hypotheses"][direction]
        assert results["directions"][direction]["bleu"] == sacrebleu.corpus_bleu(hyps, [refs]).score
        assert results["directions"][direction]["chrf"] == sacrebleu.corpus_chrf(hyps, [refs]).score
    assert "off_target" in results["directions"]["de-fr"] and "off_target" not in results["directions"]["en-de"]
    assert results["groups"]["bleu"]["zero-shot"] == results["directions"]["de-fr"]["bleu"]
    baseline = copy_baseline({"supervised": rows})
    assert baseline["en-de"]["bleu"] == sacrebleu.corpus_bleu(ENGLISH * 4, [GERMAN]).score
    paths = save_results(results, tmp_path, baseline)
    table = paths["markdown"].read_text()
    assert "| en-de | supervised |" in table and "copy-source BLEU" in table and "BLEU signature" in table
    with pytest.raises(ValueError, match=r"Test sets \['zero-shot'\] are empty"):
        evaluate_model(model, tok, {"supervised": rows, "zero-shot": []}, show_progress=False)
    with pytest.raises(ValueError, match="Unknown language code 'xx'"):
        evaluate_model(model, tok, {"supervised": [{**rows[0], "tgt_lang": "xx"}]}, show_progress=False)


MIXED = {"texts": GERMAN + ENGLISH * 2 + ["Au commencement, Dieu créa."], "src": ["de"] * 4 + ["en", "en", "fr"],
         "tgt": ["fr", "en", "fr", "en", "de", "fr", "en"]}  # fmt: skip
SHORT = {"num_beams": 2, "max_new_tokens": 5, "min_new_tokens": 5}


def _translate_mixed(entry: str, model, tok, batch_size: int) -> list[str]:
    if entry == "translate":
        return translate(model, tok, MIXED["texts"], MIXED["src"], MIXED["tgt"], batch_size=batch_size,
                         show_progress=False, **SHORT)  # fmt: skip
    from transformers import pipeline

    items = [{"text": t, "src_lang": s, "tgt_lang": g} for t, s, g in zip(*MIXED.values(), strict=True)]
    results = pipeline("langspec-translation", model=model, tokenizer=tok)(items, batch_size=batch_size, **SHORT)
    return [result[0]["translation_text"].strip() for result in results]


@pytest.mark.parametrize("entry", ["translate", "pipeline"])
def test_batches_hold_one_target_language_and_outputs_keep_the_input_order(model_and_tokenizer, entry):
    model, tok = model_and_tokenizer
    model = with_diverse_outputs(model)
    seen = []
    generate = model.generate
    model.generate = lambda **kw: seen.append(kw["tgt_lang_ids"].tolist()) or generate(**kw)
    try:
        batched = _translate_mixed(entry, model, tok, batch_size=2)
    finally:
        del model.generate
    assert all(len(set(ids)) == 1 for ids in seen) and len(seen) == 5  # fr: 3 texts -> 2 batches, en: 3 -> 2, de: 1
    assert sorted(i for ids in seen for i in ids) == sorted(model.config.language_ids(MIXED["tgt"]))
    alone = [
        translate(model, tok, [t], s, g, show_progress=False, **SHORT)[0]
        for t, s, g in zip(*MIXED.values(), strict=True)
    ]
    assert batched == alone and len(set(alone)) > 3  # outputs differ, so a wrong order shows


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ("Hello", r"texts is one string; give a list of texts"),  # was translated character by character
        (["Hello", 5], r"texts\[1\] is int 5; every text must be a string"),  # an AttributeError
    ],
)
def test_translate_refuses_texts_that_are_not_a_list_of_strings(model_and_tokenizer, texts, message):
    model, tok = model_and_tokenizer
    with pytest.raises(ValueError, match=message):
        translate(model, tok, texts, "en", "de", show_progress=False)


def test_model_card_has_model_index_and_languages(model_and_tokenizer, tmp_path):
    model, tok = model_and_tokenizer
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    results = {"directions": {"en-de": {"bleu": 12.345, "chrf": 40.0, "set": "supervised", "bleu_signature": "sig"}},
               "groups": {"bleu": {"en-xx": 12.345}, "chrf": {"en-xx": 40.0}}, "group_members": {"en-xx": ["en-de"]}}  # fmt: skip
    card = build_model_card(
        tmp_path, results, train_sizes={"en-de": 100}, model_name="tiny-bible", repo_id="me/tiny-bible"
    )
    metadata = yaml.safe_load(str(card).split("---")[1])
    assert metadata["language"] == ["de", "en", "fr"] and "custom_code" in metadata["tags"]
    assert metadata["pipeline_tag"] == "translation" and metadata["library_name"] == "transformers"
    found = {
        (result["dataset"]["config"], metric["type"], metric["value"])
        for result in metadata["model-index"][0]["results"]
        for metric in result["metrics"]
    }
    assert found == {("en-de", "bleu", 12.35), ("en-de", "chrf", 40.0)}
    assert "Johnson et al. (2017)" in card.text and "trust_remote_code=True" in card.text and "| en-de |" in card.text


class FakeHub:
    """Records what push_model asks of the Hub API."""

    def __init__(self):
        self.calls = []

    def create_repo(self, **kwargs):
        self.calls.append(("create_repo", kwargs))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))
        return type("Commit", (), {"commit_url": f"https://hub.example/{kwargs['repo_id']}/commit/1"})()

    def upload_file(self, **kwargs):
        self.calls.append(("upload_file", kwargs))
        return type("Commit", (), {"commit_url": f"https://hub.example/{kwargs['repo_id']}/commit/2"})()


def test_push_helper_uploads_a_complete_folder(model_and_tokenizer, tmp_path):
    model, tok = model_and_tokenizer
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    api = FakeHub()
    with pytest.raises(FileNotFoundError, match=r"lacks \['README.md'\]"):
        push_model(tmp_path, "me/tiny", api=api)
    build_model_card(tmp_path).save(tmp_path / "README.md")
    url = push_model(tmp_path, "me/tiny", api=api, private=True)
    assert url == "https://hub.example/me/tiny/commit/2"
    # the card's usage code named the folder: the Hub gets it rewritten to the repo id, the local card stays
    card = api.calls[2][1]["path_or_fileobj"].decode()
    assert (
        'from_pretrained("me/tiny", trust_remote_code=True)' in card and api.calls[2][1]["path_in_repo"] == "README.md"
    )
    assert api.calls[1][1]["ignore_patterns"] == ["README.md"]
    assert 'from_pretrained("me/tiny"' not in (tmp_path / "README.md").read_text()
    assert api.calls[0] == (
        "create_repo",
        {"repo_id": "me/tiny", "private": True, "exist_ok": True, "repo_type": "model"},
    )
    assert api.calls[1][1]["folder_path"] == str(tmp_path) and api.calls[1][1]["repo_id"] == "me/tiny"
    # exact names, each a file the model's save wrote (no pattern that matches anything else, at any depth)
    assert sorted(api.calls[1][1]["allow_patterns"]) == sorted(p.name for p in tmp_path.iterdir())


def saved_folder(model_and_tokenizer, folder):
    model, tok = model_and_tokenizer
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    build_model_card(folder).save(folder / "README.md")
    return folder


@pytest.mark.reliability
@pytest.mark.parametrize(
    "stray",
    [".credentials.json", "notes.txt", "train.py", "trainer_state.json", "logs/", "link.json -> /etc/hostname",
     "config.json -> elsewhere", "model.safetensors -> elsewhere"],
)  # fmt: skip
def test_push_refuses_a_folder_holding_anything_but_the_model_and_uploads_nothing(model_and_tokenizer, tmp_path,
                                                                                  stray):  # fmt: skip
    """Issue 59's security finding: push took every *.json, *.md, *.py, *.txt, *.model at any depth (hidden files
    and link targets included) and printed none of it. Now a stray file, folder or link refuses the push, named."""
    folder = saved_folder(model_and_tokenizer, tmp_path / "model")
    name, _, target = stray.partition(" -> ")
    if target:
        real = tmp_path / "elsewhere"
        real.write_text("{}")
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(real if target == "elsewhere" else target)
    elif name.endswith("/"):
        (folder / name).mkdir()
        (folder / name / "events.txt").write_text("secret")
    else:
        (folder / name).write_text("hf_token = 'hf_secret'")
    hub = FakeHub()
    kind = "links" if target else "files that are not the model's own"
    with pytest.raises((ValueError, FileNotFoundError), match=rf"holds {kind}.*{re.escape(name)}"):
        push_model(folder, "me/tiny", api=hub)
    assert hub.calls == []


def test_push_uploads_a_named_extra_file_and_prints_every_name(model_and_tokenizer, tmp_path, capsys):
    folder = saved_folder(model_and_tokenizer, tmp_path)
    (folder / "LICENSE.txt").write_text("MIT")
    (folder / "training_args.bin").write_bytes(b"pickle")
    hub = FakeHub()
    push_model(folder, "me/tiny", api=hub, include=["LICENSE.txt"])
    uploaded = hub.calls[1][1]["allow_patterns"]
    assert "LICENSE.txt" in uploaded and "training_args.bin" not in uploaded
    printed = capsys.readouterr().out
    assert "Uploading to me/tiny: " in printed and all(name in printed for name in uploaded)
    with pytest.raises(FileNotFoundError, match=r"--include names \['NOTICE'\], which .* does not hold"):
        push_model(folder, "me/tiny", api=FakeHub(), include=["NOTICE"])


@pytest.mark.reliability
def test_push_refuses_pickled_weights_and_leaves_pickles_behind(model_and_tokenizer, tmp_path):
    model, tok = model_and_tokenizer
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    build_model_card(tmp_path).save(tmp_path / "README.md")
    (tmp_path / "training_args.bin").write_bytes(b"pickle")
    api = FakeHub()
    push_model(tmp_path, "me/tiny", api=api)
    assert not any(p.endswith((".bin", ".pt", ".pth")) for p in api.calls[1][1]["allow_patterns"])
    assert "model.safetensors" in api.calls[1][1]["allow_patterns"]
    (tmp_path / "model.safetensors").rename(tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match=r"holds its weights as a pickle \(pytorch_model.bin\); save them as"):
        push_model(tmp_path, "me/tiny", api=FakeHub())
    hub = FakeHub()
    push_model(tmp_path, "me/tiny", api=hub, allow_pickles=True)  # the user's explicit choice
    assert {"pytorch_model.bin", "training_args.bin"} <= set(hub.calls[1][1]["allow_patterns"])


@pytest.mark.reliability
def test_push_refuses_a_damaged_model_before_uploading(model_and_tokenizer, tmp_path):
    """A folder whose config.json no longer fits its weights (an edited layer count) is not published."""
    from hf_langspec.model_folder import ModelFolderError

    model, tok = model_and_tokenizer
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    build_model_card(tmp_path).save(tmp_path / "README.md")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | {"decoder_layers": config["decoder_layers"] + 1}))
    hub = FakeHub()
    with pytest.raises(ModelFolderError, match=r"config\.json does not match the weights: the weights lack"):
        push_model(tmp_path, "me/tiny", api=hub)
    assert hub.calls == []


@pytest.mark.reliability
def test_push_without_a_network_is_one_line_naming_the_hub_and_the_token(model_and_tokenizer, tmp_path):
    from huggingface_hub import HfApi

    class Offline(FakeHub):  # what HfApi raises here without a network (the Hub is unreachable from this machine)
        def create_repo(self, **kwargs):
            HfApi(endpoint="http://127.0.0.1:9", token="x").create_repo("me/x", exist_ok=True)

    model, tok = model_and_tokenizer
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    build_model_card(tmp_path).save(tmp_path / "README.md")
    with pytest.raises(RuntimeError, match=r"Could not push to the Hugging Face Hub \(ConnectError: .*token"):
        push_model(tmp_path, "me/tiny", api=Offline())


def test_the_card_says_how_its_scores_were_measured():
    from hf_langspec.export.card import evaluation_note

    results = {"directions": {"en-de": {"bleu": 1.0, "sentences": 30, "bleu_signature": "nrefs:1|tok:13a"},
                              "de-fr": {"bleu": 2.0, "sentences": 10, "off_target": 0.5}},
               "settings": {"num_beams": 4, "max_new_tokens": 128}}  # fmt: skip
    note = evaluation_note(results)
    assert note.startswith("Measured on 10-30 test sentences per direction; beam 4, at most 128 new tokens;")
    assert "sacreBLEU `nrefs:1|tok:13a`" in note and "off-target" in note
    assert evaluation_note(None) == ""


def test_source_use_is_the_reference_loss_and_zero_for_a_decoder_that_cannot_see_the_source(model_and_tokenizer):
    model, tok = model_and_tokenizer
    sources, references = GERMAN, ["In the beginning.", "The earth was formless.", "Let there be light.", "Evening."]
    result = source_use(model, tok, sources, references, "de", "en", batch_size=3)  # two batches, padded
    total, tokens = 0.0, 0  # independently: one unpadded pair at a time
    for source, reference in zip(sources, references, strict=True):
        pair = tok(source, src_lang="de", tgt_lang="en", text_target=reference, return_tensors="pt")
        with torch.no_grad():
            logits = model(**pair).logits[0]
        total += torch.nn.functional.cross_entropy(logits, pair["labels"][0], reduction="sum").item()
        tokens += pair["labels"].shape[1]
    assert result["loss"] == pytest.approx(total / tokens, rel=1e-5)
    assert abs(result["gain"]) > 1e-4 and result["sentences"] == 4
    blind = copy.deepcopy(model)
    with torch.no_grad():
        for layer in blind.model.decoder.layers:  # cross-attention adds nothing: the decoder is a language model
            layer.encoder_attn.out_proj.weight.zero_()
            layer.encoder_attn.out_proj.bias.zero_()
    blind_result = source_use(blind, tok, sources, references, "de", "en")
    assert blind_result["gain"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("sources", "references", "message"),
    [
        (GERMAN, GERMAN[:3], r"4 sources but 3 references"),
        (GERMAN[:1], GERMAN[:1], r"at least 2 sentence pairs"),
        (GERMAN[:1] * 2, GERMAN[:2], r"The sources repeat"),
    ],
)
def test_source_use_refuses_what_it_cannot_measure(model_and_tokenizer, sources, references, message):
    with pytest.raises(ValueError, match=message):
        source_use(*model_and_tokenizer, sources, references, "de", "en")


def test_the_default_identifier_is_loaded_once_for_every_direction(model_and_tokenizer, monkeypatch):
    """An identifier keeps the models it has loaded: evaluate_model builds the default one once, not once per
    direction."""
    import hf_langspec.evaluation.evaluate as evaluate_module

    model, tok = model_and_tokenizer
    built = []

    def counting(*args, **kwargs):
        built.append(1)
        return language_identifier("langid")

    monkeypatch.setattr(evaluate_module, "language_identifier", counting)
    rows = [{"src_lang": s, "tgt_lang": t, "src": text, "tgt": text} for s, t, text in
            [("de", "fr", GERMAN[0]), ("fr", "de", "Au commencement, Dieu créa."), ("en", "fr", ENGLISH[0])]]  # fmt: skip
    results = evaluate_model(model, tok, {"zero-shot": rows}, num_beams=1, max_new_tokens=3, show_progress=False)
    assert len(built) == 1
    assert all(s["language_identifier"] == "langid" for s in results["directions"].values())
