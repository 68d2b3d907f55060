"""CLM's ATP analysis (equation 4) and the Table 4 layout, as a function and as `hf-langspec clm-atp`."""

from __future__ import annotations

import json

import pytest
import torch

from hf_langspec import CLMConfig, CLMForConditionalGeneration, train_tokenizer
from hf_langspec.evaluation.feature_proportions import (
    average_token_proportions,
    most_similar,
    recording_proportions,
    similarity_table,
)
from hf_langspec.files import write_jsonl
from hf_langspec_cli import main

TEXTS = {
    "en": ["the man saw a dog", "a woman in the house", "the river near the house", "a cat and a dog"],
    "de": ["der mann sah einen hund", "eine frau im haus", "der fluss nahe dem haus", "eine katze und ein hund"],
    "fr": ["le homme vit un chien", "une femme dans la maison", "le fleuve près de la maison", "un chat et un chien"],
}


@pytest.fixture(scope="module")
def model_and_tokenizer():
    tok = train_tokenizer(TEXTS, languages=list(TEXTS), vocab_size=90, lang_tag_style="source", show_progress=False)
    config = CLMConfig(
        **tok.model_config_kwargs(), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0, clm_num_features=5,
        language_pairs=["en-de", "en-fr", "de-en", "fr-en"], clm_decoder="mclm",
    )  # fmt: skip
    torch.manual_seed(0)
    return CLMForConditionalGeneration(config).eval(), tok


def rows(src: str, tgt: str) -> list[dict[str, str]]:
    return [
        {"src_lang": src, "tgt_lang": tgt, "src": s, "tgt": t} for s, t in zip(TEXTS[src], TEXTS[tgt], strict=True)
    ]


def test_atp_equals_the_per_sentence_average_over_tokens_and_modules(model_and_tokenizer):
    model, tok = model_and_tokenizer
    data = rows("en", "de") + rows("en", "fr")
    atp = average_token_proportions(model, tok, data, batch_size=3, show_progress=False)
    for direction in ("en-de", "en-fr"):
        src, tgt = direction.split("-")
        totals = {"encoder": torch.zeros(5, dtype=torch.float64), "decoder": torch.zeros(5, dtype=torch.float64)}
        counts = {"encoder": 0, "decoder": 0}
        for row in rows(src, tgt):  # one unpadded sentence at a time: every position is a real token
            batch = tok(row["src"], text_target=row["tgt"], src_lang=src, tgt_lang=tgt, return_tensors="pt")
            with recording_proportions(model) as records, torch.no_grad():
                model(**batch)
            for side, calls in records.items():
                for _, _, p in calls:
                    totals[side] += p[0].double().sum(0)
                    counts[side] += p.shape[1]
        assert len(records["encoder"]) == 2 * 2 and len(records["decoder"]) == 3 * 2  # every sublayer's module
        for side in totals:
            torch.testing.assert_close(atp[direction][side].double(), totals[side] / counts[side], atol=1e-6, rtol=0)
            assert atp[direction][side].sum().item() == pytest.approx(1.0, abs=1e-5)
    assert not torch.allclose(atp["en-de"]["decoder"], atp["en-fr"]["decoder"])  # mCLM: a gate per pair


def test_most_similar_ranks_by_cosine_and_the_table_names_the_other_language():
    vectors = {
        "en-it": torch.tensor([1.0, 0.0, 0.0]),
        "en-es": torch.tensor([0.9, 0.1, 0.0]),
        "en-pt": torch.tensor([0.8, 0.3, 0.0]),
        "en-ru": torch.tensor([0.0, 0.2, 1.0]),
    }
    atp = {d: {"encoder": v, "decoder": v.flip(0)} for d, v in vectors.items()}
    # brute force: sort the others by cosine similarity
    cos = lambda a, b: float(a @ b / (a.norm() * b.norm()))  # noqa: E731
    for d, v in vectors.items():
        expected = sorted((o for o in vectors if o != d), key=lambda o: -cos(v, vectors[o]))
        assert most_similar(atp, "encoder", top=3)[d] == expected
    assert most_similar(atp, "encoder", top=2)["en-it"] == ["en-es", "en-pt"]
    table = similarity_table(atp, top=2)
    assert table.splitlines()[0] == "| rank | it enc | it dec | es enc | es dec | pt enc | pt dec | ru enc | ru dec |"
    assert table.splitlines()[2].startswith("| 1 | es | es | it | it |")
    with pytest.raises(ValueError, match="at least two directions"):
        most_similar({"en-it": atp["en-it"]}, "encoder")


def test_the_baseline_has_no_proportions_to_record():
    from conftest import tiny_model

    with pytest.raises(ValueError, match="no gated CLM module"), recording_proportions(tiny_model()):
        pass


def test_cli_clm_atp_prints_the_table_and_writes_the_vectors(model_and_tokenizer, tmp_path, capsys):
    model, tok = model_and_tokenizer
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    write_jsonl(tmp_path / "test.jsonl", rows("en", "de") + rows("en", "fr") + rows("de", "en"))
    code = main(["clm-atp", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "test.jsonl"),
                 "--top", "1", "--output", str(tmp_path / "atp.json")])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "| rank | en-de enc | en-de dec | en-fr enc | en-fr dec | de-en enc | de-en dec |"
    saved = json.loads((tmp_path / "atp.json").read_text())
    assert set(saved["atp"]) == {"en-de", "en-fr", "de-en"} and len(saved["atp"]["en-de"]["encoder"]) == 5
    assert saved["table"] == out.strip()


def test_token_statistics_match_a_hand_computation():
    from hf_langspec.evaluation.encoder_collapse import token_stats

    a, b = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 2.0, 0.0])
    states = torch.stack([torch.stack([a, b, a]), torch.stack([a, a, a])])  # sentence 2: one token repeated
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])  # sentence 1: a and b (orthogonal), the padded a ignored
    cosine, absolute, share = token_stats(states, mask)
    # sentence 1: cosine 0, mean (0.5, 1, 0) -> 1.25 over mean squared norm (1 + 4) / 2 = 2.5: 0.5; sentence 2: 1 and 1
    assert cosine == absolute == pytest.approx((0 + 1) / 2) and share == pytest.approx((0.5 + 1) / 2)
    opposite = torch.stack([a, -a]).unsqueeze(0)
    assert token_stats(opposite, torch.ones(1, 2))[:2] == pytest.approx((-1.0, 1.0))


def test_the_collapse_probe_finds_a_mix_that_writes_one_vector_into_every_token(model_and_tokenizer):
    """Make the encoder's shared maps one large rank-1 map: every CLM output becomes the same vector up to sign,
    the probe's output similarity goes to 1 and its mix-to-input ratio far above 1; the untouched model's stays low."""
    from hf_langspec.evaluation.encoder_collapse import encoder_collapse

    model, tok = model_and_tokenizer
    before = encoder_collapse(model, tok, TEXTS["en"], "en", "de")
    assert set(before["points"]) == {"embeddings", "layer 0", "layer 1", "output"}
    assert set(before["clm"]) == {f"layer {i} {s}" for i in (0, 1) for s in ("self_attn", "ffn")}
    assert before["clm_maps"]["dimension"] == 32 and len(before["clm_maps"]["largest_singular_value"]) == 5
    broken = CLMForConditionalGeneration(model.config).eval()
    broken.load_state_dict(model.state_dict())
    weight = broken.clm_modules()["encoder"].weight
    with torch.no_grad():
        u, v = torch.randn(2, 32, generator=torch.Generator().manual_seed(0))
        weight.copy_(50 * torch.outer(v, u).expand_as(weight) / 32)  # h W = 50 (h . v / 32) u: one direction
    after = encoder_collapse(broken, tok, TEXTS["en"], "en", "de")
    assert after["clm"]["layer 0 self_attn"]["mix_to_input"] > 5 > before["clm"]["layer 0 self_attn"]["mix_to_input"]
    assert after["clm_maps"]["mean_map_effective_rank"] == pytest.approx(1.0, abs=0.01)
    # the tokens pushed onto one line by the mix of layer 1's attention, the common part of its output 0.62 -> 0.93
    assert (
        after["clm"]["layer 1 self_attn"]["common_share_out"]
        > 0.9
        > before["clm"]["layer 1 self_attn"]["common_share_out"]
    )
    assert after["points"]["layer 1"]["token_abs_cosine"] > before["points"]["layer 1"]["token_abs_cosine"] + 0.2


def test_the_probe_measures_each_branch_against_the_stream_it_is_added_to(model_and_tokenizer):
    """Scale layer 0's fc2 by 10: its FFN branch grows exactly 10x (it is fc2's output), the stream it is added
    to and its attention branch stay as they were, and the branch's common share does not move (a scale)."""
    from hf_langspec.evaluation.encoder_collapse import encoder_collapse

    model, tok = model_and_tokenizer
    before = encoder_collapse(model, tok, TEXTS["en"], "en", "de")["sublayers"]
    assert set(before) == {f"layer {i} {s}" for i in (0, 1) for s in ("self_attn", "ffn")}
    scaled = CLMForConditionalGeneration(model.config).eval()
    scaled.load_state_dict(model.state_dict())
    fc2 = scaled.get_encoder().layers[0].fc2
    with torch.no_grad():
        fc2.weight.mul_(10)
        fc2.bias.mul_(10)
    after = encoder_collapse(scaled, tok, TEXTS["en"], "en", "de")["sublayers"]
    assert after["layer 0 ffn"]["branch_norm"] == pytest.approx(10 * before["layer 0 ffn"]["branch_norm"], rel=1e-4)
    assert after["layer 0 ffn"]["branch_common_share"] == pytest.approx(before["layer 0 ffn"]["branch_common_share"])
    for name in ("stream_norm", "branch_norm"):
        assert after["layer 0 self_attn"][name] == pytest.approx(before["layer 0 self_attn"][name])
    assert after["layer 0 ffn"]["stream_norm"] == pytest.approx(before["layer 0 ffn"]["stream_norm"])
