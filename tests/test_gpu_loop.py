"""A GPU training step never waits for the device: no host reads, no data-dependent shapes (issue: the GPU loop).

On a CPU nothing waits, so the tests take the accelerator's path (`routing.accelerator_path`) and count, with
`HostSyncCensus` (a TorchFunctionMode), the calls that would wait on a GPU: `item`, `tolist`, `int(t)`,
`bool(t)`, `nonzero`, `bincount`, boolean-mask indexing. Every model class must have none in its forward and
backward, the package's Trainer none in a whole step (NaN filter, token count, FLOP count), and the accelerator's
path must compute what the CPU's path computes (it masks where the CPU's selects, gathers where it groups).
"""

from __future__ import annotations

import json
from pathlib import Path

import command_server
import pytest
import torch
from conftest import LANGUAGES, tiny_config, with_diverse_outputs
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compile import STAGES, build, loss_and_grads, training_batch
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, TrainerCallback

from hf_langspec import train_tokenizer
from hf_langspec.modeling.registry import model_classes
from hf_langspec.modeling.routing import accelerator_path
from hf_langspec.training import LangSpecSeq2SeqTrainer, LangSpecTrainingArguments
from hf_langspec.training.host_syncs import HostSyncCensus, StepCensus, sync_kind

PAIRS = [[s, t] for s in LANGUAGES for t in LANGUAGES if s != t]
# beyond test_compile's classes: the keyings whose checks read ids (pair adapters, pair-keyed mCLM), LS-MNMT
EXTRA = {
    "adapter pairs": ("adapter", {"adapter_preset": "bapna_firat", "adapter_dim": 8, "language_pairs": PAIRS}),
    "ls_mnmt": ("adapter", {"adapter_preset": "ls_mnmt"}),
    "clm pairs": (
        "clm",
        {"clm_num_features": 4, "clm_encoder": "mclm", "clm_decoder": "mclm", "language_pairs": PAIRS},
    ),
    "sclm": ("clm", {"clm_num_features": 4, "clm_encoder": "sclm", "clm_decoder": "sclm"}),
}
MODELS = [*STAGES, *EXTRA]


def model_named(name: str):
    if name not in EXTRA:
        return build(name)
    kind, overrides = EXTRA[name]
    config_class, model_class = model_classes()[kind]
    torch.manual_seed(0)
    return with_diverse_outputs(model_class(tiny_config(config_class, **overrides)))


def where(census: HostSyncCensus) -> str:
    return ", ".join(f"{site} x{n}" for site, n in census.where.items())


@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_on_the_accelerator_path_reads_nothing_back(name):
    """The second step: what a model checks once and caches (HLT-MT's fixed assignment: one read per
    assignment) happens in the first; every step after it (the ones a CUDA graph would capture) reads nothing."""
    model = model_named(name).train()
    with accelerator_path():
        model(**training_batch()).loss.backward()
    with accelerator_path(), HostSyncCensus() as census:
        model(**training_batch()).loss.backward()
    assert census.total == 0, f"{name}: {dict(census.calls)} at {where(census)}"


@pytest.mark.parametrize("name", MODELS)
def test_the_accelerator_path_computes_what_the_cpu_path_computes(name):
    model = model_named(name).train()
    batch = training_batch()
    loss, grads = loss_and_grads(model, batch)
    with accelerator_path():
        fast_loss, fast_grads = loss_and_grads(model, batch)
    assert_same_step((fast_loss, fast_grads), (loss, grads), atol=1e-5, rtol=1e-4)


def assert_same_step(found: tuple, expected: tuple, atol: float, rtol: float) -> None:
    """`(loss, grads)` of `loss_and_grads` equal within the tolerances: the loss, and every parameter's gradient."""
    torch.testing.assert_close(found[0], expected[0], atol=atol, rtol=rtol)
    assert found[1].keys() == expected[1].keys()
    for key, grad in expected[1].items():
        torch.testing.assert_close(found[1][key], grad, atol=atol, rtol=rtol, msg=key)


def test_the_census_sees_what_the_cpu_path_reads():
    """The CPU's path reads ids back (range checks, padding, grouping, CLL's selection): the census counts them,
    so the zero above is a measurement, not a census that sees nothing."""
    model = model_named("cll").train()
    with HostSyncCensus() as census:
        model(**training_batch()).loss.backward()
    names = {name for _, name in census.calls}
    assert {"__int__", "__bool__", "nonzero"} <= names, dict(census.calls)
    backbone = ("backbone.py", "attention_masks.py", "input_checks.py")  # the stacks, their masks and input checks
    assert any("routing.py" in site for site in census.where)
    assert any(name in site for site in census.where for name in backbone)


def test_sync_kinds_of_the_calls_that_wait():
    ids, mask = torch.tensor([3, 1]), torch.tensor([True, False])
    assert sync_kind("item", (ids,), {}) == "host read"
    assert sync_kind("__getitem__", (ids, mask), {}) == "data-dependent shape"
    assert sync_kind("__getitem__", (ids, ids), {}) is None  # an index tensor: a gather, no size to read
    assert sync_kind("repeat_interleave", (ids, ids), {}) == "data-dependent shape"
    assert sync_kind("repeat_interleave", (ids, ids), {"output_size": 4}) is None
    assert sync_kind("index_select", (ids, 0, ids), {}) is None


# ---------------------------------------------------------------- the Trainer's step
@pytest.fixture(scope="module")
def tokenizer():
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    texts = {code: [" ".join(words[(i + j) % 8] for j in range(1 + i % 5)) for i in range(40)] for code in LANGUAGES}
    return train_tokenizer(texts, languages=LANGUAGES, vocab_size=60, show_progress=False)


def dataset(tokenizer, n: int = 48) -> Dataset:
    rows = {"input_ids": [], "labels": [], "attention_mask": [], "src_lang_ids": [], "tgt_lang_ids": []}
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        src, tgt = (torch.randint(8, len(tokenizer), (4 + (i * k) % 9,), generator=g).tolist() for k in (3, 5))
        rows["input_ids"].append(src)
        rows["attention_mask"].append([1] * len(src))
        rows["labels"].append(tgt)
        rows["src_lang_ids"].append(0 if i % 2 else 1 + i % 3)
        rows["tgt_lang_ids"].append(1 + i % 3 if i % 2 else 0)
    return Dataset.from_dict(rows)


def trainer_for(tokenizer, output_dir, name="cll", trainer_class=LangSpecSeq2SeqTrainer, data=None, **args):
    model = model_named(name)
    settings = dict(output_dir=str(output_dir), max_steps=4, per_device_train_batch_size=8, learning_rate=1e-3,
                    logging_steps=3, save_strategy="no", report_to="none", use_cpu=True, seed=3, disable_tqdm=True,
                    include_num_input_tokens_seen="non_padding", label_smoothing_factor=0.1)  # fmt: skip
    return trainer_class(
        model=model,
        args=LangSpecTrainingArguments(**settings | args),
        train_dataset=data if data is not None else dataset(tokenizer),
        data_collator=DataCollatorForSeq2Seq(
            tokenizer, model=model, pad_to_multiple_of=args.get("pad_to_multiple_of")
        ),
        processing_class=tokenizer,
    )


@pytest.mark.parametrize("name", ["baseline", "cll", "hlt"])
def test_a_trainer_step_reads_nothing_back(tokenizer, tmp_path, name):
    """A whole step of the package's Trainer (loss with label smoothing, NaN filter, token and FLOP counts,
    clipping, fused AdamW, scheduler) on the accelerator's path: nothing read back; the steps that log read the
    loss (transformers, at logging steps only), and the count of input tokens then."""
    trainer = trainer_for(tokenizer, tmp_path, name)
    census = StepCensus(start=0, steps=2)  # steps 1 and 2; step 3 logs
    trainer.add_callback(census)
    with accelerator_path():
        trainer.train()
    assert census.counted_steps == 2
    assert census.census.total == 0, f"{dict(census.census.calls)} at {where(census.census)}"


class ModeStackProbe(TrainerCallback):
    """Records, in the middle of each step, how many torch function modes are active."""

    def __init__(self):
        self.depths: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):
        from torch.overrides import _get_current_function_mode_stack

        self.depths.append(len(_get_current_function_mode_stack()))


def test_the_census_without_host_ops_enters_no_function_mode_and_reports_none(tokenizer, tmp_path):
    """Compiled loops count device syncs only: a function mode inside the step would recompile a compiled step."""
    trainer = trainer_for(tokenizer, tmp_path, "baseline")
    census, probe = StepCensus(start=0, steps=2, host_ops=False), ModeStackProbe()
    with_ops = StepCensus(start=2, steps=1)  # the control: the full census is a function mode inside its step
    for callback in (probe, census, with_ops):  # the probe's step end first: the modes are still entered then
        trainer.add_callback(callback)
    trainer.train()
    assert census.counted_steps == 2 and with_ops.counted_steps == 1
    assert census.per_step()["host reads"] is None and census.per_step()["data-dependent shapes"] is None
    assert with_ops.per_step()["host reads"] is not None
    assert probe.depths[:2] == [0, 0] and probe.depths[2] == 1


class TransformersCounts(LangSpecSeq2SeqTrainer):
    """transformers' own token and FLOP counting (a sync per step; a walk over the parameters per step)."""

    _track_num_input_tokens = Seq2SeqTrainer._track_num_input_tokens
    floating_point_ops = Seq2SeqTrainer.floating_point_ops


@pytest.mark.parametrize("logging_steps", [3, 100])  # logged mid-training; and only flushed at the end
def test_tokens_and_flops_are_counted_as_transformers_counts_them(tokenizer, tmp_path, logging_steps):
    ours = trainer_for(tokenizer, tmp_path / "ours", logging_steps=logging_steps, max_steps=10)
    reference = trainer_for(tokenizer, tmp_path / "reference", trainer_class=TransformersCounts,
                            logging_steps=logging_steps, max_steps=10)  # fmt: skip
    ours.train()
    reference.train()
    assert ours.state.num_input_tokens_seen == reference.state.num_input_tokens_seen > 0
    assert ours.state.total_flos == reference.state.total_flos > 0
    logged = [e.get("num_input_tokens_seen") for e in ours.state.log_history if "loss" in e]
    expected = [e.get("num_input_tokens_seen") for e in reference.state.log_history if "loss" in e]
    assert logged == expected


def test_an_id_outside_the_model_is_refused_where_the_batch_is_made(tokenizer, tmp_path):
    """The GPU step does not read ids back, so the collator's batch is checked on the host: one clear error."""
    data = dataset(tokenizer).map(lambda row, i: {"tgt_lang_ids": 9 if i == 5 else row["tgt_lang_ids"]},
                                  with_indices=True)  # fmt: skip
    trainer = trainer_for(tokenizer, tmp_path, data=data, max_steps=50)
    with accelerator_path(), pytest.raises(ValueError, match=r"tgt_lang_ids holds 9, outside \[0, 4\)"):
        trainer.train()


# ---------------------------------------------------------------- compiled steps over length buckets
def test_a_compiled_loop_over_length_buckets_gives_the_eager_losses(tokenizer, tmp_path):
    """`pad_to_multiple_of` pads every batch to a few shapes (what lets a compiled step, and a CUDA graph, be
    reused instead of recompiled for each length); the Trainer's `torch_compile` (default mode; aot_eager here:
    dynamo and autograd without code generation) then trains with the eager run's losses, step for step."""
    import torch._dynamo

    runs = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        extra = {"torch_compile": True, "torch_compile_backend": "aot_eager"} if compiled else {}
        trainer = trainer_for(tokenizer, tmp_path / str(compiled), pad_to_multiple_of=8, logging_steps=1,
                              max_steps=6, learning_rate=3e-3, **extra)  # fmt: skip
        trainer.train()
        runs[compiled] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(runs[True]) == 6
    torch.testing.assert_close(torch.tensor(runs[True]), torch.tensor(runs[False]), rtol=1e-4, atol=1e-4)
    features = [dataset(tokenizer)[i] for i in range(8)]
    batch = trainer.data_collator(features)
    assert batch["input_ids"].shape[1] % 8 == 0 and batch["labels"].shape[1] % 8 == 0


def test_a_run_pads_its_batches_to_the_configured_multiple(tmp_path, monkeypatch):
    """`training.pad_to_multiple_of` in a config reaches the collator that `hf-langspec train` builds."""
    from test_training import tiny_run_config

    from hf_langspec.training.experiment import run_experiment

    shapes = []
    original = LangSpecSeq2SeqTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        shapes.append((inputs["input_ids"].shape[1], inputs["labels"].shape[1]))
        return original(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(LangSpecSeq2SeqTrainer, "compute_loss", recording)
    run_experiment(
        tiny_run_config(tmp_path, training={"pad_to_multiple_of": 8, "max_steps": 3}, evaluation={"splits": []})
    )
    assert len(shapes) == 3 and all(s % 8 == 0 and t % 8 == 0 for s, t in shapes), shapes


# ---------------------------------------------------------------- the fused label-smoothed loss
@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 4), length=st.integers(1, 6), vocab=st.integers(2, 40), eps=st.floats(0.0, 0.5),
    shift=st.booleans(), count=st.sampled_from([None, "int", "tensor"]), seed=st.integers(0, 10_000),
)  # fmt: skip
def test_the_fused_smoothed_loss_is_transformers_label_smoothing(batch, length, vocab, eps, shift, count, seed):
    """The fused loss (`cross_entropy(label_smoothing=eps)`, run on accelerators) against transformers' LabelSmoother
    and against the formula written out: value and gradient, with ignored tokens and every normaliser."""
    from transformers.trainer_pt_utils import LabelSmoother

    from hf_langspec.training.loss import SmoothedCrossEntropy

    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=g, dtype=torch.float64)
    labels = torch.randint(0, vocab, (batch, length), generator=g)
    labels[torch.rand(batch, length, generator=g) < 0.3] = -100
    labels[0, -1] = 0  # at least one counted token
    scored = labels[:, 1:] if shift else labels
    active = int(scored.ne(-100).sum())
    if active == 0:
        return
    items = {None: None, "int": active + 3, "tensor": torch.tensor(active + 3)}[count]
    results = []
    for smoother in (LabelSmoother(eps), SmoothedCrossEntropy(eps, fused=True)):
        leaf = logits.clone().requires_grad_()
        loss = smoother({"logits": leaf}, labels, shift_labels=shift, num_items_in_batch=items)
        loss.backward()
        results.append((loss.detach(), leaf.grad))
    # LabelSmoother sums the smoothing term in float32 whatever the logits' dtype: equal to float32's precision
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-6, atol=1e-7)
    # the formula: (1 - eps) * -log p(y) + eps / V * sum_v -log p(v), over the counted tokens, / the normaliser
    scores = -torch.log_softmax(logits[:, :-1] if shift else logits, dim=-1)
    keep = scored.ne(-100)
    per_token = (1 - eps) * scores.gather(-1, scored.clamp(min=0)[..., None])[..., 0] + eps * scores.mean(-1)
    expected = per_token[keep].sum() / (active if items is None else float(items))
    torch.testing.assert_close(results[1][0], expected, rtol=1e-10, atol=1e-12)


def test_the_trainer_smooths_with_the_fused_loss_and_a_cpu_keeps_transformers_arithmetic(tokenizer, tmp_path):
    from transformers.trainer_pt_utils import LabelSmoother

    from hf_langspec.training.loss import SmoothedCrossEntropy

    trainer = trainer_for(tokenizer, tmp_path)
    assert isinstance(trainer.label_smoother, SmoothedCrossEntropy) and trainer.label_smoother.epsilon == 0.1
    logits = torch.randn(2, 5, 30)
    labels = torch.tensor([[3, 4, -100, -100, -100], [1, 2, 3, 4, 5]])
    # bit for bit on a CPU: published CPU runs compute what they computed
    assert torch.equal(
        trainer.label_smoother({"logits": logits}, labels), LabelSmoother(0.1)({"logits": logits}, labels)
    )
    # the accelerator's path (what a GPU step runs, stood in for on the CPU) takes the fused loss: one
    # cross_entropy, the same value to float32's precision
    calls = []
    original = torch.nn.functional.cross_entropy

    def counted(*args, **kwargs):
        calls.append(kwargs.get("label_smoothing"))
        return original(*args, **kwargs)

    with accelerator_path(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.nn.functional, "cross_entropy", counted)
        fused = trainer.label_smoother({"logits": logits}, labels)
    assert calls == [0.1]
    torch.testing.assert_close(fused, LabelSmoother(0.1)({"logits": logits}, labels))


@pytest.mark.slow
def test_the_step_census_counts_no_waits_on_the_gpu_path_for_the_suites_systems(tmp_path):
    """`benchmarks/bench_step_census.py` (BENCHMARKS.md "loop-census"): a whole Trainer step of the suite's systems,
    HLT-MT's split by data size included, on the CPU path (which reads ids back) and on the GPU path (none)."""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "census.json"
    command = ["benchmarks/bench_step_census.py", "--setting", "tiny", "--batch-size", "16",
               "--examples", "200", "--systems", "baseline,fcll,hlt", "--no-write", "--json", str(out)]  # fmt: skip
    done = command_server.run_script(*command, cwd=root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row["system"]: row for row in json.loads(out.read_text())}
    assert set(rows) == {"baseline", "fcll", "hlt"}
    for name, row in rows.items():
        assert row["cpu"]["host reads"] > 0 and row["cpu"]["host ops"] > 100, name
        assert row["gpu"]["host reads"] == row["gpu"]["data-dependent shapes"] == 0, (name, row["gpu"])
    assert "| hlt | - |" in done.stdout  # no --before: that column is empty
