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
`tgt_lang_ids`) indexes the checkpoint's codes. M2M-100's and Marian's tokenizers are sentencepiece (Python)
tokenizers that transformers does not convert to the `tokenizers` backend this package builds on;
`keyed_spm_backend` rebuilds a SentencePiece model there with the dictionary's ids (`sentencepiece_backend` for
M2M-100; `marian_backends` for Marian, whose targets are cut by a second model, the LangSpecTokenizer's
`target_tokenizer_object`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .modeling.modeling_langspec import language_module_parameter
from .modeling.registry import variant
from .tokenization import LangSpecTokenizer

# tokenizer class -> (how a code is written as its token, where the tags go)
CONVENTIONS = {
    "NllbTokenizer": ("{}", "both"),
    "NllbTokenizerFast": ("{}", "both"),
    "M2M100Tokenizer": ("__{}__", "both"),
    "MarianTokenizer": (">>{}<<", "source"),
}


# tokens a SentencePiece model's normaliser deletes (the nmt_nfkc rules drop these control characters): a vocabulary
# entry written with one can never be read from text
_DELETED_CHARACTERS = [chr(c) for c in (*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F)]


def _spm_proto(serialized: bytes) -> Any:
    try:
        from sentencepiece import sentencepiece_model_pb2
    except Exception as error:  # protobuf missing, or older than the one sentencepiece's model file was made with
        raise ValueError(f"Reading a SentencePiece model needs protobuf ({error}); pip install -U protobuf.") from None
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(serialized)
    return proto


def keyed_spm_backend(serialized: bytes, encoder: dict[str, int], unk: str, controls: Sequence[str]) -> Any:
    """A `tokenizers.Tokenizer` that cuts text as the SentencePiece model `serialized` does and maps the pieces
    through `encoder` (a dictionary with its own ids: fairseq's for M2M-100, `vocab.json` for Marian), as the
    checkpoints' sentencepiece (Python) tokenizers do; `controls` (specials and language codes, in id order) are
    added as special tokens at their ids, those `encoder` lacks after it.

    transformers builds the pieces' tokenizer from the model (`SpmConverter.build_tokenizer_from_spm_proto`:
    normaliser, pre-tokeniser, merges ranked by piece score, decoder); here its vocabulary becomes `encoder`'s. An
    entry of `encoder` the model does not have (Marian's shared vocabulary holds the other side's pieces) must not
    be read from text, where the model cannot produce it, and must still decode: it is written with a character the
    model's normaliser deletes (so no text can contain it), which the decoder removes again. A single character the
    model lacks is the exception: SentencePiece passes it on as an unknown piece, which the dictionary looks up, so
    it keeps its entry's id here too.

    Where the two cannot agree: a piece of the model that `encoder` lacks becomes `<unk>` there; here it is dropped
    from the model (BPE merges into it, a Unigram path through it), so text that needs it is cut around it
    (`missing_pieces` counts them). SentencePiece passes a run of unknown characters on as one piece, looked up
    whole (almost always `<unk>`); here each character the dictionary has keeps its id. And a Unigram model's ties
    (`..` `.` against `.` `..`: equal scores) may break the other way, as in transformers' own fast tokenizers
    converted from SentencePiece (float sums in another order)."""
    import json as json_module

    from tokenizers import AddedToken, Tokenizer, decoders
    from transformers.convert_slow_tokenizer import SpmConverter

    proto = _spm_proto(serialized)
    unigram = proto.trainer_spec.model_type == type(proto.trainer_spec).UNIGRAM
    pieces = {piece.piece: index for index, piece in enumerate(proto.pieces)}
    scores = {p.piece: p.score for p in proto.pieces}
    if unigram:
        built = SpmConverter.build_tokenizer_from_spm_proto(proto, list(scores.items()))
    else:
        built = SpmConverter.build_tokenizer_from_spm_proto(proto, pieces)
    kept = set(controls)
    # a character the model lacks comes out of it as itself (an unknown piece), which the dictionary looks up: it
    # stays readable; a longer entry the model lacks is out of reach
    foreign = {entry for entry in encoder if entry not in pieces and entry not in kept and len(entry) > 1}
    marker = ""
    if foreign:
        deleted = [c for c in _DELETED_CHARACTERS if built.normalizer and not built.normalizer.normalize_str(c)]
        marker = next((c for c in deleted if not any(c in entry for entry in encoder)), "")
        if not marker:
            raise ValueError(f"The vocabulary holds {len(foreign)} entries the SentencePiece model lacks (e.g. "
                             f"{sorted(foreign)[:3]}), and the model's normaliser deletes no control character to keep them "
                             "out of reach of text; pass a LangSpecTokenizer built over the checkpoint's "
                             "vocabulary.")  # fmt: skip
    key = {entry: entry + marker if entry in foreign else entry for entry in encoder}
    data = json_module.loads(built.to_str())
    if unigram:
        lowest = min(scores.values()) - 10.0  # dictionary entries SentencePiece lacks (the specials): never chosen
        ordered = sorted(encoder, key=encoder.get)
        data["model"]["vocab"] = [[key[entry], scores.get(entry, lowest)] for entry in ordered]
        data["model"]["unk_id"] = encoder[unk]
    else:
        data["model"]["vocab"] = {key[entry]: index for entry, index in encoder.items()}
        data["model"]["unk_token"] = unk
        merges = data["model"]["merges"]  # ["a", "b"] pairs, or "a b" strings in older tokenizers
        pairs = [merge if isinstance(merge, list) else merge.split(" ") for merge in merges]
        data["model"]["merges"] = [
            m for m, pair in zip(merges, pairs, strict=True) if {*pair, "".join(pair)} <= encoder.keys()
        ]
    data["added_tokens"] = []
    backend = Tokenizer.from_str(json_module.dumps(data))
    if marker:  # the marked entries decode as what they are
        backend.decoder = decoders.Sequence([decoders.Replace(marker, ""), backend.decoder])
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in controls])
    return backend


def missing_pieces(serialized: bytes, encoder: dict[str, int]) -> list[str]:
    """The pieces of a SentencePiece model that a dictionary lacks (the checkpoint's tokenizer maps them to
    `<unk>`; `keyed_spm_backend` cuts text around them)."""
    proto = _spm_proto(serialized)
    normal = type(proto).SentencePiece.NORMAL
    return [p.piece for p in proto.pieces if p.type == normal and p.piece not in encoder]


def sentencepiece_backend(tokenizer: Any) -> Any:
    """A `tokenizers.Tokenizer` that encodes as a sentencepiece-based `M2M100Tokenizer` does, with its ids.

    M2M-100's tokenizer cuts text with a SentencePiece model and maps the pieces through fairseq's dictionary
    (`vocab.json`, ids in another order than the model's own); its language codes follow the dictionary, then its
    made-up words (`keyed_spm_backend`)."""
    encoder = dict(tokenizer.encoder)
    specials = [token for token in (tokenizer.bos_token, tokenizer.pad_token, tokenizer.eos_token, tokenizer.unk_token)
                if token]  # fmt: skip
    codes = dict(getattr(tokenizer, "lang_token_to_id", {}))  # `__en__` -> its id, after the dictionary
    extra = sorted(set(tokenizer.get_vocab()) - set(encoder) | set(codes), key=tokenizer.convert_tokens_to_ids)
    serialized = tokenizer.sp_model.serialized_model_proto()
    backend = keyed_spm_backend(serialized, encoder, tokenizer.unk_token, specials + extra)
    _check_ids(backend, {token: tokenizer.convert_tokens_to_ids(token) for token in extra}, tokenizer)
    return backend


def marian_backends(tokenizer: Any) -> tuple[Any, Any]:
    """`(source, target)`: `tokenizers.Tokenizer`s that encode as a multilingual `MarianTokenizer` does, with its
    ids: the sources cut by `source.spm`, the targets by `target.spm` (`None` where it is the same model), both
    mapped through the shared `vocab.json`, whose `>>fra<<` codes become special tokens at their ids.
    transformers 5's MarianTokenizer defines, but never applies, sacremoses' punctuation normaliser, so there is
    nothing else to replicate. A piece the vocabulary lacks is `<unk>` for Marian: counted in a warning, as text
    that needs it is cut differently here."""
    import warnings

    if tokenizer.separate_vocabs:
        raise ValueError("This Marian tokenizer has separate source and target vocabularies; the package's models "
                         "share one (multilingual OPUS-MT models do).")  # fmt: skip
    encoder = dict(tokenizer.encoder)
    named = {tokenizer.eos_token, tokenizer.unk_token, tokenizer.pad_token, *tokenizer.supported_language_codes}
    controls = sorted((token for token in named if token in encoder), key=encoder.get)
    sides = [tokenizer.spm_source.serialized_model_proto(), tokenizer.spm_target.serialized_model_proto()]
    for side, serialized in zip(("source", "target"), sides, strict=True):
        missing = missing_pieces(serialized, encoder)
        if missing:
            warnings.warn(f"{len(missing)} pieces of Marian's {side}.spm are not in its vocab.json (e.g. "
                          f"{missing[:3]}): Marian encodes them as <unk>; here text that needs them is cut into other "
                          "pieces.", stacklevel=3)  # fmt: skip
    source = keyed_spm_backend(sides[0], encoder, tokenizer.unk_token, controls)
    target = keyed_spm_backend(sides[1], encoder, tokenizer.unk_token, controls) if sides[1] != sides[0] else None
    for backend in (source, target):
        if backend is not None:
            _check_ids(backend, {token: encoder[token] for token in controls}, tokenizer)
    return source, target


def _check_ids(backend: Any, expected: dict[str, int], tokenizer: Any) -> None:
    """Refuse a rebuilt tokenizer whose special tokens are not at the checkpoint's ids (the model's rows)."""
    moved = [token for token, index in expected.items() if backend.token_to_id(token) != index]
    if moved:  # ids the model's rows are indexed by: a mismatch would translate with the wrong rows
        raise ValueError(f"{type(tokenizer).__name__}'s codes {moved[:5]} do not follow its dictionary; pass a "
                         "LangSpecTokenizer built over the checkpoint's vocabulary.")  # fmt: skip


def checkpoint_languages(tokenizer: Any, template: str) -> list[str]:
    """The language codes a checkpoint's tokenizer knows: its special tokens written as `template` says."""
    prefix, _, suffix = template.partition("{}")
    specials = set(getattr(tokenizer, "all_special_tokens", [])) | set(getattr(tokenizer, "added_tokens_encoder", {}))
    specials |= set(getattr(tokenizer, "lang_token_to_id", {}))  # M2M-100's codes are neither
    specials |= set(getattr(tokenizer, "supported_language_codes", []))  # nor are multilingual Marian's
    return sorted(
        token[len(prefix) : len(token) - len(suffix)]
        for token in specials
        if token.startswith(prefix) and token.endswith(suffix) and len(token) > len(prefix) + len(suffix)
        and token not in ("<s>", "</s>", "<pad>", "<unk>", "<mask>")
    )  # fmt: skip


def checkpoint_tokenizer(
    tokenizer: Any, languages: list[str], model_vocab_size: int | None = None, new_languages: Sequence[str] = ()
) -> LangSpecTokenizer:
    """A `LangSpecTokenizer` over `tokenizer`'s vocabulary (an NLLB tokenizer; a LangSpecTokenizer is returned as it
    is) for `languages`, codes as the checkpoint writes them without their marks (`eng_Latn`; `en` for M2M-100's
    `__en__`). It encodes as the checkpoint's tokenizer does; a code the checkpoint does not know is refused with
    the ones it knows, unless it is one of `new_languages`: those get a new code token after the vocabulary (item 5;
    `adapt_pretrained` gives it an embedding row). `model_vocab_size`: the checkpoint's embedding rows, when it has
    more than the vocabulary."""
    import copy

    from tokenizers import AddedToken

    if isinstance(tokenizer, LangSpecTokenizer):
        return tokenizer
    name = type(tokenizer).__name__
    if name not in CONVENTIONS:
        raise ValueError(f"No language-code convention is known for {name}; pass a LangSpecTokenizer built over the "
                         f"checkpoint's vocabulary (known: {sorted(CONVENTIONS)}).")  # fmt: skip
    template, style = CONVENTIONS[name]
    if name == "MarianTokenizer" and not tokenizer.supported_language_codes:
        style = "none"  # one target language (opus-mt-mul-en, a bilingual model): no code precedes the source
    backend, target = getattr(tokenizer, "backend_tokenizer", None), None
    if backend is None and name == "M2M100Tokenizer":
        backend = sentencepiece_backend(tokenizer)
    if backend is None and name == "MarianTokenizer":
        backend, target = marian_backends(tokenizer)
    if backend is None:
        raise ValueError(
            f"{name} is a sentencepiece (Python) tokenizer, which transformers cannot convert to the `tokenizers` "
            "backend LangSpecTokenizer builds on; build a LangSpecTokenizer over the same vocabulary "
            f"(lang_tag_template={template!r}, lang_tag_style={style!r}) and pass it instead."
        )
    known = checkpoint_languages(tokenizer, template)
    renames = {code: same_language(code, known) for code in [*languages, *new_languages] if code not in known}
    renames = {code: found for code, found in renames.items() if found}
    unknown = [code for code in languages if code not in known and code not in new_languages]
    if unknown:
        fix = (f"these are the checkpoint's {renames_text(renames, unknown)}: rename the data's codes with "
               f"{language_codes_setting(renames, unknown)}; " if any(code in renames for code in unknown) else "")  # fmt: skip
        raise ValueError(f"The checkpoint's tokenizer does not know {unknown}; {fix}it knows {len(known)} codes: "
                         f"{', '.join(known[:30])}{' ...' if len(known) > 30 else ''} (a language it lacks is "
                         "added with model.add_languages).")  # fmt: skip
    already = [code for code in new_languages if code in known]
    if already:
        raise ValueError(f"The checkpoint already knows {already}; adapt them, do not add them again.")
    twins = [code for code in new_languages if code in renames]
    if twins:  # `fr` added beside the checkpoint's `fra_Latn`: one language with two codes, one of them untrained
        raise ValueError(
            f"add_languages names {twins}, which are the checkpoint's {renames_text(renames, twins)}: rename the "
            f"data's codes ({language_codes_setting(renames, twins)}) instead of "
            "adding the language again."
        )
    stray = [code for code in new_languages if code not in languages]
    if stray:
        raise ValueError(f"add_languages names {stray}, which the data does not have ({languages}).")
    if new_languages:  # the new codes after every existing id, so no id of the checkpoint moves
        new_codes = [AddedToken(template.format(code), special=True, normalized=False) for code in new_languages]
        backend = copy.deepcopy(backend)
        backend.add_special_tokens(new_codes)
        if target is not None:
            target = copy.deepcopy(target)
            target.add_special_tokens(new_codes)
    # a token the checkpoint has none of stays None (Marian has no <s>): LangSpecTokenizer would add its default
    specials = {key: getattr(tokenizer, key) for key in ("bos_token", "eos_token", "unk_token", "pad_token")}
    return LangSpecTokenizer(
        tokenizer_object=backend, target_tokenizer_object=target, languages=list(languages), lang_tag_template=template,
        lang_tag_style=style, model_vocab_size=model_vocab_size, **specials,
    )  # fmt: skip


def same_language(code: str, known: Sequence[str]) -> str | None:
    """The code among `known` (a checkpoint's, e.g. NLLB's `fra_Latn`) that names the same language as `code`
    (`fr`, `fra`), or None: a 3-letter code is matched by its FLORES prefix, a 2-letter one through ISO 639's table
    (lingua's, where it is installed; otherwise 2-letter codes are not matched)."""
    base = code.split("_")[0].split("-")[0].lower()
    matches = [k for k in known if k.split("_")[0].lower() == base]
    if not matches and len(base) == 2:
        try:
            from lingua import IsoCode639_1, Language

            iso3 = Language.from_iso_code_639_1(IsoCode639_1.from_str(base)).iso_code_639_3.name.lower()
        except (ImportError, ValueError):
            iso3 = None
        matches = [k for k in known if iso3 and k.split("_")[0].lower() == iso3]
    return matches[0] if len(matches) == 1 else None


def renames_text(renames: dict[str, str], codes: Sequence[str]) -> str:
    """`fra_Latn (fr), ...`: the checkpoint's code for each of `codes` that has one."""
    return ", ".join(f"{renames[c]} ({c})" for c in codes if c in renames)


def language_codes_setting(renames: dict[str, str], codes: Sequence[str]) -> str:
    """The config setting that renames `codes` to the checkpoint's: `data.language_codes: {fr: fra_Latn}`."""
    return f"data.language_codes: {{{', '.join(f'{c}: {renames[c]}' for c in codes if c in renames)}}}"


# the checkpoints a method can start from: their config's model_type -> the backbone form (interop's targets)
CHECKPOINT_TYPES = {"m2m_100": "m2m100", "marian": "marian"}


def pretrained_config(path: str | os.PathLike) -> Any:
    """The config of the checkpoint at `path`, refused in one line unless it is an M2M-100 / NLLB-200 dense or a
    Marian model."""
    from transformers import AutoConfig

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
    import torch

    from .interop import _TARGETS, _backbone_kwargs

    config = pretrained_config(path)
    backbone = _backbone_kwargs(config) | _TARGETS[CHECKPOINT_TYPES[config.model_type]]
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
    from transformers import AutoTokenizer

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
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from .interop import adapt

    pretrained_config(path)  # one clear line for a folder that is not a checkpoint
    pretrained = AutoModelForSeq2SeqLM.from_pretrained(path)
    rows = new_language_rows(tokenizer, new_languages)
    if rows:
        old = pretrained.get_input_embeddings().weight.shape[0]
        if len(tokenizer) > old:
            from transformers.utils import logging as hf_logging

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
    path: str | os.PathLike, method: str = "baseline", languages: list[str] | None = None, **fields: Any
) -> tuple[Any, LangSpecTokenizer]:
    """`(model, tokenizer)`: the checkpoint at `path` as a `method` model (`"baseline"`, `"laa"`, `"cll"`, `"xlp"`,
    `"clm"`, `"adapter"`, `"lora"`, ...; `fields` are its config fields), starting equal to the checkpoint, and a
    `LangSpecTokenizer` keeping its language codes (`languages`: the codes to train and translate, as the checkpoint
    writes them). From a config: `model.init_from_pretrained: PATH` (`hf-langspec train`)."""
    tokenizer = pretrained_tokenizer(path, languages or [])
    return adapt_pretrained(path, method, tokenizer, **fields), tokenizer


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
    from transformers import NllbTokenizerFast

    from .export.ct2 import refuse_to_overwrite
    from .interop import to_m2m100

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
    import torch

    from .training.trainer import ROWS_ONLY

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
    "CONVENTIONS",
    "adapt_pretrained",
    "check_start",
    "checkpoint_languages",
    "checkpoint_tokenizer",
    "freeze_base",
    "keyed_spm_backend",
    "language_module_parameter",
    "load_pretrained",
    "marian_backends",
    "new_language_rows",
    "pretrained_config",
    "pretrained_tokenizer",
    "save_as_checkpoint",
]
