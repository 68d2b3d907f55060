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
        adapters = model.slp().adapters
        adapters.fc1_bias.normal_()
        adapters.norm_weight.uniform_(0.5, 1.5)
        adapters.norm_bias.normal_()
    return model


def by_hand(slp, h: torch.Tensor, t: int) -> torch.Tensor:
    """Equation 4 for one adapter t, written out."""
    a = slp.adapters
    out = F.relu(h @ a.fc1[0, t] + a.fc1_bias[0, t]) @ a.fc2[0, t] + a.fc2_bias[0, t] + h
    return F.layer_norm(out, (h.shape[-1],), a.norm_weight[0, t], a.norm_bias[0, t])


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

    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    config = tiny_run_config(
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


def test_the_config_pipeline_starts_the_encoder_from_a_saved_xlp_encoder(tmp_path):
    from safetensors.torch import load_file
    from test_training import synthetic_pairs, tiny_run_config

    from hf_langspec import XLPConfig, XLPForMaskedLM
    from hf_langspec.tokenization import train_tokenizer
    from hf_langspec.training.config import validate_config
    from hf_langspec.training.experiment import run_experiment
    from hf_langspec_cli.config_file import ConfigError

    texts: dict[str, list[str]] = {}
    for row in synthetic_pairs(24):
        texts.setdefault(row["src_lang"], []).append(row["src"])
    tokenizer = train_tokenizer(texts, languages=["de", "en", "fr"], vocab_size=100, show_progress=False)
    tokenizer.save_pretrained(tmp_path / "tok")
    config = {**tiny_run_config(tmp_path, evaluation={"splits": []}), "tokenizer": {"path": str(tmp_path / "tok")}}
    torch.manual_seed(4)
    shape = {
        k: config["model"][k] for k in ("d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim")
    }
    encoder = XLPForMaskedLM(XLPConfig(**tokenizer.model_config_kwargs(), **shape))
    encoder.save_pretrained(tmp_path / "xlp")
    config["model"] |= {"init_encoder_from": {"path": str(tmp_path / "xlp")}}
    # a rate too small to move a float32 weight: the weights stay the copied ones (a rate of 0 is refused)
    config["training"] |= {"max_steps": 1, "learning_rate": 1e-30}
    trained = load_file(run_experiment(config)["model_dir"] / "model.safetensors")
    source = encoder.model.encoder.state_dict()
    copied = lambda a, b: torch.allclose(a, b, rtol=0, atol=1e-20)  # noqa: E731 (a zero may become 1e-30)
    assert copied(trained["model.encoder.layers.0.fc1.weight"], source["layers.0.fc1.weight"])
    assert copied(trained["model.shared.weight"], source["embed_tokens.weight"])
    config["model"]["init_encoder_from"] = {"dir": "x"}
    with pytest.raises(ConfigError, match="init_encoder_from must be a saved encoder's directory"):
        validate_config(config)


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


KILL_AT = """
import os, signal, sys
from transformers import TrainerCallback
from hf_langspec.training import trainer as trainer_module
from hf_langspec.training.config import load_config
from hf_langspec.training.experiment import run_experiment

stage, step = sys.argv[2], int(sys.argv[3])

class Kill(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if args.output_dir.endswith(stage) and state.global_step == step:
            os.kill(os.getpid(), signal.SIGKILL)  # no clean-up, no atexit: a real kill

original = trainer_module.LangSpecSeq2SeqTrainer.__init__
def patched(self, *a, **k):
    original(self, *a, **k)
    self.add_callback(Kill())
trainer_module.LangSpecSeq2SeqTrainer.__init__ = patched
run_experiment(load_config(sys.argv[1]))
"""


@pytest.mark.slow
def test_a_two_stage_run_split_by_data_size_resumes_from_a_kill_in_either_stage(tmp_path):
    import json
    import subprocess
    import sys

    import yaml
    from test_training import tiny_run_config
    from transformers import AutoModelForSeq2SeqLM

    from hf_langspec.training.experiment import run_experiment

    saving = {"save_strategy": "steps", "save_steps": 2}
    config = tiny_run_config(
        tmp_path,
        data={"max_train_examples_per_direction": {"en-fr": 4, "fr-en": 4}},  # fr becomes low-resource
        model={"class": "hlt", "hlt_hidden_dim": 16, "high_resource_languages": {"min_examples": 10}},
        stages=[{"name": "high", "directions": "high_resource", "training": {"max_steps": 6, **saving}},
                {"name": "all", "training": {"max_steps": 6, **saving}}],
        evaluation={"splits": []},
    )  # fmt: skip
    path = tmp_path / "hlt.yaml"
    path.write_text(yaml.safe_dump(config))
    root = tmp_path / "run" / "checkpoints"
    for stage in ("high", "all"):
        killed = subprocess.run([sys.executable, "-c", KILL_AT, str(path), stage, "3"], capture_output=True, text=True)
        assert killed.returncode == -9, killed.stderr[-2000:]
        assert (root / stage / "checkpoint-2").exists() and not (root / stage / "final").exists()
    stage_one = root / "high" / "final"
    assert json.loads((stage_one / "stage_complete.json").read_text())["step"] == 6
    resumed_from = root / "all" / "checkpoint-2" / "model.safetensors"
    written = resumed_from.stat().st_mtime_ns
    outcome = run_experiment(config)
    assert resumed_from.stat().st_mtime_ns == written  # stage 2 continued from its checkpoint
    assert json.loads((root / "all" / "final" / "stage_complete.json").read_text())["step"] == 6
    # the data-size split: en (16 examples into it) and de (12) are high-resource, fr (4) is not
    model = AutoModelForSeq2SeqLM.from_pretrained(outcome["model_dir"])
    assert type(model) is HLTForConditionalGeneration and model.config.hlt_stage == 2
    assert model.config.high_resource_languages == ["de", "en"]
    expected = HLTForConditionalGeneration.from_pretrained(stage_one).fix_assignment()
    languages = model.config.languages
    kept = {code: int(model.slp().assignment[languages.index(code)]) for code in languages}
    assert kept == {code: expected.get(code, -1) for code in languages}


def test_the_high_low_split_and_the_first_stage_directions_come_from_data_sizes():
    from types import SimpleNamespace

    from hf_langspec.training.model_check import resolve_high_resource
    from hf_langspec.training.steps.data import cap_directions
    from hf_langspec.training.steps.train import stage_directions as _stage_directions
    from hf_langspec_cli.config_file import ConfigError

    rows = [
        {"src_lang": s, "tgt_lang": t, "i": i}
        for s, t in (("en", "de"), ("de", "en"), ("en", "fr"), ("fr", "en"))
        for i in range(10)
    ]
    capped = cap_directions(rows, {"en-fr": 3, "fr-en": 2})
    sizes = {
        d: sum(1 for r in capped if f"{r['src_lang']}-{r['tgt_lang']}" == d)
        for d in ("en-de", "de-en", "en-fr", "fr-en")
    }
    assert sizes == {"en-de": 10, "de-en": 10, "en-fr": 3, "fr-en": 2}
    assert [r["i"] for r in capped if r["tgt_lang"] == "fr"] == [0, 1, 2]  # the first ones, in order
    assert len(cap_directions(rows, {"default": 4, "en-de": 6})) == 6 + 3 * 4
    with pytest.raises(ConfigError, match=r"names \['es-en'\], which have no training data"):
        cap_directions(rows, {"es-en": 1})
    section = {"high_resource_languages": {"min_examples": 10}}
    resolve_high_resource(section, sizes)  # into en: 10 + 2, de: 10, fr: 3
    assert section["high_resource_languages"] == ["de", "en"]
    config = SimpleNamespace(high_resource_languages=["de", "en"])
    stage = {"name": "high", "directions": "high_resource"}
    assert _stage_directions(stage, config, sorted(sizes)) == ["de-en", "en-de"]
    with pytest.raises(ConfigError, match="no language has 50 training examples"):
        resolve_high_resource({"high_resource_languages": {"min_examples": 50}}, sizes)
    with pytest.raises(ConfigError, match="no training direction joins two high-resource languages"):
        _stage_directions(stage, SimpleNamespace(high_resource_languages=["de"]), sorted(sizes))
