"""Standard test sets from local files (hf_langspec/evaluation/test_sets.py): FLORES-200, NTREX-128, TICO-19 and
WMT in OPUS-MT-testsets' layout, on committed samples of the real files (tests/fixtures/test_sets/ATTRIBUTION.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import cli_exit_code, with_diverse_outputs

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration, train_tokenizer
from hf_langspec.evaluation.test_sets import read_test_set

SAMPLES = Path(__file__).parent / "fixtures" / "test_sets"
FLORES = SAMPLES / "flores200_dataset" / "devtest"
ISO = ["en", "de", "fr"]
NLLB = ["eng_Latn", "deu_Latn", "fra_Latn"]


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# (spec, the model's languages, {direction: (source file, reference file)})
LAYOUTS = {
    "flores200, ISO codes": (f"flores200:{SAMPLES / 'flores200_dataset'}", ISO, {
        "de-en": (FLORES / "deu_Latn.devtest", FLORES / "eng_Latn.devtest"),
        "en-fr": (FLORES / "eng_Latn.devtest", FLORES / "fra_Latn.devtest")}),
    "flores200, NLLB codes": (f"flores200:{SAMPLES / 'flores200_dataset'}", NLLB, {
        "eng_Latn-deu_Latn": (FLORES / "eng_Latn.devtest", FLORES / "deu_Latn.devtest"),
        "fra_Latn-deu_Latn": (FLORES / "fra_Latn.devtest", FLORES / "deu_Latn.devtest")}),
    "ntrex128": (f"ntrex128:{SAMPLES / 'NTREX-128'}", NLLB, {
        "eng_Latn-deu_Latn": (SAMPLES / "NTREX-128/newstest2019-src.eng.txt", SAMPLES / "NTREX-128/newstest2019-ref.deu.txt"),
        "fra_Latn-eng_Latn": (SAMPLES / "NTREX-128/newstest2019-ref.fra.txt", SAMPLES / "NTREX-128/newstest2019-src.eng.txt")}),
    "tico19": (f"tico19:{SAMPLES / 'tico19'}", ISO, {
        "en-fr": (SAMPLES / "tico19/en-fr/tico19-test.en", SAMPLES / "tico19/en-fr/tico19-test.fr"),
        "fr-en": (SAMPLES / "tico19/en-fr/tico19-test.fr", SAMPLES / "tico19/en-fr/tico19-test.en")}),
    "wmt, every pair holding the name": (f"wmt:{SAMPLES / 'opus-mt/newstest2019'}", ISO, {
        "de-en": (SAMPLES / "opus-mt/de-en/newstest2019.de", SAMPLES / "opus-mt/de-en/newstest2019.en")}),
    "opus-mt, one pair": (f"opus-mt:{SAMPLES / 'opus-mt/fr-en/newstest2014'}", NLLB, {
        "eng_Latn-fra_Latn": (SAMPLES / "opus-mt/fr-en/newstest2014.en", SAMPLES / "opus-mt/fr-en/newstest2014.fr")}),
}  # fmt: skip


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_each_layout_reads_as_its_files_line_by_line_in_the_models_codes(layout):
    spec, languages, expected = LAYOUTS[layout]
    rows = read_test_set(spec, languages, list(expected))
    assert list(rows) == list(expected)
    for direction, (source, reference) in expected.items():
        src_lang, tgt_lang = direction.split("-")
        assert rows[direction] == [{"src_lang": src_lang, "tgt_lang": tgt_lang, "src": s, "tgt": t}
                                   for s, t in zip(lines(source), lines(reference), strict=True)]  # fmt: skip


def test_without_directions_every_direction_between_the_models_languages_is_read():
    assert sorted(read_test_set(f"flores200:{SAMPLES / 'flores200_dataset'}", ["en", "de"])) == ["de-en", "en-de"]
    assert sorted(read_test_set(f"ntrex128:{SAMPLES / 'NTREX-128'}", ISO)) == ["de-en", "en-de", "en-fr", "fr-en"]
    assert sorted(read_test_set(f"wmt:{SAMPLES / 'opus-mt/newstest2014'}", ISO)) == ["en-fr", "fr-en"]


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("spec", "directions", "message"),
    [
        (f"flores200:{SAMPLES / 'flores200_dataset'}", ["en-es"], r"the files hold no en-es in the model's codes; they "
                                                                  r"hold de-en, de-fr, en-de, en-fr, fr-de, fr-en"),
        (f"tico19:{SAMPLES / 'tico19'}", ["de-en"], r"hold no de-en .* they hold en-fr, fr-en"),
        (f"wmt:{SAMPLES / 'opus-mt/newstest2099'}", None, r"no pair folder <src>-<tgt> under .* holds newstest2099"),
        (f"flores:{SAMPLES}", None, r"give KIND:PATH with KIND one of flores200, flores200-dev, flores101, ntrex128"),
        (f"ntrex128:{SAMPLES / 'tico19'}", None, r"has no newstest2019-src.eng.txt; give the NTREX-128 folder"),
        (f"flores200:{SAMPLES / 'missing'}", None, r"is not a folder; give the flores200 release folder"),
    ],
)  # fmt: skip
def test_a_direction_or_layout_the_files_lack_is_one_line_naming_what_they_hold(spec, directions, message):
    with pytest.raises(ValueError, match=message):
        read_test_set(spec, ISO, directions)


@pytest.mark.reliability
def test_files_whose_lines_do_not_pair_are_refused(tmp_path):
    folder = tmp_path / "devtest"
    folder.mkdir()
    (folder / "eng_Latn.devtest").write_text("a\nb\n")
    (folder / "deu_Latn.devtest").write_text("a\n")
    with pytest.raises(ValueError, match=r"deu_Latn.devtest has 1 lines and .*eng_Latn.devtest 2; the files of one "
                                         r"set pair line by line"):  # fmt: skip
        read_test_set(f"flores200:{tmp_path}", ["en", "de"], ["de-en"])


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    texts = {code: lines(FLORES / f"{flores}.devtest") for code, flores in zip(ISO, NLLB, strict=True)}
    tokenizer = train_tokenizer(texts, vocab_size=300, show_progress=False)
    config = LangSpecConfig(**tokenizer.model_config_kwargs(), d_model=16, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("model") / "model"
    with_diverse_outputs(LangSpecForConditionalGeneration(config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_evaluate_scores_flores_from_its_files_as_sacrebleus_command_line_does(model_folder, tmp_path):
    out = tmp_path / "scores"
    code = cli_exit_code(["evaluate", str(model_folder), "--test-set", f"flores200:{SAMPLES / 'flores200_dataset'}",
                          "--directions", "de-en,en-fr", "--output-dir", str(out), "--num-beams", "1",
                          "--max-new-tokens", "8"])  # fmt: skip
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["directions"]) == ["de-en", "en-fr"]
    for direction, reference in (("de-en", "eng_Latn"), ("en-fr", "fra_Latn")):
        scores = results["directions"][direction]
        assert scores["set"] == "flores200" and scores["sentences"] == 6
        command = [sys.executable, "-m", "sacrebleu", str(FLORES / f"{reference}.devtest"), "-i",
                   str(out / f"hypotheses.{direction}.txt"), "-b", "-w", "6"]  # fmt: skip
        bleu = subprocess.run([*command, "-m", "bleu"], capture_output=True, text=True, check=True).stdout
        chrfpp = subprocess.run([*command, "-m", "chrf", "--chrf-word-order", "2"], capture_output=True, text=True,
                                check=True).stdout  # fmt: skip
        assert float(bleu) == pytest.approx(scores["bleu"], abs=1e-6)
        assert float(chrfpp) == pytest.approx(scores["chrfpp"], abs=1e-6) and scores["chrfpp"] > 0


@pytest.mark.reliability
def test_evaluate_refuses_a_direction_the_set_lacks_before_loading_the_model(model_folder, tmp_path, capsys):
    code = cli_exit_code(["evaluate", str(model_folder), "--test-set", f"tico19:{SAMPLES / 'tico19'}",
                          "--directions", "de-en", "--output-dir", str(tmp_path / "out")])  # fmt: skip
    assert (
        code == 2 and "the files hold no de-en in the model's codes; they hold en-fr, fr-en" in capsys.readouterr().err
    )
    assert cli_exit_code(["evaluate", str(model_folder), "--output-dir", str(tmp_path / "o2")]) == 2
    assert "give --test NAME=FILE.jsonl or --test-set KIND:PATH" in capsys.readouterr().err


SPM_MODEL = SAMPLES / "spm" / "flores_sample.model"  # 120 pieces of the samples (ATTRIBUTION.md)


def test_spbleu_is_sacrebleus_flores200_bleu_with_the_same_model(model_folder, tmp_path):
    """`evaluate --spm FILE`: spBLEU per direction and group, equal to sacreBLEU's command line with its flores200
    tokenizer reading the same file (placed where sacreBLEU keeps its downloaded model), and signed with the file."""
    out = tmp_path / "scores"
    code = cli_exit_code(["evaluate", str(model_folder), "--test-set", f"flores200:{SAMPLES / 'flores200_dataset'}",
                          "--directions", "de-en,en-fr", "--spm", str(SPM_MODEL), "--output-dir", str(out),
                          "--num-beams", "1", "--max-new-tokens", "8"])  # fmt: skip
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    home = tmp_path / "sacrebleu"
    (home / "models").mkdir(parents=True)
    (home / "models" / "flores200sacrebleuspm").write_bytes(SPM_MODEL.read_bytes())
    for direction, reference in (("de-en", "eng_Latn"), ("en-fr", "fra_Latn")):
        scores = results["directions"][direction]
        command = [sys.executable, "-m", "sacrebleu", str(FLORES / f"{reference}.devtest"), "-i",
                   str(out / f"hypotheses.{direction}.txt"), "-b", "-w", "6", "-m", "bleu", "-tok", "flores200"]  # fmt: skip
        spbleu = subprocess.run(
            command, capture_output=True, text=True, check=True, env={**os.environ, "SACREBLEU": str(home)}
        )
        assert float(spbleu.stdout) == pytest.approx(scores["spbleu"], abs=1e-6)
        assert scores["spbleu"] != scores["bleu"] and "tok:spm-flores_sample.model-" in scores["spbleu_signature"]
    assert set(results["groups"]["spbleu"]) == set(results["groups"]["bleu"])


@pytest.mark.reliability
def test_spm_that_is_missing_or_not_a_model_is_one_line_before_the_model_loads(model_folder, tmp_path, capsys):
    test_set = f"flores200:{SAMPLES / 'flores200_dataset'}"
    for spm, message in (
        (tmp_path / "none.model", "no such file"),
        (FLORES / "eng_Latn.devtest", "is not a SentencePiece model"),
    ):
        code = cli_exit_code(["evaluate", str(model_folder), "--test-set", test_set, "--spm", str(spm),
                              "--output-dir", str(tmp_path / "out")])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1, err


@pytest.mark.reliability
def test_a_direction_in_two_test_sets_is_refused_before_the_model_loads(model_folder, tmp_path, capsys):
    """Scores are kept per direction: de-en in a JSONL test file and in FLORES-200 kept FLORES' alone, silently."""
    own = tmp_path / "own.jsonl"
    own.write_text(json.dumps({"src_lang": "de", "tgt_lang": "en", "src": "Hallo.", "tgt": "Hello."}) + "\n")
    code = cli_exit_code(["evaluate", str(model_folder), "--test", f"supervised={own}", "--test-set",
                          f"flores200:{SAMPLES / 'flores200_dataset'}", "--output-dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "de-en in supervised and flores200" in err and err.count("\n") == 1, err
    assert not (tmp_path / "out" / "results.json").exists()


def test_a_training_config_scores_standard_sets_and_spbleu(tmp_path):
    """`[evaluation] test_sets` and `spm` in a run's config: FLORES-200 read in the tokenizer's codes (en, de, fr)
    after training, scored like the run's own sets, spBLEU included; `splits` keeps the supervised set (which shares
    directions with FLORES) out of that evaluation."""
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    test_set = f"flores200:{SAMPLES / 'flores200_dataset'}"
    evaluation = {"test_sets": [test_set], "test_set_directions": ["de-en", "en-fr"], "spm": str(SPM_MODEL),
                  "splits": ["flores200"]}  # fmt: skip
    outcome = run_experiment(tiny_run_config(tmp_path, evaluation=evaluation))
    scores = outcome["results"]["directions"]
    assert sorted(scores) == ["de-en", "en-fr"] and {s["set"] for s in scores.values()} == {"flores200"}
    assert all(
        s["sentences"] == 6 and "tok:spm-flores_sample.model-" in s["spbleu_signature"] for s in scores.values()
    )


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("evaluation", "message"),
    [
        ({"test_sets": ["flores300:x"]}, "test_sets: "),
        ({"test_sets": [f"flores200:{SAMPLES}"]}, "test_sets: "),
        ({"spm": "missing.model"}, "spm: missing.model is not a file"),
        ({"test_sets": [f"flores200:{SAMPLES / 'flores200_dataset'}"]}, "de-en in supervised and flores200"),
    ],
)
def test_a_bad_standard_set_in_a_config_is_refused_before_training(tmp_path, evaluation, message):
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment
    from hf_langspec_cli.config_file import ConfigError

    with pytest.raises(ConfigError, match=message):
        run_experiment(tiny_run_config(tmp_path, evaluation=evaluation))
    assert not (tmp_path / "run" / "checkpoints").exists()
