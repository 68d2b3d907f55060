"""What every method's model must do alike: train under gradient checkpointing and bf16 autocast."""

from __future__ import annotations

import pytest
import torch
from conftest import enable_checkpointing, random_batch, tiny_config

from hf_langspec.modeling.modeling_langspec import language_module_parameter
from hf_langspec.modeling.registry import model_classes

OVERRIDES = {
    "xlp": {},
    "clm": {"clm_num_features": 4, "clm_decoder_key": "target", "clm_decoder": "mclm"},
    "laa": {"laa_points": ["enc_self_attn", "dec_self_attn", "dec_cross_attn"], "lee_points": [2, 4, 6]},
    "cll": {"central_language": "en", "cll_inner_dim": 8, "cll_dropout": 0.0},
    "hlt": {"high_resource_languages": ["en", "de"], "hlt_hidden_dim": 48, "hlt_hard_probability": 1.0},
    "adapter": {"adapter_preset": "monolingual", "adapter_dim": 8},
    "lora": {"lora_rank": 4, "lora_dropout": 0.1},
    "lsl": {"lsl_encoder_source_layers": [0], "lsl_encoder_target_layers": [1], "lsl_decoder_target_layers": [2]},
    "lms": {"lms_rank": 3, "lms_points": ["ffn", "self_attn"], "lms_fuse_distillation": True, "lms_every": 2},
}
VARIANTS = {name: (*model_classes()[name], overrides) for name, overrides in OVERRIDES.items()}


def build(name: str, seed: int = 0):
    config_class, model_class, overrides = VARIANTS[name]
    torch.manual_seed(seed)
    return model_class(tiny_config(config_class, **overrides))


def training_batch() -> dict[str, torch.Tensor]:
    batch = random_batch(batch=4, seed=3)
    batch["labels"] = batch.pop("decoder_input_ids").roll(-1, 1)
    batch.pop("decoder_attention_mask")
    return batch


@pytest.mark.parametrize("name", list(VARIANTS))
def test_gradient_checkpointing_gives_the_same_gradients(name):
    grads = []
    for checkpointing in (False, True):
        model = build(name).train()
        if checkpointing:
            enable_checkpointing(model, use_reentrant=False)
        model(**training_batch()).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    assert any(language_module_parameter(n) for n in grads[0])  # the language modules get gradients
    for key, grad in grads[0].items():
        torch.testing.assert_close(grads[1][key], grad, atol=1e-6, rtol=1e-5, msg=key)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_bf16_autocast_trains_close_to_float32(name):
    model = build(name).train()
    batch = training_batch()
    full = model(**batch).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(**batch).loss
    mixed.backward()
    assert mixed.dtype == torch.float32 and torch.isfinite(mixed)
    assert mixed.item() == pytest.approx(full.item(), rel=2e-2)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_every_method_of_the_experiment_configs_is_covered_here():
    assert set(OVERRIDES) == set(model_classes()) - {"baseline"}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_method_saved_loads_through_the_checked_loader_with_the_same_outputs(name, tmp_path):
    """`load_model_folder` refuses a config that does not match its weights (a tensor missing, extra or of another
    shape): each method's own save must match exactly, and reload to the same logits."""
    from hf_langspec.model_folder import load_model_folder

    model = build(name).eval()
    model.save_pretrained(tmp_path)
    batch = random_batch(batch=2, seed=5)
    loaded = load_model_folder(tmp_path).eval()
    assert type(loaded) is type(model)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, model(**batch).logits)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_methods_card_says_what_its_registry_entry_says(name, tmp_path):
    """A card's description, citation and settings come from the method's one registration (its `Variant` and its
    config's `card_settings`): adding a method adds its card."""
    from hf_langspec.export.card import build_model_card
    from hf_langspec.modeling.registry import variant

    model = build(name)
    model.save_pretrained(tmp_path)
    card = build_model_card(tmp_path, model_name="tiny").text
    entry = variant(name)
    assert entry.description.split(":")[0] in card and entry.citation in card
    settings = model.config.card_settings()
    assert settings and all(line in card for line in settings.splitlines())


def test_the_readmes_method_table_cites_each_methods_registered_paper():
    """The README's table names each method's paper as its registry entry cites it (first author and year)."""
    import re
    from pathlib import Path

    from hf_langspec.modeling.registry import VARIANTS

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    rows = {m.group(2): m.group(1) for m in re.finditer(r"^\| [^|]+ \| ([^|]*) \| `(\w+)` \|", readme, re.M)}
    checked = 0
    for entry in VARIANTS:
        paper = rows.get(entry.name, "").strip()
        if paper:  # the rows of a paper's method (the baselines cite theirs in their cards)
            author, year = paper.split()[0], paper.split()[-1]
            first = entry.citation.split(",")[0].split(" and ")[0].split(" (")[0]  # "Pessoa Pires" is "Pires"
            assert author in first and f"({year})" in entry.citation, (entry.name, paper)
            checked += 1
    assert checked == 7
