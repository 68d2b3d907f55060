"""Starting from a pretrained translation checkpoint: NLLB-200 (dense), M2M-100, multilingual Marian (issue 45).

Most users adapt a model they already have. `load_pretrained` reads a local folder (or a Hub id where the Hub is
reachable) holding an `M2M100ForConditionalGeneration` or a `MarianMTModel` and its tokenizer, and returns a
method's model holding the checkpoint's weights, its language modules started as the identity
(`interop.adapt`: the logits are the checkpoint's until training), with a `LangSpecTokenizer` over the
checkpoint's own vocabulary that keeps its language-code convention:

| checkpoint | codes | convention | `lang_tag_template`, `lang_tag_style` |
|---|---|---|---|
| NLLB-200 | `eng_Latn` | source code before the source, target code forced first in the decoder | `"{}"`, `"both"` |
| M2M-100 | `__en__` | the same | `"__{}__"`, `"both"` |
| multilingual Marian (OPUS-MT) | `>>fra<<` | target code before the source | `">>{}<<"`, `"source"` |

So training data is tokenized exactly as the checkpoint's tokenizer does (tested against `NllbTokenizer`), and the
language contract (`config.languages`, `src_lang_ids` / `tgt_lang_ids`) indexes the checkpoint's codes. M2M-100's
and Marian's tokenizers are sentencepiece (Python) tokenizers that transformers cannot convert to the `tokenizers`
backend this package builds on; for them, pass a `LangSpecTokenizer` built over the same vocabulary.
"""

from __future__ import annotations

import os
from typing import Any

from .modeling.modeling_langspec import language_module_parameter
from .tokenization import LangSpecTokenizer

# tokenizer class -> (how a code is written as its token, where the tags go)
CONVENTIONS = {
    "NllbTokenizer": ("{}", "both"),
    "NllbTokenizerFast": ("{}", "both"),
    "M2M100Tokenizer": ("__{}__", "both"),
    "MarianTokenizer": (">>{}<<", "source"),
}


def checkpoint_languages(tokenizer: Any, template: str) -> list[str]:
    """The language codes a checkpoint's tokenizer knows: its special tokens written as `template` says."""
    prefix, _, suffix = template.partition("{}")
    specials = set(getattr(tokenizer, "all_special_tokens", [])) | set(getattr(tokenizer, "added_tokens_encoder", {}))
    return sorted(
        token[len(prefix) : len(token) - len(suffix)]
        for token in specials
        if token.startswith(prefix) and token.endswith(suffix) and len(token) > len(prefix) + len(suffix)
        and token not in ("<s>", "</s>", "<pad>", "<unk>", "<mask>")
    )  # fmt: skip


def checkpoint_tokenizer(
    tokenizer: Any, languages: list[str], model_vocab_size: int | None = None
) -> LangSpecTokenizer:
    """A `LangSpecTokenizer` over `tokenizer`'s vocabulary (an NLLB tokenizer; a LangSpecTokenizer is returned as it
    is) for `languages`, codes as the checkpoint writes them without their marks (`eng_Latn`; `en` for M2M-100's
    `__en__`). It encodes as the checkpoint's tokenizer does; a code the checkpoint does not know is refused with
    the ones it knows. `model_vocab_size`: the checkpoint's embedding rows, when it has more than the vocabulary."""
    if isinstance(tokenizer, LangSpecTokenizer):
        return tokenizer
    name = type(tokenizer).__name__
    if name not in CONVENTIONS:
        raise ValueError(f"No language-code convention is known for {name}; pass a LangSpecTokenizer built over the "
                         f"checkpoint's vocabulary (known: {sorted(CONVENTIONS)}).")  # fmt: skip
    template, style = CONVENTIONS[name]
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        raise ValueError(
            f"{name} is a sentencepiece (Python) tokenizer, which transformers cannot convert to the `tokenizers` "
            "backend LangSpecTokenizer builds on; build a LangSpecTokenizer over the same vocabulary "
            f"(lang_tag_template={template!r}, lang_tag_style={style!r}) and pass it instead."
        )
    known = checkpoint_languages(tokenizer, template)
    unknown = [code for code in languages if code not in known]
    if unknown:
        raise ValueError(f"The checkpoint's tokenizer does not know {unknown}; it knows {len(known)} codes: "
                         f"{', '.join(known[:30])}{' ...' if len(known) > 30 else ''}.")  # fmt: skip
    specials = {key: getattr(tokenizer, key) for key in ("bos_token", "eos_token", "unk_token", "pad_token")}
    return LangSpecTokenizer(
        tokenizer_object=tokenizer.backend_tokenizer, languages=list(languages), lang_tag_template=template,
        lang_tag_style=style, model_vocab_size=model_vocab_size, **{k: v for k, v in specials.items() if v is not None},
    )  # fmt: skip


# the checkpoints a method can start from: their config's model_type -> the backbone form (interop's targets)
CHECKPOINT_TYPES = {"m2m_100": "m2m100", "marian": "marian"}


def pretrained_config(path: str | os.PathLike) -> Any:
    """The config of the checkpoint at `path`, refused in one line unless it is an M2M-100 / NLLB-200 dense or a
    Marian model."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{path} is not a model checkpoint ({first}); give the folder of an M2M-100, NLLB-200 "
                         "(dense) or Marian model.") from None  # fmt: skip
    if config.model_type not in CHECKPOINT_TYPES:
        raise ValueError(f"{path} holds a {config.model_type!r} model; a method starts from an M2M-100, NLLB-200 "
                         "(dense) or Marian checkpoint.")  # fmt: skip
    return config


def check_start(path: str | os.PathLike, method: str, fields: dict[str, Any]) -> None:
    """Refuse, before any weights or data are read, a `method` (with its config `fields`) that cannot start as the
    checkpoint at `path`: the method is built on the meta device with the checkpoint's shape and stand-in
    languages, and its modules asked to start as the identity (`start_as_identity` names the ones that cannot)."""
    import torch

    from .interop import _TARGETS, _backbone_kwargs
    from .training.config import model_classes

    config = pretrained_config(path)
    backbone = _backbone_kwargs(config) | _TARGETS[CHECKPOINT_TYPES[config.model_type]]
    if method not in model_classes():
        raise ValueError(f"Unknown method {method!r}; choose one of {sorted(model_classes())}.")
    config_class, model_class = model_classes()[method]
    codes = ["aa", "bb"]
    contract = {"languages": codes, "lang_tag_token_ids": [config.vocab_size - 2, config.vocab_size - 1],
                "lang_tag_style": "source" if config.model_type == "marian" else "both"}  # fmt: skip
    with torch.device("meta"):
        model = model_class(config_class(**{**backbone, **contract, **fields}))
        model.start_as_identity()


def pretrained_tokenizer(path: str | os.PathLike, languages: list[str]) -> LangSpecTokenizer:
    """A `LangSpecTokenizer` over the tokenizer saved with the checkpoint at `path`, for `languages` (codes as the
    checkpoint writes them), checked against the checkpoint's config (one vocabulary, one pad and end)."""
    from transformers import AutoTokenizer

    if not languages:
        raise ValueError("Name the languages to adapt (codes as the checkpoint writes them, e.g. eng_Latn).")
    config = pretrained_config(path)
    tokenizer = checkpoint_tokenizer(AutoTokenizer.from_pretrained(path), languages, config.vocab_size)
    for field in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, field) != getattr(config, field):
            raise ValueError(f"The tokenizer's {field} ({getattr(tokenizer, field)}) is not the model's "
                             f"({getattr(config, field)}): they are not one checkpoint.")  # fmt: skip
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"The tokenizer has {len(tokenizer)} pieces, the model {config.vocab_size} rows.")
    return tokenizer


def adapt_pretrained(path: str | os.PathLike, method: str, tokenizer: LangSpecTokenizer, **fields: Any) -> Any:
    """The checkpoint at `path` as a `method` model for `tokenizer`'s languages (`pretrained_tokenizer`), its
    language modules started as the identity (`interop.adapt`, logits checked equal to the checkpoint's)."""
    from transformers import AutoModelForSeq2SeqLM

    from .interop import adapt

    pretrained_config(path)  # one clear line for a folder that is not a checkpoint
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(path)
    contract = tokenizer.model_config_kwargs()
    contract = {
        k: contract[k] for k in ("languages", "lang_tag_token_ids", "lang_tag_style", "vocabulary_fingerprint")
    }
    model = adapt(pretrained, method, **{**contract, **fields})
    tokenizer.check_model(model)
    return model


def load_pretrained(
    path: str | os.PathLike, method: str = "baseline", languages: list[str] | None = None, **fields: Any
) -> tuple[Any, LangSpecTokenizer]:
    """`(model, tokenizer)`: the checkpoint at `path` as a `method` model (`"baseline"`, `"laa"`, `"cll"`, `"xlp"`,
    `"clm"`, `"adapter"`, `"lora"`, ...; `fields` are its config fields), starting equal to the checkpoint, and a
    `LangSpecTokenizer` keeping its language codes (`languages`: the codes to train and translate, as the checkpoint
    writes them). From a config: `model.init_from_pretrained: PATH` (`hf-langspec train`)."""
    tokenizer = pretrained_tokenizer(path, languages or [])
    return adapt_pretrained(path, method, tokenizer, **fields), tokenizer


def freeze_base(model: Any, trainable: tuple[str, ...] = ()) -> tuple[int, int]:
    """Freeze the pretrained weights: every parameter but the language modules' and those whose name contains one of
    `trainable` (e.g. `("layer_norm",)`). Returns `(trainable, total)` parameter counts.

    With the base frozen, a direction none of whose language modules was trained computes exactly what the
    checkpoint computes (zero-started modules stay zero under AdamW, weight decay included; tested), so adapting
    one language never changes the others."""
    total = kept = 0
    for name, parameter in model.named_parameters():
        train = language_module_parameter(name) or any(part in name for part in trainable)
        parameter.requires_grad_(train)
        total += parameter.numel()
        kept += parameter.numel() if train else 0
    if kept == 0:
        raise ValueError("Nothing is left to train: the model has no language modules; pick a method that adds "
                         "some, or name parameters to keep trainable.")  # fmt: skip
    return kept, total


__all__ = [
    "CONVENTIONS",
    "adapt_pretrained",
    "check_start",
    "checkpoint_languages",
    "checkpoint_tokenizer",
    "freeze_base",
    "language_module_parameter",
    "load_pretrained",
    "pretrained_config",
    "pretrained_tokenizer",
]
