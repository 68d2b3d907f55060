"""`hf-langspec train` refuses a config's unknown section or key before it loads torch (hf_langspec_cli.config_file),
with the line the package's own validation gives for the same config."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from test_training import tiny_run_config

from hf_langspec.modeling.registry import model_classes
from hf_langspec.training.config import apply_overrides, load_config
from hf_langspec.training.config_schema import key_table, schema_table
from hf_langspec_cli.config_file import KEY_TABLE, ConfigError, first_check, package_keys

# where a wrong key goes: a section, or a section's key (a stage's training too), or a model class
MISTAKES = [
    {"extra": 1},
    {"data": {"max_lenght": 10}},
    {"data": {"train_files": None, "bible": {"language": ["en", "de"]}}},
    {"tokenizer": {"vocab": 100}},
    {"model": {"d_modle": 32}},
    {"model": {"class": "xlp", "clm_decoder": "none"}},  # a key of another class
    {"model": {"class": "transformer"}},
    {"training": {"lerning_rate": 1.0}},
    {"stages": [{"name": "a", "training": {"max_step": 2}}]},
    {"stages": [{"name": "a", "steps": 2}]},
    {"stages": {"name": "a"}},
    {"evaluation": {"beams": 4}},
    {"translate": {"text": "x", "source": "en"}},
    {"card": {"licence": "mit"}},
    {"model": 3},
]


def _refusals(config: dict, tmp_path, overrides: list[str]) -> tuple[str, str]:
    """The line of the first check and the line of the package's validation, for the same file and overrides."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as fast:
        first_check(path, overrides)
    with pytest.raises(ConfigError) as full:
        apply_overrides(load_config(path), overrides)
    return str(fast.value), str(full.value)


def test_the_key_table_is_what_the_package_computes():
    """config_keys.json is generated: a new config field or model class fails here until it is rewritten."""
    assert package_keys() == json.loads(json.dumps(key_table())), (
        f"{KEY_TABLE} is out of date: run `python -m hf_langspec.training.config_schema --write-keys`"
    )
    assert set(package_keys()["model"]) == set(model_classes())


@pytest.mark.parametrize("mistake", MISTAKES, ids=lambda m: json.dumps(m)[:40])
def test_a_wrong_key_gets_the_packages_line_before_the_package_loads(tmp_path, mistake):
    config = tiny_run_config(tmp_path, **mistake)
    fast, full = _refusals(config, tmp_path, [])
    assert fast == full


@settings(max_examples=25, deadline=None)
@given(section=st.sampled_from(["data", "tokenizer", "model", "training", "evaluation", "card"]),
       key=st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True))  # fmt: skip
def test_an_override_with_a_wrong_key_gets_the_packages_line(tmp_path_factory, section, key):
    """`--set SECTION.KEY=1`: a key the section does not have is refused by both, with the same line; one it has
    passes the first check (the package may still refuse its value)."""
    tmp_path = tmp_path_factory.mktemp("override")
    config = tiny_run_config(tmp_path)
    overrides = [f"{section}.{key}=1"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    try:
        first_check(path, overrides)
    except ConfigError as fast:
        with pytest.raises(ConfigError) as full:
            apply_overrides(load_config(path), overrides)
        assert str(fast) == str(full.value)
        assert f"unknown keys [{key!r}]" in str(fast)


def test_a_config_with_known_keys_passes_the_first_check(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_run_config(tmp_path, model={"class": "xlp", "xlp_encoder": [0]})))
    first_check(path, ["training.max_steps=3"])


def test_train_with_a_wrong_key_answers_without_loading_torch_and_help_config_is_the_packages(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_run_config(tmp_path, model={"d_modle": 32})))
    script = (
        "import sys\nfrom hf_langspec_cli import main\n"
        f"code = main(['train', '--config', {str(path)!r}])\n"
        "print(code, sorted(m for m in ('torch', 'transformers', 'hf_langspec') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == "2 []", result.stdout + result.stderr
    assert result.stderr.startswith(f"hf-langspec train: error: {path} [model]: unknown keys ['d_modle']")
    printed = subprocess.run([sys.executable, "-m", "hf_langspec_cli", "train", "--help-config"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert printed == schema_table() + "\n"
