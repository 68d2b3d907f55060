"""Initialising a translation model's encoder from a pretrained encoder on disk (HLT-MT, section 3.2).

HLT-MT starts from XLM-R; here any saved encoder of this package's shape serves, for example an
`XLPForMaskedLM` / `XLPModel` from `examples/pretrain_xlp.py` (XLP or XLM). The token embeddings and every
encoder layer are copied by name; with `decoder_layers=True` the decoder's self-attention and FFN weights
are initialised from the encoder's layers too (XLM-T style), cross-attention staying fresh. Shapes,
vocabularies and language lists must agree; nothing is resized or skipped silently.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ..model_folder import load_model_folder

ENCODER_ONLY = ("self_attn.", "self_attn_layer_norm.", "fc1.", "fc2.", "final_layer_norm.")


def _encoder_state(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], Any]:
    source = load_model_folder(path, translation=False)  # XLPModel (or a translation model's bare model); checked
    encoder = getattr(source, "encoder", None)
    if encoder is None:
        raise ValueError(f"{path} holds a {type(source).__name__}, which has no `encoder`; save an XLP/XLM encoder.")
    return encoder.state_dict(), source.config


def init_encoder_from(model: Any, path: str | os.PathLike, decoder_layers: bool = False) -> list[str]:
    """Copy a pretrained encoder's weights into `model` (a translation model); returns the names copied."""
    state, source_config = _encoder_state(path)
    config = model.config
    for field in ("d_model", "encoder_layers", "vocab_size", "languages", "normalize_before"):
        if getattr(source_config, field) != getattr(config, field):
            raise ValueError(
                f"{path} does not fit this model: {field} is {getattr(source_config, field)!r} there and "
                f"{getattr(config, field)!r} here. Build the translation model with the encoder's shape and tokenizer."
            )
    target = model.model.encoder.state_dict()
    copied = []
    with torch.no_grad():
        for name, tensor in state.items():
            if name.startswith("insertions."):
                continue  # the encoder's language encoding (XLP's projections) belongs to its own task
            if name not in target or target[name].shape != tensor.shape:
                raise ValueError(f"Encoder weight {name!r} {tuple(tensor.shape)} has no counterpart in the model.")
            target[name].copy_(tensor)
            copied.append(f"model.encoder.{name}")
        model.get_input_embeddings().weight.copy_(state["embed_tokens.weight"])
        if decoder_layers:
            decoder = model.model.decoder.state_dict()
            for name, tensor in state.items():
                parts = name.split(".", 2)
                if (
                    parts[0] == "layers"
                    and int(parts[1]) < config.decoder_layers
                    and parts[2].startswith(ENCODER_ONLY)
                ):
                    if decoder[name].shape != tensor.shape:
                        raise ValueError(
                            f"decoder_layers=True copies encoder layers into the decoder, but {name} is "
                            f"{tuple(tensor.shape)} in the encoder and {tuple(decoder[name].shape)} in the decoder."
                        )
                    decoder[name].copy_(tensor)
                    copied.append(f"model.decoder.{name}")
    model.tie_weights()
    return copied


__all__ = ["init_encoder_from"]
