"""The training pipeline: config checks, auxiliary losses under label smoothing, resuming, averaging."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import two_process_launcher, with_diverse_outputs
from datasets import Dataset
from safetensors.torch import load_file
from transformers import DataCollatorForSeq2Seq, TrainerCallback
from transformers.modeling_outputs import Seq2SeqLMOutput

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration, train_tokenizer
from hf_langspec.training import (
    LangSpecSeq2SeqTrainer,
    LangSpecTrainingArguments,
    average_checkpoints,
    complete_checkpoints,
    last_complete_checkpoint,
)
from hf_langspec.training.checkpoints import truly_missing_keys
from hf_langspec.training.config import validate_config
from hf_langspec.training.experiment import run_experiment
from hf_langspec_cli.config_file import ConfigError

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu"]


def synthetic_pairs(n: int = 96) -> list[dict[str, str]]:
    """A learnable toy task: de is the English words reversed, fr the words upper-cased."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        words = [WORDS[j] for j in torch.randint(0, len(WORDS), (3 + i % 4,), generator=g)]
        en = " ".join(words)
        other = ("de", " ".join(reversed(words))) if i % 2 else ("fr", en.upper())
        rows.append({"src_lang": "en", "tgt_lang": other[0], "src": en, "tgt": other[1]})
        rows.append({"src_lang": other[0], "tgt_lang": "en", "src": other[1], "tgt": en})
    return rows


@pytest.fixture(scope="module")
def tokenizer():
    texts = {}
    for row in synthetic_pairs():
        texts.setdefault(row["src_lang"], []).append(row["src"])
    return train_tokenizer(texts, languages=["en", "de", "fr"], vocab_size=120, show_progress=False)


def tiny_model(tokenizer, cls=LangSpecForConditionalGeneration, **overrides):
    kwargs = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                  encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.1)  # fmt: skip
    torch.manual_seed(0)
    return cls(LangSpecConfig(**tokenizer.model_config_kwargs(), **{**kwargs, **overrides}))


def encoded(tokenizer, rows):
    def encode(batch):
        return tokenizer(
            batch["src"], text_target=batch["tgt"], src_lang=batch["src_lang"], tgt_lang=batch["tgt_lang"]
        )

    return Dataset.from_list(rows).map(encode, batched=True, remove_columns=["src_lang", "tgt_lang", "src", "tgt"])


def make_trainer(tokenizer, output_dir, model=None, callbacks=(), **args):
    model = model or tiny_model(tokenizer)
    defaults = dict(output_dir=str(output_dir), max_steps=6, per_device_train_batch_size=8, learning_rate=3e-3, warmup_steps=2,
                    logging_steps=1, save_strategy="steps", save_steps=3, report_to="none", use_cpu=True, seed=11,
                    disable_tqdm=True, dataloader_num_workers=0)  # fmt: skip
    return LangSpecSeq2SeqTrainer(
        model=model,
        args=LangSpecTrainingArguments(**{**defaults, **args}),
        train_dataset=encoded(tokenizer, synthetic_pairs()),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )


def losses(output_dir) -> dict[int, float]:
    state = json.loads((last_complete_checkpoint_path(output_dir) / "trainer_state.json").read_text())
    return {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}


def last_complete_checkpoint_path(output_dir) -> Path:
    return Path(last_complete_checkpoint(output_dir))


class Interrupt(TrainerCallback):
    """Kills training (an exception, like a SIGINT) at a given step, after the checkpoint before it was written."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at_step:
            raise KeyboardInterrupt("simulated interruption")


@pytest.mark.reliability
def test_resume_after_interruption_continues_exactly(tokenizer, tmp_path, caplog):
    make_trainer(tokenizer, tmp_path / "straight").train()
    uninterrupted = losses(tmp_path / "straight")
    with pytest.raises(KeyboardInterrupt):
        make_trainer(tokenizer, tmp_path / "resumed", callbacks=[Interrupt(at_step=4)]).train()
    assert [p.name for p in complete_checkpoints(tmp_path / "resumed")] == ["checkpoint-3"]
    trainer_logger = logging.getLogger("transformers.trainer")  # transformers' loggers do not propagate
    trainer_logger.addHandler(caplog.handler)
    try:
        make_trainer(tokenizer, tmp_path / "resumed").train(resume_from_checkpoint=True)
    finally:
        trainer_logger.removeHandler(caplog.handler)
    # the tied embeddings are loaded through model.shared: no false "missing keys" warning (transformers#27972)
    assert not [r for r in caplog.records if "missing keys" in r.getMessage()]
    resumed = losses(tmp_path / "resumed")
    assert sorted(resumed) == list(range(1, 7))
    for step in (4, 5, 6):  # steps after the checkpoint: same batches, same dropout, same loss
        assert resumed[step] == pytest.approx(uninterrupted[step], abs=1e-6), step


@pytest.mark.reliability
def test_an_interrupted_checkpoint_write_never_looks_complete(tokenizer, tmp_path):
    make_trainer(tokenizer, tmp_path, max_steps=3).train()
    assert json.loads((tmp_path / "checkpoint-3" / "manifest.json").read_text())["files"]["optimizer.pt"]["size"] > 0
    partial = tmp_path / "checkpoint-9"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\x00" * 10)  # the process died while writing
    truncated = tmp_path / "checkpoint-12"
    truncated.mkdir()
    (truncated / "trainer_state.json").write_text('{"log_history": [')
    (tmp_path / "incomplete-checkpoint-9").mkdir()  # a leftover of an earlier crash at the same step
    assert last_complete_checkpoint(tmp_path).endswith("checkpoint-3")
    assert sorted(p.name for p in tmp_path.iterdir() if "incomplete" in p.name) == [
        "incomplete-checkpoint-12",
        "incomplete-checkpoint-9",
        "incomplete-checkpoint-9-2",
    ]


DAMAGE = {
    "optimizer.pt missing": lambda c: (c / "optimizer.pt").unlink(),
    "scheduler.pt missing": lambda c: (c / "scheduler.pt").unlink(),
    "rng_state.pth missing": lambda c: (c / "rng_state.pth").unlink(),
    "model.safetensors truncated": lambda c: (c / "model.safetensors").write_bytes(
        (c / "model.safetensors").read_bytes()[:1000]
    ),
    "optimizer.pt corrupted, same size": lambda c: (c / "optimizer.pt").write_bytes(
        b"\x00" * (c / "optimizer.pt").stat().st_size
    ),
}


@pytest.mark.reliability
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_last_checkpoint_falls_back_to_the_previous_one_exactly(tokenizer, tmp_path, caplog, damage):
    """Each kind of damage to the newest checkpoint: it is set aside with one warning naming the problem, and
    the run resumes from the previous checkpoint and ends with the uninterrupted run's losses, bit for bit."""
    make_trainer(tokenizer, tmp_path / "straight", save_steps=2).train()
    uninterrupted = losses(tmp_path / "straight")
    resumed_dir = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        make_trainer(tokenizer, resumed_dir, save_steps=2, callbacks=[Interrupt(at_step=5)]).train()
    DAMAGE[damage](resumed_dir / "checkpoint-4")
    with caplog.at_level("WARNING"):
        make_trainer(tokenizer, resumed_dir, save_steps=2).train(resume_from_checkpoint=True)
    warnings = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert len(warnings) == 1 and "checkpoint-4" in warnings[0]
    assert damage.split()[0] in warnings[0] or "manifest" in warnings[0]
    resumed = losses(resumed_dir)
    assert [resumed[step] for step in (3, 4, 5, 6)] == [uninterrupted[step] for step in (3, 4, 5, 6)]


@pytest.mark.reliability
def test_a_checkpoint_killed_before_its_manifest_resumes_when_its_files_are_all_there(tokenizer, tmp_path, caplog):
    """Killed after the Trainer's files but before the manifest (or written by an older version): every file a
    resume needs is present and the state parses, so it is used, with a warning that it was not checksummed."""
    make_trainer(tokenizer, tmp_path / "straight", save_steps=2).train()
    with pytest.raises(KeyboardInterrupt):
        make_trainer(tokenizer, tmp_path / "resumed", save_steps=2, callbacks=[Interrupt(at_step=5)]).train()
    (tmp_path / "resumed" / "checkpoint-4" / "manifest.json").unlink()
    with caplog.at_level("WARNING"):
        make_trainer(tokenizer, tmp_path / "resumed", save_steps=2).train(resume_from_checkpoint=True)
    assert any("checkpoint-4 has no manifest" in r.getMessage() for r in caplog.records)
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")


def test_only_keys_without_a_loaded_twin_are_reported_missing(tokenizer):
    """Tied weights dropped from a checkpoint were loaded through their twin; a truly missing key, or a tie that
    was broken (lm_head given its own tensor), is still reported."""
    model = tiny_model(tokenizer)
    tied = ["model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"]
    layer = "model.encoder.layers.0.fc1.weight"
    assert truly_missing_keys(model, tied) == []
    assert truly_missing_keys(model, [*tied, layer]) == [layer]
    assert truly_missing_keys(model, [*tied, "model.shared.weight"]) == [*tied, "model.shared.weight"]
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    assert truly_missing_keys(model, tied) == ["lm_head.weight"]


def test_checkpoint_averaging_is_the_mean_of_the_weights(tokenizer, tmp_path):
    make_trainer(tokenizer, tmp_path, max_steps=6, save_steps=3).train()
    first, second = complete_checkpoints(tmp_path)
    averaged = average_checkpoints([first, second])
    from safetensors.torch import load_file

    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    name = "model.encoder.layers.0.fc1.weight"
    torch.testing.assert_close(averaged[name], (a[name] + b[name]) / 2)
    assert not torch.equal(a[name], b[name])


def test_training_with_checkpoint_averaging_ends_with_the_mean_of_the_last_checkpoints(tokenizer, tmp_path):
    """`average_last_checkpoints=2` loads the mean of the last two checkpoints into the model (the tied embeddings,
    stored once in a checkpoint, are loaded through `model.shared`)."""
    trainer = make_trainer(tokenizer, tmp_path, max_steps=6, save_steps=3, average_last_checkpoints=2)
    trainer.train()
    expected = average_checkpoints(complete_checkpoints(tmp_path))
    for name in ("model.encoder.layers.0.fc1.weight", "model.shared.weight"):
        torch.testing.assert_close(trainer.model.state_dict()[name], expected[name])
    assert trainer.model.lm_head.weight is trainer.model.model.shared.weight


@dataclass
class AuxOutput(Seq2SeqLMOutput):
    aux_loss: torch.Tensor | None = None


class ModelWithAuxLoss(LangSpecForConditionalGeneration):
    """Returns an auxiliary loss that depends on its own parameter, as HLT-MT's disparity loss does."""

    def __init__(self, config):
        super().__init__(config)
        self.aux_weight = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, **kwargs):
        out = super().forward(**kwargs)
        aux = 3.0 * self.aux_weight**2
        return AuxOutput(loss=None if out.loss is None else out.loss + aux, logits=out.logits, aux_loss=aux)


def test_auxiliary_loss_reaches_the_gradient_under_label_smoothing(tokenizer, tmp_path):
    model = tiny_model(tokenizer, cls=ModelWithAuxLoss, dropout=0.0).eval()
    trainer = make_trainer(tokenizer, tmp_path, model=model, label_smoothing_factor=0.1)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    loss = trainer.compute_loss(model, dict(batch))
    smoothed = trainer.label_smoother(model(**{k: v for k, v in batch.items() if k != "labels"}), batch["labels"])
    torch.testing.assert_close(loss, smoothed + 3.0 * 0.5**2)
    loss.backward()
    assert model.aux_weight.grad == pytest.approx(6.0 * 0.5)  # d(3 w^2)/dw


def test_training_on_a_machine_without_an_accelerator_does_not_warn_about_pinned_memory(tokenizer, tmp_path):
    """Pinning only speeds copies to an accelerator; torch warned at every data loader of every CPU run."""
    import warnings

    trainer = make_trainer(tokenizer, tmp_path, use_cpu=False)  # use_cpu alone turned pinning off
    assert trainer.args.dataloader_pin_memory is torch.accelerator.is_available()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        next(iter(trainer.get_train_dataloader()))


def test_temperature_sampler_is_used_and_needs_language_ids(tokenizer, tmp_path):
    trainer = make_trainer(tokenizer, tmp_path)
    sampler = trainer._get_train_sampler()
    assert type(sampler).__name__ == "TemperatureSampler" and sampler.temperature == 5.0
    assert sorted(sampler.directions) == [(0, 1), (0, 2), (1, 0), (2, 0)]
    stripped = trainer.train_dataset.remove_columns(["src_lang_ids", "tgt_lang_ids"])
    with pytest.raises(ValueError, match=r"needs the columns \['src_lang_ids', 'tgt_lang_ids'\]"):
        trainer._get_train_sampler(stripped)


def tiny_run_config(tmp_path, **sections):
    files = {}
    rows = synthetic_pairs(28)  # its first 48 rows are synthetic_pairs(24); the last 8 are held out for the test
    for split, part in (("train", rows[:48]), ("test", rows[48:])):
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in part))
        files[split] = str(path)
    config = {
        "output_dir": str(tmp_path / "run"),
        "data": {"train_files": [files["train"]], "test_files": {"supervised": files["test"]}},
        "tokenizer": {"vocab_size": 100},
        "model": {"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                  "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32},
        "training": {"max_steps": 2, "per_device_train_batch_size": 8, "report_to": "none", "use_cpu": True,
                     "save_strategy": "no", "disable_tqdm": True},
        "evaluation": {"num_beams": 1, "max_new_tokens": 5, "off_target": False},
    }  # fmt: skip
    for name, value in sections.items():
        config[name] = value if not isinstance(value, dict) else {**config.get(name, {}), **value}
    return config


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"training": {"lerning_rate": 1.0}}, r"\[training\]: unknown keys \['lerning_rate'\]"),
        ({"model": {"languages": ["en"]}}, r"\['languages'\] come from the tokenizer"),
        ({"model": {"d_modle": 32}}, r"\[model\]: unknown keys \['d_modle'\]"),
        ({"extra": 1}, r"unknown keys \['extra'\]"),
        ({"data": {"bible": {"languages": ["en", "de"]}}}, "either `bible`"),
        ({"training": {"max_steps": "forty"}}, r"\[training\]: max_steps = 'forty' is a str; it must be int\."),
        (
            {"training": {"max_steps": "40"}},
            r"max_steps = '40' is a str; it must be int \(write max_steps: 40 without",
        ),
        ({"model": {"decoder_layers": 0}}, r"\[model\]: decoder_layers = 0 must be at least 1"),
        ({"model": {"normalize_before": "yes"}}, r"normalize_before = 'yes' is a str; it must be bool"),
        ({"training": {"learning_rate": -0.001}}, r"learning_rate = -0.001 must be at least 0"),
        ({"evaluation": {"num_beams": 0}}, r"\[evaluation\]: num_beams = 0 must be at least 1"),
        ({"evaluation": {"language_identifier": "cld3"}}, r"language_identifier='cld3' is unknown; use one of"),
        ({"tokenizer": {"vocab_size": 99.5}}, r"\[tokenizer\]: vocab_size = 99.5 is a float; it must be int"),
        ({"stages": [{"name": "a", "training": {"max_steps": "x"}}]}, r"\[stages\]\[0\].training: max_steps = 'x'"),
        # each trained (or failed once data, tokenizer and model were built) without a word
        ({"training": {"max_steps": 0}}, r"\[training\]: max_steps = 0 would train num_train_epochs epochs"),
        (
            {"stages": [{"name": "a", "training": {"max_steps": 0}}, {"name": "b"}], "training": {"max_steps": 50}},
            r"\[stages\]\[0\].training: max_steps = 0 would train",
        ),
        ({"training": {"sampling_temperature": -1.0}}, r"sampling_temperature = -1.0 must be at least 0"),
        ({"training": {"warmup_steps": -5}}, r"warmup_steps = -5 must be at least 0"),
        # trained to the end without a checkpoint; failed in numpy once the corpus was built; switched clipping off
        ({"training": {"save_steps": 0}}, r"\[training\]: save_steps = 0 must be greater than 0"),
        ({"training": {"seed": -1}}, r"\[training\]: seed = -1 must be at least 0"),
        ({"training": {"max_grad_norm": -1.0}}, r"max_grad_norm = -1.0 must be at least 0"),
        # a choice outside the function's Literal annotation: refused once the corpus was built
        ({"tokenizer": {"model_type": "wordpiece"}}, r"model_type = 'wordpiece': it must be one of \['unigram', 'bpe'\]"),
        # a test set the config lacks: evaluated or measured nothing, or a StopIteration, after the whole training
        ({"evaluation": {"splits": ["nosuch"]}}, r"splits \['nosuch'\] are not test sets of this config; use some of \['supervised'\]"),
        ({"evaluation": {"off_target": "zero-shot"}}, r"off_target = 'zero-shot' is not a test set of this config \(\['supervised'\]\)"),
        # the example translation: an AttributeError after training and evaluation
        ({"translate": {"text": 5, "src_lang": "en", "tgt_lang": "de"}}, r"\[translate\]: text = 5 is an int; it must be str"),
        ({"translate": {"text": "a b", "src_lang": "en"}}, r"\[translate\]: give text \(not empty\), src_lang and tgt_lang"),
        ({"translate": {"text": " ", "src_lang": "en", "tgt_lang": "de"}}, r"\[translate\]: give text \(not empty\)"),
    ],
)  # fmt: skip
def test_bad_configs_fail_before_any_work(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(tiny_run_config(tmp_path, **change))


def test_warmups_training_by_epochs_and_plain_shuffling_are_accepted(tmp_path):
    """A warm-up longer than the run is said when the stage starts (test_cli), not refused: smoke tests shrink
    max_steps on purpose."""
    for training in ({"warmup_steps": 1}, {"warmup_steps": 0.5}, {"warmup_steps": 300}, {"max_steps": -1, "num_train_epochs": 1},
                     {"sampling_temperature": 0.0}):  # fmt: skip
        validate_config(tiny_run_config(tmp_path, training=training))


@pytest.mark.reliability
def test_bad_inputs_fail_before_training(tmp_path, tokenizer):
    tokenizer.save_pretrained(tmp_path / "tok")
    config = {**tiny_run_config(tmp_path), "tokenizer": {"path": str(tmp_path / "tok")}}
    zh = tmp_path / "zh.jsonl"
    zh.write_text(json.dumps({"src_lang": "en", "tgt_lang": "zh", "src": "a", "tgt": "b"}) + "\n")
    config["data"]["train_files"].append(str(zh))
    with pytest.raises(ValueError, match=r"Unknown language code 'zh'"):
        run_experiment(config)
    assert not (tmp_path / "run" / "checkpoints").exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError, match="The supervised test set is empty"):
        run_experiment(tiny_run_config(tmp_path, data={"test_files": {"supervised": str(empty)}}))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="Cannot write to output_dir"):
        run_experiment(tiny_run_config(tmp_path, output_dir=str(blocker / "run")))
    with pytest.raises(ConfigError, match=r"the training files \[.*empty.jsonl'\] hold no examples"):
        run_experiment(tiny_run_config(tmp_path, data={"train_files": [str(empty)]}))
    with pytest.raises(
        ConfigError,
        match=r"No training example is left after filtering \(.*longer than 1: 48.*raise data.max_length \(1 ",
    ):
        run_experiment(tiny_run_config(tmp_path, data={"max_length": 1}))


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("change", "message"),
    [
        # both failed only after the whole training and evaluation
        ({"translate": {"text": "a b", "src_lang": "en", "tgt_lang": "xx"}},
         r"\[translate\] en -> xx: \['xx'\] not among the training languages \['de', 'en', 'fr'\]"),
        # these failed once the tokenizer was trained and the data tokenized; now as the config is read
        ({"model": {"encoder_attention_heads": 3}}, r"\[model\] encoder_attention_heads=3 does not divide d_model=32"),
        ({"model": {"class": "laa", "laa_points": ["foo"]}}, r"\[model\] laa_points \['foo'\] are not attention points"),
        ({"model": {"class": "hlt", "high_resource_languages": ["zz"]}}, r"\[model\] high_resource_languages \['zz'\]"),
    ],
)  # fmt: skip
def test_what_only_the_data_refutes_fails_before_the_tokenizer(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        run_experiment(tiny_run_config(tmp_path, **change))
    assert not (tmp_path / "run" / "tokenizer").exists()


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda folder: shutil.rmtree(folder), r"\[tokenizer\] path \S+tok: does not exist; give the tokenizer folder"),
        (lambda folder: (folder / "tokenizer.json").unlink(), r"tok: it has no tokenizer\.json"),
        (lambda folder: (folder / "tokenizer.json").write_text('{"model": {}}'), r"tokenizer\.json is not a vocabulary"),
        (lambda folder: (folder / "tokenizer_config.json").write_text('{"languages": ["en", "zz"]}'),
         r"\[tokenizer\] path \S+tok: tokenizer_config\.json is refused: The vocabulary has no tag tokens"),
    ],
)  # fmt: skip
def test_a_damaged_saved_tokenizer_is_one_line_before_any_work(tmp_path, tokenizer, damage, message):
    """tokenizer.path is checked like a model folder: tokenizers' own parse error was a traceback reported as a bug."""
    from hf_langspec.model_folder import ModelFolderError

    tokenizer.save_pretrained(tmp_path / "tok")
    damage(tmp_path / "tok")
    with pytest.raises(ModelFolderError, match=message):
        run_experiment({**tiny_run_config(tmp_path), "tokenizer": {"path": str(tmp_path / "tok")}})
    assert not (tmp_path / "run").exists()


@pytest.mark.reliability
@pytest.mark.parametrize("resume", [True, False])
def test_an_output_dir_holding_a_model_no_run_recorded_is_refused(tmp_path, resume):
    """output_dir holds a model/ of the user's (no run's recorded config beside it): refused before any work, with
    or without --no-resume, and the folder is left as it was."""
    mine = tmp_path / "run" / "model"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"run holds model/ that no hf_langspec run recorded \(no experiment_config"):
        run_experiment(tiny_run_config(tmp_path), resume=resume)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["model"]
    assert [p.name for p in mine.iterdir()] == ["config.json"] and (mine / "config.json").read_text() == "{}"


def test_a_small_experiment_runs_end_to_end(tmp_path):
    outcome = run_experiment(
        tiny_run_config(tmp_path, translate={"text": "alpha beta", "src_lang": "en", "tgt_lang": "de"})
    )
    model_dir = outcome["model_dir"]
    assert {"model.safetensors", "tokenizer.json", "README.md", "config.json"} <= {p.name for p in model_dir.iterdir()}
    assert not [p.name for p in model_dir.iterdir() if p.suffix in (".bin", ".pt", ".pth")]  # no pickles to share
    results = json.loads((tmp_path / "run" / "evaluation" / "results.json").read_text())
    assert set(results["directions"]) == {"en-de", "de-en", "en-fr", "fr-en"}
    assert "copy_source_baseline" in results and isinstance(outcome["example"], str)
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["world_size"] == 1 and info["global_train_batch_size"] == 8


@pytest.mark.reliability
def test_a_changed_tokenizer_setting_is_not_silently_reused(tmp_path):
    run_experiment(tiny_run_config(tmp_path, evaluation={"splits": []}))
    with pytest.raises(
        ConfigError, match=r"holds a run started with another config \(tokenizer.vocab_size: 100 -> 90\)"
    ):
        run_experiment(tiny_run_config(tmp_path, tokenizer={"vocab_size": 90}, evaluation={"splits": []}))


def test_validation_and_device_settings_may_change_when_a_run_resumes(tmp_path, capsys):
    """They do not change what is trained (`run_guard.FREE_KEYS`): a learning curve's run is re-read with other
    generation settings, a CPU run continues where a GPU is present. The resumed run tokenizes nothing: it maps the
    training set the first one wrote."""
    config = tiny_run_config(tmp_path, evaluation={"splits": []})
    config["data"]["cache_dir"] = str(tmp_path / "cache")  # its own cache: the same text elsewhere is shared
    run_experiment(config)
    assert "data: wrote the tokenized training set" in capsys.readouterr().out
    changed = {
        "generation_num_beams": 3,
        "generation_max_length": 9,
        "per_device_eval_batch_size": 2,
        "use_cpu": False,
    }
    run_experiment({**config, "training": {**config["training"], **changed}})  # the same files, unchanged
    assert "data: reusing the tokenized training set" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=r"training.learning_rate"):  # what is trained still may not change
        run_experiment(tiny_run_config(tmp_path, evaluation={"splits": []}, training={"learning_rate": 0.5}))


def test_stages_train_their_directions_and_resume_stage_by_stage(tmp_path):
    import shutil

    stages = [
        {"name": "high", "directions": ["en-de", "de-en"], "training": {"max_steps": 2}},
        {"name": "all", "training": {"max_steps": 4, "save_strategy": "steps", "save_steps": 2}},
    ]
    config = tiny_run_config(tmp_path, stages=stages, evaluation={"splits": []})
    run_experiment(config)
    root = tmp_path / "run" / "checkpoints"
    complete = json.loads((root / "high" / "final" / "stage_complete.json").read_text())
    assert complete["stage"] == "high" and complete["step"] == 2 and complete["trained"]["steps_this_process"] == 2
    assert json.loads((root / "all" / "final" / "stage_complete.json").read_text())["step"] == 4
    # the first stage saw only its directions
    from safetensors.torch import load_file

    high = load_file(root / "high" / "final" / "model.safetensors")
    final = load_file(tmp_path / "run" / "model" / "model.safetensors")
    assert not torch.equal(high["model.encoder.layers.0.fc1.weight"], final["model.encoder.layers.0.fc1.weight"])
    # interrupt stage 2 after its step-2 checkpoint: the rerun loads stage 1 and resumes stage 2
    shutil.rmtree(root / "all" / "final")
    shutil.rmtree(root / "all" / "checkpoint-4")
    untouched = [root / "high" / "final" / "model.safetensors", root / "all" / "checkpoint-2" / "model.safetensors"]
    mtimes = [p.stat().st_mtime_ns for p in untouched]
    run_experiment(config)
    # stage 1 was loaded, not retrained; stage 2 resumed from checkpoint-2 instead of writing it again
    assert [p.stat().st_mtime_ns for p in untouched] == mtimes
    assert json.loads((root / "all" / "final" / "stage_complete.json").read_text())["step"] == 4
    with pytest.raises(ConfigError, match=r"names .* must be unique"):
        validate_config(tiny_run_config(tmp_path, stages=[{"name": "a"}, {"name": "a"}]))


def test_averaging_keeps_each_tensors_dtype(tmp_path):
    from safetensors.torch import save_file

    for i, value in enumerate((1.0, 2.0)):
        (tmp_path / f"c{i}").mkdir()
        save_file(
            {"w": torch.full((2,), value, dtype=torch.bfloat16), "n": torch.tensor([3])},
            tmp_path / f"c{i}" / "model.safetensors",
        )
    averaged = average_checkpoints([tmp_path / "c0", tmp_path / "c1"])
    assert averaged["w"].dtype == torch.bfloat16 and averaged["w"].tolist() == [1.5, 1.5]
    assert averaged["n"].tolist() == [3]


def test_generation_based_validation_reports_bleu_per_direction(tokenizer, tmp_path):
    import sacrebleu

    from hf_langspec.evaluation.trainer_metrics import TranslationMetrics

    model = tiny_model(tokenizer)
    rows = synthetic_pairs(16)
    eval_sets = {
        d: encoded(tokenizer, [r for r in rows if f"{r['src_lang']}-{r['tgt_lang']}" == d]) for d in ("en-de", "fr-en")
    }
    trainer = make_trainer(tokenizer, tmp_path, model=model, predict_with_generate=True, generation_max_length=12)
    trainer.eval_dataset = eval_sets
    trainer.compute_metrics = TranslationMetrics(tokenizer)
    metrics = trainer.evaluate()
    assert {"eval_en-de_bleu", "eval_en-de_chrf", "eval_en-de_chrfpp", "eval_fr-en_bleu"} <= set(metrics)
    # the same number from the model's own generations, with language ids passed per example
    en_de = [r for r in rows if r["src_lang"] == "en" and r["tgt_lang"] == "de"]
    batch = tokenizer([r["src"] for r in en_de], src_lang="en", tgt_lang="de", return_tensors="pt")
    hyps = tokenizer.batch_decode(model.eval().generate(**batch, max_length=12), skip_special_tokens=True)
    expected = sacrebleu.corpus_bleu([h.strip() for h in hyps], [[r["tgt"] for r in en_de]]).score
    assert metrics["eval_en-de_bleu"] == pytest.approx(expected)
    # a set mixing directions is scored per direction (the langspec_mt module): means over its directions
    trainer.eval_dataset = {
        "mixed": encoded(
            tokenizer, [r for r in rows if (r["src_lang"], r["tgt_lang"]) in {("en", "de"), ("fr", "en")}]
        )
    }
    mixed = trainer.evaluate()
    assert mixed["eval_mixed_bleu"] == pytest.approx((metrics["eval_en-de_bleu"] + metrics["eval_fr-en_bleu"]) / 2)
    assert mixed["eval_mixed_bleu_en-xx"] == pytest.approx(metrics["eval_en-de_bleu"])
    # off-target asked for on a set without zero-shot directions: nothing to measure (it raised a KeyError)
    trainer.compute_metrics = TranslationMetrics(tokenizer, off_target=True)
    asked = trainer.evaluate()
    assert asked["eval_mixed_bleu"] == pytest.approx(mixed["eval_mixed_bleu"]) and "eval_mixed_off_target" not in asked


def unpadded(ids, tokenizer) -> list[int]:
    """A row of predictions or labels without the Trainer's padding (-100) and the tokenizer's."""
    return [int(i) for i in ids if i not in (-100, tokenizer.pad_token_id)]


def test_prediction_generates_one_target_per_batch_and_returns_the_dataset_order(tokenizer, tmp_path):
    model = with_diverse_outputs(tiny_model(tokenizer, language_embedding="additive"))  # outputs depend on the target
    rows = synthetic_pairs(12)  # targets alternate: de, en, fr, en, ...
    trainer = make_trainer(tokenizer, tmp_path, model=model, predict_with_generate=True, generation_max_length=10,
                           per_device_eval_batch_size=5)  # fmt: skip
    generate, targets_per_call, seen = model.generate, [], []
    model.generate = lambda *a, **kw: targets_per_call.append(set(kw["tgt_lang_ids"].tolist())) or generate(*a, **kw)
    trainer.compute_metrics = lambda p: seen.append(p) or {}
    out = trainer.predict(encoded(tokenizer, rows))
    # 24 examples of 3 targets in batches of 5: only the 2 batches at a language boundary mix (2) targets
    assert [len(t) for t in targets_per_call].count(1) == 3 and max(len(t) for t in targets_per_call) == 2

    model.eval()
    for i, row in enumerate(rows):  # each prediction is the example's own translation, at its own index
        alone = generate(**tokenizer(row["src"], src_lang=row["src_lang"], tgt_lang=row["tgt_lang"], return_tensors="pt"),
                         max_length=10)  # fmt: skip
        assert unpadded(out.predictions[i], tokenizer) == unpadded(alone[0], tokenizer), i
        pair = tokenizer(row["src"], text_target=row["tgt"], src_lang=row["src_lang"], tgt_lang=row["tgt_lang"])
        assert unpadded(out.label_ids[i], tokenizer) == pair["labels"]
        # compute_metrics sees the same order
        assert unpadded(seen[0].predictions[i], tokenizer) == unpadded(out.predictions[i], tokenizer)
    assert len({tuple(unpadded(p, tokenizer)) for p in out.predictions}) >= 5  # varied outputs: a wrong order shows


PREDICT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_training import encoded, make_trainer, synthetic_pairs
from hf_langspec import LangSpecForConditionalGeneration, LangSpecTokenizer
model_dir, out_dir = sys.argv[2:]
tokenizer = LangSpecTokenizer.from_pretrained(model_dir)
model = LangSpecForConditionalGeneration.from_pretrained(model_dir)
trainer = make_trainer(tokenizer, out_dir, model=model, predict_with_generate=True, generation_max_length=10,
                       per_device_eval_batch_size=2)
out = trainer.predict(encoded(tokenizer, synthetic_pairs(12)))
if trainer.is_world_process_zero():
    json.dump({"world_size": trainer.args.world_size, "predictions": out.predictions.tolist()},
              open(out_dir + "/predictions.json", "w"))
trainer.accelerator.end_training()  # the process group ends here, not at interpreter exit (a rank aborted there)
"""


@pytest.mark.slow
def test_two_processes_predict_the_dataset_order_like_one(tokenizer, tmp_path):
    model = with_diverse_outputs(tiny_model(tokenizer, language_embedding="additive"))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    script = tmp_path / "predict.py"
    script.write_text(PREDICT)
    tests = str(Path(__file__).resolve().parent)
    for _ in range(2):  # a port found free can be taken before the launch binds it: then a new port, once
        launch = subprocess.run([*two_process_launcher(), script, tests, tmp_path / "model", tmp_path],
                                capture_output=True, text=True, timeout=600)  # fmt: skip
        if launch.returncode == 0 or "address already in use" not in launch.stderr.lower():
            break
    assert launch.returncode == 0, launch.stderr[-4000:]  # what the two processes said, when they fail
    two = json.loads((tmp_path / "predictions.json").read_text())
    one = make_trainer(tokenizer, tmp_path / "one", model=model, predict_with_generate=True, generation_max_length=10,
                       per_device_eval_batch_size=4).predict(encoded(tokenizer, synthetic_pairs(12)))  # fmt: skip

    assert two["world_size"] == 2 and len(two["predictions"]) == len(one.predictions) == 24
    assert [unpadded(p, tokenizer) for p in two["predictions"]] == [unpadded(p, tokenizer) for p in one.predictions]
    assert len({tuple(unpadded(p, tokenizer)) for p in one.predictions}) >= 5  # varied outputs: a wrong order shows


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("training: {max_steps: 5\n", r"bad.yaml: not valid YAML at line \d+, column \d+"),
        ("training:\n  max_steps: 5\n max_steps: 6\n", r"bad.yaml: not valid YAML at line 3"),
    ],
)
def test_a_config_file_that_is_not_yaml_is_one_clear_error(tmp_path, text, message):
    from hf_langspec.training.config import load_config

    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "bad.yaml")
    from hf_langspec.training.config import apply_overrides

    with pytest.raises(ConfigError, match=r"Override 'training.max_steps=\[5': the value is not valid YAML"):
        apply_overrides(tiny_run_config(tmp_path), ["training.max_steps=[5"])


@pytest.mark.reliability
def test_a_resumed_run_with_another_config_is_refused_with_the_differing_keys(tmp_path):
    config = tiny_run_config(tmp_path, evaluation={"splits": []})
    run_experiment(config)
    changed = tiny_run_config(
        tmp_path, evaluation={"splits": []}, training={"learning_rate": 0.01}, model={"d_model": 48}
    )
    with pytest.raises(ConfigError, match=r"another config \(model.d_model: 32 -> 48; training.learning_rate: "):
        run_experiment(changed)
    # what does not change the trained model may change: logging, evaluation, the printed example
    run_experiment(tiny_run_config(tmp_path, evaluation={"splits": [], "num_beams": 2}, training={"logging_steps": 7}))


@pytest.mark.reliability
def test_a_larger_max_steps_extends_a_finished_run(tmp_path, capsys):
    run_experiment(
        tiny_run_config(tmp_path, evaluation={"splits": []}, training={"save_strategy": "steps", "save_steps": 2})
    )
    run_experiment(
        tiny_run_config(
            tmp_path, evaluation={"splits": []}, training={"save_strategy": "steps", "save_steps": 2, "max_steps": 4}
        )
    )
    assert "training.max_steps 2 -> 4" in capsys.readouterr().out
    info = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert info["trained"][0]["steps"] == 4 and info["trained"][0]["steps_this_process"] == 2


@pytest.mark.reliability
def test_a_second_process_on_the_same_output_dir_is_refused_and_a_stale_lock_is_taken_over(tmp_path, caplog):
    import socket

    from hf_langspec.training.run_guard import LOCK_FILE

    config = tiny_run_config(tmp_path, evaluation={"splits": []})
    (tmp_path / "run").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"pid": holder.pid, "host": socket.gethostname(), "started": "2026-11-23 10:00:00"}
        (tmp_path / "run" / LOCK_FILE).write_text(json.dumps(lock))
        with pytest.raises(ConfigError, match=rf"is being trained by process {holder.pid} on .*since 2026-11-23"):
            run_experiment(config)
    finally:
        holder.kill()
        holder.wait()
    with caplog.at_level("WARNING"):
        run_experiment(config)  # the holder is gone: its lock is stale
    assert any("stale lock" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "run" / LOCK_FILE).exists()


_SIGNAL_EVERYWHERE = r"""
import atexit, json, os, sys
from pathlib import Path
from hf_langspec.training import run_guard

directory, stale = Path(sys.argv[1]), json.loads(sys.argv[2])


def landing(n):  # a SystemExit (what a signal's handler may raise: Ctrl-C's, sys.exit) at the n-th line the lock runs
    seen = 0

    def local(frame, event, arg):
        nonlocal seen
        if event == "line":
            seen += 1
            if seen == n:
                raise SystemExit(143)
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == run_guard.__file__ or frame.f_code.co_name == "cycle" else None

    return tracer


def cycle():
    with run_guard.RunLock(directory):
        pass


landed, n = [], 0
while True:
    n += 1
    if stale:
        (directory / run_guard.LOCK_FILE).write_text(json.dumps(stale))
    pid = os.fork()
    if pid == 0:
        sys.settrace(landing(n))
        try:
            cycle()
            code = 0
        except SystemExit:
            code = 3
        sys.settrace(None)
        atexit._run_exitfuncs()  # what the interpreter does on its way out
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    left = sorted(p.name for p in directory.iterdir() if str(pid) in p.name or str(pid) in p.read_text())
    landed.append({"n": n, "landed": os.waitstatus_to_exitcode(status) == 3, "left": left})
    if not landed[-1]["landed"]:
        break
    (directory / run_guard.LOCK_FILE).unlink(missing_ok=True)
print(json.dumps(landed))
"""


@pytest.mark.reliability
@pytest.mark.parametrize("stale", [False, True], ids=["free", "stale lock"])
def test_an_exit_signal_anywhere_in_taking_or_releasing_the_lock_leaves_nothing_behind(tmp_path, stale):
    """An exception raised by a signal's handler (Ctrl-C's KeyboardInterrupt, a SystemExit) may land in any line
    of the lock's own code (seen in CI: a lock left behind by a worker that had ended). Land one at every line
    that taking and releasing it runs, free or taking over a stale lock: after the process exits, no lock
    and no file names it."""
    import socket

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"pid": int(gone.stdout), "host": socket.gethostname(), "started": "2026-11-23 10:00:00"}
    out = subprocess.run([sys.executable, "-c", _SIGNAL_EVERYWHERE, str(tmp_path), json.dumps(holder if stale else {})],
                         capture_output=True, text=True, check=True)  # fmt: skip
    landings = json.loads(out.stdout)
    assert sum(r["landed"] for r in landings) >= 15  # every line of __enter__, release and __exit__
    assert not landings[-1]["landed"]  # and then a cycle with no signal ran to its end
    assert [r for r in landings if r["left"]] == []


def test_the_lock_works_where_the_file_system_has_no_hard_links(tmp_path, monkeypatch):
    """Some network and FUSE mounts refuse hard links: the lock is then created in place, and still refuses a
    second holder and leaves nothing behind."""
    import os

    from hf_langspec.training.run_guard import LOCK_FILE, RunLock

    def no_links(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    with RunLock(tmp_path):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
        with pytest.raises(ConfigError, match=f"is being trained by process {os.getpid()}"):
            RunLock(tmp_path).__enter__()
        assert (tmp_path / LOCK_FILE).exists()  # the refused second holder took nothing away
    assert list(tmp_path.iterdir()) == []


def _probe_output_dir(directory: str, times: int, ready, start) -> None:
    from hf_langspec.training.experiment import check_writable

    ready.release()
    start.wait()  # both processes probe in the same moment, like the ranks of a launch
    for _ in range(times):
        check_writable(Path(directory))


def test_ranks_probing_one_output_dir_at_once_do_not_fail_each_other(tmp_path):
    """The ranks of an `accelerate launch` check output_dir at the same moment; with one probe file, one rank
    deleted it under the other (seen in CI: "Cannot write to output_dir ...: No such file or directory")."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ready, start = context.Semaphore(0), context.Event()
    workers = [
        context.Process(target=_probe_output_dir, args=(str(tmp_path / "run"), 2000, ready, start)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.acquire(timeout=120)
    start.set()
    for worker in workers:
        worker.join(timeout=120)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert list((tmp_path / "run").iterdir()) == []  # no probe left behind


@pytest.mark.reliability
def test_a_fresh_runs_card_knows_the_weights_its_results_scored(tmp_path, capsys):
    """Issue 59: every fresh `train` printed "the results do not record which weights they scored", which was not
    true: its results.json records them. The card now gets them, and no such note is printed."""
    from hf_langspec.model_folder import described_model_problem, model_files_fingerprint, weights_fingerprint
    from hf_langspec.training.experiment import run_experiment

    run_experiment(tiny_run_config(tmp_path))
    out = capsys.readouterr().out
    assert "do not record which weights" not in out
    saved = json.loads((tmp_path / "run" / "evaluation" / "results.json").read_text())
    assert saved["model_weights"] == weights_fingerprint(tmp_path / "run" / "model")
    assert saved["model_files"] == model_files_fingerprint(tmp_path / "run" / "model")  # as scored, files too
    assert described_model_problem(tmp_path / "run" / "model") is None  # nothing written after the card


@pytest.mark.reliability
def test_a_checkpoint_past_max_steps_is_not_resumed_into_an_untrained_run(tokenizer, tmp_path):
    """Issue 59: a checkpoint folder from a longer run (step 6) in a run of 3 steps became the run's model with 0 steps
    trained. Refused before loading, with the fix; a checkpoint at exactly max_steps (a finished run) still resumes."""
    make_trainer(tokenizer, tmp_path).train()  # checkpoints 3 and 6
    with pytest.raises(ValueError, match=r"checkpoint-6 is at step 6, past this run's max_steps=3.*new output_dir"):
        make_trainer(tokenizer, tmp_path, max_steps=3).train(resume_from_checkpoint=True)
    make_trainer(tokenizer, tmp_path, max_steps=6).train(resume_from_checkpoint=True)  # finished: nothing to train


def _messages(err: str) -> list[str]:
    """The lines of stderr that are not progress bars (a bar redraws itself with carriage returns, and a loaded
    machine draws the data's bars before the error)."""
    return [line for line in err.splitlines() if line.strip() and "\r" not in line and " pairs [" not in line]


@pytest.mark.reliability
def test_a_run_whose_loss_becomes_nan_stops_before_its_model_is_saved_scored_or_carded(tmp_path, capsys):
    """issue 59, item 3: a diverged run was saved, scored and carded like any other."""
    from hf_langspec_cli import main

    config = tiny_run_config(tmp_path, training={"max_steps": 6, "learning_rate": 1e12, "logging_steps": 1,
                                         "max_grad_norm": 0.0, "warmup_steps": 0})  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"the training loss became (nan|inf) by step \d: the model diverged and is not saved", err), err
    assert len(_messages(err)) == 1 and "Lower training.learning_rate (now 1e+12)" in err
    assert not (tmp_path / "run" / "model").exists() and not list((tmp_path / "run").glob("**/results.json"))


@pytest.mark.reliability
@pytest.mark.parametrize(("logging_steps", "save_steps"), [(500, 500), (500, 3), (1, 500)])
def test_a_diverged_run_is_never_saved_whatever_the_logging_interval(tmp_path, capsys, logging_steps, save_steps):
    """The class of issue 75: with no logged loss to show it (logging every 500 of 8 steps) the run ended with
    `train_loss: nan`, saved its model and scored it. The weights are checked before each checkpoint and the loss of
    every step and the weights at the end, so no logging interval lets a diverged model through."""
    from hf_langspec_cli import main

    config = tiny_run_config(tmp_path, training={"max_steps": 8, "learning_rate": 1e12, "logging_steps": logging_steps,
                                         "save_strategy": "steps", "save_steps": save_steps, "max_grad_norm": 0.0,
                                         "warmup_steps": 0})  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"the (training loss became (nan|inf)|weights became NaN or infinite \(.+\)) by step \d: the "
                     r"model diverged and is not saved, scored or carded", err), err  # fmt: skip
    assert len(_messages(err)) == 1
    run = tmp_path / "run"
    assert not (run / "model").exists() and not list(run.glob("**/results.json"))
    for checkpoint in run.glob("**/checkpoint-*"):  # a checkpoint written before the divergence holds finite weights
        weights = load_file(checkpoint / "model.safetensors")
        assert all(torch.isfinite(t).all() for t in weights.values()), checkpoint
