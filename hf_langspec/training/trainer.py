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
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForSeq2SeqLM, EvalPrediction, Seq2SeqTrainer
from transformers.trainer_pt_utils import LabelSmoother
from transformers.trainer_utils import rotate_checkpoints

from ..data.sampler import TemperatureSampler
from ..environment import environment_problem, writing
from ..modeling.modeling_langspec import ROWS_ONLY
from ..modeling.routing import standing_in
from ..pipelines import group_by_target
from .batches import CheckedBatches, example_lengths, sampling_columns
from .callbacks import StopOnNonFiniteLoss, TokensAtEpochEnd, diverged, non_finite_parameters
from .checkpoints import (
    average_checkpoints,
    check_resumable,
    complete_checkpoints,
    last_complete_checkpoint,
    truly_missing_keys,
    write_manifest,
)
from .graph_step import StepGraphs, StepTakenInGraph, inner_optimizer, whole_step
from .loss import SmoothedCrossEntropy
from .processes import warn_if_fsdp_not_applied
from .static_shapes import (
    StaticShapeCollator,
    capture_buckets,
    check_lengths_fit,
    resolve_buckets,
    use_compile_cache,
)

logger = logging.getLogger(__name__)


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
        self.callback_handler.callbacks.insert(0, TokensAtEpochEnd(self))  # before any callback reads the count
        self.add_callback(StopOnNonFiniteLoss())

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
        if device.type != "cuda" and not standing_in(device):
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

    def refuse_non_finite_weights(self) -> None:
        """Raise `DivergedTraining` when a weight is NaN or infinite: checked before each checkpoint and at the end,
        whatever the logging interval or the loop (eager, compiled, a recorded GPU step), with one read from the
        device each time and none per step."""
        broken = non_finite_parameters(self.model)
        if broken:
            more = f" and {len(broken) - 1} more" if len(broken) > 1 else ""
            raise diverged(
                f"the weights became NaN or infinite ({broken[0]}{more})", self.state.global_step, self.args
            )

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's checkpoint, then its manifest (written last), and only then the rotation of old ones; a
        diverged model is not written."""
        self.refuse_non_finite_weights()
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
        if not math.isfinite(result.training_loss):  # the mean over every step, logged or not
            raise diverged(f"the training loss became {result.training_loss}", self.state.global_step, self.args)
        self.refuse_non_finite_weights()
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


__all__ = ["LangSpecSeq2SeqTrainer"]
