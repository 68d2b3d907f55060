"""A pretrained checkpoint's tokenizer as a `LangSpecTokenizer` over the same vocabulary, keeping the checkpoint's
language-code convention (NLLB-200 `eng_Latn`, M2M-100 `__en__`, multilingual Marian `>>fra<<`).

M2M-100's and Marian's tokenizers are sentencepiece (Python) tokenizers that transformers does not convert to the
`tokenizers` backend this package builds on; `keyed_spm_backend` rebuilds a SentencePiece model there with the
dictionary's ids (`sentencepiece_backend` for M2M-100; `marian_backends` for Marian, whose targets are cut by a
second model, the LangSpecTokenizer's `target_tokenizer_object`). Tested against `NllbTokenizer`,
`M2M100Tokenizer` and `MarianTokenizer` (tests/test_pretrained_start.py).
"""

from __future__ import annotations

import copy
import json as json_module
import warnings
from collections.abc import Sequence
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders
from transformers.convert_slow_tokenizer import SpmConverter

from .tokenization_langspec import LangSpecTokenizer

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
        from sentencepiece import sentencepiece_model_pb2  # needs protobuf: the error below says so
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


__all__ = [
    "CONVENTIONS",
    "checkpoint_languages",
    "checkpoint_tokenizer",
    "keyed_spm_backend",
    "language_codes_setting",
    "marian_backends",
    "missing_pieces",
    "same_language",
    "sentencepiece_backend",
]
