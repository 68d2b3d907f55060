"""The training step: the config's stages (one, or HLT-MT's two) trained in turn, each resumable and each
loaded from its `final` folder once complete, then the model saved with its tokenizer and the run's record.

In: the model, the tokenizer, the training and validation sets. Out: the trained model and its Trainer, what each
stage ran, and the saved model folder.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import DataCollatorForSeq2Seq, TrainerCallback

from hf_langspec_cli.config_file import ConfigError

from ...evaluation.trainer_metrics import TranslationMetrics
from ...files import read_json, write_atomic
from ..batches import sampling_columns
from ..checkpoints import last_complete_checkpoint
from ..cpu_allocator import keep_freed_memory
from ..trainer import LangSpecSeq2SeqTrainer
from .context import RunContext, TrainingSet

logger = logging.getLogger(__name__)

GENERATION_MAX_NEW_TOKENS = 256  # in a saved model's generation_config: what `hf-langspec translate` allows


@dataclass
class Trained:
    """The trained model, the Trainer of its last stage (it saves and evaluates under any distribution), what each
    stage ran, and the last stage's arguments."""

    model: Any
    trainer: Any
    record: list[dict[str, Any]]
    args: Any


def train_stages(config: dict[str, Any], model: Any, tokenizer: Any, training_set: TrainingSet, eval_sets: dict[str, Any],
                 run: RunContext) -> Trained:  # fmt: skip
    """Train every stage of the config (`[{"name": "main"}]` without `stages`) on its directions."""
    train_set, output_dir, base_args, say = training_set.dataset, run.output_dir, run.args, run.say
    stages = config.get("stages") or [{"name": "main"}]
    stages = [
        {**stage, "directions": stage_directions(stage, model.config, sorted(training_set.sizes))}
        if "directions" in stage
        else stage
        for stage in stages
    ]
    if base_args.device.type == "cpu":  # no page fault per freed logits tensor, every step; the same bits
        say(f"training on the CPU: {keep_freed_memory()}")
    trained = []  # what each stage ran: steps, and the steps, seconds and source tokens of this process
    for stage in stages:
        stage_dir = output_dir / "checkpoints" / stage["name"] if len(stages) > 1 else output_dir / "checkpoints"
        stage_args = type(base_args)(
            output_dir=str(stage_dir), **{**config.get("training", {}), **stage.get("training", {})}
        )
        batch = stage_args.per_device_train_batch_size * stage_args.gradient_accumulation_steps * stage_args.world_size
        say(
            f"training: stage {stage['name']}, {stage_args.max_steps:,} steps x {batch} examples, checkpoints in {stage_dir}"
        )
        warmup = stage_args.get_warmup_steps(stage_args.max_steps) if stage_args.max_steps > 0 else 0
        if warmup >= stage_args.max_steps > 0:  # a shrunk smoke test does this on purpose; a real run by mistake
            say(
                f"training: the warm-up ({warmup:,} steps) is not shorter than the stage, so the learning rate "
                f"reaches at most {stage_args.max_steps / warmup:.0%} of {stage_args.learning_rate:g}"
            )
        model, trainer, record = run_stage(stage, stage_args, model, tokenizer, train_set, eval_sets, run.resume)
        trained.append(record)
        if stage is not stages[-1] and hasattr(model, "end_of_stage"):
            # method-specific transitions, e.g. HLT-MT fixing each high-resource language's adapter
            logger.info("End of stage %s: %s", stage["name"], model.end_of_stage())
    return Trained(model, trainer, trained, stage_args)


def save_model(trained: Trained, tokenizer: Any, config: dict[str, Any], report: Any, parameters: dict[str, int],
               run: RunContext) -> Path | None:  # fmt: skip
    """Save the trained model (every process: under FSDP the weights are gathered from all); the main process adds
    the tokenizer and `run_info.json` and gets the folder, the others None."""
    model, trainer = trained.model, trained.trainer
    model_dir = run.output_dir / "model"
    # transformers' default stops generation at 20 tokens; a shared model should translate whole sentences
    # (within the positions the decoder has: its start token and a target tag come before the new tokens)
    positions = getattr(model.config, "max_position_embeddings", None) or GENERATION_MAX_NEW_TOKENS + 2
    model.generation_config.max_new_tokens = min(GENERATION_MAX_NEW_TOKENS, positions - 2)
    trainer.save_loadable_model(model_dir)
    if not trainer.is_world_process_zero():
        return None
    (model_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle; the run's config is in run_info.json
    tokenizer.save_pretrained(model_dir)
    write_run_info(run.output_dir, config, trained.args, report, trained.record, parameters)
    return model_dir


def stage_directions(stage: dict[str, Any], config: Any, available: list[str]) -> list[str] | None:
    """A stage's directions: a list, or `high_resource` (source and target both high-resource)."""
    directions = stage.get("directions")
    if directions != "high_resource":
        return directions
    high = set(getattr(config, "high_resource_languages", []) or [])
    chosen = [d for d in available if set(d.split("-")) <= high]
    if not chosen:
        raise ConfigError(
            f"Stage {stage['name']!r}: directions=high_resource, but no training direction joins two high-resource "
            f"languages ({sorted(high) or 'none set'}); set model.high_resource_languages."
        )
    return chosen


def run_stage(
    stage: dict[str, Any], args: Any, model: Any, tokenizer: Any, train_set: Any, eval_sets: dict, resume: bool
):
    """Train one stage on its directions; a finished stage is loaded from its `final` folder instead."""

    final = Path(args.output_dir) / "final"
    record: dict[str, Any] = {"stage": stage["name"], "max_steps": args.max_steps}
    if "directions" in stage:
        wanted = [[tokenizer.language_id(c) for c in d.split("-")] for d in stage["directions"]]
        directions, _ = sampling_columns(train_set, with_lengths=False)
        keys = directions @ np.array([1 << 20, 1])  # one integer per (source, target) pair
        wanted_keys = np.array(wanted, dtype=np.int64) @ np.array([1 << 20, 1])
        absent = [d for d, key in zip(stage["directions"], wanted_keys, strict=True) if key not in keys]
        if absent:  # a stage listing one direction the data lacks trained the others, without a word
            raise ConfigError(f"Stage {stage['name']!r}: no training data for directions {absent}; list the "
                              "directions the training data holds.")  # fmt: skip
        keep = np.flatnonzero(np.isin(keys, wanted_keys))
        train_set = train_set.select(keep)
        eval_sets = {d: ds for d, ds in eval_sets.items() if d in stage["directions"]}
    trainer = LangSpecSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=train_set,
        eval_dataset=eval_sets or None,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, pad_to_multiple_of=args.pad_to_multiple_of),
        processing_class=tokenizer,
        compute_metrics=TranslationMetrics(tokenizer) if args.predict_with_generate else None,
    )
    complete = read_json(final / "stage_complete.json") if (final / "stage_complete.json").exists() else None
    if resume and complete and args.max_steps > 0 and complete["step"] < args.max_steps:  # a larger max_steps
        last = last_complete_checkpoint(args.output_dir)
        if last is None or not last.endswith(f"checkpoint-{complete['step']}"):
            raise ConfigError(
                f"Stage {stage['name']!r} finished at step {complete['step']} without a checkpoint there (the optimizer "
                f"state), so it cannot be extended to {args.max_steps} steps; use a new output_dir."
            )
        complete = None
    if resume and complete:
        logger.info("Stage %s is complete; loading its final weights from %s", stage["name"], final)
        model = type(model).from_pretrained(final)
        trainer.model = model
        return model, trainer, record | complete.get("trained", {})
    timing = TrainingTime()
    trainer.add_callback(timing)
    trainer.train(resume_from_checkpoint=resume)
    record |= {"steps": trainer.state.global_step, **timing.record(trainer.state)}
    if trainer.static_capture:  # compiled over static shapes: what compiling and capturing the buckets took
        record["static_shapes"] = trainer.static_capture
    trainer.save_loadable_model(final)  # every process: under FSDP the weights are gathered from all
    if trainer.is_world_process_zero():
        write_atomic(
            final / "stage_complete.json",
            json.dumps({"stage": stage["name"], "step": trainer.state.global_step, "trained": record}),
        )
    return model, trainer, record


class TrainingTime(TrainerCallback):
    """Times the training loop of this process (after a resume: the resumed part only)."""

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self._start = (time.perf_counter(), state.global_step, state.num_input_tokens_seen)

    def on_train_end(self, args, state, control, **kwargs) -> None:
        self._end = (time.perf_counter(), state.global_step, state.num_input_tokens_seen)

    def record(self, state) -> dict[str, Any]:
        """Steps, seconds and (with `include_num_input_tokens_seen`) source tokens trained in this process, and
        the last logged training loss (the mean over the last `logging_steps`; the history survives a resume)."""
        (t0, step0, tokens0), (t1, step1, tokens1) = self._start, self._end
        logged = [entry for entry in state.log_history if "loss" in entry]
        return {
            "steps_this_process": step1 - step0,
            "seconds": t1 - t0,
            "input_tokens_this_process": tokens1 - tokens0,
            "final_loss": logged[-1]["loss"] if logged else None,
        }


def write_run_info(
    output_dir: Path, config: dict[str, Any], args: Any, report: Any, trained: list, parameters: dict[str, int]
) -> None:
    from ... import __version__

    info = {
        "world_size": args.world_size,
        "global_train_batch_size": args.per_device_train_batch_size
        * args.world_size
        * args.gradient_accumulation_steps,
        "versions": {"hf_langspec": __version__, "torch": torch.__version__, "transformers": transformers.__version__},
        "train_filter_report": {"kept": report.kept, "removed": report.removed},
        "trained": trained,  # per stage: the steps reached, and what this process trained (steps, seconds, tokens)
        "parameters": parameters,  # total, and trainable (a pretrained start's frozen weights are not)
        "config": config,
    }
    write_atomic(output_dir / "run_info.json", json.dumps(info, indent=2, default=str))


__all__ = ["GENERATION_MAX_NEW_TOKENS", "Trained", "TrainingTime", "run_stage", "save_model", "stage_directions",
           "train_stages", "write_run_info"]  # fmt: skip
