"""HLT-MT's selective language-specific pool (Yang et al. 2022): routing, the universal adapter, the disparity loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import LANGUAGES, TAG_IDS, assert_round_trips, random_batch, tiny_config

from hf_langspec import HLTConfig, HLTForConditionalGeneration
from hf_langspec.modeling.routing import LanguageContext


def hlt_model(seed: int = 0, **overrides) -> HLTForConditionalGeneration:
    torch.manual_seed(seed)
    overrides = {"hlt_hidden_dim": 48, "high_resource_languages": ["en", "de"]} | overrides
    model = HLTForConditionalGeneration(tiny_config(HLTConfig, **overrides))
    with torch.no_grad():  # distinct adapters and norms, so a wrong choice shows
        slp = model.slp()
        slp.up_bias.normal_()
        slp.norm_weight.uniform_(0.5, 1.5)
        slp.norm_bias.normal_()
    return model


def by_hand(slp, h: torch.Tensor, t: int) -> torch.Tensor:
    """Equation 4 for one adapter t, written out."""
    out = F.relu(h @ slp.up[t] + slp.up_bias[t]) @ slp.down[t] + slp.down_bias[t] + h
    return F.layer_norm(out, (h.shape[-1],), slp.norm_weight[t], slp.norm_bias[t])


def context(model, tgt: list[str]) -> LanguageContext:
    lang = LanguageContext(None, torch.tensor([LANGUAGES.index(c) for c in tgt]), len(LANGUAGES), len(tgt))
    lang.scratch["embed_tokens"] = model.get_input_embeddings()
    return lang


def test_hard_routing_applies_the_argmax_adapter_alone():
    model = hlt_model().eval()  # inference in stage 1 is hard
    slp = model.slp()
    h = torch.randn(3, 4, 32)
    lang = context(model, ["en", "de", "fr"])
    alpha = slp.gate(model.get_input_embeddings().weight[[TAG_IDS[0], TAG_IDS[1], TAG_IDS[2]]]).softmax(-1)
    out = slp(h, lang)
    for b, t in enumerate(alpha.argmax(-1).tolist()):
        torch.testing.assert_close(out[b], by_hand(slp, h[b], t), atol=1e-5, rtol=0)


def test_soft_routing_is_the_alpha_weighted_sum_of_every_adapter():
    model = hlt_model(hlt_hard_probability=0.0).train()  # always soft
    slp = model.slp()
    h = torch.randn(2, 3, 32)
    lang = context(model, ["de", "es"])
    alpha = slp.gate(model.get_input_embeddings().weight[[TAG_IDS[1], TAG_IDS[3]]]).softmax(-1)
    out = slp(h, lang)
    for b in range(2):
        expected = sum(alpha[b, t] * by_hand(slp, h[b], t) for t in range(3))
        torch.testing.assert_close(out[b], expected, atol=1e-5, rtol=0)


def test_stage_two_uses_the_fixed_adapters_and_the_universal_one_for_exactly_the_low_resource_targets():
    model = hlt_model().eval()
    assignment = model.fix_assignment()
    assert set(assignment) == {"en", "de"} and model.config.hlt_stage == 2
    slp = model.slp()
    h = torch.randn(4, 3, 32)
    out = slp(h, context(model, ["fr", "en", "es", "de"]))
    universal = slp.num_adapters
    for b, (code, t) in enumerate(
        [("fr", universal), ("en", assignment["en"]), ("es", universal), ("de", assignment["de"])]
    ):
        torch.testing.assert_close(out[b], by_hand(slp, h[b], t), atol=1e-5, rtol=0, msg=code)


def test_the_disparity_loss_is_equation_10_and_reaches_the_gate_under_label_smoothing(tmp_path):
    from transformers import Seq2SeqTrainingArguments

    from hf_langspec.training import LangSpecSeq2SeqTrainer

    for variant in ("pairs", "all"):
        model = hlt_model(hlt_disparity=variant, high_resource_languages=["en", "de", "fr"]).train()
        alpha = model.slp().gate(model.get_input_embeddings().weight[TAG_IDS[:3]]).softmax(-1)
        pairs = sum(alpha[i] @ alpha[k] for i in range(3) for k in range(i + 1, 3))
        expected = pairs if variant == "pairs" else (alpha @ alpha.T).sum()
        torch.testing.assert_close(
            model.slp().disparity_loss(model.get_input_embeddings(), torch.device("cpu")), expected
        )

    model = hlt_model(hlt_hard_probability=1.0).train()  # hard: cross-entropy gives the gate no gradient
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, report_to=[], use_cpu=True)
    trainer = LangSpecSeq2SeqTrainer(model=model, args=args)
    batch = random_batch(seed=3)
    batch["labels"] = batch["decoder_input_ids"].roll(-1, 1)  # the collator also gives decoder_input_ids
    trainer.compute_loss(model, batch).backward()
    assert model.slp().gate.weight.grad is not None and model.slp().gate.weight.grad.abs().sum() > 0


def test_stage_two_without_a_fixed_assignment_is_refused_and_the_assignment_is_saved(tmp_path):
    model = hlt_model(hlt_stage=2).eval()
    with pytest.raises(ValueError, match=r"call HLTForConditionalGeneration\.fix_assignment"):
        model(**random_batch(seed=4))
    model = hlt_model(seed=5).eval()
    model.fix_assignment()
    assert_round_trips(model, random_batch(seed=6), tmp_path)
    assert torch.equal(
        HLTForConditionalGeneration.from_pretrained(tmp_path / "ckpt").slp().assignment, model.slp().assignment
    )


def test_bad_hlt_configs_are_named():
    with pytest.raises(ValueError, match="needs high_resource_languages"):
        tiny_config(HLTConfig)
    with pytest.raises(ValueError, match="hlt_stage=3 must be 1"):
        tiny_config(HLTConfig, high_resource_languages=["en"], hlt_stage=3)


def test_two_stages_in_one_config_fix_the_assignment_between_them(tmp_path):
    import json

    from test_training import _config

    from hf_langspec.training.experiment import run_experiment

    config = _config(
        tmp_path, model={"class": "hlt", "hlt_hidden_dim": 16, "high_resource_languages": ["de"]},
        evaluation={"max_sentences_per_direction": 2},
    )  # fmt: skip
    with open(config["data"]["train_files"][0]) as f:
        directions = sorted({f"{r['src_lang']}-{r['tgt_lang']}" for r in map(json.loads, f)})
    high = [d for d in directions if d.endswith("-de")]
    config["stages"] = [{"name": "high", "directions": high, "training": {"max_steps": 2}}, {"name": "all"}]
    outcome = run_experiment(config)
    saved = json.loads((outcome["model_dir"] / "config.json").read_text())
    assert saved["hlt_stage"] == 2
    model = HLTForConditionalGeneration.from_pretrained(outcome["model_dir"])
    languages = model.config.languages  # the pipeline's tokenizer orders the codes of the data
    assert model.slp().assignment[languages.index("de")] >= 0 and model.slp().assignment[languages.index("en")] == -1
    for stage in ("high", "all"):
        assert (tmp_path / "run" / "checkpoints" / stage / "final" / "stage_complete.json").exists()
