"""`LangSpecSeq2SeqTrainer`: `Seq2SeqTrainer` with the papers' training recipe.

* temperature-based sampling over directions (`sampling_temperature`, T=5 as in the papers; HLT-MT's
  linear warm-up of T from 1 with `temperature_warmup_epochs`), seeded from `args.seed`, identical on
  every process, with batches of similar length (`train_sampling_strategy="group_by_length"`, the
  default, as fairseq's length buckets: far less padding);
* label smoothing that keeps a model's auxiliary loss: with `label_smoothing_factor > 0` the Trainer
  recomputes the loss from the logits and would drop, e.g., HLT-MT's disparity loss, so the
  `aux_loss` the model returns is added back, and the logits of a model's extra passes of the batch
  (`extra_logits`: LMS's fuse distillation) are smoothed and averaged with the first pass's;
* inverse square-root schedule with warm-up (`lr_scheduler_type="inverse_sqrt"`: lr * sqrt(warmup / step)
  after warm-up, fairseq's `inverse_sqrt`) by default;
* resuming only from complete checkpoints (`resume_from_checkpoint=True`), and averaging of the last
  N checkpoints at the end (`average_last_checkpoints`);
* evaluation and prediction run through the examples by target language, longest first
  (`pipelines.group_by_target`, as `translate` batches), so that every batch but those at a language
  boundary has one target language. A decoding step of LAA, CLL, adapters or HLT-MT reads the weights
  of every target language in its batch, and on a batch of one language LAA and CLL fold theirs into
  the backbone's (Transformer-base on a CPU: 22 targets in a batch decode at 0.4-0.8x the baseline, one
  target at 0.8-1.0x; BENCHMARKS.md); longest first keeps the padding low. Predictions, labels and what
  `compute_metrics` sees come back in the dataset's order (transformers 5 would return them in its
  length-grouped order), also with several processes.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import shutil
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import EvalPrediction, Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback
from transformers.trainer_pt_utils import LabelSmoother
from transformers.trainer_utils import rotate_checkpoints

from ..data.sampler import TemperatureSampler
from ..environment import environment_problem, writing
from ..modeling.routing import _standing_in, on_accelerator
from ..pipelines import group_by_target
from .checkpoints import complete_checkpoints, last_complete_checkpoint, write_manifest
from .graph_step import StepGraphs, StepTakenInGraph, inner_optimizer, whole_step
from .static_shapes import (
    StaticShapeCollator,
    capture_buckets,
    check_lengths_fit,
    resolve_buckets,
    use_compile_cache,
)

logger = logging.getLogger(__name__)


@dataclass
class LangSpecTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with the papers' defaults and the sampling/averaging options."""

    sampling_temperature: float = field(
        default=5.0, metadata={"help": "Temperature T over directions (1: proportional; 0: plain shuffling)."}
    )
    temperature_warmup_epochs: float = field(
        default=0.0, metadata={"help": "Raise T linearly from 1 over this many epochs (HLT-MT uses 5)."}
    )
    average_last_checkpoints: int = field(
        default=0, metadata={"help": "Average the weights of the last N checkpoints into output_dir at the end."}
    )
    lr_scheduler_type: str = field(default="inverse_sqrt", metadata={"help": "fairseq's inverse_sqrt by default."})
    train_sampling_strategy: str = field(
        default="group_by_length",
        metadata={"help": "Batches of similar length (fairseq's buckets) within the temperature sampling."},
    )
    label_smoothing_factor: float = field(default=0.1, metadata={"help": "0.1 in every paper."})
    adam_beta2: float = field(default=0.98, metadata={"help": "Adam (0.9, 0.98) as in the papers."})
    pad_to_multiple_of: int | None = field(
        default=None,
        metadata={
            "help": "Pad each batch's source and target lengths up to a multiple of this (the package's runs pass it "
            "to their collator): a few shapes instead of one per length, so that a compiled step is reused and a "
            "CUDA graph can be replayed (torch_compile_mode='reduce-overhead'). Masked padding changes no result."
        },
    )
    static_shapes: str | list[list[int]] | None = field(
        default="auto",
        metadata={
            "help": "Pad every training batch to one of a few fixed shapes (`training.static_shapes`): 'auto' (on when "
            "the step is compiled: 4 square buckets up to the longest example), 'off', or [[src, tgt], ...]. The "
            "compiled step is then traced with dynamic=False and compiled once per bucket, before the first step."
        },
    )
    cuda_graph_step: bool = field(
        default=False,
        metadata={
            "help": "Record the whole training step (loss, backward, clipping, fused AdamW) as one CUDA graph per "
            "static-shape bucket and replay it for every batch (training/graph_step.py): host work per step is "
            "copying the batch in. Needs a CUDA GPU, static shapes, optim adamw_torch_fused, one process, no "
            "gradient accumulation; combine with torch_compile in its default mode, not reduce-overhead."
        },
    )
    compile_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Where inductor keeps compiled kernels and graphs (TORCHINDUCTOR_CACHE_DIR, unless that is set): "
            "runs and processes of the same model shape then compile from a warm cache."
        },
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "transformers' filter reads every step's loss back from the device to leave NaN/inf out of the "
            "logged mean (it changes no update); off, a NaN loss shows in the log, and a GPU step does not wait."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        # pinned host memory only speeds copies to an accelerator; without one torch warns at every data loader
        if self.dataloader_pin_memory and not _has_accelerator():
            self.dataloader_pin_memory = False


def _has_accelerator() -> bool:
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6; before it, CUDA is the one that pins
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def check_processes_joined(world_size: int) -> None:
    """Several processes launched, but this one is alone (no GPU and `use_cpu` false, so accelerate found no
    backend to join them): each would train its own model into the same folder. A ValueError says the fix."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and world_size == 1:
        raise ValueError(
            f"accelerate launched {launched} processes, but they did not join one process group (no GPU here, and "
            "training.use_cpu is false): set training.use_cpu: true to train on CPU processes."
        )


def warn_if_fsdp_not_applied(accelerator: Any) -> None:
    """An FSDP config on CPU processes trains with DDP: say so instead of letting it pass.

    accelerate (1.15) turns its FSDP plugin on only for GPU-like devices (`AcceleratorState` sets
    `DistributedType.FSDP` inside its MULTI_GPU / NPU / XPU / ... branch; CPU processes are MULTI_CPU),
    so every process holds the whole model and its optimizer state.
    """
    from accelerate.utils import DistributedType

    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and (
        accelerator.state.distributed_type != DistributedType.FSDP
    ):
        message = (
            f"accelerate was launched with FSDP, but it applies FSDP only on GPUs: these "
            f"{accelerator.state.distributed_type.value} processes train with DDP (a full copy of the model and "
            "optimizer each). On CPU use examples/accelerate/ddp.yaml; FSDP needs GPUs."
        )
        warnings.warn(message, stacklevel=3)
        logger.warning(message)


# the attribute that marks a parameter trained in some rows only (its other rows' gradient masked): how many rows
ROWS_ONLY = "_hf_langspec_rows_only"


class LangSpecSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with temperature sampling, auxiliary losses under label smoothing, safe resuming."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        warn_if_fsdp_not_applied(self.accelerator)
        if isinstance(self.label_smoother, LabelSmoother):
            self.label_smoother = SmoothedCrossEntropy(self.label_smoother.epsilon, self.label_smoother.ignore_index)
        config = getattr(self.model, "config", None)
        if self.data_collator is not None and getattr(config, "vocab_size", None):
            # the ids are checked here, on the host, where the batch is made: a GPU step does not read them back
            self.data_collator = CheckedBatches(self.data_collator, config.vocab_size, len(config.languages or []))
        self._tokens_pending: torch.Tensor | None = None
        self._flops_per_token: int | None = None
        self.static_buckets = self._resolve_static_buckets()
        self.static_capture: dict[str, Any] | None = None  # what compiling and capturing the buckets took
        self._records_steps = self._check_graph_step()  # True: record; False: a CPU standing in runs it eagerly
        self._step_graphs: StepGraphs | None = None
        self.callback_handler.callbacks.insert(0, _TokensAtEpochEnd(self))  # before any callback reads the count
        self.add_callback(_StopOnNonFiniteLoss())

    def _resolve_static_buckets(self) -> list[tuple[int, int]] | None:
        """`args.static_shapes` as buckets (checked against the training set's lengths before any step), and the
        compiled step set to trace them statically: one compilation per bucket, never one per length."""
        args = self.args
        lengths = functools.cache(lambda: example_lengths(self.train_dataset))  # read once, if at all

        def longest() -> int:
            return int(max(side.max(initial=0) for side in lengths()))

        compiled = bool(args.torch_compile or getattr(args, "cuda_graph_step", False))
        buckets = resolve_buckets(getattr(args, "static_shapes", None), compiled, longest)
        if buckets is None or self.train_dataset is None:
            return buckets
        check_lengths_fit(buckets, *lengths())
        if args.torch_compile:
            self.accelerator.state.dynamo_plugin.dynamic = False  # transformers leaves it None: dynamic at the 2nd
            limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
            # one compilation per bucket, then evaluation's: dynamo's default limit (8) would fall back to eager
            setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 2 * len(buckets) + 4))
            if args.compile_cache_dir:
                use_compile_cache(args.compile_cache_dir)
        return buckets

    def _check_graph_step(self) -> bool | None:
        """`cuda_graph_step`'s conditions, checked before any step (a ValueError names each unmet one and its fix);
        True on a GPU, False on a CPU standing in for one (`routing.accelerator_path()`), None when it is off."""
        args = self.args
        if not getattr(args, "cuda_graph_step", False):
            return None
        device = args.device
        problems = []
        if device.type != "cuda" and not _standing_in(device):
            problems.append(f"it records CUDA graphs, and this run trains on {device.type} (train on a CUDA GPU)")
        if not self.static_buckets:
            problems.append("it needs static shapes (leave training.static_shapes at auto, or give buckets)")
        if args.gradient_accumulation_steps != 1:
            problems.append("it records one whole optimizer step (set gradient_accumulation_steps: 1)")
        if args.world_size != 1:
            problems.append("it runs in one process (launch one process per GPU-run, or turn it off)")
        if args.fp16:
            problems.append("fp16's loss scaler reads the gradients back every step (use bf16)")
        if self.optimizer is None and str(getattr(args.optim, "value", args.optim)) != "adamw_torch_fused":
            problems.append(f"it records the fused AdamW's step, and optim is {args.optim} (optim: adamw_torch_fused)")
        if args.torch_compile and (args.torch_compile_mode or "default") in ("reduce-overhead", "max-autotune"):
            problems.append(
                "torch_compile's CUDA graphs would be recorded inside its own (torch_compile_mode: default)"
            )
        if problems:
            raise ValueError("training.cuda_graph_step cannot be used: " + "; ".join(problems) + ".")
        return device.type == "cuda"

    def get_train_dataloader(self):
        """The Trainer's loader; with static shapes, its batches padded to the run's buckets and batch size."""
        if not self.static_buckets:
            return super().get_train_dataloader()
        collator = self.data_collator
        pad = self._pad_token_id()
        self.data_collator = StaticShapeCollator(collator, self.static_buckets, self._train_batch_size, pad)
        try:
            return super().get_train_dataloader()
        finally:
            self.data_collator = collator

    def _pad_token_id(self) -> int:
        pad = getattr(self.processing_class, "pad_token_id", None)
        pad = pad if pad is not None else getattr(getattr(self.model, "config", None), "pad_token_id", None)
        if pad is None:
            raise ValueError(
                "training.static_shapes needs a pad token: give the Trainer the tokenizer (processing_class)."
            )
        return int(pad)

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The Trainer's step; with static shapes, every bucket is compiled (and on CUDA captured) before the first
        one, leaving weights, optimizer, RNG and data order as they were (`static_shapes.capture_buckets`)."""
        if self._records_steps is not None:
            return self._graph_step(model, inputs)
        if self.static_buckets and self.args.torch_compile and self.static_capture is None:
            self.static_capture = self._capture_static_buckets(model, inputs)
        return super().training_step(model, inputs, num_items_in_batch)

    def _graph_step(self, model, inputs) -> torch.Tensor:
        """`cuda_graph_step`: the first call records every bucket's whole step, every call replays its bucket's;
        the Trainer's own clipping and optimizer step then do nothing (they ran in the step)."""
        inputs = self._prepare_inputs(inputs)
        if self._step_graphs is None:
            model.train()
            optimizer = inner_optimizer(self.optimizer)
            params = [p for group in optimizer.param_groups for p in group["params"]]
            self._step_graphs = StepGraphs(
                whole_step(self, model, params, optimizer), optimizer, self.static_buckets, self._pad_token_id(),
                self.args.device, record=bool(self._records_steps),
            )  # fmt: skip
            recorded = self._step_graphs.capture(inputs)
            if recorded:
                self.static_capture = recorded
                self.log({"graph_capture_s": recorded["graph_capture_s"]})
            self.optimizer = StepTakenInGraph(self.optimizer)
        return self._step_graphs.run(inputs)

    def _clip_grad_norm(self, model):
        if self._step_graphs is not None:  # clipped inside the step; its norm before clipping
            return self._step_graphs.grad_norm
        return super()._clip_grad_norm(model)

    def _get_grad_norm(self, model, grad_norm=None):
        if grad_norm is None and self._step_graphs is not None:
            grad_norm = self._step_graphs.grad_norm
        return super()._get_grad_norm(model, grad_norm)

    def loss_and_backward(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        """`compute_loss` on a whole batch (its own token count as transformers divides; label smoothing and the
        model's auxiliary losses) and `accelerator.backward`: the part of a step the warm-ups and the recorded step
        run outside the Trainer's loop. Returns the loss."""
        inputs = dict(inputs)  # compute_loss pops the labels
        count = inputs["labels"].ne(-100).sum() if "labels" in inputs else None
        with self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs, num_items_in_batch=count)
        self.accelerator.backward(loss)
        return loss

    def _capture_static_buckets(self, model, inputs) -> dict[str, Any]:
        model.train()
        batch = self._prepare_inputs(inputs)
        record = capture_buckets(functools.partial(self.loss_and_backward, model), model, batch, self.static_buckets,
                                 self._pad_token_id(), self.args.device)  # fmt: skip
        self.log({"static_compile_s": record["compile_s"], "static_capture_s": record["capture_s"]})
        return record

    def get_decay_parameter_names(self, model: Any) -> list[str]:
        """transformers' choice, less the parameters trained in some rows only (`pretrained.freeze_base(rows=...)`:
        a new language's embedding rows): decoupled weight decay would move their frozen rows."""
        names = super().get_decay_parameter_names(model)
        return [name for name in names if not getattr(model.get_parameter(name), ROWS_ONLY, False)]

    def _track_num_input_tokens(self, inputs) -> None:
        """`include_num_input_tokens_seen` as transformers counts it, without reading the count back every step
        (one host sync per step on a GPU): summed on the device, added to the state when it is logged or saved."""
        if self.args.include_num_input_tokens_seen in ("no", False) or "input_ids" not in inputs:
            return super()._track_num_input_tokens(inputs)
        ids = inputs["input_ids"]
        if self.args.include_num_input_tokens_seen == "non_padding" and "attention_mask" in inputs:
            count = inputs["attention_mask"].sum()
        else:
            count = torch.tensor(ids.numel(), device=ids.device)
        self._tokens_pending = count if self._tokens_pending is None else self._tokens_pending + count

    def flush_tokens(self) -> None:
        """Add the input tokens counted on the device since the last flush to `state.num_input_tokens_seen`."""
        if self._tokens_pending is not None:
            pending, self._tokens_pending = self._tokens_pending.to(torch.int64), None
            self.state.num_input_tokens_seen += int(self.accelerator.gather(pending).sum())

    def _maybe_log_save_evaluate(self, *args: Any, **kwargs: Any):
        control = self.control
        if control.should_log or control.should_save or control.should_evaluate or control.should_training_stop:
            self.flush_tokens()  # every process at the same steps: the gather matches
        return super()._maybe_log_save_evaluate(*args, **kwargs)

    def floating_point_ops(self, inputs: dict[str, Any]) -> int:
        """transformers' estimate (6 x input tokens x non-embedding parameters), with the parameter count taken
        once: transformers walks every parameter at every step for it."""
        if self._flops_per_token is None:
            self._flops_per_token = super().floating_point_ops({"input_ids": torch.empty(1, 1)})
        ids = inputs.get("input_ids")
        return 0 if ids is None else self._flops_per_token * ids.numel()

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        temperature = getattr(self.args, "sampling_temperature", 0.0)
        if not temperature:
            return super()._get_train_sampler(train_dataset)
        missing = {"src_lang_ids", "tgt_lang_ids"} - set(dataset.column_names)
        if missing:
            raise ValueError(
                f"Temperature sampling needs the columns {sorted(missing)} in the training dataset to know each "
                "example's direction; tokenize with LangSpecTokenizer (it returns them) or set sampling_temperature=0."
            )
        directions, lengths = sampling_columns(dataset, self.args.train_sampling_strategy == "group_by_length")
        return TemperatureSampler(
            directions,
            temperature=temperature,
            seed=self.args.seed,
            warmup_epochs=getattr(self.args, "temperature_warmup_epochs", 0.0),
            lengths=lengths,
            batch_size=self._train_batch_size * self.args.world_size,
        )

    def _evaluation_order(self, dataset) -> list[int] | None:
        """The order evaluation runs `dataset` in: by target language, longest first within one; None for a
        dataset without an `input_ids` column. With several processes accelerate deals the batches out in
        turn and gathers them back in the same order."""
        columns = set(getattr(dataset, "column_names", None) or ())
        if "input_ids" not in columns:
            return None
        lengths = [len(ids) for ids in dataset["input_ids"]]
        targets = dataset["tgt_lang_ids"] if "tgt_lang_ids" in columns else [None] * len(lengths)
        return [i for group in group_by_target(targets, lengths) for i in group]

    def _get_eval_sampler(self, eval_dataset):
        order = self._evaluation_order(eval_dataset)
        return order if order is not None else super()._get_eval_sampler(eval_dataset)

    def evaluation_loop(self, dataloader, *args: Any, **kwargs: Any):
        """`Trainer.evaluation_loop`, with the outputs of a target-grouped evaluation put back in dataset order,
        and each example's language codes given to a `compute_metrics` that takes them (`takes_languages`)."""
        dataset = getattr(dataloader, "dataset", None)
        order = self._evaluation_order(dataset)
        user_metrics = self.compute_metrics
        languages = self._example_languages(dataset) if getattr(user_metrics, "takes_languages", False) else None
        if order is None and languages is None:
            return super().evaluation_loop(dataloader, *args, **kwargs)
        if user_metrics is not None and not self.args.batch_eval_metrics:  # per-batch metrics: order-free

            def metrics(prediction: EvalPrediction):
                if order is not None:
                    fields = {name: in_dataset_order(getattr(prediction, name), order) for name in EVAL_FIELDS}
                    prediction = EvalPrediction(**fields)
                return user_metrics(prediction, **languages) if languages else user_metrics(prediction)

            self.compute_metrics = metrics
        try:
            output = super().evaluation_loop(dataloader, *args, **kwargs)
        finally:
            self.compute_metrics = user_metrics
        if order is None:
            return output
        return output._replace(
            predictions=in_dataset_order(output.predictions, order),
            label_ids=in_dataset_order(output.label_ids, order),
        )

    def _example_languages(self, dataset) -> dict[str, list[str]] | None:
        """`{"src_lang": [...], "tgt_lang": [...]}`: each example's codes, in dataset order (None without ids)."""
        columns = set(getattr(dataset, "column_names", None) or ())
        codes = getattr(self.model.config, "languages", None)
        if not codes or not {"src_lang_ids", "tgt_lang_ids"} <= columns:
            return None
        return {
            "src_lang": [codes[i] for i in dataset["src_lang_ids"]],
            "tgt_lang": [codes[i] for i in dataset["tgt_lang_ids"]],
        }

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        smoothing = self.label_smoother is not None and "labels" in inputs
        labels = inputs.get("labels")  # the Trainer pops them before the forward when it smooths
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        aux = outputs.get("aux_loss") if isinstance(outputs, dict) else getattr(outputs, "aux_loss", None)
        extra = outputs.get("extra_logits") if isinstance(outputs, dict) else getattr(outputs, "extra_logits", None)
        if (
            smoothing and extra
        ):  # more passes of the batch (LMS's fuse distillation): the mean of their smoothed losses
            passes = [self.label_smoother({"logits": logits}, labels, num_items_in_batch=num_items_in_batch)
                      for logits in extra]  # fmt: skip
            loss = (loss + sum(passes)) / (1 + len(passes))
        if smoothing and aux is not None:
            loss = loss + aux  # the model's own loss (which includes it) was replaced by the smoothed one
        return (loss, outputs) if return_outputs else loss

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """The Trainer's warnings after loading a checkpoint to resume, without its false "missing keys" for tied
        weights (transformers#27972): safetensors stores a shared tensor once, and the names it drops were loaded
        through the one it kept. A missing key that shares no tensor with a loaded one is still reported."""
        missing = truly_missing_keys(self.model, load_result.missing_keys)
        super()._issue_warnings_after_load(type(load_result)(missing, load_result.unexpected_keys))

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's checkpoint, then its manifest (written last), and only then the rotation of old ones."""
        limit = self.args.save_total_limit
        self.args.save_total_limit = None  # rotate after the manifest: never delete the last complete checkpoint first
        run_dir = self._get_output_dir(trial=trial)
        folder = Path(run_dir) / f"checkpoint-{self.state.global_step}"
        try:
            with writing(folder):  # a full disk names the checkpoint, not torch's internal assertion
                super()._save_checkpoint(model, trial)
        except Exception as err:
            if environment_problem(err) is not None and self.args.should_save:
                shutil.rmtree(folder, ignore_errors=True)  # half a checkpoint is not left for a resume to find
            raise
        finally:
            self.args.save_total_limit = limit
        self.accelerator.wait_for_everyone()  # every process's rng_state file is written
        if self.args.should_save:
            write_manifest(Path(run_dir) / f"checkpoint-{self.state.global_step}")
            rotate_checkpoints(run_dir, limit, best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)

    def save_loadable_model(self, output_dir: str | os.PathLike) -> None:
        """`save_model` into a folder that `from_pretrained` loads; every process must call it.

        Under FSDP the weights live in shards, and `save_model` writes them only with a FULL_STATE_DICT: with the
        SHARDED_STATE_DICT that examples/accelerate/fsdp.yaml keeps for its checkpoints it writes nothing (the
        GPU plan's step 2 on an H100 found no model folder). So the full state dict is gathered for this save
        (accelerate's documented "train sharded, save full"), a collective every rank joins, and only the main
        process writes it.
        """
        if not self.is_fsdp_enabled:
            self.save_model(str(output_dir))
            return
        plugin = self.accelerator.state.fsdp_plugin
        previous = plugin.state_dict_type
        plugin.set_state_dict_type("FULL_STATE_DICT")
        try:
            self.save_model(str(output_dir))
        finally:
            plugin.set_state_dict_type(previous)

    def model_for_evaluation(self, model: torch.nn.Module, model_dir: str | os.PathLike) -> torch.nn.Module:
        """The model the main process decodes the test sets with, alone: the trained `model`, or under FSDP the
        whole model saved in `model_dir` (by `save_loadable_model`), reloaded onto this process's device. The
        trained model's parameters are shards there, and a forward on one process would wait for the others."""
        if not self.is_fsdp_enabled:
            return model
        from transformers import AutoModelForSeq2SeqLM

        return AutoModelForSeq2SeqLM.from_pretrained(model_dir).to(self.args.device)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any):
        """`Trainer.train`; `resume_from_checkpoint=True` resumes from the last *complete* checkpoint, or
        starts from scratch when there is none."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                logger.info("No complete checkpoint in %s: training from scratch.", self.args.output_dir)
            else:
                logger.info("Resuming from %s", resume_from_checkpoint)
        if resume_from_checkpoint:
            check_resumable(resume_from_checkpoint, self.args.max_steps)
        try:
            result = super().train(resume_from_checkpoint=resume_from_checkpoint or None, **kwargs)
        finally:
            if isinstance(self.optimizer, StepTakenInGraph):  # the recorded steps end with this train call
                self.optimizer = self.optimizer.wrapped
            self._step_graphs = None
        n = getattr(self.args, "average_last_checkpoints", 0)
        if n and self.is_world_process_zero():
            checkpoints = complete_checkpoints(self.args.output_dir)[-n:]
            if checkpoints:
                averaged = average_checkpoints(checkpoints)
                missing, unexpected = self.model.load_state_dict(averaged, strict=False)
                if unexpected or truly_missing_keys(self.model, missing):  # tied weights load through their twin
                    raise ValueError(
                        f"Averaged checkpoints do not fit the model: missing {missing}, unexpected {unexpected}."
                    )
                logger.info("Averaged the weights of %s", [c.name for c in checkpoints])
        return result


@dataclass
class SmoothedCrossEntropy(LabelSmoother):
    """transformers' `LabelSmoother` (eps/V on every class, the papers' 0.1), as one fused `cross_entropy` with
    `label_smoothing` on an accelerator: the same value, `(1 - eps) * nll + eps / V * sum_V(-log p)` summed over the
    non-ignored tokens and divided as transformers divides (the batch's or the accumulated count), in about a third
    of the kernels. On a CPU (outside `modeling.routing.accelerator_path()`, or with `fused=False`) transformers'
    own code runs, so CPU runs compute exactly what they computed before."""

    fused: bool | None = None  # None: on an accelerator

    def __call__(self, model_output, labels, shift_labels=False, num_items_in_batch=None):
        logits = model_output["logits"] if isinstance(model_output, dict) else model_output[0]
        if not (self.fused if self.fused is not None else on_accelerator(logits)):
            return super().__call__(model_output, labels, shift_labels, num_items_in_batch)
        if shift_labels:
            logits, labels = logits[..., :-1, :], labels[..., 1:]
        total = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).to(torch.promote_types(logits.dtype, torch.float32)),
            labels.reshape(-1), ignore_index=self.ignore_index,
            label_smoothing=self.epsilon, reduction="sum",
        )  # fmt: skip
        if num_items_in_batch is None:
            return total / labels.ne(self.ignore_index).sum()
        if torch.is_tensor(num_items_in_batch):
            return total / num_items_in_batch.to(total.device)
        return total / num_items_in_batch


def check_resumable(checkpoint: str | os.PathLike, max_steps: int) -> None:
    """A checkpoint past the run's `max_steps` (one from a longer run, copied or left in the folder) would become
    the run's model with no step trained: a ValueError says so and the fix, before anything is loaded."""
    state_file = Path(checkpoint) / "trainer_state.json"
    if max_steps <= 0 or not state_file.is_file():
        return
    step = json.loads(state_file.read_text(encoding="utf-8")).get("global_step", 0)
    if step > max_steps:
        raise ValueError(
            f"{checkpoint} is at step {step}, past this run's max_steps={max_steps}: resuming would train nothing and "
            "keep that checkpoint's weights as the run's model. Use a new output_dir, or raise max_steps."
        )


class _TokensAtEpochEnd(TrainerCallback):
    """Flushes the trainer's token count at the end of each epoch (and of training, which ends an epoch), before
    the other callbacks and the final metrics read it."""

    def __init__(self, trainer: LangSpecSeq2SeqTrainer):
        self.trainer = weakref.proxy(trainer)

    def on_epoch_end(self, args, state, control, **kwargs):
        self.trainer.flush_tokens()


class DivergedTraining(RuntimeError):
    """The training loss became NaN or infinite: the run stops before that model is saved, scored or carded."""


class _StopOnNonFiniteLoss(TrainerCallback):
    """Reads the loss the Trainer logs (every `logging_steps`; no extra read-back from the device) and stops the
    run with `DivergedTraining` when it is NaN or infinite. Logging comes before saving in a step, so the diverged
    weights are never written as a checkpoint or the run's model; the checkpoints before it are kept."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        try:
            loss = float((logs or {}).get("loss", 0.0))
        except (TypeError, ValueError):
            return
        if not math.isfinite(loss):
            raise DivergedTraining(
                f"the training loss became {loss} by step {state.global_step}: the model diverged and is not saved, "
                f"scored or carded. Lower training.learning_rate (now {args.learning_rate:g}), lengthen "
                "training.warmup_steps or set training.max_grad_norm, or check the data; the checkpoints before it "
                f"are in {args.output_dir}."
            )


class CheckedBatches:
    """A data collator whose batches are checked on the host: token ids in `[0, vocab_size)` (labels may hold
    -100), language ids in `[0, num_languages)`; a ValueError names the field and the fix. The model checks the
    same in a CPU step; a GPU training step does not (`modeling.routing.sync_free`), so that it never waits to
    read ids back, and without this a wrong id would end the run with CUDA's device-side assert."""

    def __init__(self, collator: Any, vocab_size: int, num_languages: int):
        self.collator, self.vocab_size, self.num_languages = collator, vocab_size, num_languages

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(features)
        limits = {"input_ids": self.vocab_size, "decoder_input_ids": self.vocab_size, "labels": self.vocab_size,
                  "src_lang_ids": self.num_languages, "tgt_lang_ids": self.num_languages}  # fmt: skip
        for name, limit in limits.items():
            values = batch.get(name) if hasattr(batch, "get") else None
            if not isinstance(values, torch.Tensor) or values.device.type != "cpu" or not values.numel():
                continue
            if name == "labels":
                values = values[values != -100]
                if not values.numel():
                    continue
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= limit:
                bad = low if low < 0 else high
                what = "the vocabulary size" if limit == self.vocab_size else "len(config.languages)"
                raise ValueError(
                    f"{name} holds {bad}, outside [0, {limit}) ({what}): the data was made for another model; "
                    "tokenize it with the tokenizer saved with this model."
                )
        return batch


def sampling_columns(dataset: Any, with_lengths: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """`([N, 2] source and target language ids, [N] lengths or None)` of a training dataset, as arrays.

    Read from the Arrow columns of a `datasets.Dataset` (zero-copy; the length of an example is the longer of its
    source and labels, from the list offsets), never through Python lists: at OPUS-100's 110M examples those cost
    gigabytes and minutes. Any other dataset (a list of feature dicts) is read example by example.
    """
    if hasattr(dataset, "with_format"):
        table = dataset.with_format("arrow")
        # narrow as stored (int32): at 110M examples each byte per example is 110 MB per process
        directions = np.stack([table["src_lang_ids"].to_numpy(), table["tgt_lang_ids"].to_numpy()], axis=1)
        return directions, np.maximum(*example_lengths(dataset)) if with_lengths else None
    rows = list(dataset)
    directions = np.array([[int(r["src_lang_ids"]), int(r["tgt_lang_ids"])] for r in rows], dtype=np.int64)
    return directions, np.maximum(*example_lengths(rows)) if with_lengths else None


def example_lengths(dataset: Any) -> tuple[np.ndarray, np.ndarray]:
    """`([N] source lengths, [N] target lengths)` of a training dataset: from the Arrow list offsets of a
    `datasets.Dataset` (zero-copy), else example by example; a dataset without labels has target length 0."""
    if hasattr(dataset, "with_format"):
        import pyarrow.compute as pc

        table = dataset.with_format("arrow")
        names = [name for name in ("input_ids", "labels") if name in dataset.column_names]
        found = [pc.list_value_length(table[name]).to_numpy() for name in names]
        return found[0], found[1] if len(found) > 1 else np.zeros_like(found[0])
    if not hasattr(dataset, "__len__"):
        raise ValueError(
            "training.static_shapes 'auto' reads the training set's lengths, which a streamed dataset does not have; "
            "declare the buckets ([[src, tgt], ...]) or set static_shapes: off."
        )
    rows = list(dataset)
    source = np.array([len(r["input_ids"]) for r in rows], dtype=np.int64)
    target = np.array([len(r.get("labels", ())) for r in rows], dtype=np.int64)
    return source, target


def truly_missing_keys(model: torch.nn.Module, missing_keys: list[str]) -> list[str]:
    """The keys of `missing_keys` whose tensor no loaded key shares (tied weights are loaded through their twin)."""
    names_by_tensor: dict[int, list[str]] = {}
    for name, tensor in [
        *model.named_parameters(remove_duplicate=False),
        *model.named_buffers(remove_duplicate=False),
    ]:
        names_by_tensor.setdefault(id(tensor), []).append(name)
    missing = set(missing_keys)
    loaded_via_twin = {
        name for names in names_by_tensor.values() if any(n not in missing for n in names) for name in names
    }
    return [key for key in missing_keys if key not in loaded_via_twin]


EVAL_FIELDS = ("predictions", "label_ids", "inputs", "losses")


def in_dataset_order(values: Any, order: list[int]) -> Any:
    """Per-example arrays produced in `order` (a permutation of the dataset's indexes), put back in dataset order."""
    if isinstance(values, (tuple, list)):
        return type(values)(in_dataset_order(v, order) for v in values)
    if isinstance(values, np.ndarray) and values.ndim and values.shape[0] == len(order):
        restored = np.empty_like(values)
        restored[order] = values
        return restored
    return values


def average_checkpoints(paths: list[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the floating-point weights of several checkpoints (fairseq's average_checkpoints)."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint.")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        weights = Path(path) / "model.safetensors"
        if not weights.exists():
            raise FileNotFoundError(f"{weights} does not exist; is {path} a checkpoint saved by save_pretrained?")
        state = load_file(weights)
        if total and set(state) != set(total):
            raise ValueError(f"{path} has different weights than the first checkpoint; cannot average them.")
        for name, tensor in state.items():
            dtypes[name] = tensor.dtype
            if tensor.is_floating_point():
                total[name] = total.get(name, 0) + tensor.double()  # accumulate in float64
            else:
                total.setdefault(name, tensor)
    return {name: (t / len(paths)).to(dtypes[name]) if t.is_floating_point() else t for name, t in total.items()}


__all__ = [
    "DivergedTraining",
    "LangSpecSeq2SeqTrainer",
    "LangSpecTrainingArguments",
    "average_checkpoints",
    "complete_checkpoints",
    "last_complete_checkpoint",
]
