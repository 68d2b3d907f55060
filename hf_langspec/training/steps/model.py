"""The model step: the method's model on the tokenizer's vocabulary and languages, started fresh, from a saved
model (`init_from`), as a pretrained checkpoint (`init_from_pretrained`, its base frozen by default) or with a
saved encoder (`init_encoder_from`); its parameters counted.

In: the config's `[model]` section, the data's `max_length`, the tokenizer, the examples per direction. Out: a
`BuiltModel`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from hf_langspec_cli.config_file import ConfigError

from ...model_folder import load_model_folder
from ...modeling.modeling_langspec import ROWS_ONLY, added_parameters
from ...modeling.registry import model_classes
from ...pretrained import adapt_pretrained, freeze_base, new_language_rows
from ..model_check import resolve_high_resource
from ..pretrained_encoder import init_encoder_from
from .context import RunContext

logger = logging.getLogger(__name__)


@dataclass
class BuiltModel:
    """The run's model and its parameter counts (`total`, `trainable`: a pretrained start's frozen weights are
    not), and how many of them are the method's language modules."""

    model: Any
    parameters: dict[str, int]
    added: int


def build_model(
    model_section: dict[str, Any], max_length: int, tokenizer: Any, train_sizes: dict[str, int], run: RunContext
) -> BuiltModel:
    """The run's model (see the module) from the config's [model] section, checked against the tokenizer and the
    data's `max_length`, with its parameters counted and said."""

    model_section = dict(model_section)
    pretrained = model_section.get("init_from_pretrained")
    torch.manual_seed(run.args.seed)
    if "init_from" in model_section:  # continue a saved model (e.g. one extended with a new language)
        model = load_model_folder(model_section["init_from"], folder_checked=True)  # its config must fit its weights
    else:
        # the trained directions: mCLM keys its gates by them (and every checkpoint records them)
        model_section.setdefault("language_pairs", sorted(train_sizes))
        resolve_high_resource(model_section, train_sizes)
        method = model_section.pop("class", "baseline")
        config_class, model_class = model_classes()[method]
        encoder_init = model_section.pop("init_encoder_from", None)
        if pretrained:
            model = pretrained_model(pretrained, method, tokenizer, model_section, run.say)
        else:
            model = model_class(config_class(**tokenizer.model_config_kwargs(), **model_section))
        if encoder_init is not None:  # HLT-MT starts from XLM-R: here a saved XLP/XLM encoder (resuming overrides it)
            spec = {"path": encoder_init} if isinstance(encoder_init, str) else encoder_init
            copied = init_encoder_from(model, spec["path"], decoder_layers=spec.get("decoder_layers", False))
            logger.info("Initialised %d tensors from the encoder in %s", len(copied), spec["path"])
    if getattr(model.config, "cll_frozen_languages", None) and run.args.weight_decay:
        raise ConfigError(
            f"The model freezes the LSLs of {model.config.cll_frozen_languages}, but weight_decay="
            f"{run.args.weight_decay} would still shrink them; set training.weight_decay: 0."
        )
    tokenizer.check_model(model)
    check_positions(model, max_length, pretrained)
    added = added_parameters(model)
    # a matrix trained in some rows only (a new language's code rows) counts those rows
    trainable = sum(getattr(p, ROWS_ONLY, 0) * p.shape[-1] or p.numel() for p in model.parameters() if p.requires_grad)
    parameters = {"total": model.num_parameters(), "trainable": trainable}
    frozen = f", {trainable:,} trainable ({trainable / model.num_parameters():.1%})" if pretrained else ""
    run.say(f"model: {type(model).__name__}, {model.num_parameters():,} parameters ({added:,} in language modules)"
        f"{frozen}")  # fmt: skip
    return BuiltModel(model, parameters, added)


def check_positions(model: Any, max_length: int | None, pretrained: str | None) -> None:
    """A ConfigError before training when `data.max_length` lets in sequences longer than the model has positions
    for (a small checkpoint's `max_position_embeddings`, or the config's): the first batch would fail."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and max_length and max_length > limit:
        whose = f"the checkpoint {pretrained}" if pretrained else "the model"
        raise ConfigError(f"data.max_length is {max_length} subwords but {whose} has {limit} positions "
                          f"(max_position_embeddings); set data.max_length to {limit} or less.")  # fmt: skip


def pretrained_model(path: str, method: str, tokenizer: Any, fields: dict[str, Any], say) -> Any:
    """`method` on the checkpoint at `path`, started as it (`pretrained.adapt_pretrained`), its weights frozen unless
    `freeze_pretrained: false` (the default freezes them when the method adds language modules) but for the
    parameters named in `train_pretrained` and the code rows of `add_languages`."""

    freeze = fields.pop("freeze_pretrained", method != "baseline")
    also = tuple(fields.pop("train_pretrained", ()))
    added = fields.pop("add_languages", [])
    say(f"model: {method} on {path}, started as the checkpoint" + (f", {added} added" if added else ""))
    try:
        model = adapt_pretrained(path, method, tokenizer, new_languages=added, **fields)
    except ValueError as error:
        raise ConfigError(f"[model] init_from_pretrained: {error}") from None
    if freeze:
        unmatched = [part for part in also if not any(part in name for name, _ in model.named_parameters())]
        if unmatched:
            raise ConfigError(f"[model] train_pretrained: {unmatched} name no parameter of the model (names look "
                              f"like {next(iter(model.state_dict()))}).")  # fmt: skip
        try:
            freeze_base(model, also, rows=new_language_rows(tokenizer, added))
        except ValueError as error:
            raise ConfigError(f"[model] {error}") from None
    return model


__all__ = ["BuiltModel", "build_model", "check_positions", "pretrained_model"]
