"""One check per kind of input, the same at every door (issue 46): each bad input below goes through every entry
point that takes its kind, and each must give the same one-line refusal before any expensive work.

Kinds: config files and values (a key written twice), data files of the wrong layout (a multi-way file where
pairs are read and the reverse), files the package wrote that were damaged, and failures of the machine (a
file-size limit: a full disk gives the same errno path).
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_exit_code, tiny_suite

from hf_langspec.environment import environment_problem
from hf_langspec.training.config import apply_overrides, load_config
from hf_langspec.training.model_check import run_languages
from hf_langspec_cli.config_file import ConfigError

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.reliability

PAIRS = [
    {"src_lang": "en", "tgt_lang": "de", "src": "alpha beta", "tgt": "beta alpha"},
    {"src_lang": "de", "tgt_lang": "en", "src": "beta alpha", "tgt": "alpha beta"},
]
MULTIWAY = [{"texts": {"en": "alpha beta", "de": "beta alpha"}}, {"en": "gamma", "de": "ammag"}]


def write_lines(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def one_line_error(capsys) -> str:
    """The command's error line (progress bars aside): exactly one, and no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("hf-langspec")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ a key written twice
BASE_CONFIG = (ROOT / "examples/configs/bible_baseline_cpu.yaml").read_text()
DUPLICATES = {
    "a second training section": BASE_CONFIG + "training:\n  max_steps: 5\n",
    "a key twice inside a section": "model:\n  class: baseline\n  d_model: 64\n  d_model: 128\n",
    "a key twice in a flow mapping": "model: {class: baseline, class: cll}\n",
}


@pytest.mark.parametrize("text", DUPLICATES.values(), ids=DUPLICATES.keys())
def test_a_key_written_twice_is_refused_by_every_config_reader(tmp_path, capsys, text):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(
        ConfigError, match=r"dup.yaml: not valid YAML at line \d+.*appears twice \(lines \d+ and \d+\)"
    ):
        load_config(path)
    assert cli_exit_code(["train", "--config", str(path)]) == 2
    assert "appears twice" in one_line_error(capsys)


def test_a_key_written_twice_in_json_a_set_value_or_a_suite_is_refused_alike(tmp_path, capsys):
    as_json = tmp_path / "dup.json"
    as_json.write_text('{"model": {"class": "baseline"}, "model": {"class": "cll"}}')
    with pytest.raises(ConfigError, match=r"dup.json: key 'model' appears twice"):
        load_config(as_json)
    config = load_config(ROOT / "examples/configs/bible_baseline_cpu.yaml")
    with pytest.raises(ConfigError, match=r"Override 'training=\{max_steps: 5, max_steps: 6\}'.*appears twice"):
        apply_overrides(config, ["training={max_steps: 5, max_steps: 6}"])
    suite = tiny_suite(tmp_path)
    suite.write_text(suite.read_text() + "seeds: [7, 8]\n")  # the file already has its seeds
    assert cli_exit_code(["compare", "--suite", str(suite)]) == 2
    assert "key 'seeds' appears twice" in one_line_error(capsys)
    assert not (tmp_path / "out").exists()


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path):
    from hf_langspec_cli.config_file import read_config_text

    text = "shared: &s {max_steps: 5, seed: 1}\ntraining:\n  <<: *s\n  max_steps: 9\n"
    assert read_config_text(text, "x.yaml")["training"] == {"max_steps": 9, "seed": 1}


# ------------------------------------------------------------------ data files of the wrong layout
def test_a_multiway_file_where_pairs_are_read_gets_one_refusal_at_every_command(tmp_path, capsys):
    multiway = write_lines(tmp_path / "records.jsonl", MULTIWAY)
    out = tmp_path / "out"
    config = tmp_path / "train.yaml"
    config.write_text(
        f"data: {{train_files: [{multiway}], valid_files: [{multiway}], test_files: {{supervised: {multiway}}}}}\n"
        f"output_dir: {out / 'run'}\n"
        "model: {class: baseline}\ntraining: {max_steps: 1}\n"
    )
    commands = {
        "data local": ["data", "local", str(multiway), "--output", str(out / "x.jsonl")],
        "train": ["train", "--config", str(config)],
        "evaluate": ["evaluate", "no-model", "--test", str(multiway), "--output-dir", str(out / "eval")],
        "clm-atp": ["clm-atp", "--model", "no-model", "--data", str(multiway)],
        "add-language": [
            "add-language",
            "--model",
            "no-model",
            "--language",
            "it",
            "--texts",
            str(multiway),
            "--old-texts",
            str(multiway),
            "--output-dir",
            str(out / "new"),
        ],
    }
    for name, command in commands.items():
        assert cli_exit_code(command) == 2, name
        message = one_line_error(capsys)  # add-language: --texts is plain text, --old-texts is refused
        assert "records.jsonl:1: a multi-way record" in message, (name, message)
    assert not (out / "x.jsonl").exists()


def test_pairs_where_multiway_records_are_read_get_one_refusal(tmp_path, capsys):
    pairs = write_lines(tmp_path / "pairs.multiway.jsonl", PAIRS)
    assert cli_exit_code(["train-tokenizer", "--train", str(pairs), "--output-dir", str(tmp_path / "tok")]) == 2
    assert "pairs.multiway.jsonl:1: a translation pair" in one_line_error(capsys)
    from hf_langspec.compare.shared import multiway_rows

    with pytest.raises(ValueError, match=r"pairs.multiway.jsonl:1: a translation pair"):
        multiway_rows(pairs, ["en", "de"])
    bad_code = write_lines(tmp_path / "codes.multiway.jsonl", [{"texts": {"EN": "alpha", "de": "beta"}}])
    with pytest.raises(ValueError, match=r"codes.multiway.jsonl:1: 'EN' is not a language code"):
        multiway_rows(bad_code, ["en", "de"])


# ------------------------------------------------------------------ files the package wrote, damaged
@pytest.mark.parametrize(
    ("content", "gzipped", "reason"),
    [
        (b'{"sets": {"supervised": ', False, "not valid JSON"),
        (b"\xff\xfe", False, "not UTF-8 text"),
        (b"\x1f\x8b\x08\x00garbage", True, "not a complete gzip file"),
        (b'{"a": 1}', True, "not a complete gzip file"),  # written plain where gzip is expected
    ],
)
def test_a_damaged_file_the_package_wrote_is_one_line_naming_it_and_the_fix(tmp_path, content, gzipped, reason):
    from hf_langspec.files import DamagedFileError, read_json

    path = tmp_path / "seed1.json"
    path.write_bytes(content)
    with pytest.raises(DamagedFileError, match=rf"seed1.json is damaged: {reason}.*; delete it and rerun") as caught:
        read_json(path, gzipped=gzipped)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------ the machine: a file-size limit
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing the process
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from hf_langspec_cli import main
sys.exit(main(sys.argv[2:]))
"""


def run_limited(limit: int, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_LANGSPEC_CACHE": str(cwd / "cache")}
    return subprocess.run([sys.executable, "-c", LIMITED, str(limit), *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)  # fmt: skip


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_and_leaves_nothing_half_written(tmp_path):
    rows = [
        {"src_lang": "en", "tgt_lang": "de", "src": f"alpha {i} " * 20, "tgt": f"beta {i} " * 20} for i in range(400)
    ]
    source = write_lines(tmp_path / "big.jsonl", rows)
    cases = {
        "data local": ["data", "local", str(source), "--output", str(tmp_path / "out" / "copy.jsonl")],
        "train-tokenizer": [
            "train-tokenizer",
            "--train",
            str(source),
            "--output-dir",
            str(tmp_path / "out" / "tok"),
            "--vocab-size",
            "200",
        ],
    }
    for name, args in cases.items():
        result = run_limited(60_000, args, tmp_path)
        assert result.returncode == 2, (name, result.stderr[-2000:])
        lines = [line for line in result.stderr.replace("\r", "\n").splitlines() if line.startswith("hf-langspec")]
        assert len(lines) == 1 and "Traceback" not in result.stderr, (name, result.stderr)
        assert "larger than this system allows" in lines[0] and "ulimit -f" in lines[0], lines[0]
        print(lines[0])
        assert not list((tmp_path / "out").rglob("*.tmp")), name
    assert not (tmp_path / "out" / "copy.jsonl").exists()
    # a checkpoint larger than the limit (the corpus and its tokenized set fit): the checkpoint is named, and the
    # half-written one removed
    tiny = ROOT / "examples/suites/tiny"
    config = tmp_path / "run.yaml"
    config.write_text(
        f"output_dir: {tmp_path / 'run'}\n"
        f"data: {{train_files: [{tiny / 'train.jsonl'}], valid_files: [{tiny / 'valid.jsonl'}], "
        f"test_files: {{supervised: {tiny / 'test.jsonl'}}}, max_length: 16}}\n"
        "tokenizer: {vocab_size: 100}\n"
        "model: {d_model: 64, encoder_layers: 1, decoder_layers: 1, encoder_attention_heads: 2, "
        "decoder_attention_heads: 2, encoder_ffn_dim: 256, decoder_ffn_dim: 256}\n"
        "training: {max_steps: 2, save_steps: 1, save_strategy: steps, per_device_train_batch_size: 4, "
        "use_cpu: true, report_to: none, disable_tqdm: true}\n"
    )
    result = run_limited(400_000, ["train", "--config", str(config)], tmp_path)
    lines = [line for line in result.stderr.replace("\r", "\n").splitlines() if line.startswith("hf-langspec")]
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "checkpoint-1" in lines[0] and "larger than this system allows" in lines[0], lines[0]
    assert not (tmp_path / "run" / "checkpoints" / "checkpoint-1").exists()


def test_environment_failures_are_told_apart_from_bugs_however_a_library_words_them():
    cases = [
        (OSError(errno.ENOSPC, "No space left on device", "/data/run/model.safetensors"),
         "could not write (/data/run/model.safetensors): the disk is full"),
        (OSError(errno.EDQUOT, "Disk quota exceeded", "/x"), "the disk quota is used up"),
        (OSError(errno.EROFS, "Read-only file system", "/ro/x"), "/ro/x): the file system is read-only"),
        (PermissionError(errno.EACCES, "Permission denied", "/root/x"), "/root/x: permission denied"),
        (RuntimeError("[enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing file data/3: "
                      "file write failed"), "a checkpoint write failed"),
        (RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left "
                      "on device\" })"), "the disk is full"),
        (ImportError("libtorch_cpu.so: failed to map segment from shared object"), "ran out of memory"),
        (MemoryError(), "ran out of memory; lower the batch size"),
    ]  # fmt: skip
    for err, words in cases:
        assert words in (environment_problem(err) or ""), (err, environment_problem(err))
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.EFBIG, "File too large", "/x/y")
    assert "larger than this system allows" in environment_problem(wrapped)
    for bug in (ValueError("bad value"), KeyError("k"), OSError(errno.ENOENT, "missing", "/x"), TypeError("t")):
        assert environment_problem(bug) is None


# ------------------------------------------------------------------ settings meaningless together or with the data
MEANINGLESS = {
    "a learning rate of 0": ("training.learning_rate=0", r"learning_rate=0 never moves the weights"),
    "a CLL field on the baseline": ("model.central_language=en", r"central_language is read by class 'cll' only"),
    "an HLT field on CLL": ("model.high_resource_languages=[en]", r"high_resource_languages is read by class 'hlt'"),
}


@pytest.mark.parametrize(("setting", "message"), MEANINGLESS.values(), ids=MEANINGLESS.keys())
def test_a_meaningless_setting_is_refused_in_a_config_a_set_value_and_a_suite(tmp_path, capsys, setting, message):
    import yaml

    key, value = setting.split("=")
    section, field = key.split(".")
    raw = yaml.safe_load(BASE_CONFIG)
    if "high_resource" in key:
        raw["model"] |= {"class": "cll", "central_language": "en"}
    raw.setdefault(section, {})[field] = yaml.safe_load(value)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=message):
        load_config(path)
    config = load_config(ROOT / "examples/configs/bible_cll_cpu.yaml" if "high_resource" in key else
                         ROOT / "examples/configs/bible_baseline_cpu.yaml")  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        apply_overrides(config, [setting])
    suite = tiny_suite(tmp_path, systems={"baseline": {}, "other": {"set": {key: yaml.safe_load(value)}}})
    assert cli_exit_code(["compare", "--suite", str(suite)]) == 2
    assert re.search(message, one_line_error(capsys))


# ------------------------------------------------------------------ a model value its class refuses
REFUSED_MODEL_VALUES = {
    "LMS in no layer": ("bible_lms_cpu.yaml", "model.lms_every=9", r"lms_every=9 places LMS in no layer"),
    "an LSL layer the encoder lacks": (
        "bible_lsl_cpu.yaml", "model.lsl_encoder_target_layers=[5]", r"LSL encoder layers \[5\] do not exist"
    ),
    "a frozen CLL language outside the corpus": (
        "bible_cll_cpu.yaml", "model.cll_frozen_languages=[sw]", r"cll_frozen_languages \['sw'\] are not"
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "setting", "message"), REFUSED_MODEL_VALUES.values(), ids=REFUSED_MODEL_VALUES.keys()
)
def test_a_model_value_its_class_refuses_is_one_line_before_any_data_is_built(
    tmp_path, capsys, name, setting, message
):
    """The model config's own checks run as the config is read (with the corpus's languages where the config names
    them), not after the corpus is built and the tokenizer trained: nothing is written."""
    path = ROOT / "examples/configs" / name
    with pytest.raises(ConfigError, match=message):
        apply_overrides(load_config(path), [setting])
    cache, run = tmp_path / "cache", tmp_path / "run"
    args = ["train", "--config", str(path), "--set", setting, f"data.cache_dir={cache}", "--output-dir", str(run)]
    assert cli_exit_code(args) == 2
    assert re.search(message, one_line_error(capsys))
    assert not cache.exists() and not run.exists()


def test_languages_that_only_the_data_files_name_are_not_refused_before_they_are_read():
    """With `train_files`, the languages are known once the files are read: a language the [model] section names
    (a central language, a frozen one, a pair) is not refused for being outside stand-ins before that."""
    config = load_config(ROOT / "examples/configs/opus100_cll.yaml")
    apply_overrides(config, ["model.central_language=sw", "model.cll_frozen_languages=[yo]"])
    with pytest.raises(ConfigError, match=r"cll_frozen_languages \['sw'\] are not non-central"):
        apply_overrides(config, ["model.cll_frozen_languages=[sw]"])


def test_the_languages_checked_early_are_the_runs_where_the_config_decides_them():
    bible = {"data": {"bible": {"languages": ["en", "de", "fr"]}}, "model": {"central_language": "es"}}
    assert run_languages(bible) == ["en", "de", "fr"]  # es is refused: the run's model would not have it
    # a saved tokenizer's languages are the model's: es may be among them, so it is not refused before it is read
    assert run_languages({**bible, "tokenizer": {"path": "tok"}}) == ["en", "de", "fr", "es"]
    renamed = {"data": {"bible": {"languages": ["en", "de"]}, "language_codes": {"en": "eng_Latn"}}}
    assert run_languages(renamed) == ["eng_Latn", "de"]
    files = {"data": {"train_files": ["t.jsonl"]}, "model": {"language_pairs": ["en-sw", ["yo", "en"]]}}
    assert run_languages(files) == ["en", "de", "fr", "sw", "yo"]


def test_a_suite_system_identical_to_the_baseline_or_with_a_field_of_the_wrong_type_is_refused(tmp_path, capsys):
    from hf_langspec.compare.suite import load_suite

    same = tiny_suite(tmp_path, name="same.yaml", systems={"baseline": {}, "copy": {"set": {"model.dropout": 0.0}}})
    with pytest.raises(ConfigError, match=r"systems.copy\]: trains exactly the baseline's model"):
        load_suite(same)
    typed = tiny_suite(
        tmp_path, name="typed.yaml", systems={"baseline": {"label": 5}, "fcll": {"set": {"model.class": "cll"}}}
    )
    with pytest.raises(ConfigError, match=r"systems.baseline\]: label must be text, got int 5"):
        load_suite(typed)
    import yaml

    named = tiny_suite(tmp_path, "named.yaml")
    named.write_text(yaml.safe_dump(yaml.safe_load(named.read_text()) | {"name": 123}))
    assert cli_exit_code(["compare", "--suite", str(named)]) == 2
    assert "name must be text, got int 123" in one_line_error(capsys)


def test_held_out_sets_and_settings_are_checked_against_the_data_before_training(tmp_path):
    from types import SimpleNamespace

    from hf_langspec.data.corpus_store import read_corpus
    from hf_langspec.data.processing import FilterReport
    from hf_langspec.training.steps.context import RunData
    from hf_langspec.training.steps.data import setting_warnings

    rows = [{"src_lang": "en", "tgt_lang": "de", "src": f"sentence {i}", "tgt": f"satz {i}"} for i in range(20)]
    corpus = read_corpus([write_lines(tmp_path / "train.jsonl", rows)], cache_dir=tmp_path, show_progress=False)
    held_out = [{"src_lang": "en", "tgt_lang": "de", "src": f"unseen {i}", "tgt": f"neu {i}"} for i in range(4)]
    args = SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=1, world_size=1)
    report = FilterReport(kept=20, removed={"longer than 100": 0})
    sizes = {"en-de": 20}

    def warnings(tests, valid=(), report=report, args=args):
        data = RunData(corpus=corpus, train=corpus, valid=list(valid), tests=tests, language_codes={})
        return setting_warnings(data, sizes, report, args)

    assert warnings({"supervised": held_out}) == []
    with pytest.raises(ConfigError, match=r"test set 'supervised': all 20 of its source sentences occur in the "):
        warnings({"supervised": rows})
    [partial] = warnings({"supervised": held_out + rows[:2]})
    assert "2 of its 6 source sentences occur in the training data" in partial
    [valid] = warnings({"supervised": held_out}, valid=rows[:1] + held_out)
    assert valid.startswith("the validation set: 1 of its 5 source sentences occur")
    untrained = [{"src_lang": "de", "tgt_lang": "fr", "src": "neu", "tgt": "nouveau"}]
    [zero] = warnings({"supervised": held_out + untrained})
    assert "directions the training data lacks (de-fr)" in zero and "named zero-shot" in zero
    assert warnings({"zero-shot": untrained}) == []  # named for what it is
    long = FilterReport(kept=20, removed={"longer than 8": 30})
    assert "data.max_length removed 30 of 50 training examples (60%)" in warnings({"s": held_out}, report=long)[0]
    big = SimpleNamespace(per_device_train_batch_size=16, gradient_accumulation_steps=2, world_size=1)
    assert "a batch of 32 examples is larger than the 20 training examples" in warnings({"s": held_out}, args=big)[0]
    renamed = RunData(corpus=corpus, train=corpus, valid=[], tests={}, language_codes={"en": "en", "fr": "fra_Latn"})
    [unused] = setting_warnings(renamed, sizes, report, args)
    assert "data.language_codes renames ['fr'], which the data does not have (it has ['de', 'en'])" in unused


def test_language_codes_rename_the_corpus_as_it_is_read_and_key_its_cache(tmp_path):
    from hf_langspec.data.corpus_store import read_corpus

    rows = [{"src_lang": "en", "tgt_lang": "de", "src": f"s {i}", "tgt": f"t {i}"} for i in range(5)]
    path = write_lines(tmp_path / "train.jsonl", rows)
    plain = read_corpus([path], cache_dir=tmp_path, show_progress=False)
    renamed = read_corpus([path], cache_dir=tmp_path, show_progress=False, language_codes={"en": "eng_Latn"})
    assert set(plain["src_lang"]) == {"en"} and set(renamed["src_lang"]) == {"eng_Latn"}
    assert renamed["tgt_lang"] == plain["tgt_lang"] and renamed["src"] == plain["src"]
    assert read_corpus([path], cache_dir=tmp_path, show_progress=False)["src_lang"] == plain["src_lang"]


def test_an_eval_sets_languages_the_model_lacks_are_said_not_dropped(tmp_path, capsys):
    from hf_langspec.compare.shared import multiway_rows

    records = write_lines(tmp_path / "x.multiway.jsonl", [{"texts": {"en": "a", "de": "b", "es": "c"}}])
    rows = multiway_rows(records, ["en", "de"])
    assert {(r["src_lang"], r["tgt_lang"]) for r in rows} == {("en", "de"), ("de", "en")}
    assert "languages ['es'] are not among the model's ['en', 'de']; they are left out" in capsys.readouterr().out


# ------------------------------------------------------------------ identity by the file, not its spelling
def test_a_run_is_the_same_run_however_its_files_are_spelled(tmp_path, monkeypatch):
    from hf_langspec.training.run_guard import check_resumed_config, record_config

    data = write_lines(tmp_path / "train.jsonl", PAIRS)
    (tmp_path / "link.jsonl").symlink_to(data)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    config = {"output_dir": str(run), "data": {"train_files": [str(data)], "test_files": {"supervised": str(data)}},
              "training": {"max_steps": 5}}  # fmt: skip
    record_config(run, config)
    monkeypatch.chdir(tmp_path)
    for spelling in ("train.jsonl", "./train.jsonl", "link.jsonl", f"{tmp_path}/../{tmp_path.name}/train.jsonl"):
        again = {**config, "output_dir": "run",
                 "data": {"train_files": [spelling], "test_files": {"supervised": spelling}}}  # fmt: skip
        check_resumed_config(run, again, resume=True)  # the same files: resumed, not refused
    other = write_lines(tmp_path / "other.jsonl", PAIRS[:1])
    with pytest.raises(ConfigError, match=r"another config \(data.train_files"):
        check_resumed_config(run, {**config, "data": {**config["data"], "train_files": [str(other)]}}, resume=True)


def test_a_suites_runs_are_matched_by_what_they_train_not_where_their_files_are():
    from hf_langspec.compare.shared import run_identity

    here = {"output_dir": "runs/x/runs/baseline/seed1", "data": {"train_files": ["runs/x/shared/train.jsonl"],
            "max_length": 100}, "tokenizer": {"path": "runs/x/shared/tokenizer"}, "model": {"d_model": 32}}  # fmt: skip
    moved = {"output_dir": "/big/disk/x/runs/baseline/seed1", "data": {"train_files": ["/big/disk/x/shared/train.jsonl"],
             "max_length": 100}, "tokenizer": {"path": "/big/disk/x/shared/tokenizer"}, "model": {"d_model": 32}}  # fmt: skip
    assert run_identity(here) == run_identity(moved)
    assert run_identity(here) != run_identity({**moved, "model": {"d_model": 64}})
    assert run_identity(here) != run_identity({**moved, "data": {**moved["data"], "max_length": 50}})


# ------------------------------------------------------------------ one refusal of a direction on every surface
@pytest.mark.parametrize(
    ("src", "tgt", "message"),
    [
        ("en", "en", r"en->en: the source and target are the same language"),
        ("en", "xx", r"Unknown language code 'xx'"),
    ],
)
def test_a_direction_is_refused_alike_by_every_surface_that_takes_one(tmp_path, src, tgt, message):
    from test_ct2_export import trained_like
    from test_specialize import M2M, tiny_tokenizer
    from transformers import pipeline

    from hf_langspec.evaluation.translate import translate
    from hf_langspec.export.backends import ModelBackend
    from hf_langspec.export.ct2 import export_direction, export_directions
    from hf_langspec.export.specialize import fold, specialize

    tokenizer = tiny_tokenizer()
    model = trained_like("laa+lee (tied)", M2M, tokenizer)
    surfaces = {
        "translate": lambda: translate(model, tokenizer, ["alpha"], src, tgt, show_progress=False),
        "pipeline": lambda: pipeline("langspec-translation", model=model, tokenizer=tokenizer)(
            "alpha", src_lang=src, tgt_lang=tgt
        ),
        "fold": lambda: fold(model, src, tgt),
        "specialize": lambda: specialize(model, src, tgt, tokenizer),
        "export": lambda: export_direction(model, tokenizer, src, tgt, tmp_path / "one"),
        "export --directions": lambda: export_directions(model, tokenizer, [(src, tgt)], tmp_path / "many"),
        "serve --model --directions": lambda: ModelBackend(model, tokenizer, [f"{src}-{tgt}"]),
    }
    for name, call in surfaces.items():
        with pytest.raises(ValueError, match=message):
            call()
        assert not (tmp_path / "one").exists() and not (tmp_path / "many").exists(), name


# ------------------------------------------------------------------ a corpus's content, the same at every door
def test_data_local_applies_trains_content_checks_to_what_it_writes(tmp_path, capsys):
    pytest.importorskip("lingua")
    english = ["The Lord is my shepherd; I shall not want.", "In the beginning was the Word.",
               "Blessed are the meek, for they shall inherit the earth.", "Love your neighbour as yourself."]  # fmt: skip
    german = ["Der Herr ist mein Hirte, mir wird nichts mangeln.", "Im Anfang war das Wort.",
              "Selig sind die Sanftmütigen, denn sie werden das Land ererben.", "Liebe deinen Nächsten wie dich selbst."]  # fmt: skip
    swapped = [{"src_lang": "en", "tgt_lang": "de", "src": g, "tgt": e} for e, g in zip(english, german, strict=True)]
    source = write_lines(tmp_path / "swapped.jsonl", swapped)
    out = tmp_path / "out.jsonl"
    assert cli_exit_code(["data", "local", str(source), "--output", str(out)]) == 0
    said = capsys.readouterr().out
    assert "wrote 4 examples" in said and said.count("are src/tgt or the language fields swapped?") == 2
    stray = [{"src_lang": "en", "tgt_lang": "de", "src": f"line {i}", "tgt": f"zeile {i}"} for i in range(1000)]
    stray[700] = {**stray[700], "tgt_lang": "xx"}
    source = write_lines(tmp_path / "stray.jsonl", stray)
    assert cli_exit_code(["data", "local", str(source), "--output", str(tmp_path / "stray-out.jsonl")]) == 2
    assert "'xx' (1 example(s), the first is example 701)" in one_line_error(capsys)
    assert not (tmp_path / "stray-out.jsonl").exists()


def test_a_number_in_exponent_notation_is_a_number_in_every_config_reader(tmp_path):
    """PyYAML reads `5e-4` as a string (YAML 1.1 wants `5.0e-4`); the configs, suites and `--set` read it as the
    learning rate every paper writes."""
    from hf_langspec.compare.suite import load_suite

    config = load_config(ROOT / "examples/configs/bible_baseline_cpu.yaml")
    assert apply_overrides(config, ["training.learning_rate=5e-4"])["training"]["learning_rate"] == 5e-4
    path = tmp_path / "c.yaml"
    path.write_text(BASE_CONFIG.replace("learning_rate: 0.002", "learning_rate: 2e-3"))
    assert load_config(path)["training"]["learning_rate"] == 2e-3
    suite = tiny_suite(tmp_path, systems={"baseline": {}, "slow": {"set": {"training.learning_rate": "1e-3"}}},
                       report={})  # fmt: skip
    suite.write_text(suite.read_text().replace("'1e-3'", "1e-3"))
    assert load_suite(suite).system_config("slow")["training"]["learning_rate"] == 1e-3
