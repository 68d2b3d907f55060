"""Language-specific matrix synthesis and fuse distillation (LMS + FD; Xu et al. 2023), against the paper.

Eq. 1: a projection becomes `(W + W_v W_f) x`, `W_v` of the source language and `W_f` of the target language
(pair-wise) or both of one language (language-wise: the encoder's source, the decoder's target). Eqs. 3-4: fuse
distillation trains a shared pair in a second pass, `1/2 (CE_l + CE_s) + 1/2 (KL(p_l || p_s) + KL(p_s || p_l))`, and
inference can then use the shared pair alone, which condenses into one plain Transformer. Section 2.2 and Table 3:
`2 L N d (r + c)` parameters for the FFNs, reproduced for the paper's stated configurations.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import (
    assert_direction_folds,
    random_batch,
    run_readme_example,
    tiny_config,
    with_diverse_outputs,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration, LMSConfig, LMSForConditionalGeneration
from hf_langspec.modeling.modeling_lms import symmetric_kl
from hf_langspec.modeling.routing import LanguageContext


def lms_model(**overrides) -> LMSForConditionalGeneration:
    torch.manual_seed(0)
    fields = {"lms_rank": 3, **overrides}
    return with_diverse_outputs(LMSForConditionalGeneration(tiny_config(LMSConfig, **fields))).eval()


@pytest.mark.parametrize("synthesis", ["pair", "language"])
@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_each_example_gets_the_synthesised_matrix_of_its_languages(synthesis, side):
    """`x W_f^T W_v^T` per example (the row form of eq. 1's `W_v W_f x`), with the paper's choice of languages."""
    model = lms_model(lms_synthesis=synthesis)
    module = getattr(model.model, side).insertions[f"{side[:3]}_ffn_proj"]
    src, tgt = torch.tensor([0, 2, 1, 2]), torch.tensor([1, 0, 3, 3])
    lang = LanguageContext(src, tgt, num_languages=4, batch_size=4)
    x = torch.randn(4, 5, 32)
    got = module(x, lang, 1, "fc1")
    for b in range(4):
        if synthesis == "pair":
            flat_language, vertical_language = tgt[b], src[b]
        else:
            flat_language = vertical_language = src[b] if side == "encoder" else tgt[b]
        expected = x[b] @ module.fc1_flat[1, flat_language] @ module.fc1_vertical[1, vertical_language]
        torch.testing.assert_close(got[b], expected, atol=1e-5, rtol=1e-5)


def test_a_new_lms_adds_nothing_and_starts_as_its_checkpoint():
    """Flat matrices start at zero (the vertical ones N(0, 0.01), the authors' code): a new model is its backbone,
    and `adapt` starts one on a baseline's weights with the same logits (it checks them itself)."""
    from hf_langspec.interop import adapt

    torch.manual_seed(0)
    fresh = LMSForConditionalGeneration(tiny_config(LMSConfig, lms_rank=4))
    module = fresh.model.encoder.insertions["enc_ffn_proj"]
    assert module.fc1_flat.abs().sum() == 0 and 0.005 < module.fc1_vertical.std() < 0.02
    base = with_diverse_outputs(LangSpecForConditionalGeneration(tiny_config(LangSpecConfig))).eval()
    adapt(base, "lms", lms_rank=4, lms_fuse_distillation=True)


def test_lms_every_second_layer_places_its_matrices_as_the_authors_lms_freq():
    model = lms_model(lms_every=2)
    assert model.model.encoder.insertions["enc_ffn_proj"].layers == [1]  # (i + 1) % 2 == 0 of layers 0-1
    assert model.model.decoder.insertions["dec_ffn_proj"].layers == [1]  # of 0-2
    x = torch.randn(2, 3, 32)
    lang = LanguageContext(torch.tensor([0, 1]), torch.tensor([1, 2]), num_languages=4, batch_size=2)
    assert model.model.decoder.insertions["dec_ffn_proj"](x, lang, 2, "fc1").abs().sum() == 0


@settings(max_examples=40, deadline=None)
@given(every=st.integers(1, 6), encoder=st.integers(1, 4), decoder=st.integers(1, 4))
def test_lms_every_is_refused_exactly_where_it_places_no_matrix(every, encoder, decoder):
    """The authors' `(i + 1) % lms_freq == 0` counted over both stacks: a frequency that selects no layer of either
    would build a model without LMS, and is refused instead."""
    fields = {"lms_every": every, "encoder_layers": encoder, "decoder_layers": decoder}
    placed = [i for depth in (encoder, decoder) for i in range(depth) if (i + 1) % every == 0]
    if placed:
        assert LMSConfig.lms_layers(tiny_config(LMSConfig, **fields), max(encoder, decoder))
    else:
        with pytest.raises(ValueError, match=f"lms_every={every} places LMS in no layer"):
            tiny_config(LMSConfig, **fields)


def paper_shape(languages: int, **shape) -> dict:
    return {"languages": [f"l{i}" for i in range(languages)], "normalize_before": True, **shape}


TRANSFORMER_BIG = {"vocab_size": 64000, "d_model": 1024, "encoder_layers": 6, "decoder_layers": 6,
                   "encoder_attention_heads": 16, "decoder_attention_heads": 16, "encoder_ffn_dim": 4096,
                   "decoder_ffn_dim": 4096}  # fmt: skip
OPUS15_BASE = {"vocab_size": 32000, "d_model": 512, "encoder_layers": 6, "decoder_layers": 6,
               "encoder_attention_heads": 8, "decoder_attention_heads": 8, "encoder_ffn_dim": 2048,
               "decoder_ffn_dim": 2048}  # fmt: skip
IWSLT_SMALL = {**OPUS15_BASE, "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024, "encoder_attention_heads": 4,
               "decoder_attention_heads": 4}  # fmt: skip


@pytest.mark.parametrize(
    ("table", "shape", "languages", "fields", "paper_millions"),
    [("Table 3, naive", TRANSFORMER_BIG, 95, None, 242),
     ("Table 3, LMS d = 64", TRANSFORMER_BIG, 95, {"lms_rank": 64}, 989),
     ("Table 3, LMS d = 16", TRANSFORMER_BIG, 95, {"lms_rank": 16}, 429),
     ("Table 3, LMS d = 4", TRANSFORMER_BIG, 95, {"lms_rank": 4}, 289),
     ("Table 3, LMS+FD d = 64", TRANSFORMER_BIG, 95, {"lms_rank": 64, "lms_fuse_distillation": True}, 996),
     ("Table 3, LMS+FD d = 16", TRANSFORMER_BIG, 95, {"lms_rank": 16, "lms_fuse_distillation": True}, 431),
     ("Table 2, naive", IWSLT_SMALL, 9, None, 48),
     ("Table 2, LMS d = 32", IWSLT_SMALL, 9, {"lms_rank": 32}, 58),
     ("Table 2, LMS+FD d = 32", IWSLT_SMALL, 9, {"lms_rank": 32, "lms_fuse_distillation": True}, 60),
     ("Table 6, naive", OPUS15_BASE, 16, None, 61),
     ("Table 6, ffn only", OPUS15_BASE, 16, {"lms_rank": 20}, 80),
     ("Table 6, att only", OPUS15_BASE, 16, {"lms_rank": 20, "lms_points": ["self_attn"]}, 77),
     ("Table 6, att+ffn", OPUS15_BASE, 16, {"lms_rank": 20, "lms_points": ["ffn", "self_attn"]}, 96)],
)  # fmt: skip
def test_the_papers_parameter_counts(table, shape, languages, fields, paper_millions):
    """Section 2.2: the FFNs' LS matrices add `2 L N d (r + c)` (`L + 1` pairs with FD), exactly; the totals are the
    papers' to within its rounding (it prints 996.87M as 996M and 76.25M as 77M, so within 1M), built on the meta
    device. The shapes: transformer_big (OPUS-100, 64K vocabulary, 95 languages), transformer (IWSLT'14: FFN 1024,
    32K, 9 languages) and transformer_base (OPUS-15: FFN 2048, 32K, 16 languages), Appendices A and D."""
    with torch.device("meta"):
        base = LangSpecForConditionalGeneration(LangSpecConfig(**paper_shape(languages, **shape))).num_parameters()
        if fields is None:
            total = base
        else:
            total = LMSForConditionalGeneration(
                LMSConfig(**paper_shape(languages, **shape), **fields)
            ).num_parameters()
    assert abs(total / 1e6 - paper_millions) < 1.0, f"{table}: {total / 1e6:.2f}M, the paper {paper_millions}M"
    if fields and fields.get("lms_points", ["ffn"]) == ["ffn"]:
        pairs = languages + int(fields.get("lms_fuse_distillation", False))
        r, c, layers = shape["encoder_ffn_dim"], shape["d_model"], 12
        assert total - base == 2 * pairs * layers * fields["lms_rank"] * (r + c)


def target_tokens(labels: torch.Tensor) -> torch.Tensor:
    return labels.ne(-100)


def test_fuse_distillation_trains_on_eq_3_with_eq_4s_symmetric_kl():
    """A training forward with FD: the model's loss is `1/2 (CE_l + CE_s) + w * symmetric KL`, every term computed
    here from the two routes run separately (dropout is off in the tiny config)."""
    model = lms_model(lms_fuse_distillation=True, lms_fd_weight=0.7)
    batch = random_batch(batch=3, seed=6)
    labels = batch["decoder_input_ids"].roll(-1, 1).masked_fill(batch["decoder_attention_mask"].eq(0), -100)
    with torch.no_grad():
        with model.lms_route("language"):
            specific = model(**batch).logits
        with model.lms_route("shared"):
            shared = model(**batch).logits
    assert (specific - shared).abs().max() > 1e-3  # the two routes differ

    def ce(logits):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)

    p, q = specific.softmax(-1), shared.softmax(-1)
    kl_pq = (p * (p.log() - q.log())).sum(-1)
    kl_qp = (q * (q.log() - p.log())).sum(-1)
    mask = target_tokens(labels)
    symmetric = (0.5 * (kl_pq + kl_qp))[mask].mean()
    expected = 0.5 * (ce(specific) + ce(shared)) + 0.7 * symmetric
    model.train()
    out = model(**batch, labels=labels)
    torch.testing.assert_close(out.loss, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.aux_loss, 0.7 * symmetric, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.logits, specific)
    torch.testing.assert_close(out.extra_logits[0], shared)
    out.loss.backward()
    shared_slot = model.model.encoder.insertions["enc_ffn_proj"].fc1_flat.grad[:, -1]
    assert shared_slot.abs().sum() > 0  # the shared pair learns


def _symmetric_kl_as_published(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Eq. 4 as the published LMS+FD runs computed it: `log` of the softmax."""
    p, q = F.softmax(logits_p.float(), dim=-1), F.softmax(logits_q.float(), dim=-1)
    return 0.5 * ((p - q) * (torch.log(p) - torch.log(q))).sum(-1)


def test_the_distillation_term_and_its_gradient_are_the_published_runs_to_the_bit():
    """Where every probability is a normal float32 number, the term and the logits' gradients are what the
    published runs computed, bit for bit: the fix for underflow changes nothing else."""
    generator = torch.Generator().manual_seed(3)
    a, b = (torch.randn(4, 7, 50, generator=generator) * 6 for _ in range(2))
    grads = []
    for kl in (symmetric_kl, _symmetric_kl_as_published):
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        value = kl(x, y)
        (value * torch.arange(7.0)).sum().backward()
        grads.append((value.detach(), x.grad, y.grad))
    for new, published in zip(*grads, strict=True):
        assert torch.equal(new, published)


@pytest.mark.parametrize(
    ("dtype", "computed_in"),
    [(torch.float64, torch.float64), (torch.float32, torch.float32), (torch.bfloat16, torch.float32),
     (torch.float16, torch.float32)],
)  # fmt: skip
def test_the_distillation_term_is_computed_in_float32_at_least(dtype, computed_in):
    """Half-precision logits are taken up to float32; float64 ones are not taken down (a float64 model's padded and
    unpadded batches gave terms 6e-8 apart, float32's rounding, where they must agree to float64's)."""
    generator = torch.Generator().manual_seed(5)
    a, b = (torch.randn(2, 3, 30, generator=generator, dtype=torch.float64).to(dtype) for _ in range(2))
    value = symmetric_kl(a, b)
    assert value.dtype == computed_in
    log_p, log_q = F.log_softmax(a.double(), -1), F.log_softmax(b.double(), -1)
    expected = 0.5 * ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1)
    tolerance = 1e-12 if computed_in == torch.float64 else 1e-5
    torch.testing.assert_close(value.double(), expected, rtol=tolerance, atol=tolerance)


@settings(max_examples=30, deadline=None)
@given(scale=st.floats(1.0, 400.0), seed=st.integers(0, 10_000))
def test_the_distillation_term_stays_finite_where_the_softmax_underflows(scale, seed):
    """Logits far apart (a token about 87 below its row's largest has a subnormal float32 probability, 104 below
    none): eq. 4's term and its gradient are finite; the term equals a float64 computation from log-softmax where no
    probability is below float32's smallest normal number, and never exceeds it elsewhere (the clamped log only
    understates a token's term)."""
    generator = torch.Generator().manual_seed(seed)
    a, b = (torch.randn(3, 5, 40, generator=generator) * scale for _ in range(2))
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    value = symmetric_kl(x, y)
    value.sum().backward()
    log_p, log_q = F.log_softmax(a.double(), -1), F.log_softmax(b.double(), -1)
    expected = 0.5 * ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1)
    assert torch.isfinite(x.grad).all() and torch.isfinite(y.grad).all()
    normal = (torch.minimum(log_p, log_q) > math.log(torch.finfo(torch.float32).tiny)).all(-1)
    torch.testing.assert_close(value.double()[normal], expected[normal], rtol=2e-3, atol=1e-5)
    assert (value.double()[~normal] <= expected[~normal] * (1 + 1e-3) + 1e-5).all()
    assert (value >= 0).all()


def test_log_of_the_softmax_was_not_finite_where_it_underflows():
    """The cases the test above guards: both passes put a token 200 below the rest (the term was NaN), or one pass
    puts it 100 below (the term is finite, its gradient was not)."""
    logits = torch.tensor([[0.0, 1.0, -200.0]])
    assert torch.isnan(_symmetric_kl_as_published(logits, logits + 0.5)).all()
    assert torch.isfinite(symmetric_kl(logits, logits + 0.5)).all()
    for kl, finite in ((_symmetric_kl_as_published, False), (symmetric_kl, True)):
        x = torch.tensor([[0.0, 1.0, -100.0]], requires_grad=True)
        kl(x, torch.zeros(1, 3)).sum().backward()
        assert bool(torch.isfinite(x.grad).all()) is finite


def test_the_trainer_smooths_both_passes_and_adds_the_distillation(tmp_path):
    """With label smoothing the Trainer drops the model's loss: it must smooth the shared pass too (`extra_logits`)
    and add `aux_loss` back, giving `1/2 (LS-CE_l + LS-CE_s) + w * KL`."""
    from transformers.trainer_pt_utils import LabelSmoother

    from hf_langspec.training.trainer import LangSpecSeq2SeqTrainer
    from hf_langspec.training.training_args import LangSpecTrainingArguments

    model = lms_model(lms_fuse_distillation=True).train()
    args = LangSpecTrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, report_to="none",
                                     use_cpu=True)  # fmt: skip
    trainer = LangSpecSeq2SeqTrainer(model=model, args=args)
    batch = random_batch(batch=3, seed=6)
    labels = batch["decoder_input_ids"].roll(-1, 1).masked_fill(batch["decoder_attention_mask"].eq(0), -100)
    loss, outputs = trainer.compute_loss(model, {**batch, "labels": labels}, return_outputs=True)
    smooth = LabelSmoother(epsilon=0.1)
    expected = 0.5 * (smooth({"logits": outputs.logits}, labels) + smooth({"logits": outputs.extra_logits[0]}, labels))
    torch.testing.assert_close(loss, expected + outputs.aux_loss, atol=1e-5, rtol=1e-5)


def test_the_condensed_model_is_a_plain_transformer_computing_the_shared_route():
    """LMS+FD-Share at inference is `W + W_v^shared W_f^shared` for every language: `condense()` returns that as a
    baseline model, whose logits equal the LMS model's on a batch of four directions; it needs no language ids."""
    model = lms_model(lms_fuse_distillation=True, lms_points=["ffn", "self_attn"], lms_every=2)
    batch = random_batch(batch=4, seed=8)
    plain = model.condense()
    assert type(plain) is LangSpecForConditionalGeneration
    assert plain.num_parameters() < model.num_parameters()
    inputs = {k: v for k, v in batch.items() if not k.endswith("lang_ids")}
    with torch.no_grad():
        torch.testing.assert_close(plain(**inputs).logits, model(**batch).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="lms_fuse_distillation=False"):
        lms_model().condense()


@pytest.mark.parametrize("route", ["language", "shared"])
def test_the_inference_route_is_the_configured_one(route):
    model = lms_model(lms_fuse_distillation=True, lms_inference_route=route)
    batch = random_batch(batch=2, seed=3)
    with torch.no_grad():
        with model.lms_route(route):
            expected = model(**batch).logits
        torch.testing.assert_close(model(**batch).logits, expected)  # eval mode, no route given: the configured one


@pytest.mark.parametrize(("src", "tgt"), [("fr", "en"), ("en", "es")])
def test_one_direction_folds_into_a_plain_model(src, tgt):
    assert_direction_folds(lms_model(normalize_before=True, lms_points=["ffn", "self_attn"]), src, tgt)


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"lms_rank": 0}, "lms_rank=0"), ({"lms_rank": 2.5}, "lms_rank=2.5"), ({"lms_every": 0}, "lms_every=0"),
     ({"lms_every": 4}, "lms_every=4 places LMS in no layer"),
     ({"lms_synthesis": "direction"}, "lms_synthesis='direction'"), ({"lms_points": ["cross_attn"]}, "lms_points"),
     ({"lms_points": []}, "lms_points"), ({"lms_inference_route": "ls"}, "lms_inference_route='ls'"),
     ({"lms_fuse_distillation": "yes"}, "true or false"), ({"lms_fd_weight": -1}, "lms_fd_weight=-1"),
     ({"languages": [], "lang_tag_token_ids": None}, "needs `languages`")],
)  # fmt: skip
def test_impossible_lms_settings_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(LMSConfig, **fields)


def test_the_shared_route_needs_fuse_distillation():
    with pytest.raises(ValueError, match="fuse distillation only"), lms_model().lms_route("shared"):
        pass


@pytest.mark.slow
def test_a_run_with_fuse_distillation_trains_both_routes_and_reloads(tmp_path):
    """`train` end to end with LMS+FD and label smoothing (the suites' setting): the Trainer's loss is the two passes'
    smoothed mean plus the distillation, the shared pair and the languages' pairs both move, the saved model reloads
    with its outputs, and it condenses into a plain model translating as it does."""
    from test_training import tiny_run_config
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.training.experiment import run_experiment

    config = tiny_run_config(tmp_path, model={"class": "lms", "lms_rank": 2, "lms_fuse_distillation": True},
                     training={"max_steps": 6, "label_smoothing_factor": 0.1, "learning_rate": 0.01})  # fmt: skip
    outcome = run_experiment(config)
    card = (Path(outcome["model_dir"]) / "README.md").read_text()
    assert "## LMS settings" in card and "Synthesis: pair-wise (W_v of the source, W_f of the target)" in card
    model = AutoModelForSeq2SeqLM.from_pretrained(outcome["model_dir"]).eval()
    flat = model.model.encoder.insertions["enc_ffn_proj"].fc1_flat
    assert flat[:, -1].abs().sum() > 0 and flat[:, :-1].abs().sum() > 0  # started at zero: both trained
    plain = model.condense()
    batch = random_batch(batch=2, seed=1)
    batch["input_ids"] = batch["input_ids"] % model.config.vocab_size
    batch["decoder_input_ids"] = batch["decoder_input_ids"] % model.config.vocab_size
    batch["src_lang_ids"], batch["tgt_lang_ids"] = torch.tensor([0, 1]), torch.tensor([1, 0])
    inputs = {k: v for k, v in batch.items() if not k.endswith("lang_ids")}
    with torch.no_grad():
        torch.testing.assert_close(plain(**inputs).logits, model(**batch).logits, atol=1e-5, rtol=1e-5)
    # the CLI's export of the condensed model: a plain baseline folder that the package's checked loader takes
    from hf_langspec.model_folder import load_model_folder
    from hf_langspec_cli import main

    assert (
        main(["export", "--model", str(outcome["model_dir"]), "--condensed", "--output-dir", str(tmp_path / "x")]) == 0
    )
    exported = load_model_folder(tmp_path / "x" / "transformers").eval()
    assert type(exported) is LangSpecForConditionalGeneration
    with torch.no_grad():
        torch.testing.assert_close(exported(**inputs).logits, plain(**inputs).logits)


def test_only_a_fuse_distilled_lms_model_translating_through_its_shared_matrices_condenses(tmp_path):
    from hf_langspec.export.specialize import save_condensed

    with pytest.raises(ValueError, match="LangSpecForConditionalGeneration has none"):
        save_condensed(LangSpecForConditionalGeneration(tiny_config(LangSpecConfig)), None, tmp_path / "a")
    with pytest.raises(ValueError, match="lms_inference_route='language'"):
        save_condensed(lms_model(lms_fuse_distillation=True, lms_inference_route="language"), None, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_readmes_lms_example_runs_and_condenses():
    scope = run_readme_example("LMS and fuse distillation: low-rank language-specific matrices, condensed")
    assert type(scope["plain"]) is LangSpecForConditionalGeneration
    assert scope["model"].config.lms_fuse_distillation and scope["model"].config.lms_rank == 16
