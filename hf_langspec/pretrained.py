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
| Marian with one target language | none | the text alone (languages added: `add_languages`) | `"none"` |

So training data is tokenized as the checkpoint's tokenizer does (tested against `NllbTokenizer`,
`M2M100Tokenizer` and `MarianTokenizer`), and the language contract (`config.languages`, `src_lang_ids` /
`tgt_lang_ids`) indexes the checkpoint's codes (the tokenizer's conversion: `tokenization/checkpoint_tokenizer.py`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, NllbTokenizerFast
from transformers.utils import logging as hf_logging

from .files import refuse_to_overwrite
from .interop import TARGETS, adapt, backbone_kwargs, to_m2m100
from .modeling.modeling_langspec import ROWS_ONLY, language_module_parameter
from .modeling.registry import variant
from .tokenization import LangSpecTokenizer
from .tokenization.checkpoint_tokenizer import (
    checkpoint_tokenizer,
)

# the checkpoints a method can start from: their config's model_type -> the backbone form (interop's targets)
CHECKPOINT_TYPES = {"m2m_100": "m2m100", "marian": "marian"}


def pretrained_config(path: str | os.PathLike) -> Any:
    """The config of the checkpoint at `path`, refused in one line unless it is an M2M-100 / NLLB-200 dense or a
    Marian model."""

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as error:
        if not Path(path).exists():
            raise ValueError(f"{path} does not exist here, and is not a model on a reachable Hub; give the folder of "
                             "an M2M-100, NLLB-200 (dense) or Marian model.") from None  # fmt: skip
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

    config = pretrained_config(path)
    backbone = backbone_kwargs(config) | TARGETS[CHECKPOINT_TYPES[config.model_type]]
    config_class, model_class = variant(method).config_class, variant(method).translation_class
    codes = ["aa", "bb"]
    contract = {"languages": codes, "lang_tag_token_ids": [config.vocab_size - 2, config.vocab_size - 1],
                "lang_tag_style": "source" if config.model_type == "marian" else "both"}  # fmt: skip
    with torch.device("meta"):
        model = model_class(config_class(**{**backbone, **contract, **fields}))
        model.start_as_identity()


def pretrained_tokenizer(
    path: str | os.PathLike, languages: list[str], new_languages: Sequence[str] = ()
) -> LangSpecTokenizer:
    """A `LangSpecTokenizer` over the tokenizer saved with the checkpoint at `path`, for `languages` (codes as the
    checkpoint writes them; `new_languages` among them get new code tokens), checked against the checkpoint's config
    (one vocabulary, one pad and end)."""

    if not languages:
        raise ValueError("Name the languages to adapt (codes as the checkpoint writes them, e.g. eng_Latn).")
    config = pretrained_config(path)
    tokenizer_files = ("tokenizer.json", "tokenizer_config.json", "sentencepiece.bpe.model", "spm.model", "source.spm")
    if Path(path).is_dir() and not any((Path(path) / name).is_file() for name in tokenizer_files):
        # transformers then builds a tokenizer with an empty vocabulary: every text became <unk>, and training ran
        raise ValueError(
            f"{path} holds no tokenizer files (none of {list(tokenizer_files)}): save the checkpoint's tokenizer "
            "beside its weights (tokenizer.save_pretrained(folder)) and start again."
        )
    with warnings.catch_warnings():  # MarianTokenizer recommends sacremoses, which transformers 5 never applies
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        original = AutoTokenizer.from_pretrained(path)
    if len(original) > config.vocab_size:
        raise ValueError(f"The tokenizer has {len(original)} pieces, the model {config.vocab_size} rows.")
    tokenizer = checkpoint_tokenizer(original, languages, config.vocab_size, new_languages)
    for field in ("pad_token_id", "eos_token_id"):
        if getattr(tokenizer, field) != getattr(config, field):
            raise ValueError(f"The tokenizer's {field} ({getattr(tokenizer, field)}) is not the model's "
                             f"({getattr(config, field)}): they are not one checkpoint.")  # fmt: skip
    return tokenizer


def adapt_pretrained(
    path: str | os.PathLike,
    method: str,
    tokenizer: LangSpecTokenizer,
    new_languages: Sequence[str] = (),
    **fields: Any,
) -> Any:
    """The checkpoint at `path` as a `method` model for `tokenizer`'s languages (`pretrained_tokenizer`), its
    language modules started as the identity (`interop.adapt`, logits checked equal to the checkpoint's).

    `new_languages` (item 5): codes the checkpoint lacks, whose code tokens `pretrained_tokenizer` added. Each gets
    an embedding row (the embedding matrix grows where the checkpoint has no spare row) set to the mean of the
    checkpoint's rows, as fairseq and Qu & Watanabe (2022) start a new language's embeddings; `freeze_base(...,
    rows=...)` then trains those rows alone. The old tokens' logits are unchanged, and the new codes are suppressed
    in generation (`generation_config.suppress_tokens`, with `renormalize_logits`), so untouched directions decode
    as the checkpoint does."""

    pretrained_config(path)  # one clear line for a folder that is not a checkpoint
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(path)
    rows = new_language_rows(tokenizer, new_languages)
    if rows:
        old = pretrained.get_input_embeddings().weight.shape[0]
        if len(tokenizer) > old:
            # MarianMTModel's resize drops mean_resizing=False and announces a multivariate-normal start for the
            # new rows; they are set to the mean just below, so the announcement would mislead
            verbosity = hf_logging.get_verbosity()
            hf_logging.set_verbosity_error()
            try:
                pretrained.resize_token_embeddings(len(tokenizer), mean_resizing=False)
            finally:
                hf_logging.set_verbosity(verbosity)
        with torch.no_grad():
            embeddings = pretrained.get_input_embeddings().weight
            embeddings[rows] = embeddings[: min(rows)].mean(0)  # the mean of the real tokens' rows
        pretrained.tie_weights()
    contract = tokenizer.model_config_kwargs()
    contract = {
        k: contract[k] for k in ("languages", "lang_tag_token_ids", "lang_tag_style", "vocabulary_fingerprint")
    }
    model = adapt(pretrained, method, **{**contract, **fields})
    if rows:
        # a code is never generated (the decoder starts with it), and its row, now a typical token's, would take a
        # share of every step's softmax: suppressed, directions without the new language decode as the checkpoint
        # (with the entry, 0.2% of the stand-in's beam outputs changed). A row appended to the matrix is exact; a
        # spare row of the checkpoint's (NLLB-200 has two) loses the share its old logit had, trained down there
        model.generation_config.suppress_tokens = sorted(
            set(model.generation_config.suppress_tokens or []) | set(rows)
        )
        # beam search takes log-probabilities before the processors suppress a token: without renormalising, every
        # step's scores keep the share of the suppressed row (1-2 of 600 untouched beam outputs of
        # bible_nllb_add_tl changed); renormalised, they are the checkpoint's log-softmax over its own tokens
        model.generation_config.renormalize_logits = True
    tokenizer.check_model(model)
    return model


def new_language_rows(tokenizer: LangSpecTokenizer, new_languages: Sequence[str]) -> list[int]:
    """The embedding rows of the code tokens of `new_languages`."""
    return [tokenizer.lang_tag_token_ids[tokenizer.language_id(code)] for code in new_languages]


def load_pretrained(
    path: str | os.PathLike,
    method: str = "baseline",
    languages: list[str] | None = None,
    add_languages: Sequence[str] = (),
    freeze: bool | None = None,
    train_pretrained: Sequence[str] = (),
    **fields: Any,
) -> tuple[Any, LangSpecTokenizer]:
    """`(model, tokenizer)`: the checkpoint at `path` as a `method` model (`"baseline"`, `"laa"`, `"cll"`, `"xlp"`,
    `"clm"`, `"adapter"`, `"lora"`, ...; `fields` are its config fields), starting equal to the checkpoint, and a
    `LangSpecTokenizer` keeping its language codes (`languages`: the codes to train and translate, as the checkpoint
    writes them).

    As `train` does from `model.init_from_pretrained`: `add_languages` are codes the checkpoint lacks (each gets a
    code token after its vocabulary and an embedding row started at the mean of the others), and `freeze` (default:
    when the method adds language modules, as `freeze_pretrained`) leaves trainable only the language modules, the
    parameters whose names contain one of `train_pretrained`, and the added languages' rows (`freeze_base`)."""
    codes = list(languages or [])
    codes += [code for code in add_languages if code not in codes]
    tokenizer = pretrained_tokenizer(path, codes, new_languages=add_languages)
    model = adapt_pretrained(path, method, tokenizer, new_languages=add_languages, **fields)
    if freeze if freeze is not None else method != "baseline":
        freeze_base(model, tuple(train_pretrained), rows=new_language_rows(tokenizer, add_languages))
    return model, tokenizer


def save_as_checkpoint(
    model: Any, tokenizer: LangSpecTokenizer, folder: str | os.PathLike, force: bool = False
) -> Any:
    """Save a multilingual model without language modules (a baseline) as a plain NLLB-convention checkpoint: an
    `M2M100ForConditionalGeneration` and an `NllbTokenizerFast` over the same vocabulary, which plain transformers
    drives (`src_lang` set, `forced_bos_token_id` the target code) and `load_pretrained` / `model.init_from_pretrained`
    start from: the inverse of `load_pretrained`. The tokenizer must use NLLB's convention (`lang_tag_style="both"`,
    `lang_tag_template="{}"`, codes like `eng_Latn`) and a BPE vocabulary, which transformers 5's NllbTokenizer
    rebuilds from its pieces and merges without a normaliser: text that NFKC changes (ligatures, full-width forms)
    is segmented as NLLB's class does, not as the package's NFKC tokenizer did. `hf-langspec export --multilingual`.
    Returns the plain model."""

    tokenizer.check_model(model)
    modules = sorted({name.split(".insertions.")[0] for name, _ in model.named_parameters()
                      if language_module_parameter(name)})  # fmt: skip
    if modules:
        raise ValueError(f"The model has language modules ({', '.join(modules[:3])}); a plain checkpoint is one "
                         "network for every language: export one direction (--src-lang/--tgt-lang), which folds "
                         "them.")  # fmt: skip
    convention = (tokenizer.lang_tag_style, tokenizer.lang_tag_template)
    if convention != ("both", "{}"):
        raise ValueError(f"The tokenizer writes tags as lang_tag_style={convention[0]!r}, lang_tag_template="
                         f"{convention[1]!r}; an NLLB-convention checkpoint needs 'both' and '{{}}' (codes like "
                         "eng_Latn: data.language_codes renames a corpus's).")  # fmt: skip
    folder = Path(folder)
    refuse_to_overwrite(folder, force)
    vocabulary = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    if vocabulary["type"] != "BPE":
        raise ValueError(f"The tokenizer is a {vocabulary['type']} vocabulary; NllbTokenizer (transformers 5) holds a "
                         "BPE one (vocabulary and merges): train the tokenizer with model_type: bpe.")  # fmt: skip
    plain = to_m2m100(model).eval()  # a backbone M2M-100 cannot hold is refused here, with what it needs
    languages = list(tokenizer.languages)
    # the checkpoint's whole code list, not only the languages this model was trained on: every special token the
    # tokenizer added besides <s> </s> <unk> <pad> <mask>, in id order (a model fine-tuned on 2 of NLLB's 202 codes
    # keeps the other 200 as codes, where they were)
    mask = "<mask>" if "<mask>" in tokenizer.get_vocab() else None
    plain_specials = {tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token, tokenizer.pad_token, mask}
    added = sorted(tokenizer.backend_tokenizer.get_added_tokens_decoder().items())
    codes = [token.content for _, token in added if token.special and token.content not in plain_specials]
    codes += [code for code in languages if code not in codes]
    # built as from_pretrained rebuilds it (a BPE over the vocabulary and merges, Metaspace, no normaliser), so the
    # check below is the check of the saved folder
    merges = [tuple(m.split(" ") if isinstance(m, str) else m) for m in vocabulary["merges"]]  # either format
    nllb = NllbTokenizerFast(
        vocab=vocabulary["vocab"], merges=merges, src_lang=languages[0], tgt_lang=languages[-1],
        additional_special_tokens=codes, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token,
        unk_token=tokenizer.unk_token, pad_token=tokenizer.pad_token, mask_token=mask,
    )  # fmt: skip
    if len(nllb) != len(tokenizer):
        raise ValueError(f"NllbTokenizer over this vocabulary has {len(nllb)} entries, the model's {len(tokenizer)}.")
    probe = "A probe: 1, 2, 3."
    for src, tgt in [(languages[0], languages[-1]), (languages[-1], languages[0])]:
        nllb.src_lang, nllb.tgt_lang = src, tgt
        theirs = nllb(probe, text_target=probe)
        ours = tokenizer(probe, text_target=probe, src_lang=src, tgt_lang=tgt)
        if theirs["input_ids"] != ours["input_ids"] or theirs["labels"] != ours["labels"]:
            raise ValueError(f"NllbTokenizer does not encode as the model's tokenizer ({theirs['input_ids']} "
                             f"against {ours['input_ids']}); the checkpoint would not be the model.")  # fmt: skip
    nllb.src_lang = languages[0]
    plain.generation_config.max_new_tokens = model.generation_config.max_new_tokens
    folder.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(folder)
    nllb.save_pretrained(folder)
    return plain


def freeze_base(model: Any, trainable: tuple[str, ...] = (), rows: Sequence[int] = ()) -> tuple[int, int]:
    """Freeze the pretrained weights: every parameter but the language modules' and those whose name contains one of
    `trainable` (e.g. `("layer_norm",)`), and of the embedding matrix all but `rows` (a new language's code rows,
    `new_language_rows`: their gradient alone is kept and the matrix is left out of weight decay, so AdamW leaves
    the other rows exactly where they were; with another trainer, exclude it from decay yourself). Returns `(trainable, total)` parameter counts.

    With the base frozen, a direction none of whose language modules was trained computes exactly what the
    checkpoint computes (zero-started modules stay zero under AdamW, weight decay included; tested), so adapting
    one language never changes the others."""

    embedding = model.get_input_embeddings().weight
    total = kept = 0
    for name, parameter in model.named_parameters():
        train = language_module_parameter(name) or any(part in name for part in trainable)
        parameter.requires_grad_(train)
        total += parameter.numel()
        kept += parameter.numel() if train else 0
    if rows and not embedding.requires_grad:
        mask = torch.zeros(embedding.shape[0], 1, dtype=embedding.dtype, device=embedding.device)
        mask[list(rows)] = 1
        embedding.requires_grad_(True)
        embedding.register_hook(lambda grad: grad * mask)  # the rows of the old tokens get no gradient
        setattr(embedding, ROWS_ONLY, len(rows))  # and no weight decay (the package's Trainer leaves it out)
        kept += len(rows) * embedding.shape[1]
    if kept == 0:
        raise ValueError("Nothing is left to train: the model has no language modules; pick a method that adds "
                         "some, or name parameters to keep trainable.")  # fmt: skip
    return kept, total


__all__ = [
    "adapt_pretrained",
    "check_start",
    "freeze_base",
    "load_pretrained",
    "new_language_rows",
    "pretrained_config",
    "pretrained_tokenizer",
    "save_as_checkpoint",
]
