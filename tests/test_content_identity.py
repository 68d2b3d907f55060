"""Identity by content (issue 59, item 1): a corpus cache entry, and the tokenizer trained on it, belong to what the
files hold, whatever their paths, sizes and modification times; a hash is read again only when a file changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hf_langspec.data.cache import HASHES_FILE, content_fingerprint
from hf_langspec.data.corpus_store import read_corpus

ROWS = [{"src_lang": "en", "tgt_lang": "de", "src": f"the word {i}", "tgt": f"das wort {i}"} for i in range(6)]


def write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_file_changed_in_place_with_its_size_and_time_kept_is_read_again(tmp_path):
    """The old key (path, size, modification time) gave the stale cached corpus back for this edit."""
    data = tmp_path / "train.jsonl"
    write(data, ROWS)
    first = read_corpus([data], tmp_path / "cache", show_progress=False)
    stat = data.stat()
    edited = data.read_text().replace("the word 3", "the bird 3")  # same length
    data.write_text(edited)
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as `cp -p` or a restored backup would leave it
    assert data.stat().st_size == stat.st_size and data.stat().st_mtime_ns == stat.st_mtime_ns
    second = read_corpus([data], tmp_path / "cache", show_progress=False)
    assert "the bird 3" in second["src"] and "the bird 3" not in first["src"]


def test_the_same_content_at_another_path_is_the_same_corpus_and_is_hashed_once(tmp_path, monkeypatch):
    a, b = tmp_path / "a.jsonl", tmp_path / "b" / "train.jsonl"
    b.parent.mkdir()
    write(a, ROWS)
    write(b, ROWS)
    assert content_fingerprint([a], tmp_path) == content_fingerprint([b], tmp_path)
    first = read_corpus([a], tmp_path, show_progress=False)
    assert read_corpus([b], tmp_path, show_progress=False).cache_files == first.cache_files
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda f, *a, **k: opened.append(str(f)) or real_open(f, *a, **k))
    content_fingerprint([a, b], tmp_path)  # remembered: no file is read again
    assert not [f for f in opened if f.endswith(".jsonl")]
    write(a, ROWS[:3])  # changed: read again, and only it
    content_fingerprint([a, b], tmp_path)
    assert [f for f in opened if f.endswith(".jsonl")] == [str(a.resolve())]


def test_a_damaged_hash_memo_is_only_a_cache(tmp_path):
    data = tmp_path / "train.jsonl"
    write(data, ROWS)
    expected = content_fingerprint([data], tmp_path)
    (tmp_path / HASHES_FILE).write_text("{ not json")
    assert content_fingerprint([data], tmp_path) == expected


def test_a_second_run_on_the_same_corpus_reuses_its_tokenizer_and_a_changed_corpus_trains_anew(tmp_path, monkeypatch):
    """issue 61: a second `train` into another output folder trained the tokenizer again (3 min 18 s at 5M pairs)."""
    from test_training import tiny_run_config

    from hf_langspec import tokenization
    from hf_langspec.training.experiment import run_experiment

    config = tiny_run_config(tmp_path, training={"max_steps": 1}, evaluation={"splits": []})
    config["data"]["cache_dir"] = str(tmp_path / "cache")
    first = run_experiment(config)
    trained = (first["model_dir"] / "tokenizer.json").read_text()
    monkeypatch.setattr(tokenization, "train_tokenizer", lambda *a, **k: pytest.fail("trained the tokenizer again"))
    second = run_experiment({**config, "output_dir": str(tmp_path / "another")})
    assert (second["model_dir"] / "tokenizer.json").read_text() == trained
    monkeypatch.undo()
    with open(config["data"]["train_files"][0], "a") as handle:  # another corpus: another tokenizer
        handle.write(json.dumps({"src_lang": "en", "tgt_lang": "de", "src": "zebra quagga", "tgt": "zebra"}) + "\n")
    third = run_experiment({**config, "output_dir": str(tmp_path / "third")})
    assert (third["model_dir"] / "tokenizer.json").read_text() != trained  # its new letters are pieces now


def test_a_resumed_run_whose_training_file_now_holds_other_pairs_is_refused(tmp_path):
    """Same path, same size, same modification time, other text: the run would have continued on other data."""
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment
    from hf_langspec_cli.config_file import ConfigError

    config = tiny_run_config(tmp_path, training={"max_steps": 1}, evaluation={"splits": []})
    run_experiment(config)
    train = tmp_path / "train.jsonl"
    stat = train.stat()
    text = train.read_text()
    at = text.index('"src": "') + len('"src": "')  # one letter of the first source sentence, the length kept
    train.write_text(text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1 :])
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ConfigError, match=r"holds a run trained on other inputs: the contents of data\.train_files"):
        run_experiment({**config, "training": {**config["training"], "max_steps": 2}})
    run_experiment({**config, "output_dir": str(tmp_path / "fresh")})  # a new output_dir trains on the new file


def _edited_suite(tmp_path, edit):
    """bible6_clm_norm as committed, its results_dir the committed results, with `edit` applied to its raw YAML."""
    import yaml

    root = Path(__file__).resolve().parent.parent
    raw = yaml.safe_load((root / "examples/suites/bible6_clm_norm.yaml").read_text())
    raw["results_dir"] = str(root / raw["results_dir"])
    raw["output_dir"] = str(tmp_path / "runs")
    edit(raw)
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_report_over_runs_of_changed_settings_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """issue 59: `compare --report-only` published old runs under a suite changed since (the header stated the new
    settings over runs trained with the old ones). The committed results match their suites as they stand."""
    from hf_langspec.compare import runner
    from hf_langspec.compare.suite import load_suite
    from hf_langspec_cli.config_file import ConfigError

    runner.check_results_settings(load_suite(_edited_suite(tmp_path, lambda raw: None)))  # as committed: fine
    for edit, key in [
        (lambda raw: raw["base"]["model"].update(d_model=256), "model.d_model: 128 -> 256"),
        (
            lambda raw: raw["systems"]["sclm_post"]["set"].update({"model.clm_num_features": 16}),
            "model.clm_num_features: 8 -> 16",
        ),
    ]:
        suite = _edited_suite(tmp_path, edit)
        monkeypatch.setattr(runner, "build_report", lambda *a, **k: pytest.fail("reported"))  # the name compare calls
        with pytest.raises(ConfigError, match=rf"results were trained with other settings .*{key}"):
            runner.compare(suite, report_only=True)
