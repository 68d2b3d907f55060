"""One experiment from one config: corpus -> tokenizer -> model -> training -> evaluation -> card, each a stage of
`training/steps/` (data, tokenizer, model, train, evaluate), each taking what it needs and returning a dataclass.

`hf-langspec train --config CONFIG` and `examples/train_translation.py --config CONFIG` run
:func:`run_experiment`. The config's sections, keys and checks are `training/config.py`'s
(`hf-langspec train --help-config` prints them); this module only runs what a checked config says.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from ..data.columns import direction_sizes
from ..model_folder import ModelFolderError, load_model_folder, load_tokenizer, tokenizer_problem
from ..modeling.configuration_clm import clm_collapse_risk, clm_map_start_risk
from .config import DATA_DEFAULTS, validate_config
from .processes import check_processes_joined
from .run_guard import RunLock, check_resumed_config, record_config
from .static_shapes import compiled_shapes_risk
from .steps.context import RunContext
from .steps.data import (
    add_standard_test_sets,
    check_against_data,
    load_data,
    prepare_training,
    validation_sets,
)
from .steps.evaluate import evaluate_and_publish
from .steps.model import build_model
from .steps.tokenizer import build_tokenizer
from .steps.train import save_model, train_stages
from .training_args import LangSpecTrainingArguments

logger = logging.getLogger(__name__)


def check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-test-{os.getpid()}"  # one per process: ranks of a launch probe at once
        probe.write_text("ok")
        probe.unlink()
    except OSError as err:
        raise ConfigError(
            f"Cannot write to output_dir {directory}: {err.strerror}. Choose a writable directory."
        ) from None


def run_experiment(config: dict[str, Any], resume: bool = True) -> dict[str, Any]:
    """Run every step of the config; returns paths and the evaluation results. Resumes by default.

    A run resumed into its output_dir must have the config it was started with (`run_guard`), and one
    process at a time trains into an output_dir.
    """

    validate_config(config, build=True)  # the model on the meta device too, and a pretrained start's shape
    _check_saved_models(config.get("model", {}), config.get("tokenizer", {}))
    output_dir = Path(config["output_dir"])
    check_writable(output_dir)
    # the base arguments give the seed and the main-process-first guard; each stage builds its own
    base_args = LangSpecTrainingArguments(output_dir=str(output_dir / "checkpoints"), **config.get("training", {}))
    check_processes_joined(base_args.world_size)  # before the lock, which a lone process would take for itself
    main = base_args.process_index == 0
    with RunLock(output_dir) if main else contextlib.nullcontext():
        if main:
            check_resumed_config(output_dir, config, resume)
            # what is trained from here on, a resumption must match (compared only once checkpoints or a model exist)
            record_config(output_dir, config)
        return _run(config, resume, output_dir, base_args)


def _check_saved_models(model: dict[str, Any], tokenizer: dict[str, Any]) -> None:
    """The saved models a run starts from (`init_from`, `init_encoder_from`) and the saved tokenizer
    (`tokenizer.path`), checked before any data is built: a missing, damaged or foreign folder, or a config that
    does not fit its weights, is one line (model_folder.py lists the faults). Each is loaded to check it, and
    loaded again where the run builds its model."""

    if "path" in tokenizer:
        folder = Path(tokenizer["path"])
        missing = "is a file, not a folder" if folder.exists() else "does not exist"
        problem = tokenizer_problem(folder) if folder.is_dir() else missing
        if problem:
            raise ModelFolderError(f"[tokenizer] path {folder}: {problem}; give the tokenizer folder a run saved.")
        load_tokenizer(folder, "[tokenizer] path", **{k: v for k, v in tokenizer.items() if k == "lang_tag_style"})
    if "init_from" in model:
        load_model_folder(model["init_from"])
    encoder = model.get("init_encoder_from")
    if encoder is not None:
        load_model_folder(encoder if isinstance(encoder, str) else encoder["path"], translation=False)


def _run(config: dict[str, Any], resume: bool, output_dir: Path, base_args: Any) -> dict[str, Any]:
    """The run's steps in order (training/steps/): data, tokenizer, training set, model, training, saving,
    evaluation. Each says what it did; the main process alone writes the results and the card."""

    run = RunContext(output_dir, base_args, resume, _announcer(base_args.process_index == 0))
    data_section, model_section = config.get("data", {}), config.get("model", {})
    risks = clm_collapse_risk(model_section, config.get("training", {})), clm_map_start_risk(model_section)
    for risk in (*risks, compiled_shapes_risk(config)):
        if risk and run.main:  # said first, before any data is read
            print(f"warning: {risk}")
            logger.warning(risk)
    data = load_data(data_section, run)
    check_against_data(config, direction_sizes(data.train))
    tokenizer = build_tokenizer(config, data, run)
    add_standard_test_sets(config.get("evaluation", {}), data, tokenizer.languages)
    training_set = prepare_training(data_section, data, tokenizer, run)
    eval_sets = validation_sets(data_section, data, tokenizer, run)  # the data's last step (no random draws)
    max_length = data_section.get("max_length", DATA_DEFAULTS["max_length"])
    built = build_model(model_section, max_length, tokenizer, training_set.sizes, run)  # seeds its own start
    trained = train_stages(config, built.model, tokenizer, training_set, eval_sets, run)
    model_dir = save_model(trained, tokenizer, config, training_set.report, built.parameters, run)
    if model_dir is None:  # not the main process
        return {"model_dir": output_dir / "model"}
    evaluated = evaluate_and_publish(config, trained, model_dir, tokenizer, data, training_set, run)
    return {"model_dir": model_dir, "filter_report": training_set.report, **evaluated}


def _announcer(main: bool):
    """One line per stage of a run (data, tokenizer, model, training, evaluation), printed by the main process."""

    def say(text: str) -> None:
        if main:
            print(text, flush=True)

    return say


__all__ = ["run_experiment"]
