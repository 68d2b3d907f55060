"""The language contract and the configuration's error messages."""

from __future__ import annotations

import command_server
import pytest
import torch
from conftest import LANGUAGES, random_batch, tiny_config, with_diverse_outputs
from hypothesis import given
from hypothesis import strategies as st
from test_variants import OVERRIDES as VARIANT_OVERRIDES

from hf_langspec import LangSpecConfig
from hf_langspec.modeling.registry import model_classes
from hf_langspec.training.config import validate_config
from hf_langspec_cli.config_file import ConfigError


def test_language_contract_round_trips_through_save(tmp_path):
    config = tiny_config(
        central_language="en",
        high_resource_languages=["de"],
        language_pairs=["en-de", ["de", "fr"]],
        lang_tag_style="target",
    )
    config.save_pretrained(tmp_path)
    loaded = LangSpecConfig.from_pretrained(tmp_path)
    assert loaded.languages == ["en", "de", "fr", "es"]
    assert loaded.language_pairs == [["en", "de"], ["de", "fr"]]
    assert (loaded.central_language, loaded.high_resource_languages) == ("en", ["de"])
    assert loaded.lang_tag_token_ids == [4, 5, 6, 7] and loaded.lang_tag_style == "target"
    assert loaded.language_ids(["fr", "en"]) == [2, 0] and loaded.pair_id("de", "fr") == 1


@given(d_model=st.integers(1, 96), heads=st.integers(1, 16))
def test_heads_must_divide_d_model(d_model, heads):
    if d_model % heads == 0:
        assert (
            LangSpecConfig(d_model=d_model, encoder_attention_heads=heads, decoder_attention_heads=heads).d_model
            == d_model
        )
    else:
        with pytest.raises(ValueError, match=f"encoder_attention_heads={heads} does not divide d_model={d_model}"):
            LangSpecConfig(d_model=d_model, encoder_attention_heads=heads, decoder_attention_heads=heads)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            dict(lang_tag_style="prefix"),
            r"lang_tag_style='prefix' is not supported; use one of \['source', 'target', 'both', 'none'\]",
        ),
        (dict(position_embedding_type="rope"), "position_embedding_type='rope' is not supported"),
        (dict(languages=["en", "de", "en"], lang_tag_token_ids=None), r"languages lists \['en'\] more than once"),
        (dict(lang_tag_token_ids=[4, 5]), "lang_tag_token_ids has 2 ids for 4 languages"),
        (dict(lang_tag_token_ids=[4, 5, 6, 500]), r"lang_tag_token_ids \[500\] are outside the vocabulary"),
        (dict(lang_tag_style="target", lang_tag_token_ids=None), "lang_tag_style='target' needs lang_tag_token_ids"),
        (dict(central_language="zh"), r"central_language='zh' is not in languages"),
        (dict(high_resource_languages=["en", "xx"]), r"high_resource_languages \['xx'\]"),
        (dict(language_pairs=[["en", "xx"]]), "language_pairs"),
        (dict(language_pairs=["zh-Hans-en"]), "ambiguous"),
        (dict(languages=[], lang_tag_token_ids=None, language_embedding="additive"), "needs the `languages` list"),
        (dict(tie_word_embeddings=False), "tie_word_embeddings=False is not supported"),
        (dict(activation_function="swishy"), "activation_function='swishy' is unknown"),
        (dict(dropout=1.0), r"dropout=1.0 must be in \[0, 1\)"),
        (dict(encoder_layers=0), "encoder_layers=0 must be at least 1"),
        (dict(decoder_layers=-2), "decoder_layers=-2 must be at least 1"),
        (dict(pad_token_id=500), r"pad_token_id=500 must be an id in \[0, vocab_size=120\)"),
    ],
)
def test_impossible_configs_name_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**overrides)


def test_unknown_language_code_names_the_known_ones():
    with pytest.raises(
        ValueError, match=r"Unknown language code 'zh': config.languages is \['en', 'de', 'fr', 'es'\]"
    ):
        tiny_config().language_id("zh")
    with pytest.raises(ValueError, match=r"Direction en->zh is not in config.language_pairs"):
        tiny_config().pair_id("en", "zh")


def test_the_config_schema_prints_every_section_and_key_the_validation_knows():
    """`hf-langspec train --help-config`: every section and every key the checks accept, with types and defaults."""

    from hf_langspec.training.config_schema import schema_table
    from hf_langspec_cli import config_file as schema

    printed = command_server.run("train", "--help-config", capture_output=True, text=True, check=True).stdout
    assert printed == schema_table() + "\n"
    rows = [line.split("|")[1:-1] for line in printed.splitlines() if line.startswith("|")]
    assert all(len(row) == 4 for row in rows)  # no type or default breaks the Markdown table
    sections = {row[0].strip().strip("*") for row in rows if row[0].strip()} - {"section", "---"}
    assert sections == schema.SECTIONS
    keys = {row[1].strip() for row in rows}
    for known in (schema.DATA_KEYS - {"bible"}) | schema.TOKENIZER_KEYS | schema.EVALUATION_KEYS | schema.CARD_KEYS:
        assert known in keys, known
    assert "| | num_beams | int | 4 |" in printed and "| | lr_scheduler_type | str | 'inverse_sqrt' |" in printed
    assert "| | max_length | int or None | 100 |" in printed and "| | bible.valid_chapters | int | 30 |" in printed


@pytest.mark.parametrize(
    ("bible", "sets"),
    [
        ({"languages": ["en", "de", "fr"]}, ["supervised", "zero-shot"]),
        ({"languages": ["en", "de"]}, ["supervised"]),  # one language besides the pivot: no zero-shot direction
        ({"languages": ["en", "de", "fr"], "directions": "all"}, ["supervised"]),  # every direction trained
        ({"languages": ["de", "fr"], "pivot": "de"}, ["supervised"]),
    ],
)
def test_a_bible_corpus_has_a_zero_shot_test_set_only_where_it_has_zero_shot_directions(bible, sets):
    """Before, a two-language Bible corpus (a pretrained start on en/de, guide/pretrained.md's config) stopped the run
    with "The zero-shot test set is empty"."""
    from hf_langspec.training.config import named_test_files

    assert list(named_test_files({"bible": bible})) == sets


NO_TAG_CASES = {
    "baseline": ("baseline", {}),
    "baseline, additive language embedding": ("baseline", {"language_embedding": "additive"}),
    "sCLM (shared maps)": ("clm", {"clm_num_features": 4}),
    **{name: (name, overrides) for name, overrides in VARIANT_OVERRIDES.items()},
}


@pytest.mark.reliability
@pytest.mark.parametrize("case", list(NO_TAG_CASES))
def test_no_tag_is_refused_exactly_where_the_model_cannot_know_the_target(case, tmp_path):
    """Issue 75's class of settings valid alone and meaningless together: `lang_tag_style: none` with a model that
    never reads the target language translates every direction into one language. Independently of the check (a
    forward on the meta device without the target's ids), a real model's logits are compared for two targets: the
    config is refused exactly when they are equal."""
    name, overrides = NO_TAG_CASES[case]
    config_class, model_class = model_classes()[name]
    model = with_diverse_outputs(model_class(tiny_config(config_class, **overrides))).eval()
    batch = random_batch(batch=2, seed=3)
    with torch.no_grad():
        logits = [model(**{**batch, "src_lang_ids": torch.tensor([0, 0]), "tgt_lang_ids": torch.tensor([t, t])}).logits
                  for t in (1, 2)]  # fmt: skip
    reads_target = not torch.allclose(logits[0], logits[1])
    shape = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 3, "encoder_attention_heads": 4,
             "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 48}  # fmt: skip
    config = {"output_dir": str(tmp_path / "run"), "data": {"bible": {"languages": list(LANGUAGES)}},
              "tokenizer": {"lang_tag_style": "none"}, "model": {"class": name, **shape, **overrides}}  # fmt: skip
    if reads_target:
        validate_config(config)
    else:
        with pytest.raises(ConfigError, match=rf"lang_tag_style: none leaves model class '{name}' no way to know the "
                                              r"target language .* keep a tag"):  # fmt: skip
            validate_config(config)
    for style in ("source", "target"):  # a tag names the target: every model is accepted
        validate_config({**config, "tokenizer": {"lang_tag_style": style}})


STAGE_CASES = {
    "an empty direction list": ([], "baseline", r"directions is an empty list, so the stage trains nothing"),
    "high_resource without high-resource languages": (
        "high_resource", "baseline", r"directions: high_resource picks the directions between "
        r"model.high_resource_languages, which class 'baseline' does not have"),
    "a language the corpus lacks": (["en-xx"], "baseline", r"the corpus trains no \['en-xx'\]; its directions are en-de"),
    "a zero-shot direction": (["en-de", "de-fr"], "baseline", r"the corpus trains no \['de-fr'\]"),
}  # fmt: skip


@pytest.mark.reliability
@pytest.mark.parametrize("case", list(STAGE_CASES))
def test_a_stage_whose_directions_train_nothing_or_something_else_is_refused_as_the_config_is_read(case, tmp_path):
    """Issue 75's settings pass, stage lists: each was accepted as the config was read and failed (or, for a list
    naming one absent direction, trained the others without a word) once the corpus and the model were built."""
    directions, model_class, message = STAGE_CASES[case]
    config = {"output_dir": str(tmp_path / "run"), "data": {"bible": {"languages": ["en", "de", "fr"]}},
              "model": {"class": model_class}, "training": {"max_steps": 10},
              "stages": [{"name": "first", "directions": directions, "training": {"max_steps": 4}},
                         {"name": "rest", "training": {"max_steps": 6}}]}  # fmt: skip
    with pytest.raises(ConfigError, match=message):
        validate_config(config)
    config["stages"][0]["directions"] = ["en-de", "de-en"]  # the corpus's directions: accepted
    validate_config(config)
