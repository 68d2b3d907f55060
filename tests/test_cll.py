"""CLL (Qu & Watanabe 2022): the central-language-aware layer, FCLL / SD / chosen layers, residual removal."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import LANGUAGES, assert_round_trips, generation_inputs, random_batch, tiny_config

from hf_langspec import CLLConfig, CLLForConditionalGeneration, LangSpecConfig, LangSpecForConditionalGeneration
from hf_langspec.modeling.routing import LanguageContext


def cll_model(seed: int = 0, **overrides) -> CLLForConditionalGeneration:
    torch.manual_seed(seed)
    overrides = {"central_language": "en", "cll_inner_dim": 16, "cll_dropout": 0.0} | overrides
    return CLLForConditionalGeneration(tiny_config(CLLConfig, **overrides)).eval()


def plain_like(model) -> LangSpecForConditionalGeneration:
    fields = {k: v for k, v in model.config.to_dict().items() if k in LangSpecConfig().to_dict() and k != "model_type"}
    plain = LangSpecForConditionalGeneration(LangSpecConfig(**fields)).eval()
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(".insertions." in k for k in unexpected)
    return plain


def test_zero_scales_reproduce_the_plain_decoder_exactly():
    model = cll_model()
    with torch.no_grad():
        model.cll().scale.zero_()
    batch = random_batch(seed=1)
    assert torch.equal(model(**batch).logits, plain_like(model)(**batch).logits)


def test_the_central_languages_outputs_never_depend_on_an_lsl_parameter():
    model = cll_model().train()
    batch = random_batch(batch=4, seed=2)
    batch["tgt_lang_ids"] = torch.tensor([0, 1, 0, 2])  # en (central), de, en, fr
    logits = model(**batch).logits
    logits[[0, 2]].sum().backward()  # only the central-language examples
    for name, parameter in model.cll().named_parameters():
        assert parameter.grad is None or torch.count_nonzero(parameter.grad) == 0, name
    model.zero_grad()
    model(**batch).logits[[1]].sum().backward()  # a de example reaches de's LSL, and only de's
    cll = model.cll()
    de, fr = cll.specific.index("de"), cll.specific.index("fr")
    assert torch.count_nonzero(cll.fc1.grad[:, de]) > 0 and torch.count_nonzero(cll.scale.grad[:, de]) > 0
    assert torch.count_nonzero(cll.fc1.grad[:, fr]) == 0


def test_the_lsl_term_is_t_times_a_small_ffn_per_target_language():
    model = cll_model(cll_layers=[1])
    cll = model.cll()
    with torch.no_grad():
        cll.scale.uniform_(0.5, 1.5)
        cll.fc1_bias.normal_()
        cll.fc2_bias.normal_()
    h = torch.randn(3, 4, 32)
    tgt = torch.tensor([2, 0, 3])  # fr, en (central), es
    lang = LanguageContext(None, tgt, len(LANGUAGES), 3)
    out = cll(h, lang, 1)
    for b, code in enumerate(["fr", "en", "es"]):
        if code == "en":
            assert torch.equal(out[b], torch.zeros_like(out[b]))
            continue
        i = cll.specific.index(code)
        lsl = F.relu(h[b] @ cll.fc1[0, i] + cll.fc1_bias[0, i]) @ cll.fc2[0, i] + cll.fc2_bias[0, i]
        torch.testing.assert_close(out[b], cll.scale[0, i] * lsl, atol=1e-5, rtol=0)
    assert torch.equal(cll(h, lang, 0), torch.zeros_like(h))  # layer 0 has no CLL


@pytest.mark.parametrize(
    ("cll_layers", "decoder_layers", "dropped"),
    [("fcll", [0, 1, 2], []), ("sd", [1], [[1, "ffn"]]), ([0, 2], [0, 2], [])],
)
def test_fcll_sd_and_chosen_layers_build_the_documented_layers(cll_layers, decoder_layers, dropped):
    model = cll_model(cll_layers=cll_layers)  # tiny: 2 encoder layers, 3 decoder layers
    assert model.cll().layers == decoder_layers
    assert model.config.encoder_drop_residual == dropped
    assert [sorted(layer.no_residual) for layer in model.model.encoder.layers] == [
        ["ffn"] if [i, "ffn"] in dropped else [] for i in range(2)
    ]
    expected = len(decoder_layers) * 3 * (2 * 32 * 16 + 16 + 32 + 1)  # 3 non-central languages
    assert sum(p.numel() for p in model.cll().parameters()) == expected


def _encoder_layer_by_hand(layer, h, drop: str | None):
    """A post-norm encoder layer written out, optionally without one residual connection."""
    q, k, v = (proj(h).view(1, -1, 4, 8).transpose(1, 2) for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj))  # fmt: skip
    attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, -1, 32)
    attn = layer.self_attn.out_proj(attn)
    h = layer.self_attn_layer_norm(attn if drop == "self_attn" else h + attn)
    ffn = layer.fc2(F.relu(layer.fc1(h)))
    return layer.final_layer_norm(ffn if drop == "ffn" else h + ffn)


@pytest.mark.parametrize(
    ("config_class", "overrides", "drop"),
    [
        (CLLConfig, {"cll_layers": "sd"}, "ffn"),  # SD: encoder layer N // 2 loses its FFN residual
        (LangSpecConfig, {"encoder_drop_residual": [[1, "self_attn"]]}, "self_attn"),  # Liu et al. 2021
    ],
)
def test_residual_removal_is_exactly_one_missing_residual(config_class, overrides, drop):
    config = tiny_config(config_class, **overrides | ({"central_language": "en"} if config_class is CLLConfig else {}))
    torch.manual_seed(3)
    model_class = CLLForConditionalGeneration if config_class is CLLConfig else LangSpecForConditionalGeneration
    model = model_class(config).eval()
    layer = model.model.encoder.layers[1]
    h = torch.randn(1, 5, 32)
    lang = LanguageContext(None, None, len(LANGUAGES), 1)
    out = layer(h, None, lang, {})
    torch.testing.assert_close(out, _encoder_layer_by_hand(layer, h, drop), atol=1e-5, rtol=0)
    assert not torch.allclose(out, _encoder_layer_by_hand(layer, h, None), atol=1e-3)
    assert model.model.encoder.layers[0].no_residual == frozenset()


def test_without_a_central_language_every_language_has_an_lsl():
    model = cll_model(central_language=None)
    assert model.cll().specific == LANGUAGES
    batch = random_batch(seed=4)
    batch["tgt_lang_ids"] = torch.zeros(3, dtype=torch.long)  # en now has an LSL too
    assert not torch.equal(model(**batch).logits, plain_like(model)(**batch).logits)


def test_one_language_batches_fold_the_lsl_into_one_wider_ffn():
    """At inference a batch of one non-central target runs FFN + t_l LSL_l as one FFN; outputs unchanged."""
    model = cll_model().to(torch.float64)
    cll = model.cll()
    with torch.no_grad():
        cll.scale.uniform_(0.5, 1.5)
        cll.fc1_bias.normal_()
        cll.fc2_bias.normal_()
    batch = random_batch(seed=6)
    batch["tgt_lang_ids"] = torch.tensor([2, 2, 2])  # fr
    inputs = generation_inputs(batch)
    calls = []
    cll.register_forward_hook(lambda *_: calls.append(1))
    unfolded = model(**batch).logits  # autograd on: the LSL branch runs
    assert calls
    calls.clear()
    generate = dict(num_beams=3, max_new_tokens=7, min_new_tokens=7, do_sample=False)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits, unfolded, atol=1e-10, rtol=0)
        generated = model.generate(**inputs, **generate)
        assert not calls and sorted(cll._folded) == cll.layers
        cll.folded_ffn = lambda *args: None  # the branch as in training
        assert torch.equal(model.generate(**inputs, **generate), generated) and calls
        del cll.folded_ffn
        cll._folded.clear()
        for targets in ([0, 0, 0], [1, 2, 1]):  # central, mixed: nothing to fold
            model(**batch | {"tgt_lang_ids": torch.tensor(targets)})
        cll.disabled = {"fr"}  # a dropped LSL is not folded in either
        model(**batch)
        cll.disabled = set()
        assert not cll._folded
        cll.scale.mul_(2)  # an in-place update is seen: the folded FFN is rebuilt
        changed = model(**batch).logits
    torch.testing.assert_close(changed, model(**batch).logits, atol=1e-10, rtol=0)
    assert not torch.allclose(changed, unfolded)


def test_dropping_a_languages_lsl_at_inference_rolls_it_back_to_the_plain_ffn():
    model = cll_model()
    batch = random_batch(seed=5)
    batch["tgt_lang_ids"] = torch.tensor([1, 2, 1])  # de, fr, de
    full = model(**batch).logits
    model.cll().disabled = {"de"}
    ablated = model(**batch).logits
    plain = plain_like(model)(**batch).logits
    torch.testing.assert_close(ablated[[0, 2]], plain[[0, 2]], atol=1e-6, rtol=0)
    torch.testing.assert_close(ablated[1], full[1], atol=1e-5, rtol=0)  # fr keeps its LSL


def test_bad_cll_configs_are_named():
    with pytest.raises(ValueError, match=r"cll_layers \[5\] are not decoder layers"):
        tiny_config(CLLConfig, cll_layers=[5])
    with pytest.raises(ValueError, match="cll_layers='all' must be"):
        tiny_config(CLLConfig, cll_layers="all")
    with pytest.raises(ValueError, match=r"encoder_drop_residual entry \[4, 'ffn'\]"):
        tiny_config(LangSpecConfig, encoder_drop_residual=[[4, "ffn"]])
    with pytest.raises(ValueError, match=r"CLL .* needs `tgt_lang_ids`"):
        cll_model()(**{k: v for k, v in random_batch().items() if k != "tgt_lang_ids"})


def test_the_config_pipeline_trains_fcll_without_tags_and_writes_its_card(tmp_path):
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    config = tiny_run_config(
        tmp_path, model={"class": "cll", "central_language": "en", "cll_inner_dim": 8},
        tokenizer={"lang_tag_style": "none"}, evaluation={"max_sentences_per_direction": 2},
    )  # fmt: skip
    outcome = run_experiment(config)
    saved = json.loads((outcome["model_dir"] / "config.json").read_text())
    assert saved["model_type"] == "langspec_cll" and saved["lang_tag_style"] == "none"
    card = (outcome["model_dir"] / "README.md").read_text()
    assert "Qu and Watanabe" in card and "CLL in: every decoder layer (FCLL)" in card


@pytest.mark.slow
def test_cll_checkpoints_load_through_auto_and_as_remote_code(tmp_path):
    model = cll_model(seed=8, cll_layers="sd")
    assert model.config.encoder_drop_residual == [[1, "ffn"]]
    assert_round_trips(model, random_batch(seed=9), tmp_path)


# ---------------------------------------------------------------------------- analyses
def _scaled_log_prob(model, batch, layer: int, alphas: dict[str, float]) -> float:
    """F with decoder `layer`'s FFN and LSL outputs scaled separately (written independently of the package)."""
    handles = [
        model.model.decoder.layers[layer].fc2.register_forward_hook(lambda m, a, out: out * alphas["ffn"]),
        model.cll().register_forward_hook(lambda m, a, out: out * alphas["lsl"] if a[2] == layer else out),
    ]
    try:
        with torch.no_grad():
            logits = model(**batch).logits.double()
    finally:
        for h in handles:
            h.remove()
    labels = batch["labels"]
    logp = logits.log_softmax(-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return float((logp * labels.ne(-100)).sum())


def test_integrated_gradients_match_a_brute_force_riemann_sum_and_are_complete():
    from hf_langspec.evaluation.cll_analysis import branch_attributions

    # GELU downstream keeps F smooth along the path, so finite differences have no ReLU kinks to straddle
    model = cll_model(seed=11, activation_function="gelu").double()
    with torch.no_grad():
        model.cll().scale.fill_(1.0)
    batch = random_batch(seed=12)
    batch["tgt_lang_ids"] = torch.tensor([1, 2, 0])
    batch["labels"] = batch["decoder_input_ids"].roll(-1, 1)
    result = branch_attributions(model, batch, layer=1, steps=64)
    steps, eps = 64, 1e-5
    brute = {"ffn": 0.0, "lsl": 0.0}
    for k in range(steps):  # midpoint Riemann sum of central finite differences along the straight path
        a = (k + 0.5) / steps
        for name in brute:
            up = {"ffn": a, "lsl": a} | {name: a + eps}
            down = {"ffn": a, "lsl": a} | {name: a - eps}
            brute[name] += (
                (_scaled_log_prob(model, batch, 1, up) - _scaled_log_prob(model, batch, 1, down)) / (2 * eps) / steps
            )
    for name in brute:
        assert result[name] == pytest.approx(brute[name], rel=1e-6), name
    assert result["ffn"] + result["lsl"] == pytest.approx(result["total"], rel=1e-2)
    assert result["lsl"] != 0.0


def test_lsl_scales_and_ablation_report_per_language(tmp_path):
    from hf_langspec import train_tokenizer
    from hf_langspec.evaluation.cll_analysis import lsl_ablation, lsl_scales, plot_lsl_scales

    texts = {c: [f"{c} word{i} other{i}" for i in range(6)] for c in LANGUAGES}
    tok = train_tokenizer(texts, languages=LANGUAGES, vocab_size=70, show_progress=False)
    torch.manual_seed(0)
    model = CLLForConditionalGeneration(tiny_config(CLLConfig, **tok.model_config_kwargs() | {
        "central_language": "en", "cll_inner_dim": 8, "cll_layers": [0, 2]})).eval()  # fmt: skip
    scales = lsl_scales(model)
    assert scales == {code: [pytest.approx(0.1)] * 2 for code in ["de", "fr", "es"]}
    plot_lsl_scales(model, tmp_path / "scales.png")
    assert (tmp_path / "scales.png").stat().st_size > 0

    def identifier(outputs):
        return ["de" if "de" in o else "xx" for o in outputs]

    identifier.name = "toy"
    report = lsl_ablation(
        model, tok, texts["fr"][:3], "fr", "de", identifier=identifier, num_beams=1, max_new_tokens=4
    )
    assert report["dropped"] == ["de"] and len(report["without_lsl"]["hypotheses"]) == 3
    assert sum(report["with_lsl"]["languages"].values()) == pytest.approx(1.0)
    assert model.cll().disabled == set()  # restored after the ablation
    with pytest.raises(ValueError, match=r"\['en'\] have no LSL"):
        lsl_ablation(model, tok, ["x"], "fr", "en", identifier=identifier)
