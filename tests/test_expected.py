"""A run set beside the ranges its config expects: garbage outputs are reported, with the installed versions."""

from __future__ import annotations

from importlib import metadata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_langspec.evaluation.expected import check_expected_section, compare_with_expected
from hf_langspec.training.config import validate_config
from hf_langspec.training.run_guard import KEEP_SCORES, void_expectations
from hf_langspec_cli.config_file import ConfigError

RANGES = {"xx-en": {"bleu": [11.38, 11.64]}, "en-xx": {"bleu": [5.58, 5.76], "chrf": [26.0, 27.0]}}


def results(xx_en: float, en_xx: float, chrf: float = 26.8) -> dict:
    return {"directions": {"de-en": {"bleu": xx_en}}, "groups": {"bleu": {"xx-en": xx_en, "en-xx": en_xx},
                                                                 "chrf": {"en-xx": chrf}}}  # fmt: skip


def test_garbage_decoding_is_reported_with_the_installed_versions():
    # what transformers 5.24 gave before the cache fix: xx->en 0.57, en->xx 0.28
    lines = compare_with_expected(results(0.57, 0.28), RANGES)
    assert lines[0] == "expected xx-en BLEU 11.38-11.64: got 0.57, FAR OUTSIDE"
    assert lines[1] == "expected en-xx BLEU 5.58-5.76: got 0.28, FAR OUTSIDE"
    assert lines[2] == "expected en-xx chrF 26-27: got 26.80, within"
    warning = lines[-1]
    assert warning.startswith("WARNING: xx-en BLEU 0.57 (expected 11.38-11.64); en-xx BLEU 0.28 (expected 5.58-5.76)")
    assert f"transformers {metadata.version('transformers')}" in warning
    assert f"torch {metadata.version('torch')}" in warning
    assert "scripts/setup.sh" in warning


def test_a_run_in_range_has_no_warning_and_a_near_miss_is_named():
    lines = compare_with_expected(results(11.5, 5.0), RANGES)
    assert lines == [
        "expected xx-en BLEU 11.38-11.64: got 11.50, within",
        "expected en-xx BLEU 5.58-5.76: got 5.00, outside, not far",
        "expected en-xx chrF 26-27: got 26.80, within",
    ]


def test_a_direction_and_an_unmeasured_group_are_read_and_said():
    lines = compare_with_expected(results(11.5, 5.7), {"de-en": {"bleu": [11, 12]}, "zero-shot": {"bleu": [0.4, 0.9]}})
    assert lines == ["expected de-en BLEU 11-12: got 11.50, within", "expected zero-shot BLEU 0.4-0.9: not measured in this run"]  # fmt: skip


@given(
    low=st.floats(0.1, 50),
    width=st.floats(0, 10),
    value=st.floats(0, 200),
)
def test_the_verdict_follows_its_definition(low, width, value):
    high = low + width
    line = compare_with_expected(results(value, 5.7), {"xx-en": {"bleu": [low, high]}})[0]
    if value < low / 2 or value > high * 2:
        assert line.endswith("FAR OUTSIDE")
    elif low <= value <= high:
        assert line.endswith("within")
    else:
        assert line.endswith("outside, not far")


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([11, 12], r"expected must map a group or direction"),
        ({"xx-en": 11.6}, r"\[xx-en\]: give \{metric: \[low, high\]\}"),
        ({"xx-en": {"bleu4": [1, 2]}}, r"unknown metric 'bleu4'"),
        ({"xx-en": {"bleu": [12, 11]}}, r"\[xx-en\]\.bleu: give a range \[low, high\]"),
        ({"xx-en": {"bleu": [11, "12"]}}, r"two numbers"),
        ({"xx-en": {"bleu": 11.6}}, r"two numbers"),
    ],
)
def test_a_malformed_expected_section_is_refused_before_any_work(section, message):
    """A malformed `expected` section of an experiment config: refused by validation, naming the key."""
    config = {"output_dir": "runs/x", "data": {"bible": {"languages": ["en", "de"]}}, "expected": section}
    with pytest.raises(ConfigError, match=message):
        validate_config(config)
    assert check_expected_section({"xx-en": {"bleu": [11, 12]}}, "x") is None


@pytest.mark.slow
def test_the_run_prints_its_results_beside_the_expected_ranges(tmp_path, capsys):
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    config = tiny_run_config(tmp_path, expected={"xx-en": {"bleu": [40.0, 60.0]}})
    outcome = run_experiment(config)
    printed = capsys.readouterr().out
    measured = outcome["results"]["groups"]["bleu"]["xx-en"]
    assert f"expected xx-en BLEU 40-60: got {measured:.2f}, FAR OUTSIDE" in printed  # 2 steps of training
    assert "WARNING: xx-en BLEU" in printed and outcome["expected"][-1].startswith("WARNING")


def main_job() -> dict:
    return {"output_dir": "runs/x", "training": {"max_steps": 5000, "logging_steps": 250},
            "evaluation": {"num_beams": 4, "batch_size": 50}, "expected": RANGES}  # fmt: skip


SCORED = ["training.max_steps", "model.d_model", "data.bible.books", "tokenizer.vocab_size", "evaluation.num_beams",
          "evaluation.max_sentences_per_direction", "stages", "training.learning_rate"]  # fmt: skip
FREE = ["output_dir", "training.logging_steps", "training.save_steps", "evaluation.batch_size", "training.use_cpu",
        "translate.text", "data.num_proc"]  # fmt: skip


@given(st.lists(st.sampled_from(SCORED + FREE), min_size=1, unique=True), st.integers(1, 10**6))
def test_overrides_drop_the_expected_ranges_exactly_when_they_change_what_was_measured(keys, value):
    config = main_job()
    said = void_expectations(config, {key: value for key in keys})
    written = {"training.max_steps": 5000, "evaluation.num_beams": 4}  # main_job's values: the same again is no change
    scored = [key for key in keys if key in SCORED and written.get(key) != value]
    assert ("expected" in config) == (not scored)
    assert (said is None) == (not scored)
    if scored:  # the line names what changed, in the order given
        assert said.endswith(f"the overrides change {', '.join(scored)} (give new ones with --set expected=...)")


def test_new_ranges_with_the_overrides_are_kept_and_a_config_without_ranges_is_left_alone():
    config = main_job()
    assert void_expectations(config, {"training.max_steps": 40, "expected": {"xx-en": {"bleu": [0, 1]}}}) is None
    assert "expected" in config
    config.pop("expected")
    assert void_expectations(config, {"training.max_steps": 40}) is None and "expected" not in config
    assert "evaluation" not in KEEP_SCORES and "evaluation.batch_size" in KEEP_SCORES
