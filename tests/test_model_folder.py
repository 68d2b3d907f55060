"""Damaged model folders and busy resources: one line that names the file and the fault, never a traceback."""

from __future__ import annotations

import json
import re
import socket
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration
from hf_langspec.model_folder import ModelFolderError, load_model_folder
from hf_langspec.modeling.registry import VARIANTS, variant
from hf_langspec.tokenization import train_tokenizer
from hf_langspec_cli import main

TEXTS = {"en": ["In the beginning God created the heaven and the earth."] * 4,
         "de": ["Am Anfang schuf Gott Himmel und Erde."] * 4}  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    tok = train_tokenizer(TEXTS, vocab_size=60, show_progress=False)
    config = LangSpecConfig(**tok.model_config_kwargs(), d_model=16, encoder_layers=1, decoder_layers=1,
                            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("model") / "model"
    LangSpecForConditionalGeneration(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture
def copy(saved, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(saved, tmp_path / "model"))


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def translate_args(folder: Path) -> list:
    return ["translate", folder, "--src-lang", "en", "--tgt-lang", "de", "--input", folder.parent / "in.txt"]


def truncate(folder: Path) -> None:
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])


def corrupt_header(folder: Path) -> None:
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[12:24] = b"@@@@@@@@@@@@"
    (folder / "model.safetensors").write_bytes(bytes(data))


def remove_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def pickle_weights(folder: Path) -> None:
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()


def nan_weights(folder: Path) -> None:
    tensors = load_file(folder / "model.safetensors")
    tensors["model.decoder.layers.0.fc1.weight"][0, 0] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def broken_config(folder: Path) -> None:
    (folder / "config.json").write_text('{"model_type": "langspec", ')


def broken_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text("{ not json")


def edit_config(**changes):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        config.update(changes)
        for key in [k for k, v in changes.items() if v is None]:
            del config[key]
        (folder / "config.json").write_text(json.dumps(config))

    return edit


def extra_tensor(folder: Path) -> None:
    tensors = load_file(folder / "model.safetensors")
    tensors["model.encoder.extra.weight"] = torch.zeros(2)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def remove_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()


def remove_tokenizer_settings(folder: Path) -> None:
    (folder / "tokenizer_config.json").unlink()


def empty_tokenizer_settings(folder: Path) -> None:
    (folder / "tokenizer_config.json").write_text("{}")


def listed_tokenizer_settings(folder: Path) -> None:
    (folder / "tokenizer_config.json").write_text("[]")  # valid JSON, not the object every reader expects


def edit_tokenizer_settings(**changes):
    def edit(folder: Path) -> None:
        path = folder / "tokenizer_config.json"
        settings = json.loads(path.read_text())
        settings.update({key: change(settings) if callable(change) else change for key, change in changes.items()})
        path.write_text(json.dumps(settings))

    return edit


def unreadable_vocabulary(folder: Path) -> None:
    path = folder / "tokenizer.json"
    vocabulary = json.loads(path.read_text())
    vocabulary["model"] = {}  # valid JSON, no tokenizer: tokenizers raised a bare Exception, reported as a bug
    path.write_text(json.dumps(vocabulary))


CASES = {
    "truncated": (truncate, r"model\.safetensors is truncated \([\d,]+ bytes, its header describes [\d,]+\)"),
    "corrupted header": (corrupt_header, r"model\.safetensors is damaged \("),
    "no weights": (remove_weights, r"it has no weights file \(model\.safetensors\)"),
    "pickle": (pickle_weights, r"its weights are only pytorch_model\.bin, a pickle, which is not loaded"),
    "NaN": (nan_weights, r"tensor model\.decoder\.layers\.0\.fc1\.weight holds NaN or infinite values"),
    "config": (broken_config, r"config\.json is not valid JSON"),
    "tokenizer": (broken_tokenizer, r"tokenizer\.json is not valid JSON"),
    "no tokenizer": (remove_tokenizer, r"it has no tokenizer\.json \(the vocabulary the model was trained with\)"),
    # without them every code read as unknown: "Unknown language code 'en': this tokenizer knows []"
    "no tokenizer settings": (remove_tokenizer_settings, r"it has no tokenizer_config\.json \(the tokenizer's language codes"),
    "no languages": (empty_tokenizer_settings, r"its tokenizer_config\.json lists no languages"),
    "unreadable vocabulary": (unreadable_vocabulary, r"tokenizer\.json is not a vocabulary the tokenizers library can read"),
    "tag style": (edit_tokenizer_settings(lang_tag_style="prefix"), r"tokenizer_config\.json is refused: lang_tag_style='prefix' is not supported"),
    "untagged language": (edit_tokenizer_settings(languages=lambda s: [*s["languages"], "zz"]), r"tokenizer_config\.json is refused: The vocabulary has no tag tokens \['\S*zz\S*'\]"),
    "other languages": (edit_tokenizer_settings(languages=lambda s: s["languages"][::-1]), r"This tokenizer does not match the model \(languages: model has"),
    "settings a list": (listed_tokenizer_settings, r"tokenizer_config\.json is not a JSON object \(it holds a list\)"),
    "config a list": (lambda folder: (folder / "config.json").write_text("[1]"), r"config\.json is not a JSON object"),
    # config.json of another model, with its code: transformers would ask interactively whether to run it
    "another model": (edit_config(model_type="bert"), r"model_type is 'bert', not one of this package's (translation )?models"),
    "no model type": (edit_config(model_type=None), r"config\.json names no model_type"),
    "XLP encoder": (edit_config(model_type="langspec_xlp"), r"describes an XLP encoder .* not a translation model"),
    "refused value": (edit_config(languages=["en"]), r"config\.json is refused \(lang_tag_token_ids has 2 ids for 1"),
    "edited shape": (edit_config(d_model=32), r"does not match the weights: model\.\S+ is \[\d+(, \d+)?\] in the weights"),
    "more layers": (edit_config(encoder_layers=2), r"does not match the weights: the weights lack \d+ tensor\(s\) \((model\.)?encoder\.layers\.1\."),
    "extra tensor": (extra_tensor, r"config\.json has no place for 1 tensor\(s\) \(model\.encoder\.extra\.weight\)"),
    # values of the wrong type or range: "'<=' not supported between instances of 'str' and 'int'", and a string of
    # languages read letter by letter ("lang_tag_token_ids has 2 ids for 5 languages")
    "a string for a number": (edit_config(d_model="abc"), r"config\.json: d_model = 'abc' is a str; it must be int; the file was edited"),
    "no value": (edit_config(encoder_layers=[]), r"config\.json: encoder_layers = \[\] is a list; it must be int"),
    "languages a string": (edit_config(languages="en,de"), r"config\.json: languages = 'en,de' is a str; it must be Sequence\[str\]"),
    "a dropout of 3": (edit_config(dropout=3), r"config\.json: dropout = 3 must be in \[0, 1\)"),
    "weights a folder": (lambda folder: (folder / "model.safetensors").unlink() or (folder / "model.safetensors").mkdir(),
                         r"model\.safetensors is a folder, not a weights file"),  # errno 21, reported as a bug
    "index without a map": (lambda folder: (folder / "model.safetensors.index.json").write_text("{}"),
                            r"model\.safetensors\.index\.json has no weight_map of tensor names to files"),
}  # fmt: skip


@pytest.mark.reliability
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["translate", "evaluate", "export", "serve"])
def test_a_damaged_model_folder_is_one_line_naming_the_file(case, command, copy, capsys):
    """A damaged model folder (truncated or corrupted weights, none, a pickle, NaN, bad JSON, no tokenizer, a config of
    another model, refused by its class or not matching the weights): one line naming the file."""
    damage, message = CASES[case]
    damage(copy)
    (copy.parent / "in.txt").write_text("In the beginning.\n")
    (copy.parent / "test.jsonl").write_text(
        json.dumps({"src_lang": "en", "tgt_lang": "de", "src": "In the beginning.", "tgt": "Am Anfang."}) + "\n"
    )
    argv = {
        "translate": translate_args(copy),
        "evaluate": ["evaluate", copy, "--test", copy.parent / "test.jsonl", "--output-dir", copy.parent / "ev"],
        "export": [
            "export",
            "--model",
            copy,
            "--src-lang",
            "en",
            "--tgt-lang",
            "de",
            "--output-dir",
            copy.parent / "ex",
        ],
        "serve": ["serve", "--model", copy, "--port", "0"],
    }[command]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    last = err.rstrip("\n").split("\n")[-1].split("\r")[-1]  # after the weights' progress bar, if loaded
    assert "Traceback" not in err and err.count("error:") == 1
    assert last.startswith(f"hf-langspec {command}: error: Model folder {copy}: ")
    assert re.search(message, last), err


@pytest.mark.reliability
def test_a_file_given_as_the_model_folder_is_named_a_file(tmp_path, capsys):
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    (tmp_path / "in.txt").write_text("In the beginning.\n")
    code, out, err = run(capsys, *translate_args(tmp_path / "model.safetensors"))
    assert code == 2 and out == ""
    assert (
        err
        == f"hf-langspec translate: error: Model folder {tmp_path / 'model.safetensors'} is a file, not a folder; give the folder `hf-langspec train` saved.\n"
    )


@pytest.mark.reliability
@given(cut=st.integers(min_value=0, max_value=10_000), flip=st.integers(min_value=0, max_value=255))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_damaged_weights_file_is_refused_or_loads_finite(saved, tmp_path_factory, cut, flip):
    """Weights cut at any length or with any header byte changed: a ModelFolderError, or a model with finite weights."""
    import shutil

    folder = Path(shutil.copytree(saved, tmp_path_factory.mktemp("damaged") / "model"))
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    (header_length,) = struct.unpack("<Q", data[:8])
    position = 8 + cut % header_length
    data[position] = flip
    path.write_bytes(bytes(data[: len(data) - cut]) if cut % 2 else bytes(data))
    try:
        model = load_model_folder(folder)
    except ModelFolderError as error:
        assert str(error).startswith(f"Model folder {folder}: ") and "\n" not in str(error)
    else:
        assert all(torch.isfinite(p).all() for p in model.state_dict().values() if p.is_floating_point())


@pytest.mark.reliability
def test_serve_on_a_busy_port_is_one_line_before_the_model_loads(saved, capsys):
    """`serve` on a port already in use: one line naming host, port and the fix, before any model is loaded."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run(capsys, "serve", "--model", saved, "--port", port)
    assert code == 2 and err.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use; choose another --port" in err


@pytest.mark.reliability
def test_export_onto_an_existing_export_is_one_line_before_the_model_loads(saved, tmp_path, capsys):
    """`export` onto a folder that holds an export, without --force: one line, nothing overwritten."""
    target = tmp_path / "ex" / "ctranslate2"
    target.mkdir(parents=True)
    (target / "model.bin").write_text("the user's")
    code, _, err = run(
        capsys, "export", "--model", saved, "--src-lang", "en", "--tgt-lang", "de", "--output-dir", tmp_path / "ex"
    )
    assert code == 2 and err.count("\n") == 1 and "is not empty; pass force=True (--force)" in err
    assert (target / "model.bin").read_text() == "the user's"


OUTPUT_DIR_COMMANDS = {
    "evaluate": lambda model, test, out: ["evaluate", model, "--test", test, "--output-dir", out],
    "train-tokenizer": lambda model, test, out: ["train-tokenizer", "--train", test, "--output-dir", out],
    "add-language": lambda model, test, out: ["add-language", "--model", model, "--language", "ru", "--texts", test,
                                              "--output-dir", out],
    "export": lambda model, test, out: ["export", "--model", model, "--src-lang", "en", "--tgt-lang", "de",
                                        "--output-dir", out],
}  # fmt: skip


@pytest.mark.reliability
@pytest.mark.parametrize("command", list(OUTPUT_DIR_COMMANDS))
def test_an_output_folder_that_holds_the_users_files_is_one_line_before_any_work(command, copy, capsys):
    """--output-dir onto a file, into the model folder the command reads, or onto a folder with files in it
    (without --force): one line before any work, nothing overwritten (train-tokenizer replaced a model's
    vocabulary; evaluate decoded everything, then failed on a file with errno 17)."""
    test = copy.parent / "test.jsonl"
    test.write_text(json.dumps({"src_lang": "en", "tgt_lang": "de", "src": "In the beginning.", "tgt": "Am Anfang."}))
    before = {path.name: path.read_bytes() for path in copy.iterdir()}
    argv = OUTPUT_DIR_COMMANDS[command]
    file_message = "is a file; give a folder" if command != "export" else "lies under"  # export names its subfolder
    cases = [(copy / "config.json", file_message),
             (copy / "config.json" / "sub", f"lies under {copy / 'config.json'}, a file; give a folder")]  # fmt: skip
    if command in ("evaluate", "add-language"):  # they read the model folder: not even --force writes there
        cases += [(copy, f"is the folder {copy}, which this command reads"),
                  (copy / "eval", f"is inside {copy}, which this command reads")]  # fmt: skip
    if command != "export":  # export refuses its ctranslate2/ and transformers/ subfolders (the test above)
        cases += [(copy.parent, "is not empty; pass --force to overwrite it, or give a new folder")]
    for out, message in cases:
        code, _, err = run(capsys, *argv(copy, test, out), *(["--force"] if "reads" in message else []))
        assert code == 2 and err.count("\n") == 1 and message in err, (out, err)
        assert "Loading weights" not in err and "translating" not in err  # refused before the work
    assert {path.name: path.read_bytes() for path in copy.iterdir()} == before


def test_a_bug_shows_its_traceback_and_asks_for_a_report(monkeypatch, capsys):
    from hf_langspec.cli import sharing_commands

    def broken(args):
        raise KeyError("an internal mistake")

    monkeypatch.setattr(sharing_commands, "cmd_card", broken)  # the handler is looked up when the command runs
    code, _, err = run(capsys, "card", "x")
    assert code == 1 and "Traceback" in err and "KeyError: 'an internal mistake'" in err
    assert "this is a bug, not a bad input; please report it" in err


@pytest.mark.reliability
@pytest.mark.parametrize("command", ["translate", "export-one", "export-many"])
def test_a_same_language_direction_is_refused_unless_trained(command, saved, tmp_path, capsys):
    """A direction xx->xx the model was not trained on (translate, export): one line, nothing written."""
    (tmp_path / "in.txt").write_text("In the beginning.\n")
    argv = {
        "translate": ["translate", saved, "--src-lang", "en", "--tgt-lang", "en", "--input", tmp_path / "in.txt"],
        "export-one": ["export", "--model", saved, "--src-lang", "en", "--tgt-lang", "en", "--output-dir", tmp_path / "x"],
        "export-many": ["export", "--model", saved, "--directions", "en-de,en-en", "--output-dir", tmp_path / "x"],
    }[command]  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and "Traceback" not in err
    assert "en->en: the source and target are the same language, a direction this model was not trained on" in err
    assert not (tmp_path / "x").exists()


def test_a_same_language_direction_the_model_was_trained_on_is_translated():
    from hf_langspec.data.schema import check_not_same_language

    config = LangSpecConfig(languages=["en", "de"], language_pairs=["en-en", "en-de"])
    check_not_same_language("en", "en", config)  # mCLM-style pairs name it: allowed
    with pytest.raises(ValueError, match="de->de: the source and target are the same language"):
        check_not_same_language("de", "de", config)


@pytest.mark.reliability
def test_the_pipeline_translates_a_blank_text_to_blank_and_refuses_a_foreign_tokenizer(saved):
    """The pipeline: a blank text gives '' (not a loop); a tokenizer of another vocabulary is refused."""
    from transformers import pipeline

    from hf_langspec import LangSpecTokenizer

    model = load_model_folder(saved)
    tok = LangSpecTokenizer.from_pretrained(saved)
    translate = pipeline("langspec-translation", model=model, tokenizer=tok)
    options = {"max_new_tokens": 4, "num_beams": 1}
    assert translate("", src_lang="en", tgt_lang="de", **options) == [{"translation_text": ""}]
    mixed = translate(["  ", "In the beginning.", ""], src_lang="en", tgt_lang="de", **options)
    assert mixed[0] == mixed[2] == [{"translation_text": ""}]
    assert mixed[1] == translate("In the beginning.", src_lang="en", tgt_lang="de", **options)
    with pytest.raises(ValueError, match="en->en: the source and target are the same language"):
        translate("In the beginning.", src_lang="en", tgt_lang="en", **options)
    other = train_tokenizer({"en": ["Something else entirely."] * 4, "de": ["Etwas anderes."] * 4}, vocab_size=40,
                            show_progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="This tokenizer does not match the model"):
        pipeline("langspec-translation", model=model, tokenizer=other)


@pytest.mark.reliability
@pytest.mark.parametrize("case", ["truncated", "another model", "more layers"])
@pytest.mark.parametrize("key", ["init_from", "init_encoder_from"])
def test_a_damaged_model_to_start_from_is_one_line_before_the_run_starts(case, key, copy, capsys):
    """`hf-langspec train` from a saved model (model.init_from, or its encoder): the folder's fault in one line,
    before the corpus or the output folder is made."""
    damage, message = CASES[case]
    damage(copy)
    output = copy.parent / "run"
    rows = "".join(json.dumps({"src_lang": a, "tgt_lang": b, "src": TEXTS[a][0], "tgt": TEXTS[b][0]}) + "\n"
                   for a, b in (("en", "de"), ("de", "en")))  # fmt: skip
    (copy.parent / "train.jsonl").write_text(rows)
    config = {"output_dir": str(output), "data": {"train_files": [str(copy.parent / "train.jsonl")],
                                                  "test_files": {"supervised": str(copy.parent / "train.jsonl")}},
              "model": {key: str(copy)}, "tokenizer": {"path": str(copy)}, "training": {"max_steps": 2}}  # fmt: skip
    (copy.parent / "run.yaml").write_text(json.dumps(config))
    argv = ["train", "--config", copy.parent / "run.yaml"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", err
    last = err.rstrip("\n").split("\n")[-1].split("\r")[-1]  # after the weights' progress bar, if loaded
    assert "Traceback" not in err and err.count("error:") == 1
    assert last.startswith(f"hf-langspec train: error: Model folder {copy}: ") and re.search(message, last), err
    assert not output.exists()


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"missing\.json does not exist or is not a file"),
        ("{not json", r"results\.json is not a results file: not valid JSON"),
        ("[1, 2]", r"results\.json is not a results file: it has no 'directions' entry"),
        ('{"directions": 3}', r"results\.json is not a results file: it has no 'directions' entry"),
    ],
)
@pytest.mark.parametrize("command", ["card", "evaluate"])
def test_a_bad_results_file_is_one_line_naming_it(command, content, message, copy, capsys):
    """`card --results` and `evaluate --reference` read a results.json: a missing, unparsable or foreign one is
    one line naming the file and what to give instead."""
    results = copy.parent / ("missing.json" if content is None else "results.json")
    if content is not None:
        results.write_text(content)
    (copy.parent / "test.jsonl").write_text(
        json.dumps({"src_lang": "en", "tgt_lang": "de", "src": "In the beginning.", "tgt": "Am Anfang."}) + "\n"
    )
    argv = {
        "card": ["card", copy, "--results", results],
        "evaluate": ["evaluate", copy, "--test", copy.parent / "test.jsonl", "--output-dir", copy.parent / "ev",
                     "--reference", results],
    }[command]  # fmt: skip
    code, out, err = run(capsys, *argv)
    last = err.rstrip("\n").split("\n")[-1].split("\r")[-1]
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert last.startswith(f"hf-langspec {command}: error: {results} ") and re.search(message, last), err
    assert last.endswith("give the results.json that `hf-langspec evaluate` or `train` wrote.")
    assert not (copy.parent / "ev").exists() and not (copy / "README.md").exists()  # refused before any work


def _output_commands(folder: Path) -> dict[str, list]:
    """Each command that writes one file, with that file as the last argument."""
    (folder.parent / "in.txt").write_text("In the beginning.\n")
    (folder.parent / "rows.jsonl").write_text(
        json.dumps({"src_lang": "en", "tgt_lang": "de", "src": "In the beginning.", "tgt": "Am Anfang."}) + "\n"
    )
    return {
        "translate": [*translate_args(folder), "--output"],
        "data local": ["data", "local", folder.parent / "rows.jsonl", "--output"],
        "typology": ["typology", "--model", folder, "--output"],
    }


@pytest.mark.reliability
@pytest.mark.parametrize("command", ["translate", "data local", "typology"])
def test_an_existing_output_file_is_replaced_only_with_force_and_never_inside_the_model(command, copy, capsys):
    """An output file that exists is refused (one line, before the model loads) unless --force; one inside the model
    folder the command reads, or its input, is refused even with --force, and nothing there changes."""
    argv = _output_commands(copy)[command]
    existing = copy.parent / ("mine.jsonl" if command == "data local" else "mine.txt")  # a corpus is .jsonl
    existing.write_text("the user's own file\n")
    code, out, err = run(capsys, *argv, existing)
    assert code == 2 and out == "" and "Loading weights" not in err
    prog = command.split()[0]  # `data local` reports as `hf-langspec data`
    assert (
        err
        == f"hf-langspec {prog}: error: --output {existing} exists; pass --force to replace it, or give another file.\n"
    )
    assert existing.read_text() == "the user's own file\n"
    assert run(capsys, *argv, existing, "--force")[0] == 0 and existing.read_text() != "the user's own file\n"
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    kept = {"translate": [copy / "config.json", copy / "new.txt", copy.parent / "in.txt"],
            "typology": [copy / "config.json", copy / "new.txt"], "data local": [copy.parent / "rows.jsonl"]}  # fmt: skip
    inputs = {p: p.read_bytes() for p in kept[command] if p.parent != copy}
    for target in kept[command]:  # what the command reads: the model folder, the input file
        code, _, err = run(capsys, *argv, target, "--force")
        assert code == 2 and err.startswith(f"hf-langspec {prog}: error: --output {target} is "), err
        assert "write it to another file" in err
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before
    assert {p: p.read_bytes() for p in inputs} == inputs


@pytest.mark.reliability
def test_card_replaces_its_own_card_but_not_the_users_readme(copy, capsys):
    readme = copy / "README.md"
    readme.write_text("# My notes on this model\n")
    code, _, err = run(capsys, "card", copy)
    assert code == 2 and readme.read_text() == "# My notes on this model\n"
    assert (
        err
        == f"hf-langspec card: error: {readme} exists and is not a card hf_langspec wrote; pass --force (force=True) to replace it, or move it.\n"
    )
    assert run(capsys, "card", copy, "--force")[0] == 0 and "hf_langspec" in readme.read_text()
    assert run(capsys, "card", copy, "--model-name", "renamed")[0] == 0  # its own card: replaced without --force
    assert "renamed" in readme.read_text()


@pytest.mark.reliability
@pytest.mark.parametrize(
    "argv, message",
    [
        (["card", "--repo-id", "my org/model"], "repo id 'my org/model' is not one the Hub accepts"),
        (["card", "--repo-id", "a/b/c"], "repo id 'a/b/c' is not one the Hub accepts"),
        (["card", "--model-name", ""], "the model name is empty; give one (--model-name NAME)"),
        (["push", "--repo-id", ""], "repo id '' is not one the Hub accepts"),
        (["push", "--repo-id", "user/model-"], "repo id 'user/model-' is not one the Hub accepts"),
    ],
    ids=["card-space", "card-three-parts", "card-empty-name", "push-empty", "push-dashes"],
)
def test_a_repo_id_or_model_name_the_hub_refuses_is_refused_first(argv, message, copy, capsys, monkeypatch):
    """The card's usage code and the upload need a repo id the Hub accepts: refused in one line, before the folder
    is read or the network is tried, and nothing in the folder changes."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", lambda **_: pytest.fail("the Hub was tried"))
    before = {path.name: path.read_bytes() for path in copy.iterdir()}
    code, _, err = run(capsys, argv[0], copy, *argv[1:])
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert {path.name: path.read_bytes() for path in copy.iterdir()} == before


@pytest.mark.parametrize("name", [variant.name for variant in VARIANTS])
def test_every_variant_as_saved_passes_the_folder_check(name, tmp_path):
    """The value check of config.json (types and ranges of each config class) accepts what every variant saves."""
    from hf_langspec.model_folder import folder_problem

    config_class, model_class = variant(name).config_class, variant(name).translation_class
    tok = train_tokenizer(TEXTS, vocab_size=60, show_progress=False)
    needs = {"hlt": {"high_resource_languages": ["de"]}, "adapter": {"language_pairs": ["en-de", "de-en"]},
             "lsl": {"lsl_encoder_source_layers": [0]}}  # fmt: skip
    config = config_class(**tok.model_config_kwargs(), **needs.get(name, {}),
                          d_model=16, encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)  # fmt: skip
    model_class(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    assert folder_problem(tmp_path, tokenizer=True) is None
    assert type(load_model_folder(tmp_path)) is model_class
