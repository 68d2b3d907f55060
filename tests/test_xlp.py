"""XLP in translation (Luo et al.): the language projection at the embed insertion point."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import LANGUAGES, assert_round_trips, generation_inputs, random_batch, tiny_config

from hf_langspec import LangSpecForConditionalGeneration, XLPForConditionalGeneration, XLPMTConfig


def xlp_model(seed: int = 0, **overrides) -> XLPForConditionalGeneration:
    torch.manual_seed(seed)
    return XLPForConditionalGeneration(
        XLPMTConfig(**tiny_config(**overrides).to_diff_dict() | {"model_type": None})
    ).eval()


def xlp_like(baseline: LangSpecForConditionalGeneration) -> XLPForConditionalGeneration:
    """An XLP model with the baseline's weights (built from tiny_config()) and identity projections."""
    config = XLPMTConfig(
        **{k: v for k, v in baseline.config.to_dict().items() if k not in ("model_type", "transformers_version")}
    )
    model = XLPForConditionalGeneration(config).eval()
    missing, unexpected = model.load_state_dict(baseline.state_dict(), strict=False)
    assert not unexpected and sorted(missing) == [
        "model.decoder.insertions.embed.weight",
        "model.encoder.insertions.embed.weight",
    ]
    return model


@pytest.fixture
def pair():
    torch.manual_seed(0)
    baseline = LangSpecForConditionalGeneration(tiny_config()).eval()
    return baseline, xlp_like(baseline)


def test_identity_projections_reproduce_the_baseline(pair):
    baseline, xlp = pair
    batch = random_batch(batch=4, seed=2)
    torch.testing.assert_close(xlp(**batch).logits, baseline(**batch).logits, atol=1e-6, rtol=0)
    encoder = generation_inputs(batch)
    assert torch.equal(
        xlp.generate(**encoder, num_beams=3, max_new_tokens=6),
        baseline.generate(**encoder, num_beams=3, max_new_tokens=6),
    )


@pytest.mark.parametrize(("stack", "ids_key"), [("encoder", "src_lang_ids"), ("decoder", "tgt_lang_ids")])
def test_a_projection_changes_only_its_languages_examples(pair, stack, ids_key):
    _, xlp = pair
    batch = random_batch(batch=4, seed=3)
    batch[ids_key] = torch.tensor([0, 2, 0, 1])
    before = xlp(**batch).logits
    with torch.no_grad():
        getattr(xlp.model, stack).insertions["embed"].weight[2].mul_(1.5).add_(0.01)
    after = xlp(**batch).logits
    torch.testing.assert_close(after[[0, 2, 3]], before[[0, 2, 3]], atol=0, rtol=0)
    assert (after[1] - before[1]).abs().max() > 1e-3


def test_gradients_reach_only_the_languages_in_the_batch(pair):
    _, xlp = pair
    xlp.train()
    batch = random_batch(batch=3, seed=4)
    batch["src_lang_ids"] = torch.tensor([1, 1, 3])
    labels = batch.pop("decoder_input_ids")
    del batch["decoder_attention_mask"]
    xlp(**batch, labels=labels).loss.backward()
    grad = xlp.model.encoder.insertions["embed"].weight.grad
    assert [bool(grad[i].abs().sum() > 0) for i in range(len(LANGUAGES))] == [False, True, False, True]


def test_xlp_errors_name_the_fix():
    model = xlp_model()
    batch = random_batch()
    del batch["src_lang_ids"]
    with pytest.raises(ValueError, match=r"XLP \(the language projection\) needs `src_lang_ids`"):
        model(**batch)
    with pytest.raises(ValueError, match="XLP replaces the language embedding"):
        xlp_model(language_embedding="additive")
    with pytest.raises(ValueError, match="XLP needs `languages`"):
        XLPMTConfig(vocab_size=50, languages=[], lang_tag_token_ids=None)


@pytest.mark.slow
def test_xlp_checkpoints_load_through_auto_classes_and_as_remote_code(tmp_path):
    model = xlp_model(seed=5)
    with torch.no_grad():
        model.model.encoder.insertions["embed"].weight.add_(
            0.01 * torch.randn_like(model.model.encoder.insertions["embed"].weight)
        )
    assert_round_trips(model, random_batch(batch=2, seed=6), tmp_path)


def test_the_config_pipeline_trains_an_xlp_model_with_its_card(tmp_path):
    from test_training import tiny_run_config

    from hf_langspec.training.config import validate_config
    from hf_langspec.training.experiment import run_experiment
    from hf_langspec_cli.config_file import ConfigError

    outcome = run_experiment(
        tiny_run_config(
            tmp_path, model={"class": "xlp", "xlp_decoder": False}, evaluation={"max_sentences_per_direction": 2}
        )
    )
    saved = json.loads((outcome["model_dir"] / "config.json").read_text())
    assert saved["model_type"] == "langspec_xlp_mt" and saved["xlp_decoder"] is False
    assert "Luo" in (outcome["model_dir"] / "README.md").read_text()
    with pytest.raises(
        ConfigError,
        match=r"class='xlm' is unknown; use one of \['adapter', 'baseline', 'cll', 'clm', 'hlt', 'laa', 'lms', 'lora', 'lsl', 'xlp'\]",
    ):
        validate_config(tiny_run_config(tmp_path, model={"class": "xlm"}))
    with pytest.raises(ConfigError, match=r"unknown keys \['xlp_decoder'\]"):
        validate_config(tiny_run_config(tmp_path, model={"xlp_decoder": False}))  # an XLP field on the baseline


@pytest.fixture(scope="module")
def tok_and_models():
    from hf_langspec import LangSpecConfig, train_tokenizer

    texts = {code: ["happy glad sad car plane bike meat food rice"] * 3 for code in LANGUAGES}
    tok = train_tokenizer(texts, languages=LANGUAGES, vocab_size=60, show_progress=False)
    shape = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                 encoder_ffn_dim=16, decoder_ffn_dim=16)  # fmt: skip
    torch.manual_seed(0)
    xlp = XLPForConditionalGeneration(XLPMTConfig(**tok.model_config_kwargs(), **shape)).eval()
    additive = LangSpecForConditionalGeneration(
        LangSpecConfig(**tok.model_config_kwargs(), **shape, language_embedding="additive")
    ).eval()
    return tok, xlp, additive


def test_cross_language_similarity_of_projected_and_added_embeddings(tok_and_models):
    from hf_langspec.evaluation.language_encoding import cross_language_similarity, word_vector

    tok, xlp, additive = tok_and_models
    torch.testing.assert_close(cross_language_similarity(xlp, tok, "happy"), torch.ones(4, 4))  # identity projections
    with torch.no_grad():
        projections = xlp.model.encoder.insertions["embed"].weight
        saved = projections[1].clone()
        projections[1] = -torch.eye(16)
    try:
        sims = cross_language_similarity(xlp, tok, "happy")
    finally:
        with torch.no_grad():
            projections[1] = saved
    assert sims[0, 1].item() == pytest.approx(-1.0) and sims[0, 2].item() == pytest.approx(1.0)
    # additive: cos(w + l_s, w + l_t), by hand
    w = word_vector(additive, tok, "happy")
    table = additive.model.encoder.insertions["embed"].weight.detach()
    expected = torch.nn.functional.cosine_similarity((w + table).unsqueeze(1), (w + table).unsqueeze(0), dim=-1)
    torch.testing.assert_close(cross_language_similarity(additive, tok, "happy"), expected)


def test_word_similarity_and_heat_map(tok_and_models, tmp_path):
    from hf_langspec.evaluation.language_encoding import plot_similarity, word_similarity, word_vector

    tok, xlp, _ = tok_and_models
    words = ["happy", "glad", "sad", "car", "plane", "bike"]
    sims = word_similarity(xlp, tok, words, "en")
    raw = torch.stack([word_vector(xlp, tok, w) for w in words])
    expected = torch.nn.functional.cosine_similarity(raw.unsqueeze(1), raw.unsqueeze(0), dim=-1)
    torch.testing.assert_close(sims, expected)  # identity projection: the raw embeddings' similarities
    plot_similarity(sims, words, tmp_path / "words.png", title="XLP, en")
    assert (tmp_path / "words.png").stat().st_size > 5000
    with pytest.raises(ValueError, match="needs 6 labels, got 2"):
        plot_similarity(sims, words[:2], tmp_path / "bad.png")


def test_a_model_without_language_encoding_is_refused(tok_and_models):
    from hf_langspec import LangSpecConfig
    from hf_langspec.evaluation.language_encoding import cross_language_similarity

    tok, _, _ = tok_and_models
    plain = LangSpecForConditionalGeneration(LangSpecConfig(**tok.model_config_kwargs(), d_model=16, encoder_layers=1,
                                             decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                             encoder_ffn_dim=16, decoder_ffn_dim=16))  # fmt: skip
    with pytest.raises(ValueError, match="has no language encoding at its embed point"):
        cross_language_similarity(plain, tok, "happy")
