"""A run set beside the ranges its config expects: garbage outputs are reported, with the installed versions."""

from __future__ import annotations

from importlib import metadata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hf_langspec.evaluation.expected import check_expected_section, compare_with_expected
from hf_langspec.training.experiment import ConfigError, validate_config

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
    from test_training import _config

    from hf_langspec.training.experiment import run_experiment

    config = _config(tmp_path, expected={"xx-en": {"bleu": [40.0, 60.0]}})
    outcome = run_experiment(config)
    printed = capsys.readouterr().out
    measured = outcome["results"]["groups"]["bleu"]["xx-en"]
    assert f"expected xx-en BLEU 40-60: got {measured:.2f}, FAR OUTSIDE" in printed  # 2 steps of training
    assert "WARNING: xx-en BLEU" in printed and outcome["expected"][-1].startswith("WARNING")
