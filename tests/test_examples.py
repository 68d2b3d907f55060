"""The README's commands run as written (forked from one import: tests/command_server.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import command_server
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs_and_round_trips(tmp_path):
    result = command_server.run_script(ROOT / "examples" / "quickstart.py", "--output-dir",
                                                tmp_path / "quickstart", capture_output=True, text=True, timeout=300,
                                                check=True)  # fmt: skip
    assert "reloaded: same beams" in result.stdout
    assert "identical greedy output = True" in result.stdout
    assert (tmp_path / "quickstart" / "model.safetensors").exists()


def _example(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_xlp_pretraining_configs_set_the_flags_and_the_xlm15_model_has_the_papers_size(monkeypatch, tmp_path, capsys):
    import torch

    from hf_langspec import XLPConfig, XLPForMaskedLM

    pretrain = _example("pretrain_xlp")
    monkeypatch.setattr(
        sys, "argv", ["pretrain_xlp.py", "--config", str(ROOT / "examples/configs/xlp_pretrain_cpu.yaml")]
    )
    assert vars(pretrain.parse_args()) == vars(_defaults(pretrain)) | {"config": vars(pretrain.parse_args())["config"]}
    monkeypatch.setattr(
        sys, "argv", ["pretrain_xlp.py", "--config", str(ROOT / "examples/configs/xlp_pretrain_xlm15.yaml")]
    )
    args = pretrain.parse_args()
    assert (args.d_model, args.layers, args.heads, args.ffn_dim, len(args.languages)) == (1024, 12, 8, 4096, 15)
    config = XLPConfig(
        vocab_size=args.vocab_size, d_model=args.d_model, encoder_layers=args.layers, encoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn_dim, languages=args.languages, max_position_embeddings=args.max_length,
    )  # fmt: skip
    with torch.device("meta"):
        model = XLPForMaskedLM(config)
    projections = model.model.language_projection().weight.numel()
    assert projections == 15 * 1024 * 1024
    # XLM15 has about 250M parameters; XLP adds the 15 projections
    assert 245e6 < sum(p.numel() for p in model.parameters()) - projections < 255e6

    (tmp_path / "bad.yaml").write_text("d_model: 64\nlearning_rat: 0.1\n")
    monkeypatch.setattr(sys, "argv", ["pretrain_xlp.py", "--config", str(tmp_path / "bad.yaml")])
    with pytest.raises(SystemExit):
        pretrain.parse_args()
    assert "unknown keys ['learning_rat']" in capsys.readouterr().err


def _defaults(module):
    import unittest.mock

    with unittest.mock.patch.object(sys, "argv", ["x"]):
        return module.parse_args()


@pytest.mark.parametrize(
    "path",
    sorted(p.name for p in (ROOT / "examples" / "configs").glob("*.yaml") if not p.name.startswith("xlp_pretrain")),
)
def test_every_experiment_config_passes_validation(path):
    from hf_langspec.training.config import load_config

    config = load_config(ROOT / "examples" / "configs" / path)
    assert config["output_dir"].startswith("runs/")
