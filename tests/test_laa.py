"""LEE and LAA (Jin & Xiong 2022): exactness against the baseline and against effective per-language weights."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import LANGUAGES, TAG_IDS, assert_round_trips, generation_inputs, random_batch, tiny_config

from hf_langspec import LAAConfig, LAAForConditionalGeneration, LangSpecConfig, LangSpecForConditionalGeneration
from hf_langspec.modeling.module_lee import LanguageEmbeddingEmbodiment
from hf_langspec.modeling.routing import LanguageContext


def laa_model(seed: int = 0, dtype=torch.float64, **overrides) -> LAAForConditionalGeneration:
    torch.manual_seed(seed)
    return LAAForConditionalGeneration(tiny_config(LAAConfig, **overrides)).to(dtype).eval()


def baseline_like(model: LAAForConditionalGeneration) -> LangSpecForConditionalGeneration:
    """The plain model with `model`'s backbone weights (built with the same tiny config)."""
    fields = {k: v for k, v in model.config.to_dict().items() if k in LangSpecConfig().to_dict() and k != "model_type"}
    base = LangSpecForConditionalGeneration(LangSpecConfig(**fields)).to(model.dtype).eval()
    missing, unexpected = base.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(".insertions." in k for k in unexpected)
    return base


def folded(model: LAAForConditionalGeneration, lang: int) -> LangSpecForConditionalGeneration:
    """The direct formulation: a plain model whose q/k/v/o weights are W + W^lang for one target language."""
    base = baseline_like(model)
    with torch.no_grad():
        for side, laa in model.laa_modules().items():
            points = [p for p in model.config.laa_points if p.startswith(side[:3])]
            for i, layer in enumerate(getattr(base.model, side).layers):
                w = laa.matrices(i)[lang]  # [d, d]: q = x (A^T + W), so A' = A + W^T; o: A_O' = A_O + W
                for point in points:
                    attention = layer.encoder_attn if point == "dec_cross_attn" else layer.self_attn
                    for proj in (attention.q_proj, attention.k_proj, attention.v_proj):
                        proj.weight += w.T
                    attention.out_proj.weight += w
    return base


def mixed_batch(seed: int) -> dict[str, torch.Tensor]:
    batch = random_batch(batch=3, seed=seed)
    batch["tgt_lang_ids"] = torch.tensor([1, 3, 1])
    return batch


def one(batch: dict, i: int) -> dict:
    return {k: v[i : i + 1] for k, v in batch.items()}


def trim(ids: torch.Tensor, mask: torch.Tensor) -> dict:
    """An example without its padding (so the folded model sees exactly the same tokens)."""
    keep = int(mask.sum())
    return {"input_ids": ids[None, :keep], "attention_mask": mask[None, :keep]}


def generate_like_the_direct_formulation(model, inputs: dict, num_beams: int, new_tokens: int) -> None:
    """`model.generate` on a mixed batch equals, example by example, the plain model with `W + W^lang`."""
    length = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    generated = model.generate(**inputs, num_beams=num_beams, do_sample=False, **length)
    for i, lang in enumerate(inputs["tgt_lang_ids"].tolist()):
        example = trim(inputs["input_ids"][i], inputs["attention_mask"][i])
        direct = folded(model, lang).generate(**example, num_beams=num_beams, **length)
        assert generated[i, : direct.shape[1]].tolist() == direct[0].tolist()


# ---------------------------------------------------------------------------- LAA
def test_zero_matrices_reproduce_the_baseline_exactly():
    model = laa_model(laa_points=["enc_self_attn", "dec_self_attn", "dec_cross_attn"])
    with torch.no_grad():
        for laa in model.laa_modules().values():
            laa.weight.zero_()
    batch = mixed_batch(1)
    assert torch.equal(model(**batch).logits, baseline_like(model)(**batch).logits)


@pytest.mark.parametrize(
    "overrides",
    [
        {"laa_points": ["dec_self_attn"]},
        {"laa_points": ["enc_self_attn", "dec_self_attn", "dec_cross_attn"]},
        {"laa_points": ["dec_cross_attn"], "laa_per_layer": True},
    ],
)
def test_efficient_formulation_equals_effective_weights_per_example(overrides):
    model = laa_model(**overrides)
    batch = mixed_batch(2)
    logits = model(**batch).logits
    for i, lang in enumerate(batch["tgt_lang_ids"].tolist()):
        direct = folded(model, lang)(**{k: v for k, v in one(batch, i).items() if not k.endswith("lang_ids")}).logits
        torch.testing.assert_close(logits[i : i + 1], direct, atol=1e-6, rtol=0)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_cached_decoding_and_beam_search_match_the_effective_weights(num_beams):
    model = laa_model(laa_points=["enc_self_attn", "dec_self_attn", "dec_cross_attn"])
    batch = mixed_batch(3)
    inputs = generation_inputs(batch)
    generate_like_the_direct_formulation(model, inputs, num_beams, new_tokens=7)


def test_a_gather_serving_every_layer_is_budgeted_for_all_its_uses(monkeypatch):
    """Shared matrices serve q/k/v and o of every layer, so their gather may exceed one matmul's budget."""
    from hf_langspec.modeling import routing

    model = laa_model(laa_points=["dec_self_attn"])
    d = model.config.d_model
    monkeypatch.setattr(routing, "GATHER_BUDGET_ELEMENTS", 3 * d * d // 2)  # 3 examples' d x d: over it
    batch = mixed_batch(3)
    inputs = generation_inputs(batch)
    generate_like_the_direct_formulation(model, inputs, num_beams=1, new_tokens=6)
    cache = model.laa_modules()["decoder"]._caches.get(None)
    assert cache is not None and cache._value is not None and cache._value.shape == (3, d, d)  # gathered once


@pytest.mark.parametrize("overrides", [{}, {"laa_per_layer": True}])
def test_one_language_batches_fold_the_matrices_into_the_projections(overrides):
    """At inference a one-language batch uses W + W^lang (cached); outputs equal the direct formulation."""
    model = laa_model(laa_points=["enc_self_attn", "dec_self_attn", "dec_cross_attn"], **overrides)
    batch = random_batch(batch=3, seed=4)
    batch["tgt_lang_ids"] = torch.tensor([2, 2, 2])
    inputs = generation_inputs(batch)
    calls = {"hook": 0}
    laa = model.laa_modules()["decoder"]
    laa.register_forward_hook(lambda *_: calls.__setitem__("hook", calls["hook"] + 1))
    unfolded = model(**batch).logits  # autograd on: the matrix term is added per call
    assert calls["hook"] > 0
    calls["hook"] = 0
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, unfolded, atol=1e-10, rtol=0)
        generated = model.generate(**inputs, num_beams=3, max_new_tokens=7, min_new_tokens=7, do_sample=False)
    assert calls["hook"] == 0 and laa._folded  # every projection took the folded weight
    direct = folded(model, 2)
    for i in range(3):
        example = trim(inputs["input_ids"][i], inputs["attention_mask"][i])
        expected = direct.generate(**example, num_beams=3, max_new_tokens=7, min_new_tokens=7)
        assert generated[i, : expected.shape[1]].tolist() == expected[0].tolist()
    with torch.no_grad():  # an in-place update of the matrices is seen: the cached sums are recomputed
        laa.weight.mul_(2)
        changed = model(**batch).logits
    torch.testing.assert_close(changed, model(**batch).logits, atol=1e-10, rtol=0)  # unfolded again
    assert not torch.allclose(changed, unfolded)


def test_the_decoder_shares_its_matrices_between_self_and_cross_attention():
    model = laa_model(laa_points=["dec_self_attn", "dec_cross_attn"], dtype=torch.float32)
    names = [n for n, _ in model.named_parameters() if ".insertions." in n]
    assert names == ["model.decoder.insertions.dec_self_attn.weight"]
    laa = model.laa_modules()["decoder"]
    assert laa.weight.shape == (len(LANGUAGES), 32, 32)
    assert model.model.decoder.insertions["dec_cross_attn"].target is laa


def test_laa_random_draws_one_language_per_example_and_keeps_it_through_generation():
    model = laa_model(laa_random=True, laa_random_seed=5)
    batch = mixed_batch(4)
    inputs = generation_inputs(batch)
    drawn = model.random_language_ids(3)
    assert torch.equal(drawn, model.random_language_ids(3))  # reproducible at inference
    out = model.generate(**inputs, num_beams=2, max_new_tokens=6)
    # the same as LAA whose target languages are the drawn ones (the tags stay the real ones)
    plain = laa_model(laa_random=False)
    plain.load_state_dict(model.state_dict())
    assert torch.equal(out, plain.generate(**(inputs | {"tgt_lang_ids": drawn}), num_beams=2, max_new_tokens=6))
    model.train()
    draws = {tuple(model.random_language_ids(16).tolist()) for _ in range(3)}
    assert len(draws) == 3  # fresh random languages in training


# ---------------------------------------------------------------------------- LEE
def test_lee_with_zero_embeddings_is_the_baseline():
    model = laa_model(laa_points=[], lee_points=[1, 2, 3, 4, 5, 6], lee_embedding="table")
    batch = mixed_batch(5)
    assert torch.equal(model(**batch).logits, baseline_like(model)(**batch).logits)


def test_lee_adds_the_target_tag_embedding_unscaled():
    model = laa_model(laa_points=[], lee_points=[4, 5], dtype=torch.float32)
    inserted = model.model.decoder.insertions
    assert list(inserted) == ["dec_cross_in", "dec_self_in"]  # Figure 1's positions 4 and 5
    lee = inserted["dec_cross_in"]
    assert isinstance(lee, LanguageEmbeddingEmbodiment) and inserted["dec_self_in"].target is lee
    lang = LanguageContext(None, torch.tensor([2, 0]), len(LANGUAGES), 2)
    lang.scratch["embed_tokens"] = model.model.decoder.embed_tokens
    h = torch.randn(2, 4, 32)
    lee.prepare(lang, h)  # the stack calls it once per forward, before its layers
    tags = model.model.shared.weight[[TAG_IDS[2], TAG_IDS[0]]]
    torch.testing.assert_close(lee(h, lang, 0), h + tags[:, None, :], atol=0, rtol=0)


def test_the_encoder_output_embedding_is_added_once_per_generation():
    model = laa_model(laa_points=[], lee_points=["enc_out", "dec_self_in"], dtype=torch.float32)
    calls = {"enc_out": 0, "dec_self_in": 0}
    model.model.encoder.insertions["enc_out"].register_forward_hook(
        lambda *_: calls.__setitem__("enc_out", calls["enc_out"] + 1)
    )
    model.model.decoder.insertions["dec_self_in"].register_forward_hook(
        lambda *_: calls.__setitem__("dec_self_in", calls["dec_self_in"] + 1)
    )
    batch = mixed_batch(6)
    inputs = generation_inputs(batch)
    model.generate(**inputs, num_beams=3, max_new_tokens=5, min_new_tokens=5)
    assert calls["enc_out"] == 1
    assert calls["dec_self_in"] == 5 * model.config.decoder_layers  # once per step and layer


def test_bad_lee_and_laa_configs_are_named():
    with pytest.raises(ValueError, match=r"LEE point 7 is not one of Figure 1's positions"):
        tiny_config(LAAConfig, lee_points=[7])
    with pytest.raises(ValueError, match=r"laa_points \['enc_cross_attn'\] are not attention points"):
        tiny_config(LAAConfig, laa_points=["enc_cross_attn"])
    with pytest.raises(ValueError, match="needs lang_tag_token_ids"):
        tiny_config(LAAConfig, lee_points=[5], lang_tag_token_ids=None)
    with pytest.raises(ValueError, match=r"LAA in the decoder .* needs `tgt_lang_ids`"):
        laa_model()(**{k: v for k, v in mixed_batch(7).items() if k != "tgt_lang_ids"})


@pytest.mark.slow
def test_laa_checkpoints_load_through_auto_and_as_remote_code(tmp_path):
    model = laa_model(seed=8, dtype=torch.float32, lee_points=[4, 5], laa_points=["dec_self_attn", "dec_cross_attn"])
    assert_round_trips(model, mixed_batch(9), tmp_path)


def test_the_config_pipeline_trains_lee_and_laa_with_its_card(tmp_path):
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    outcome = run_experiment(
        tiny_run_config(
            tmp_path,
            model={"class": "laa", "lee_points": [4, 5], "laa_points": ["dec_self_attn"]},
            evaluation={"max_sentences_per_direction": 2},
        )
    )
    saved = json.loads((outcome["model_dir"] / "config.json").read_text())
    assert saved["model_type"] == "langspec_laa" and saved["lee_points"] == ["dec_cross_in", "dec_self_in"]
    card = (outcome["model_dir"] / "README.md").read_text()
    assert "Jin and Xiong" in card and "LEE points: dec_cross_in, dec_self_in (tag embeddings)" in card
    assert "hf-langspec typology" in card
