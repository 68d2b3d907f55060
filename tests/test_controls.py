"""Matched controls (hf_langspec/compare/controls.py) and the answer table (answers.py)."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_suite
from test_variants import OVERRIDES

from hf_langspec.compare import compare, load_suite
from hf_langspec.compare.answers import answer_table, human_agreement, when_to_use
from hf_langspec.compare.controls import (
    MAX_FFN_RATIO,
    TOLERANCE,
    measure,
    measure_kind,
    plan_controls,
    solve_control,
)
from hf_langspec.compare.report import build_report
from hf_langspec.compare.shared import results_paths
from hf_langspec.compare.suite import control_of
from hf_langspec.modeling.registry import model_classes
from hf_langspec_cli.config_file import ConfigError, set_keys

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 3, "encoder_attention_heads": 4,
         "decoder_attention_heads": 4, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}  # fmt: skip
BASE = {"data": {"max_length": 16}, "tokenizer": {"vocab_size": 200}, "model": dict(SHAPE)}
LANGUAGES = ["en", "de", "fr"]  # the stand-ins of a config whose data names its languages when read


def method_config(name: str) -> dict:
    return {**copy.deepcopy(BASE), "model": {**SHAPE, "class": name, **OVERRIDES[name]}}


def parameters_on_cpu(name: str, model: dict) -> int:
    """The model built with real weights on the CPU, counted by transformers' `num_parameters` (shared once)."""
    config_class, model_class = model_classes()[name]
    fields = {k: v for k, v in model.items() if k != "class"}
    fields.setdefault("language_pairs", [f"{a}-{b}" for a in LANGUAGES for b in LANGUAGES if a != b])
    config = config_class(vocab_size=200, languages=LANGUAGES, lang_tag_token_ids=[4, 5, 6], **fields)
    return model_class(config).num_parameters()


@pytest.mark.parametrize("name", list(OVERRIDES))
def test_the_parameters_control_of_every_model_class_is_within_one_percent(name):
    """Counted independently: both models built with weights on the CPU and counted by transformers."""
    method = method_config(name)
    settings, measured, widened = solve_control(BASE, "parameters", measure_kind(method, "parameters"))
    control = copy.deepcopy(BASE)
    set_keys(control, settings)
    own, matched = parameters_on_cpu(name, method["model"]), parameters_on_cpu("baseline", control["model"])
    assert measured.parameters == matched and measure_kind(method, "parameters") == own
    assert abs(matched - own) <= TOLERANCE["parameters"] * own
    assert widened in ("FFN width", "d_model and FFN width")
    assert control["model"]["encoder_ffn_dim"] <= MAX_FFN_RATIO * control["model"].get("d_model", SHAPE["d_model"])


@pytest.mark.parametrize("name", list(OVERRIDES))
def test_the_compute_control_of_every_model_class_is_within_two_percent(name):
    target = measure_kind(method_config(name), "compute")
    settings, measured, _ = solve_control(BASE, "compute", target)
    control = copy.deepcopy(BASE)
    set_keys(control, settings)
    assert abs(measure_kind(control, "compute") - target) <= TOLERANCE["compute"] * target
    assert measured.flops_per_target_token == measure_kind(control, "compute")


def test_training_flops_grow_with_the_ffn_as_three_passes_of_two_matmuls():
    """Independent of the counter: widening both FFNs by `w` adds 3 (forward, two backward) x 2 (a multiply-add)
    x 2 (two matmuls) x d x w FLOPs per token of each layer; sources and targets have the same length here."""
    wider = copy.deepcopy(BASE)
    set_keys(wider, {"model.encoder_ffn_dim": 64 + 10, "model.decoder_ffn_dim": 64 + 10})
    added = measure_kind(wider, "compute") - measure_kind(BASE, "compute")
    assert added == 3 * 2 * 2 * SHAPE["d_model"] * 10 * (SHAPE["encoder_layers"] + SHAPE["decoder_layers"])


def test_a_size_beyond_the_ffn_cap_widens_d_model_in_steps_of_the_heads():
    target = 3 * measure_kind(BASE, "parameters")
    settings, measured, widened = solve_control(BASE, "parameters", target)
    assert widened == "d_model and FFN width" and settings["model.d_model"] % 4 == 0
    assert settings["model.d_model"] > SHAPE["d_model"]
    assert abs(measured.parameters - target) <= TOLERANCE["parameters"] * target


def test_a_size_no_widening_reaches_is_refused():
    with pytest.raises(ConfigError, match=r"no widening of the baseline reaches parameters"):
        solve_control(BASE, "parameters", 1000)


def test_a_model_drawing_its_route_per_step_is_measured_deterministically():
    """HLT-MT's eq. 6 routes each step soft or hard at random: the mean of seeded steps, the same every time."""
    hlt = {**method_config("hlt"), "model": {**method_config("hlt")["model"], "hlt_hard_probability": 0.5}}
    first = measure(hlt)
    again = measure({**hlt, "training": {"logging_steps": 7}})  # another config (not the cached one), the same model
    assert first == again
    hard = measure_kind(method_config("hlt"), "compute")  # every step hard
    soft = measure_kind({**hlt, "model": {**hlt["model"], "hlt_hard_probability": 0.0}}, "compute")
    assert hard < first.flops_per_target_token < soft


def test_controls_within_the_tolerance_share_one():
    requests = {"a": ["parameters"], "b": ["parameters"]}
    configs = {"base": BASE, "a": method_config("adapter"), "b": method_config("adapter")}
    controls = plan_controls(requests, configs.__getitem__, "base")
    assert list(controls) == ["control_params_a"] and controls["control_params_a"].systems == ["a", "b"]


def test_a_compute_control_for_a_method_of_the_baselines_compute_is_refused():
    configs = {"base": BASE, "lsl": method_config("lsl")}
    with pytest.raises(ConfigError, match=r"\[systems.lsl\] controls: its training FLOPs per target token are "
                                          r"\+0.0% of the baseline's .*drop `compute`"):  # fmt: skip
        plan_controls({"lsl": ["compute"]}, configs.__getitem__, "base")


def _suite_with_controls(tmp_path: Path, edit=None) -> Path:
    raw = yaml.safe_load(tiny_suite(tmp_path).read_text())
    raw["systems"]["fcll"]["controls"] = ["parameters", "compute"]
    raw["systems"]["fcll"]["set"]["model.cll_inner_dim"] = 64  # over 5% more compute than the baseline
    raw["report"]["claims"].append(
        {"paper": "CLL", "system": "fcll", "against": "parameters", "group": "zero-shot", "metric": "off_target",
         "expect": "down", "effect": "FCLL beats a Transformer of its size"}
    )  # fmt: skip
    if edit:
        edit(raw)
    path = tmp_path / "controls.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_suite_adds_the_controls_its_systems_ask_for_and_claims_name_them(tmp_path):
    suite = load_suite(_suite_with_controls(tmp_path))
    assert list(suite.systems) == ["baseline", "fcll", "control_params_fcll", "control_compute_fcll"]
    for kind, name in (("parameters", "control_params_fcll"), ("compute", "control_compute_fcll")):
        assert control_of(suite, "fcll", kind) == name
        control = suite.systems[name]
        target = measure_kind(suite.system_config("fcll"), kind)
        assert abs(measure_kind(suite.system_config(name), kind) - target) <= TOLERANCE[kind] * target
        assert control.overrides == control.control.settings and control.seeds is None
    assert suite.report["claims"][-1]["against"] == "control_params_fcll"


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda raw: raw["systems"]["fcll"].update(controls=["size"]), r"controls must be a list of \['parameters', "
                                                                       r"'compute'\], each once, got \['size'\]"),
        (lambda raw: raw["systems"]["baseline"].update(controls=["parameters"]), r"the baseline is what controls widen"),
        (lambda raw: raw["systems"].update(parameters={"set": {"model.class": "xlp"}}), r"'parameters' names a kind"),
        (lambda raw: raw["systems"]["fcll"].update(controls=["compute"]),
         r"against 'parameters' needs `controls: \[parameters\]` on system 'fcll'"),
        (lambda raw: raw["systems"].update(control_params_fcll={"set": {"model.class": "xlp"}}),
         r"\[systems.control_params_fcll\]: the name is the control of 'fcll'; rename the system"),
    ],
)  # fmt: skip
def test_meaningless_controls_are_refused_before_any_run(tmp_path, edit, message):
    path = _suite_with_controls(tmp_path, edit)
    with pytest.raises(ConfigError, match=message):
        load_suite(path)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- the answer table
def _cell(delta, p_value, interval, seeds=(1, 2, 3)):
    return {"delta": delta, "p_value": p_value, "delta_ci95": interval, "paired_seeds": list(seeds),
            "paired_means": [1.0 + delta, 1.0], "mean": 1.0 + delta}  # fmt: skip


def _groups(bleu):
    return {group: {"bleu": bleu, "chrfpp": _cell(0.1, 0.5, [-1.0, 1.0]), "off_target": _cell(0.0, 0.9, [-0.1, 0.1])}
            for group in ("xx-en", "en-xx", "zero-shot")}  # fmt: skip


def _report(versus_bleu, control_seeds=(1, 2, 3)):
    holds = _cell(1.5, 0.001, [0.5, 2.5])
    system = {"label": "M", "seeds": [1, 2, 3], "planned_seeds": [1, 2, 3], "parameters": {"total": 2_000_000},
              "train_tokens_relative": 0.9, "decode_sentences_relative": 1.0, "flops_per_target_token": 11.0,
              "groups": _groups(holds), "versus": {"control_params_m": _groups(versus_bleu)}}  # fmt: skip
    base = {"label": "B", "seeds": [1, 2, 3], "planned_seeds": [1, 2, 3], "parameters": {"total": 1_000_000},
            "train_tokens_relative": 1.0, "decode_sentences_relative": 1.0, "flops_per_target_token": 10.0,
            "groups": {}}  # fmt: skip
    control = {**base, "label": "C", "seeds": list(control_seeds), "parameters": {"total": 1_990_000}}
    described = {"kind": "parameters", "systems": ["m"], "target": 2_000_000, "settings": {}, "widened": "FFN width",
                 "measured": {"parameters": 1_990_000, "flops_per_target_token": 12.0}}  # fmt: skip
    return {"suite": "s", "baseline": "base", "systems": {"base": base, "m": system, "control_params_m": control},
            "controls": {"control_params_m": described}}  # fmt: skip


def test_the_answer_table_follows_the_report():
    """A gain that holds against the control too is "use it"; the same gain matched by the control is "widen the
    baseline"; a control still training is "not decided"; each cell carries its difference and verdict class."""
    beats = answer_table(_report(_cell(0.8, 0.01, [0.2, 1.4])))
    matched = answer_table(_report(_cell(0.05, 0.6, [-0.4, 0.5])))
    assert beats != matched
    assert "BLEU +0.80 (holds across seeds, " in beats and "BLEU +0.05 (not significant, " in matched
    assert "Use it for xx->en BLEU, en->xx BLEU, zero-shot BLEU" in beats
    assert "do not hold against a dense Transformer of its size or compute: widen the baseline instead" in matched
    pending = when_to_use(_report(_cell(0.8, 0.01, [0.2, 1.4]), control_seeds=(1,)), "m", ["control_params_m"])
    assert "not decided against its controls yet (control_params_m: 1 of 3 seeds)" in pending
    opposite = answer_table(_report(_cell(-0.9, 0.01, [-1.5, -0.3])))
    assert "BLEU -0.90 (the opposite direction, " in opposite
    assert f"{human_agreement(0.8):.0f}% agree" in beats and "2.00M parameters (2.00x)" in beats


def test_human_agreement_is_mt_thresholds_for_bleu():
    assert human_agreement(0.0) == pytest.approx(88.33333333333225 / 2)
    assert human_agreement(-2.0) == human_agreement(2.0) > human_agreement(1.0)


@pytest.mark.parametrize("page", ["BENCHMARKS.md", "docs/guide/comparing.md"])
def test_the_published_answer_table_is_the_one_bible6s_report_gives(page):
    """The table between the answers markers is generated from the committed report; a change to the report
    that is not regenerated fails here."""
    report = json.loads((ROOT / "benchmarks/results/bible6/report.json").read_text())
    text = (ROOT / page).read_text()
    published = re.search(r"<!-- answers:bible6 -->\n(.*?)<!-- /answers:bible6 -->", text, re.S).group(1)
    assert published == answer_table(report)
    assert published == (ROOT / "benchmarks/results/bible6/answers.md").read_text()


@pytest.mark.slow
def test_the_report_judges_a_system_against_its_control_on_every_group(tmp_path):
    """The control's results stand in for a trained one (the baseline's, copied): every group of the system against
    it then equals its groups against the baseline, and the claim `against: parameters` reads that row."""
    suite = load_suite(_suite_with_controls(tmp_path))
    compare(suite, systems=["fcll"], workers=2)  # the baseline and FCLL train; the controls do not
    for seed in suite.seeds:
        for source, target in zip(results_paths(suite.results_dir, "baseline", seed),
                                  results_paths(suite.results_dir, "control_params_fcll", seed), strict=True):  # fmt: skip
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    report = build_report(suite, write=False)
    fcll = report["systems"]["fcll"]
    assert set(fcll["versus"]["control_params_fcll"]) == set(fcll["groups"])
    for group, metrics in fcll["groups"].items():
        for metric in ("bleu", "chrfpp"):
            assert fcll["versus"]["control_params_fcll"][group][metric]["delta"] == pytest.approx(
                metrics[metric]["delta"]
            )
    claim = report["claims"][-1]
    assert claim["against"] == "control_params_fcll" and claim["verdict"] == report["claims"][0]["verdict"]
    assert report["controls"]["control_params_fcll"]["systems"] == ["fcll"]
    assert "control_compute_fcll seed 1" in report["missing"]
    assert torch.isfinite(torch.tensor(fcll["flops_per_target_token"]))
