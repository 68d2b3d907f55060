"""The adapter-family baselines: Bapna & Firat, monolingual adapters (Philip et al.), the LAA paper's matrix
adapter and LS-MNMT, all on the one adapter module HLT-MT's pool uses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import LANGUAGES, assert_round_trips, random_batch, tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_langspec import AdapterConfig, AdapterForConditionalGeneration, LangSpecForConditionalGeneration
from hf_langspec.modeling.routing import LanguageContext

PAIRS = [["en", "de"], ["de", "en"], ["en", "fr"], ["fr", "en"], ["es", "en"]]


def adapter_model(seed: int = 0, **overrides) -> AdapterForConditionalGeneration:
    torch.manual_seed(seed)
    overrides = {"adapter_dim": 8, "language_pairs": PAIRS} | overrides
    model = AdapterForConditionalGeneration(tiny_config(AdapterConfig, **overrides)).eval()
    with torch.no_grad():  # distinct norms and biases, so a wrong adapter shows
        for name, p in model.named_parameters():
            if ".adapters." in name and ("bias" in name or "norm_weight" in name):
                p.uniform_(0.5, 1.5)
    return model


def by_hand(adapters, h: torch.Tensor, slot: int, key: int) -> torch.Tensor:
    """One adapter written out: [LN] -> W1 -> ReLU -> W2 -> residual -> [LN] (or h + h W)."""
    a = adapters

    def norm(x):
        return F.layer_norm(x, (x.shape[-1],), a.norm_weight[slot, key], a.norm_bias[slot, key])

    x = norm(h) if a.norm == "pre" else h
    if a.form == "matrix":
        out = h + x @ a.fc1[slot, key]
    else:
        out = h + F.relu(x @ a.fc1[slot, key] + a.fc1_bias[slot, key]) @ a.fc2[slot, key] + a.fc2_bias[slot, key]
    return norm(out) if a.norm == "post" else out


def directions(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    chosen = [PAIRS[i] for i in torch.randint(0, len(PAIRS), (n,), generator=g).tolist()]
    return (
        torch.tensor([LANGUAGES.index(s) for s, _ in chosen]),
        torch.tensor([LANGUAGES.index(t) for _, t in chosen]),
    )


@pytest.mark.parametrize("preset", ["bapna_firat", "monolingual", "monolingual_matrix", "ls_mnmt"])
@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 6), seed=st.integers(0, 10_000), strategy=st.sampled_from(["gather", "group", "dense"]))
def test_each_example_gets_its_own_adapter_in_a_mixed_batch(preset, n, seed, strategy):
    model = adapter_model(adapter_preset=preset, routing_strategy=strategy)
    src, tgt = directions(n, seed)
    h = torch.randn(n, 5, 32, generator=torch.Generator().manual_seed(seed))
    for side in model.config.adapter_stacks:
        module = model.adapters(side)
        lang = LanguageContext(src, tgt, len(LANGUAGES), n, strategy)
        layers = [None] if model.config.adapter_position == "top" else range(2)
        for layer in layers:
            out = module(h, lang, layer)
            slot = layer if module.per_layer else 0
            for b in range(n):
                if module.key == "pair":
                    key = PAIRS.index([LANGUAGES[src[b]], LANGUAGES[tgt[b]]])
                else:
                    key = int((src if side == "encoder" else tgt)[b])
                torch.testing.assert_close(out[b], by_hand(module.adapters, h[b], slot, key), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("preset", "encoder_point", "decoder_point", "per_adapter"),
    [
        ("bapna_firat", "ffn_out", "ffn_out", 2 * 32 * 8 + 8 + 3 * 32),
        ("monolingual", "ffn_out", "ffn_out", 2 * 32 * 8 + 8 + 3 * 32),
        ("monolingual_matrix", None, "ffn_out", 32 * 32),
        ("ls_mnmt", None, "dec_top", 2 * 32 * 48 + 48 + 3 * 32),
    ],
)
def test_the_presets_build_the_documented_adapters(preset, encoder_point, decoder_point, per_adapter):
    overrides = {} if preset == "ls_mnmt" else {"adapter_dim": 8}
    torch.manual_seed(0)
    model = AdapterForConditionalGeneration(
        tiny_config(AdapterConfig, adapter_preset=preset, language_pairs=PAIRS, **overrides)
    )
    config = model.config
    keys = len(PAIRS) if config.adapter_key == "pair" else len(LANGUAGES)
    for side, point, layers in (("encoder", encoder_point, 2), ("decoder", decoder_point, 3)):
        stack = getattr(model.model, side)
        assert list(stack.insertions) == ([point] if point else [])
        if point:
            slots = layers if point == "ffn_out" and not config.adapter_share_layers else 1
            count = sum(p.numel() for p in stack.insertions[point].parameters())
            assert count == slots * keys * per_adapter
    baseline = LangSpecForConditionalGeneration(tiny_config(language_pairs=PAIRS))
    extra = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in baseline.parameters())
    assert extra == sum(p.numel() for n, p in model.named_parameters() if ".insertions." in n)


@pytest.mark.parametrize("preset", ["bapna_firat", "monolingual"])
def test_adapters_with_a_zero_output_projection_are_the_baseline_exactly(preset):
    model = adapter_model(adapter_preset=preset, adapter_norm="none")
    with torch.no_grad():
        for side in ("encoder", "decoder"):
            model.adapters(side).adapters.fc2.zero_()
            model.adapters(side).adapters.fc2_bias.zero_()
    baseline = LangSpecForConditionalGeneration(tiny_config(language_pairs=PAIRS)).eval()
    missing, unexpected = baseline.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(".insertions." in k for k in unexpected)
    src, tgt = directions(3, 1)
    batch = random_batch() | {"src_lang_ids": src, "tgt_lang_ids": tgt}
    torch.testing.assert_close(model(**batch).logits, baseline(**batch).logits, atol=0, rtol=0)


def test_the_encoder_reads_the_source_language_and_the_decoder_the_target():
    model = adapter_model(adapter_preset="monolingual")
    batch = random_batch()
    encode = model.get_encoder()
    first = encode(
        batch["input_ids"],
        batch["attention_mask"],
        src_lang_ids=batch["src_lang_ids"],
        tgt_lang_ids=batch["tgt_lang_ids"],
    )
    other_target = encode(
        batch["input_ids"],
        batch["attention_mask"],
        src_lang_ids=batch["src_lang_ids"],
        tgt_lang_ids=(batch["tgt_lang_ids"] + 1) % 4,
    )
    other_source = encode(
        batch["input_ids"],
        batch["attention_mask"],
        src_lang_ids=(batch["src_lang_ids"] + 1) % 4,
        tgt_lang_ids=batch["tgt_lang_ids"],
    )
    torch.testing.assert_close(first.last_hidden_state, other_target.last_hidden_state, atol=0, rtol=0)
    assert not torch.allclose(first.last_hidden_state, other_source.last_hidden_state)


def test_pair_adapters_refuse_an_untrained_direction_and_monolingual_ones_compose_it():
    batch = random_batch(batch=2) | {"src_lang_ids": torch.tensor([1, 0]), "tgt_lang_ids": torch.tensor([2, 1])}
    with pytest.raises(ValueError, match=r"no adapter for \['de-fr'\].*adapter_key='language'"):
        adapter_model(adapter_preset="bapna_firat")(**batch)
    assert torch.isfinite(adapter_model(adapter_preset="monolingual")(**batch).logits).all()


def test_beam_search_routes_each_example_to_its_own_adapters():
    model = adapter_model(adapter_preset="bapna_firat")
    src, tgt = directions(3, 5)
    batch = random_batch() | {"src_lang_ids": src, "tgt_lang_ids": tgt}
    batch = {k: v for k, v in batch.items() if not k.startswith("decoder_")}
    together = model.generate(**batch, num_beams=3, max_new_tokens=6, do_sample=False)
    for b in range(3):
        alone = model.generate(
            **{k: v[b : b + 1] for k, v in batch.items()}, num_beams=3, max_new_tokens=6, do_sample=False
        )
        assert together[b, : alone.shape[1]].tolist() == alone[0].tolist()


def test_bad_adapter_configs_are_named():
    with pytest.raises(ValueError, match="adapter_preset='houlsby' is unknown"):
        tiny_config(AdapterConfig, adapter_preset="houlsby")
    with pytest.raises(ValueError, match="adapter_key='pair' needs language_pairs"):
        tiny_config(AdapterConfig)
    with pytest.raises(ValueError, match="adapter_stacks"):
        tiny_config(AdapterConfig, adapter_stacks=["middle"], language_pairs=PAIRS)
    with pytest.raises(ValueError, match="adapter_norm='both'"):
        tiny_config(AdapterConfig, adapter_norm="both", language_pairs=PAIRS)


def test_adapter_checkpoints_load_through_auto_and_as_remote_code(tmp_path):
    model = adapter_model(adapter_preset="monolingual", adapter_stacks=["decoder"])
    config = AdapterConfig.from_pretrained(_saved(model, tmp_path / "cfg"))
    assert config.adapter_preset == "monolingual" and config.adapter_stacks == ["decoder"] and config.adapter_dim == 8
    assert_round_trips(model, random_batch(), tmp_path)


def _saved(model, path):
    model.config.save_pretrained(path)
    return path


def test_the_config_pipeline_trains_monolingual_adapters_and_writes_their_card(tmp_path):
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    model = {"class": "adapter", "adapter_preset": "monolingual", "adapter_dim": 8}
    outcome = run_experiment(tiny_run_config(tmp_path, model=model, evaluation={"max_sentences_per_direction": 2}))
    card = (outcome["model_dir"] / "README.md").read_text()
    assert "Bapna and Firat" in card and "- Preset: monolingual" in card
    assert "One adapter per language (source in the encoder, target in the decoder)" in card
    assert outcome["results"]  # evaluated through generate with the adapters
