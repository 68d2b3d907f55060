"""XNLI loading, sentence-pair encoding, and the two encoder examples run end to end."""

from __future__ import annotations

import json
import random
from pathlib import Path

import command_server
import pytest
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file
from test_xlp_encoder import WORDS  # the same three toy vocabularies

from hf_langspec import train_tokenizer
from hf_langspec.data import XNLI_LABELS, load_xnli

ROOT = Path(__file__).resolve().parent.parent
# Each label has a marker word per language, so a classifier can learn the fixture in a few steps.
MARKERS = {"en": ["yes", "maybe", "no"], "de": ["ja", "vielleicht", "nein"], "fr": ["oui", "peut-être", "non"]}


def xnli_rows(code: str, n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.randrange(3)
        premise = " ".join(rng.choices(WORDS[code], k=8))
        hypothesis = MARKERS[code][label] + " " + " ".join(rng.choices(WORDS[code], k=5))
        rows.append({"premise": premise, "hypothesis": hypothesis, "label": label})
    return rows


@pytest.fixture(scope="module")
def xnli_dir(tmp_path_factory) -> Path:
    """A local XNLI mirror: en as the Hub's Parquet export, de and fr as JSON lines."""
    root = tmp_path_factory.mktemp("xnli")
    for k, code in enumerate(MARKERS):
        (root / code).mkdir()
        for split, n in (("train", 240), ("validation", 30), ("test", 60)):
            rows = xnli_rows(code, n, seed=100 * k + len(split))
            if code == "en":
                Dataset.from_list(rows).to_parquet(root / code / f"{split}-00000-of-00001.parquet")
            else:
                with open(root / code / f"{split}.jsonl", "w", encoding="utf-8") as f:
                    f.writelines(json.dumps(r) + "\n" for r in rows)
    return root


def test_local_mirror_loads_every_language_with_its_rows(xnli_dir):
    data = load_xnli(["en", "de"], "test", data_dir=xnli_dir)
    assert data.column_names == ["premise", "hypothesis", "label", "lang"]
    assert data["lang"] == ["en"] * 60 + ["de"] * 60
    assert [r | {} for r in data.select(range(60, 63)).remove_columns("lang")] == xnli_rows("de", 60, 104)[:3]
    assert len(load_xnli("fr", "train", data_dir=xnli_dir, max_examples=10)) == 10


def test_bad_xnli_input_is_named(xnli_dir, tmp_path):
    with pytest.raises(ValueError, match=r"no languages \['xx'\]"):
        load_xnli(["en", "xx"], "test", data_dir=xnli_dir)
    with pytest.raises(ValueError, match=r"splits .* not 'dev'"):
        load_xnli("en", "dev", data_dir=xnli_dir)
    with pytest.raises(FileNotFoundError, match=r"No XNLI test files for 'es'"):
        load_xnli("es", "test", data_dir=xnli_dir)
    (tmp_path / "en").mkdir()
    rows = [{"premise": "a", "hypothesis": "b", "label": 0}, {"premise": "a", "hypothesis": "b", "label": 5}]
    (tmp_path / "en" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"test.jsonl, row 1: label 5 is not one of 0, 1, 2"):
        load_xnli("en", "test", data_dir=tmp_path)
    (tmp_path / "en" / "test.jsonl").write_text(json.dumps({"sentence1": "a", "label": 0}) + "\n")
    with pytest.raises(ValueError, match=r"missing columns \['premise', 'hypothesis'\]"):
        load_xnli("en", "test", data_dir=tmp_path)


@pytest.fixture(scope="module")
def tok():
    texts = {code: [" ".join(WORDS[code] + MARKERS[code])] * 5 for code in WORDS}
    return train_tokenizer(texts, languages=list(WORDS), vocab_size=100, lang_tag_style="none", mask_token=True,
                           show_progress=False)  # fmt: skip


def test_sentence_pairs_use_the_xlm_r_layout(tok):
    [feature] = tok.encode_sentences(["der mann"], "de", ["die frau"])
    pieces = lambda text: tok.backend_tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731
    expected = [tok.bos_token_id, *pieces("der mann"), tok.eos_token_id, *pieces("die frau"), tok.eos_token_id]
    assert feature == {"input_ids": expected, "src_lang_ids": 1}
    [single] = tok.encode_sentences(["le chat"], "fr")
    assert single["input_ids"] == [tok.bos_token_id, *pieces("le chat"), tok.eos_token_id]
    with pytest.raises(ValueError, match="max_length=4 leaves no room"):
        tok.encode_sentences(["a"], "en", ["b"], max_length=4)
    with pytest.raises(ValueError, match="Unknown language code 'xx'"):
        tok.encode_sentences(["a"], "xx")


@settings(max_examples=30, deadline=None)
@given(
    first=st.lists(st.sampled_from(WORDS["en"]), min_size=1, max_size=20),
    second=st.lists(st.sampled_from(WORDS["en"]), min_size=1, max_size=20),
    max_length=st.integers(5, 30),
)
def test_truncation_fits_and_keeps_both_sides_and_their_starts(tok, first, second, max_length):
    full = tok.encode_sentences([" ".join(first)], "en", [" ".join(second)])[0]["input_ids"]
    cut = tok.encode_sentences([" ".join(first)], "en", [" ".join(second)], max_length=max_length)[0]["input_ids"]
    assert len(cut) == min(len(full), max_length)
    assert cut[0] == tok.bos_token_id and cut[-1] == tok.eos_token_id and cut.count(tok.eos_token_id) == 2
    split_full, split_cut = full.index(tok.eos_token_id), cut.index(tok.eos_token_id)
    assert full[1:split_full][: split_cut - 1] == cut[1:split_cut]  # each side loses only its end
    assert full[split_full + 1 :][: len(cut) - split_cut - 2] == cut[split_cut + 1 : -1]


def run_example(*args: str) -> str:
    result = command_server.run_script(*args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """examples/pretrain_xlp.py on a slice of the Bible corpus (four books, three languages)."""
    root = tmp_path_factory.mktemp("pretrain")
    run_example(
        "examples/pretrain_xlp.py", "--output-dir", str(root / "model"), "--corpus-dir", str(root / "bible"),
        "--languages", "en", "de", "fr", "--books", "40", "41", "42", "43", "--vocab-size", "1000",
        "--max-steps", "150", "--d-model", "64", "--layers", "2", "--heads", "4", "--ffn-dim", "128",
        "--save-steps", "100",
    )  # fmt: skip
    return root / "model"


@pytest.mark.slow
def test_mlm_pretraining_on_the_bible_lowers_validation_loss_of_every_language(pretrained):
    report = json.loads((pretrained / "mlm_eval.json").read_text())
    assert set(report["loss"]) == {"en", "de", "fr"}
    for code, loss in report["loss"].items():
        assert loss["after"] < 0.9 * loss["before"], (code, loss)
    assert (pretrained / "model.safetensors").exists() and (pretrained / "tokenizer.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["transfer", "translate-train"])
def test_xnli_fine_tuning_learns_keeps_projections_frozen_and_reports_every_language(
    pretrained, xnli_dir, tmp_path, setting
):
    output = tmp_path / "xnli"
    stdout = run_example(
        "examples/finetune_xnli.py", "--model", str(pretrained), "--data-dir", str(xnli_dir),
        "--setting", setting, "--output-dir", str(output), "--epochs", "4", "--learning-rate", "1e-3",
    )  # fmt: skip
    results = json.loads((output / "results.json").read_text())
    assert list(results["accuracy"]) == ["en", "fr", "de"]  # XNLI's order
    trained = ["en"] if setting == "transfer" else ["en", "fr", "de"]
    for code in trained:  # the languages it was fine-tuned on learn the marker words
        assert results["accuracy"][code] >= 0.9, results
    others = [v for c, v in results["accuracy"].items() if c != "en"]
    assert results["transfer_gap"] == pytest.approx(results["accuracy"]["en"] - sum(others) / len(others))
    assert "transfer gap" in stdout and (output / "results.md").exists()

    key = "model.encoder.insertions.embed.weight"
    before = load_file(pretrained / "model.safetensors")[key]
    for folder in ["model"] if setting == "transfer" else ["model-en", "model-fr", "model-de"]:
        after = load_file(output / folder / "model.safetensors")
        assert after[key].equal(before), folder  # frozen: bit-identical
        assert after["classifier.weight"].shape == (len(XNLI_LABELS), 64)
