"""Language-specific Transformer layers (LSL; Pires et al. 2023): each example runs through its language's layer.

`LSL(x) = sum_l 1[lang(x) = l] Layer_l(x)`, `lang` the source or the target language as the position is indexed.
Checked against that definition computed independently: the plain baseline model holding, at every LSL position,
the weights of one example's languages, run on that example alone. Then the package's paths: the paper's placement,
parameter counts, the dense start (`interop.adapt`), folding one direction (`specialize`) and the experiment config.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import (
    LANGUAGES,
    assert_direction_folds,
    random_batch,
    run_readme_example,
    tiny_config,
    with_diverse_outputs,
)

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration, LSLConfig, LSLForConditionalGeneration
from hf_langspec.modeling.modeling_langspec import added_parameters

PLACEMENT = {"lsl_encoder_source_layers": [0], "lsl_encoder_target_layers": [1], "lsl_decoder_target_layers": [2]}
SIDE_OF = {("encoder", 0): "source", ("encoder", 1): "target", ("decoder", 2): "target"}


def lsl_model(**overrides) -> LSLForConditionalGeneration:
    torch.manual_seed(0)
    fields = {**PLACEMENT, **overrides}
    return with_diverse_outputs(LSLForConditionalGeneration(tiny_config(LSLConfig, **fields))).eval()


def plain_model_for(model: LSLForConditionalGeneration, src: int, tgt: int) -> LangSpecForConditionalGeneration:
    """The baseline with, at every LSL position, the `src`/`tgt` language's weights (sliced and transposed here by
    hand, as `nn.Linear` stores them), so that it is what one example's pass through the LSL model should be."""
    config = model.config.to_dict()
    for key in ("lsl_encoder_source_layers", "lsl_encoder_target_layers", "lsl_decoder_source_layers",
                "lsl_decoder_target_layers", "lsl_preset", "model_type", "architectures"):  # fmt: skip
        config.pop(key, None)
    plain = LangSpecForConditionalGeneration(LangSpecConfig(**config)).eval()
    state = {}
    for name, value in model.state_dict().items():
        if ".per_language_" not in name:
            state[name] = value
            continue
        stack, index = name.split(".")[1], int(name.split(".")[3])
        language = src if SIDE_OF[(stack, index)] == "source" else tgt
        weight = value[language]
        plain_name = name.replace("per_language_", "")
        state[plain_name] = weight.t() if weight.dim() == 2 and not name.split(".")[-2].endswith("norm") else weight
    missing, unexpected = plain.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("lm_head.weight") for k in missing)
    return plain


@pytest.mark.parametrize("strategy", ["auto", "gather", "group", "dense"])
def test_each_example_runs_through_its_own_languages_layers(strategy):
    """A batch of four directions: every example's logits equal the plain model holding its languages' layers."""
    model = lsl_model(routing_strategy=strategy)
    batch = random_batch(batch=4, seed=3)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([0, 2, 1, 2]), torch.tensor([1, 0, 3, 3])
    with torch.no_grad():
        logits = model(**batch).logits
        for b in range(4):
            plain = plain_model_for(model, int(batch["src_lang_ids"][b]), int(batch["tgt_lang_ids"][b]))
            alone = {k: v[b : b + 1] for k, v in batch.items() if not k.endswith("lang_ids")}
            torch.testing.assert_close(logits[b : b + 1], plain(**alone).logits, atol=1e-4, rtol=1e-4)


def test_a_layer_reads_only_the_language_it_is_indexed_by():
    model = lsl_model()
    batch = random_batch(batch=2, seed=4)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([0, 0]), torch.tensor([1, 1])
    source_layer = model.model.encoder.layers[0].self_attn.q_proj.per_language_weight
    with torch.no_grad():
        before = model(**batch).logits
        source_layer[1].mul_(3)  # language 1 is these examples' target, not their source: nothing changes
        torch.testing.assert_close(model(**batch).logits, before)
        source_layer[0].mul_(3)  # their source's layer: a change
        assert (model(**batch).logits - before).abs().max() > 1e-3


def layer_parameters(layer: torch.nn.Module) -> int:
    return sum(p.numel() for p in layer.parameters())


@pytest.mark.parametrize(
    "placement", [PLACEMENT, {"lsl_encoder_target_layers": [0, 1]}, {"lsl_decoder_source_layers": [0]}]
)
def test_each_lsl_position_holds_one_layer_per_language(placement):
    """Parameters: the baseline's plus `L - 1` copies of the shared layer at each LSL position, counted from the
    baseline's own layers; `added_parameters` reports exactly that difference."""
    lsl = LSLForConditionalGeneration(tiny_config(LSLConfig, **placement))
    base = LangSpecForConditionalGeneration(tiny_config(LangSpecConfig))
    extra = 0
    for key, layers in placement.items():
        stack = getattr(base.model, key.split("_")[1])
        extra += sum((len(LANGUAGES) - 1) * layer_parameters(stack.layers[i]) for i in layers)
    assert lsl.num_parameters() == base.num_parameters() + extra
    assert added_parameters(lsl) == extra


def test_the_papers_placement_is_source_low_and_target_high_in_a_16_layer_encoder():
    config = tiny_config(LSLConfig, encoder_layers=16, lsl_preset="paper")
    assert config.lsl_encoder_source_layers == [2, 3] and config.lsl_encoder_target_layers == [12, 13, 14]
    sides = [config.lsl_side("encoder", i) for i in range(16)]
    assert sides.count(None) == 11 and sides[2:4] == ["source"] * 2 and sides[12:15] == ["target"] * 3
    model = LSLForConditionalGeneration(
        tiny_config(LSLConfig, encoder_layers=16, decoder_layers=3, lsl_preset="paper")
    )
    kinds = [type(layer).__name__ for layer in model.model.encoder.layers]
    assert kinds.count("LanguageSpecificEncoderLayer") == 5
    again = LSLConfig.from_dict(config.to_dict())  # a saved preset reloads (its lists are the preset's)
    assert again.lsl_encoder_target_layers == [12, 13, 14]


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"lsl_preset": "paper"}, "16-layer encoder"),
     ({"lsl_preset": "nas"}, "lsl_preset='nas' is unknown"),
     ({}, "at least one language-specific layer"),
     ({"lsl_encoder_target_layers": [2]}, r"encoder layers \[2\] do not exist"),
     ({"lsl_encoder_source_layers": [1], "lsl_encoder_target_layers": [1]}, "as source- and as target-indexed"),
     ({"lsl_decoder_target_layers": [1, 1]}, "more than once"),
     ({"lsl_encoder_source_layers": [0.5]}, "whole numbers from 0"),
     ({"lsl_encoder_source_layers": [0], "languages": [], "lang_tag_token_ids": None}, "needs `languages`")],
)  # fmt: skip
def test_impossible_lsl_settings_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(LSLConfig, **fields)


def test_the_dense_start_copies_the_shared_layer_to_every_language():
    """Dense pre-training's start (`interop.adapt` from a baseline): every language's layer is the shared one,
    so the LSL model computes the baseline's logits (adapt checks them itself); then training one language's layer
    changes that language's examples only."""
    from hf_langspec.interop import adapt

    torch.manual_seed(0)
    base = with_diverse_outputs(LangSpecForConditionalGeneration(tiny_config(LangSpecConfig))).eval()
    model = adapt(base, "lsl", **PLACEMENT).eval()
    shared = base.model.encoder.layers[1].fc1.weight
    stacked = model.model.encoder.layers[1].fc1.per_language_weight
    assert all(torch.equal(stacked[language], shared.t()) for language in range(len(LANGUAGES)))
    batch = random_batch(batch=2, seed=5)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([0, 1]), torch.tensor([2, 3])
    with torch.no_grad():
        stacked[3].add_(
            torch.randn_like(stacked[3])
        )  # the second example's target: the encoder's target-indexed layer
        changed = (model(**batch).logits - base(**batch).logits).abs().amax(dim=(1, 2))
    assert changed[0] == 0 and changed[1] > 1e-3


@pytest.mark.parametrize(("src", "tgt"), [("fr", "en"), ("en", "es")])
def test_one_direction_folds_into_a_plain_model(src, tgt):
    assert_direction_folds(lsl_model(normalize_before=True), src, tgt)


def test_the_example_config_builds_an_lsl_model_with_the_documented_layers():
    from pathlib import Path

    from hf_langspec.modeling.registry import model_classes
    from hf_langspec.training.config import load_config

    config = load_config(Path(__file__).parents[1] / "examples/configs/bible_lsl_cpu.yaml")
    fields = {k: v for k, v in config["model"].items() if k != "class"}
    config_class, model_class = model_classes()[config["model"]["class"]]
    model = model_class(tiny_config(config_class, **{**fields, "d_model": 32, "encoder_ffn_dim": 64,
                                                     "decoder_ffn_dim": 48}))  # fmt: skip
    kinds = [(type(layer).__name__, getattr(layer, "language_side", None)) for layer in model.model.encoder.layers]
    assert kinds == [("LanguageSpecificEncoderLayer", "source"), ("LanguageSpecificEncoderLayer", "target")]
    assert all(type(layer).__name__ == "LangSpecDecoderLayer" for layer in model.model.decoder.layers)


def test_the_readmes_lsl_example_runs_and_builds_what_it_says():
    model = run_readme_example("LSL: language-specific Transformer layers")["model"]
    assert [type(layer).__name__ for layer in model.model.encoder.layers] == ["LanguageSpecificEncoderLayer"] * 2
    assert [layer.language_side for layer in model.model.encoder.layers] == ["source", "target"]


def test_a_layer_run_on_its_rows_sorted_by_language_trains_as_the_gathered_one(monkeypatch):
    """`group` routing runs an LSL layer once on its rows sorted by language (`LanguageContext.sorted_by`): its loss
    and every gradient equal `gather`'s, which keeps the batch order, in training with dropout off."""
    from hf_langspec.modeling.routing import LanguageContext

    sorted_by, calls = LanguageContext.sorted_by, []
    monkeypatch.setattr(LanguageContext, "sorted_by", lambda self, side: calls.append(side) or sorted_by(self, side))
    batch = random_batch(batch=6, seed=8)
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([2, 0, 2, 1, 0, 2]), torch.tensor([1, 3, 0, 0, 3, 1])
    grads = {}
    for strategy in ("gather", "group"):
        model = lsl_model(routing_strategy=strategy).train()
        model.config.dropout = 0.0
        loss = model(**batch, labels=batch["decoder_input_ids"]).loss
        loss.backward()
        grads[strategy] = (loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None})
    assert calls == ["source", "target", "target"]  # group's three LSL layers, each sorted once; gather's none
    torch.testing.assert_close(grads["group"][0], grads["gather"][0])
    assert grads["group"][1].keys() == grads["gather"][1].keys()
    for name, grad in grads["gather"][1].items():
        torch.testing.assert_close(grads["group"][1][name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.slow
def test_a_run_trains_the_languages_layers_and_writes_its_card(tmp_path):
    """`train` end to end: the card names the language-specific layers and the saved model reloads as LSL."""
    from test_training import tiny_run_config
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.training.experiment import run_experiment

    config = tiny_run_config(tmp_path, model={"class": "lsl", "lsl_encoder_target_layers": [0]},
                     training={"max_steps": 4, "learning_rate": 0.01})  # fmt: skip
    outcome = run_experiment(config)
    card = (Path(outcome["model_dir"]) / "README.md").read_text()
    assert "## Language-specific layers" in card and "Encoder layers [0] (from 0): one per target language" in card
    model = AutoModelForSeq2SeqLM.from_pretrained(outcome["model_dir"]).eval()
    assert type(model.model.encoder.layers[0]).__name__ == "LanguageSpecificEncoderLayer"


def test_the_placement_search_mixes_three_layers_and_reads_its_largest_weights():
    """Section 3's search: each encoder position is `softmax(alpha)`-weighted shared, source- and target-indexed
    layers (checked against the three layers run alone), and the placement is each position's largest weight."""
    torch.manual_seed(0)
    model = with_diverse_outputs(LSLForConditionalGeneration(tiny_config(LSLConfig, lsl_search=True))).eval()
    layer = model.model.encoder.layers[1]
    assert torch.equal(layer.choice_logits, torch.zeros(3))  # equal weights to start
    from hf_langspec.modeling.routing import LanguageContext

    with torch.no_grad():
        layer.choice_logits.copy_(torch.tensor([0.2, -0.4, 1.0]))
        x = torch.randn(3, 5, 32)
        lang = LanguageContext(torch.tensor([0, 2, 1]), torch.tensor([1, 0, 3]), num_languages=4, batch_size=3)
        weights = torch.softmax(torch.tensor([0.2, -0.4, 1.0]), 0)
        parts = [layer.shared(x, None, lang, {}), layer.source(x, None, lang, {}), layer.target(x, None, lang, {})]
        torch.testing.assert_close(
            layer(x, None, lang, {}), sum(w * part for w, part in zip(weights, parts, strict=True))
        )
        model.model.encoder.layers[0].choice_logits.copy_(torch.tensor([0.0, 3.0, 1.0]))
    found = model.searched_placement()
    assert found["lsl_encoder_source_layers"] == [0] and found["lsl_encoder_target_layers"] == [1]
    assert len(found["weights"]) == 2 and abs(sum(found["weights"][0]) - 1) < 1e-6
    LSLConfig(**{**model.config.to_dict(), "lsl_search": False, **{k: v for k, v in found.items() if k != "weights"}})
    batch = random_batch(batch=2, seed=1)
    model.train()
    model(**batch, labels=batch["decoder_input_ids"]).loss.backward()
    assert model.model.encoder.layers[0].choice_logits.grad.abs().sum() > 0  # the mix is learned


def test_the_search_is_refused_with_a_placement_or_a_dense_start():
    with pytest.raises(ValueError, match="searches the placement itself"):
        tiny_config(LSLConfig, lsl_search=True, lsl_encoder_target_layers=[1])
    from hf_langspec.interop import adapt

    base = LangSpecForConditionalGeneration(tiny_config(LangSpecConfig))
    with pytest.raises(ValueError, match="trained from scratch"):
        adapt(base, "lsl", lsl_search=True)
