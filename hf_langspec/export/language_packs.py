"""Language packs: one language's modules, apart from the base they were trained on, added to a model in place.

A model adapted on a frozen pretrained base (`freeze_pretrained`, the default of a pretrained start) holds the base
and, beside it, each language's slice of every language-specific parameter (LoRA's A and B per language, LAA's
matrices, adapters, ...). `export_language_pack` writes the slices of some languages into a folder
(`language_modules.safetensors` and `language_pack.json`: the languages, their code tokens, the method's settings
and a fingerprint of the base); `add_language_packs` appends them to another model of the same method on the same
base, with one copy of the base for every language, which is what `hf-langspec serve --language-dir` does while it
serves (`POST /admin/reload-languages`).

Which axis of a parameter is its language axis differs by method and parameter (LoRA's attention factors
`[layers, projections, L, d, r]` at 2, its FFN factors `[layers, L, d, r]` at 1): `language_axes` finds it by
building the model with one more language on the meta device and comparing shapes, so every method that stacks its
parameters by language is covered without a table to keep. A parameter indexed by language pair (Bapna & Firat's
pair adapters) does not grow with a language and is refused with that reason; so is a pack whose base, method
settings or shapes differ from the model's.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..files import write_atomic
from ..modeling.modeling_langspec import language_module_parameter

PACK_WEIGHTS = "language_modules.safetensors"
PACK_FILE = "language_pack.json"
PACK_FORMAT = 1
# config fields a language changes (or that name where the model came from): every other field must be the model's
LANGUAGE_FIELDS = {"languages", "lang_tag_token_ids", "vocabulary_fingerprint", "_name_or_path", "transformers_version",
                   "architectures", "auto_map", "torch_dtype", "dtype", "central_language", "high_resource_languages"}  # fmt: skip


def base_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter that is not a language module's (names, shapes, dtypes and values): two models
    adapted on the same frozen checkpoint share it, any base trained or started elsewhere does not."""
    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters(), key=lambda item: item[0]):
        if language_module_parameter(name):
            continue
        tensor = parameter.detach().cpu().contiguous()
        digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _config_with(config: Any, languages: list[str], tag_ids: list[int]) -> Any:
    values = {**config.to_dict(), "languages": languages, "lang_tag_token_ids": tag_ids}
    values.pop("vocabulary_fingerprint", None)
    return type(config).from_dict(values)


def language_axes(model: torch.nn.Module) -> dict[str, int]:
    """`{parameter: its language axis}` for every language-module parameter: the axis that grows by one when the
    same model is built (on the meta device) with one more language. A ValueError names a parameter that does not
    grow that way (indexed by language pair, or not by language at all)."""
    config = model.config
    taken = set(config.lang_tag_token_ids or [])
    spare = next(i for i in range(config.vocab_size) if i not in taken)  # any id: the probe model is never run
    bigger_config = _config_with(config, [*config.languages, "__probe__"], [*(config.lang_tag_token_ids or []), spare])
    with torch.device("meta"):
        bigger = dict(type(model)(bigger_config).named_parameters())
    axes = {}
    for name, parameter in model.named_parameters():
        if not language_module_parameter(name):
            continue
        grown = bigger.get(name)
        differs = [] if grown is None or grown.dim() != parameter.dim() else [
            axis for axis, (a, b) in enumerate(zip(parameter.shape, grown.shape, strict=True)) if a != b
        ]  # fmt: skip
        if len(differs) != 1 or grown.shape[differs[0]] != parameter.shape[differs[0]] + 1:
            raise ValueError(
                f"{name} {tuple(parameter.shape)} does not have one axis per language (with one more language it is "
                f"{tuple(grown.shape) if grown is not None else 'absent'}): a {config.model_type} model with these "
                "settings (language pairs, for example) cannot take a language pack; export and serve its "
                "directions instead (`hf-langspec export --directions`)."
            )
        axes[name] = differs[0]
    return axes


def method_settings(config: Any) -> dict[str, Any]:
    """The config's fields that every model taking a pack must share (all but the language-dependent ones), as they
    read back from the pack's JSON (integer keys become strings there)."""
    fields = {k: v for k, v in config.to_dict().items() if k not in LANGUAGE_FIELDS}
    return json.loads(json.dumps(fields, sort_keys=True, default=str))


def export_language_pack(
    model: torch.nn.Module, tokenizer: Any, languages: list[str], output_dir: str | os.PathLike
) -> Path:
    """Write the modules of `languages` (codes of `model`) into `output_dir` (new or empty): their slices of every
    language-module parameter, their code tokens, the method's settings and the base's fingerprint."""

    output = Path(output_dir)
    if output.exists() and any(output.iterdir()):
        raise ValueError(f"{output} is not empty; give a new folder for the language pack (nothing is overwritten).")
    unknown = [code for code in languages if code not in model.config.languages]
    if not languages or unknown:
        raise ValueError(f"the model has no modules for {unknown or 'no language'}; it has {model.config.languages}.")
    axes = language_axes(model)
    if not axes:
        raise ValueError(f"a {model.config.model_type} model has no language modules to pack; serve it as it is.")
    ids = torch.tensor([model.config.languages.index(code) for code in languages])
    params = dict(model.named_parameters())
    tensors = {name: params[name].detach().index_select(axis, ids.to(params[name].device)).cpu().contiguous()
               for name, axis in axes.items()}  # fmt: skip
    pack = {
        "format": PACK_FORMAT,
        "model_type": model.config.model_type,
        "languages": list(languages),
        "code_tokens": {code: tokenizer.lang_tag(code) for code in languages},
        "base_fingerprint": base_fingerprint(model),
        "method_settings": method_settings(model.config),
        "axes": axes,
    }
    output.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(output / f".{PACK_WEIGHTS}.tmp"))
    os.replace(output / f".{PACK_WEIGHTS}.tmp", output / PACK_WEIGHTS)
    write_atomic(output / PACK_FILE, json.dumps(pack, indent=1, sort_keys=True) + "\n")  # last: marks it complete
    return output


def read_language_pack(folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """A pack's description and tensors, or a ValueError naming what is missing or damaged and the fix."""

    folder = Path(folder)
    again = f"export it again (`hf-langspec export --model MODEL --language-pack CODE --output-dir {folder}`)"
    if not (folder / PACK_FILE).is_file() or not (folder / PACK_WEIGHTS).is_file():
        raise ValueError(f"{folder} is not a language pack (no {PACK_FILE} and {PACK_WEIGHTS}); {again}.")
    try:
        pack = json.loads((folder / PACK_FILE).read_text(encoding="utf-8"))
        tensors = load_file(str(folder / PACK_WEIGHTS))
    except (ValueError, OSError, SafetensorError) as error:
        raise ValueError(f"the language pack {folder} cannot be read ({error}); {again}.") from None
    if not isinstance(pack, dict) or pack.get("format") != PACK_FORMAT:
        raise ValueError(f"{folder / PACK_FILE} is not a language pack of format {PACK_FORMAT}; {again}.")
    return pack, tensors


def check_pack(model: torch.nn.Module, tokenizer: Any, pack: dict[str, Any], tensors: dict[str, torch.Tensor],
               axes: dict[str, int], base: str, where: str) -> list[int]:  # fmt: skip
    """The pack's code-token ids, once it is known to fit `model`: same method and settings, same base, languages
    it lacks, code tokens its vocabulary has, and every language parameter's slice in the shape the model needs."""
    config = model.config
    if pack["model_type"] != config.model_type:
        raise ValueError(f"{where} holds {pack['model_type']} modules; this model is a {config.model_type} model.")
    if pack["base_fingerprint"] != base:
        raise ValueError(f"{where} was trained on another base than this model's (base fingerprints differ): a pack "
                         "fits models adapted from the same checkpoint with the base frozen.")  # fmt: skip
    settings = method_settings(config)
    changed = sorted(k for k in set(settings) | set(pack["method_settings"]) if settings.get(k) != pack["method_settings"].get(k))  # fmt: skip
    if changed:
        shown = ", ".join(
            f"{k}: pack {pack['method_settings'].get(k)!r}, model {settings.get(k)!r}" for k in changed[:4]
        )
        raise ValueError(f"{where} was made with other settings ({shown}); export it from a model with this one's.")
    present = [code for code in pack["languages"] if code in config.languages]
    if present:
        raise ValueError(f"{where} adds {present}, which the model already serves.")
    vocab = tokenizer.get_vocab()
    ids = [vocab.get(pack["code_tokens"][code]) for code in pack["languages"]]
    if None in ids:
        missing = [pack["code_tokens"][c] for c, i in zip(pack["languages"], ids, strict=True) if i is None]
        raise ValueError(
            f"{where}: the model's vocabulary has no code token {missing}; a pack adds modules, not tokens."
        )
    params, count = dict(model.named_parameters()), len(pack["languages"])
    if set(tensors) != set(axes):
        raise ValueError(f"{where} has the modules {sorted(set(tensors) ^ set(axes))[:4]} that the model lacks or "
                         "has beyond it; export it from a model of this method and settings.")  # fmt: skip
    for name, axis in axes.items():
        expected = list(params[name].shape)
        expected[axis] = count
        if list(tensors[name].shape) != expected:
            raise ValueError(f"{where}: {name} is {tuple(tensors[name].shape)}, the model needs {tuple(expected)}.")
    return ids


def add_language_packs(model: torch.nn.Module, tokenizer: Any, folders: list[str | os.PathLike],
                       base: str | None = None) -> tuple[Any, list[str]]:  # fmt: skip
    """`(model, languages added)`: `model` with the packs' languages appended, a new model object over the same base
    tensors (one copy of the base); `tokenizer` takes them too (`LangSpecTokenizer.add_languages`). Every pack is checked before anything
    changes. `base`: the model's `base_fingerprint`, when the caller keeps it (hashing a large base takes seconds)."""
    axes, base = language_axes(model), base or base_fingerprint(model)
    packs, languages, tag_ids = [], [], []
    for folder in folders:
        pack, tensors = read_language_pack(folder)
        ids = check_pack(model, tokenizer, pack, tensors, axes, base, str(folder))
        if set(pack["languages"]) & set(languages):
            raise ValueError(f"{folder} adds {sorted(set(pack['languages']) & set(languages))} a second time.")
        packs.append(tensors)
        languages += pack["languages"]
        tag_ids += ids
    if not packs:
        return model, []
    state = model.state_dict(keep_vars=False)
    for name, axis in axes.items():
        state[name] = torch.cat([state[name], *(t[name].to(state[name]) for t in packs)], dim=axis)
    config = _config_with(
        model.config, [*model.config.languages, *languages], [*model.config.lang_tag_token_ids, *tag_ids]
    )
    with torch.device("meta"):
        grown = type(model)(config)
    grown.load_state_dict(state, assign=True, strict=True)
    grown.tie_weights()  # `assign` gives each tied name a Parameter of its own (one storage): one Parameter again
    _copy_buffers(model, grown)
    grown.generation_config = model.generation_config
    tokenizer.add_languages(languages)
    grown.config.vocabulary_fingerprint = tokenizer.vocabulary_fingerprint()
    tokenizer.check_model(grown)
    return grown.eval(), languages


def _copy_buffers(source: torch.nn.Module, target: torch.nn.Module) -> None:
    """Buffers a state dict leaves out (non-persistent: position tables, masks) from `source` into `target`."""
    for name, buffer in source.named_buffers():
        owner, _, leaf = name.rpartition(".")
        module = target.get_submodule(owner) if owner else target
        if getattr(module, leaf).is_meta:
            module.register_buffer(leaf, buffer, persistent=leaf not in module._non_persistent_buffers_set)


__all__ = [
    "PACK_FILE",
    "PACK_WEIGHTS",
    "add_language_packs",
    "base_fingerprint",
    "export_language_pack",
    "language_axes",
    "read_language_pack",
]
