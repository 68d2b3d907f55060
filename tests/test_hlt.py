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
    card = (outcome["model_dir"] / "README.md").read_text()
    assert "Yang, Yin" in card and "High-resource targets (pool adapters): de" in card
    model = HLTForConditionalGeneration.from_pretrained(outcome["model_dir"])
    languages = model.config.languages  # the pipeline's tokenizer orders the codes of the data
    assert model.slp().assignment[languages.index("de")] >= 0 and model.slp().assignment[languages.index("en")] == -1
    for stage in ("high", "all"):
        assert (tmp_path / "run" / "checkpoints" / stage / "final" / "stage_complete.json").exists()


def test_the_encoder_starts_from_a_pretrained_xlp_encoder(tmp_path):
    from hf_langspec import XLPConfig, XLPForMaskedLM
    from hf_langspec.training.pretrained_encoder import init_encoder_from

    model = hlt_model(decoder_ffn_dim=64)  # decoder FFN as wide as the encoder's, for the XLM-T-style copy
    shape = ("vocab_size", "d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim", "languages",
             "lang_tag_token_ids", "max_position_embeddings")  # fmt: skip
    torch.manual_seed(9)
    encoder = XLPForMaskedLM(XLPConfig(**{k: getattr(model.config, k) for k in shape}))
    encoder.save_pretrained(tmp_path / "xlp")
    cross_before = model.model.decoder.layers[0].encoder_attn.q_proj.weight.clone()
    copied = init_encoder_from(model, tmp_path / "xlp", decoder_layers=True)
    source = encoder.model.encoder
    assert torch.equal(model.model.encoder.layers[1].fc2.weight, source.layers[1].fc2.weight)
    assert torch.equal(model.get_input_embeddings().weight, source.embed_tokens.weight)
    assert torch.equal(model.lm_head.weight, source.embed_tokens.weight)  # still tied
    assert torch.equal(model.model.decoder.layers[1].self_attn.k_proj.weight, source.layers[1].self_attn.k_proj.weight)
    assert torch.equal(model.model.decoder.layers[0].encoder_attn.q_proj.weight, cross_before)  # cross-attention fresh
    assert "model.encoder.layers.0.self_attn.q_proj.weight" in copied
    with pytest.raises(ValueError, match="d_model is 32 there and 16 here"):
        init_encoder_from(
            hlt_model(d_model=16, encoder_attention_heads=2, decoder_attention_heads=2), tmp_path / "xlp"
        )


def test_selection_probabilities_and_gradient_similarity(tmp_path):
    from hf_langspec.evaluation.hlt_analysis import gradient_similarity, plot_matrix, selection_probabilities

    model = hlt_model(hlt_hard_probability=1.0)
    alpha = selection_probabilities(model)
    assert list(alpha) == LANGUAGES and all(sum(v) == pytest.approx(1.0) for v in alpha.values())
    expected = model.slp().gate(model.get_input_embeddings().weight[TAG_IDS[2]]).softmax(-1)
    assert alpha["fr"] == pytest.approx(expected.tolist())

    def batch_for(tgt: int, seed: int) -> dict:
        b = random_batch(batch=2, seed=seed)
        b["tgt_lang_ids"] = torch.full((2,), tgt)
        b["labels"] = b["decoder_input_ids"].roll(-1, 1)
        return b

    batches = {"en-de": batch_for(1, 1), "en-fr": batch_for(2, 2), "en-de (again)": batch_for(1, 1)}
    names, sims = gradient_similarity(model, batches)
    assert names == list(batches) and sims.shape == (3, 3)
    assert sims[0, 2].item() == pytest.approx(1.0) and sims[0, 1].item() < 0.999  # same batch: identical gradient
    # brute force for one pair, on the shared parameters only, without dropout and stage-1 training losses
    model.eval()
    grads = []
    for b in (batches["en-de"], batches["en-fr"]):
        model.zero_grad()
        model(**b).loss.backward()
        grads.append(
            torch.cat(
                [
                    p.grad.flatten()
                    for n, p in model.named_parameters()
                    if ".insertions." not in n and p.grad is not None
                ]
            )
        )
    assert sims[0, 1].item() == pytest.approx(torch.nn.functional.cosine_similarity(*grads, dim=0).item(), abs=1e-5)
    figure = plot_matrix(sims, names, names, tmp_path / "grad.png", "gradient cosine")
    assert (tmp_path / "grad.png").stat().st_size > 0 and figure is not None
