"""`LangSpecTokenizer`: one joint subword vocabulary plus language tags, and the language contract.

`tok(src_texts, text_target=tgt_texts, src_lang=..., tgt_lang=...)` returns `input_ids`,
`attention_mask`, `labels`, `src_lang_ids` and `tgt_lang_ids`, where `src_lang` / `tgt_lang` are a
code or one code per example, so a batch can mix directions. The tag style decides where the
target-language tag goes:

* `source` (Johnson et al. 2017): `<2tgt> source </s>`, labels `target </s>`;
* `target`: source `source </s>`, labels `<2tgt> target </s>` (the model starts decoding from `[</s>, <2tgt>]`);
* `none`: no tag; language-specific modules alone steer.

Sources and targets share one vocabulary and, as a rule, one subword model; a pretrained checkpoint that cuts its
two sides with two models (multilingual Marian's `source.spm` and `target.spm`) keeps both: `target_tokenizer_object`
cuts the targets (saved as `target_tokenizer.json`), the main one the sources.

Tags are special tokens and are never part of decoded text. Nor are they ever read from text: a literal
`<2fr>`, `</s>` or `<pad>` inside a sentence is encoded as the characters it is made of (`encode_text`), so
no text (a training sentence, a request to `hf-langspec serve`) can switch the output language or end its
input early; only the code puts control tokens in a sequence. This file imports only transformers and
tokenizers, so `save_pretrained` can ship it as remote code.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tokenizers import Tokenizer
from transformers import BatchEncoding, PreTrainedTokenizerFast

# LangSpecConfig's styles; written out here, not imported: this file travels alone as the Hub's remote code
TAG_STYLES = ("source", "target", "both", "none")
SOURCE_TAG_SIDE = {"source": "target", "both": "source"}  # whose tag precedes the source (configuration_langspec)
TARGET_TOKENIZER_FILE = "target_tokenizer.json"
SPECIAL_TOKENS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}


def control_token_ids(tokenizer: PreTrainedTokenizerFast) -> frozenset[int]:
    """The ids only code may put in a sequence: every special token (language tags, `<s>`, `</s>`, `<pad>`,
    `<mask>`) except `<unk>`, which also stands for the characters a vocabulary lacks."""
    ids = set(tokenizer.all_special_ids)
    ids.update(i for i, token in tokenizer.added_tokens_decoder.items() if token.special)
    ids.update(getattr(tokenizer, "lang_tag_token_ids", ()))
    ids.discard(tokenizer.unk_token_id)
    return frozenset(ids)


def encode_text(
    tokenizer: PreTrainedTokenizerFast,
    texts: Sequence[str],
    controls: frozenset[int] | None = None,
    target: bool = False,
) -> list[list[int]]:
    """The subword ids of each text read as text, with no special tokens added (`target`: texts of the target side,
    cut by the tokenizer's target subword model where it has one).

    Two mechanisms would otherwise turn text into control tokens: the backend's added-token matcher (off here:
    `encode_special_tokens`) and the subword model itself, whose vocabulary holds the special pieces (a unigram
    model scores them 0, its best score, and picks `<2fr>` as one piece). A piece the model produced with a
    control id is spelled out character by character (each character's piece, or `<unk>`), the one
    segmentation of that text that cannot contain it. Works for any fast tokenizer (the package's, or the plain
    one `specialize` exports); `controls` defaults to `control_token_ids(tokenizer)`.
    """
    backend = target_backend(tokenizer) if target else tokenizer.backend_tokenizer
    if controls is None:
        controls = getattr(tokenizer, "_control_ids", None) or control_token_ids(tokenizer)
    # transformers leaves its last call's settings on the backend (split_special_tokens, padding to the longest,
    # truncation): text alone is wanted here, each piece once; its next call sets them again as it needs them
    backend.encode_special_tokens = True
    if backend.padding is not None:
        backend.no_padding()
    if backend.truncation is not None:
        backend.no_truncation()
    encodings = backend.encode_batch(list(texts), add_special_tokens=False)
    unk = tokenizer.unk_token_id
    return [
        e.ids if controls.isdisjoint(e.ids) else spell_out_controls(backend, e.ids, e.tokens, controls, unk)
        for e in encodings
    ]


def target_backend(tokenizer: PreTrainedTokenizerFast) -> Any:
    """The `tokenizers.Tokenizer` that cuts `tokenizer`'s target texts: its own, unless it keeps a second one."""
    return getattr(tokenizer, "_target_tokenizer", None) or tokenizer.backend_tokenizer


def same_ids(one: Any, other: Any) -> bool:
    """Whether two `tokenizers.Tokenizer`s have as many ids and their added tokens at the same ids (their subword
    models may write an entry differently: `checkpoint_tokenizer.keyed_spm_backend` marks the other side's pieces)."""
    size = one.get_vocab_size(with_added_tokens=True)
    added = {index: token.content for index, token in one.get_added_tokens_decoder().items()}
    theirs = {index: token.content for index, token in other.get_added_tokens_decoder().items()}
    return size == other.get_vocab_size(with_added_tokens=True) and added == theirs


def encode_with_template(tokenizer: PreTrainedTokenizerFast, texts: Sequence[str]) -> list[list[int]]:
    """`tokenizer(texts)["input_ids"]` for a plain fast tokenizer, whose post-processor adds the special tokens
    (for example `specialize`'s `<2de> $A </s>`), with each text read as text (`encode_text`)."""
    probe = tokenizer.backend_tokenizer.encode("a", add_special_tokens=True)
    marks = probe.special_tokens_mask
    first = marks.index(0) if 0 in marks else len(marks)  # the specials before the text, and those after it
    last = len(marks) - marks[::-1].index(0) if 0 in marks else len(marks)
    prefix, suffix = probe.ids[:first], probe.ids[last:]
    return [prefix + ids + suffix for ids in encode_text(tokenizer, texts)]


def spell_out_controls(
    backend: Any, ids: list[int], tokens: list[str], controls: frozenset[int], unk_id: int | None
) -> list[int]:
    """`ids` with every control id replaced by the ids of its piece's characters (see `encode_text`)."""
    model = backend.model
    out: list[int] = []
    for i, token in zip(ids, tokens, strict=True):
        if i not in controls:
            out.append(i)
            continue
        for ch in token:
            piece = model.token_to_id(ch)
            if piece is None or piece in controls:
                if unk_id is None:
                    raise ValueError(f"The text holds {token!r}, a control token, and the vocabulary has no <unk> "
                                     f"for its character {ch!r}; remove it from the text.")  # fmt: skip
                piece = unk_id
            out.append(piece)
    return out


def check_unique_languages(languages: Sequence[str]) -> None:
    """Refuse a code listed twice: two tags for one language (the model config refuses it too)."""
    repeated = sorted(code for code, count in Counter(languages).items() if count > 1)
    if repeated:
        raise ValueError(f"languages lists {repeated} more than once; each code must appear once.")


class LangSpecTokenizer(PreTrainedTokenizerFast):
    """Joint multilingual tokenizer with language tags (see the module docstring).

    Args:
        languages (`list[str]`): ordered language codes; the ids returned are indexes into it, as in
            `LangSpecConfig.languages`.
        lang_tag_style (`str`, defaults to `"source"`): `"source"`, `"target"`, `"both"` or `"none"`
            (`LangSpecConfig.lang_tag_style`).
        lang_tag_template (`str`, defaults to `"<2{}>"`): how a code becomes its tag token.
        model_vocab_size (`int`, *optional*): the embedding rows of the model this vocabulary serves, when it has
            more than the vocabulary (a pretrained checkpoint's spare rows: NLLB-200 has two); what
            `model_config_kwargs` and `check_model` take as the vocabulary size.
        target_tokenizer_object (`tokenizers.Tokenizer`, *optional*): a second subword model over the same ids
            that cuts the targets (`text_target`), for a checkpoint whose two sides were cut by two models
            (multilingual Marian); saved as `target_tokenizer.json`. Without it one model cuts both sides.
    """

    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names = {**PreTrainedTokenizerFast.vocab_files_names, "target_tokenizer_file": TARGET_TOKENIZER_FILE}

    def __init__(
        self,
        *args,
        languages: Sequence[str] | None = None,
        lang_tag_style: str = "source",
        lang_tag_template: str = "<2{}>",
        model_vocab_size: int | None = None,
        target_tokenizer_object: Any = None,
        target_tokenizer_file: str | None = None,
        **kwargs,
    ):
        if (
            target_tokenizer_object is None
            and target_tokenizer_file is not None
            and os.path.isfile(target_tokenizer_file)
        ):
            target_tokenizer_object = Tokenizer.from_file(target_tokenizer_file)
        for name, token in SPECIAL_TOKENS.items():
            kwargs.setdefault(name, token)
        # text is never read as special tokens, whatever a saved tokenizer_config says (see `encode_text`)
        kwargs["split_special_tokens"] = True
        super().__init__(
            *args, languages=list(languages or []), lang_tag_style=lang_tag_style,
            lang_tag_template=lang_tag_template, model_vocab_size=model_vocab_size, **kwargs,
        )  # fmt: skip
        self.model_vocab_size = model_vocab_size
        self._target_tokenizer = target_tokenizer_object
        if target_tokenizer_object is not None and not same_ids(target_tokenizer_object, self.backend_tokenizer):
            raise ValueError("target_tokenizer_object has other ids than the tokenizer (its size or its special "
                             "tokens'); the two sides' subword models must share one vocabulary.")  # fmt: skip
        if lang_tag_style not in TAG_STYLES:
            raise ValueError(f"lang_tag_style={lang_tag_style!r} is not supported; use one of {list(TAG_STYLES)}.")
        for loading_option in ("is_local", "local_files_only"):  # how it was loaded, not what it is: not saved
            self.init_kwargs.pop(loading_option, None)
        self.lang_tag_style, self.lang_tag_template = lang_tag_style, lang_tag_template
        self.languages: list[str] = []
        self.add_languages(list(languages or []))

    def add_languages(self, codes: Sequence[str]) -> None:
        """Append `codes` to the language contract, their tags already in the vocabulary (at `__init__`, or a
        checkpoint's codes whose modules `export.language_packs` adds), with what derives from them."""
        languages = [*self.languages, *codes]
        check_unique_languages(languages)
        vocab = self.get_vocab()
        missing = [self.lang_tag(code) for code in languages if self.lang_tag(code) not in vocab]
        if missing:
            raise ValueError(
                f"The vocabulary has no tag tokens {missing}; train the tokenizer with these languages "
                "(hf_langspec.train_tokenizer adds the tags) or add them as special tokens."
            )
        self.languages, self.init_kwargs["languages"] = languages, list(languages)  # the latter: what is saved
        self.lang_tag_token_ids = [vocab[self.lang_tag(code)] for code in languages]
        self._tag_ids = set(self.lang_tag_token_ids)
        self._control_ids, self._fingerprint = control_token_ids(self), None  # the fingerprint covers the languages

    @classmethod
    def convert_to_native_format(cls, trust_remote_code: bool = False, **kwargs: Any) -> dict[str, Any]:
        # transformers 5 rebuilds subclasses that define __init__ from the bare vocabulary, which drops
        # the normalizer, the Metaspace pre-tokenizer and the unknown-token id; tokenizer.json has them all.
        tokenizer_file = kwargs.get("tokenizer_file")
        if tokenizer_file is not None and os.path.isfile(tokenizer_file):
            return dict(kwargs)
        return super().convert_to_native_format(trust_remote_code=trust_remote_code, **kwargs)

    # ------------------------------------------------------------------ languages
    def lang_tag(self, code: str) -> str:
        return self.lang_tag_template.format(code)

    def language_id(self, code: str) -> int:
        try:
            return self.languages.index(code)
        except ValueError:
            raise ValueError(
                f"Unknown language code {code!r}: this tokenizer knows {self.languages}. Train or extend the "
                "tokenizer with that language, or use one of these codes."
            ) from None

    def _language_ids(self, codes: str | Sequence[str] | None, name: str, batch_size: int) -> list[int] | None:
        if codes is None:
            return None
        if isinstance(codes, str):
            return [self.language_id(codes)] * batch_size
        codes = list(codes)
        if len(codes) != batch_size:
            raise ValueError(f"{name} has {len(codes)} codes for {batch_size} texts; give one code or one per text.")
        return [self.language_id(code) for code in codes]

    def model_config_kwargs(self) -> dict[str, Any]:
        """The `LangSpecConfig` fields this tokenizer fixes: vocabulary, special ids and the language contract."""
        return {
            "vocab_size": max(len(self), self.model_vocab_size or 0),
            "languages": list(self.languages),
            "lang_tag_token_ids": list(self.lang_tag_token_ids),
            "lang_tag_style": self.lang_tag_style,
            "pad_token_id": self.pad_token_id,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "decoder_start_token_id": self.eos_token_id,
            "vocabulary_fingerprint": self.vocabulary_fingerprint(),
        }

    def vocabulary_fingerprint(self) -> str:
        """A short hash of the vocabulary (pieces, scores or merges, ids) and the language tags.

        Two tokenizers with the same fingerprint segment every text into the same ids; one of equal size
        but another fingerprint does not (two trainings used to differ in 28-30 of 600 ids), so a model
        records its tokenizer's fingerprint in `config.vocabulary_fingerprint` and meets only that one.
        """
        state = self.backend_tokenizer.to_str()
        target = self._target_tokenizer.to_str() if self._target_tokenizer is not None else ""
        cached = getattr(self, "_fingerprint", None)
        if cached is None or cached[0] != hash((state, target)):
            parts = [json.loads(state)["model"], self.languages, self.lang_tag_template]
            if target:  # a second subword model (the targets') decides ids too
                parts.append(json.loads(target)["model"])
            key = json.dumps(parts, sort_keys=True, ensure_ascii=False)
            self._fingerprint = (hash((state, target)), hashlib.sha256(key.encode()).hexdigest()[:16])
        return self._fingerprint[1]

    def check_model(self, model_or_config: Any) -> None:
        """Raise a ValueError when a model (or its config) was not built for this tokenizer."""
        config = getattr(model_or_config, "config", model_or_config)
        expected = self.model_config_kwargs()
        expected.pop("decoder_start_token_id")
        if getattr(config, "vocabulary_fingerprint", None) is None:  # a model saved before fingerprints existed
            expected.pop("vocabulary_fingerprint")
        if expected["bos_token_id"] is None:  # a vocabulary without <s> (Marian's): no sequence holds the model's
            expected.pop("bos_token_id")
        mismatches = [
            f"{field}: model has {getattr(config, field, None)!r}, tokenizer has {value!r}"
            for field, value in expected.items()
            if getattr(config, field, None) != value
        ]
        if mismatches:
            raise ValueError(
                "This tokenizer does not match the model (" + "; ".join(mismatches) + "). Load the tokenizer saved "
                "with the model, or build the model config from LangSpecTokenizer.model_config_kwargs()."
            )

    # ------------------------------------------------------------------ encoding
    def __call__(
        self,
        text: str | Sequence[str] | None = None,
        text_target: str | Sequence[str] | None = None,
        src_lang: str | Sequence[str] | None = None,
        tgt_lang: str | Sequence[str] | None = None,
        max_length: int | None = None,
        truncation: bool = False,
        padding: bool | str = False,
        return_tensors: str | None = None,
        **kwargs: Any,
    ) -> BatchEncoding:
        """Encode sources and/or targets with tags and language ids (see the module docstring).

        Padded `labels` use -100, so a padded batch can go straight into the model's loss.
        `truncation=True` cuts to `max_length` pieces, keeping the tag and `</s>`.
        """
        if kwargs:
            raise TypeError(
                f"LangSpecTokenizer.__call__ got unsupported arguments {sorted(kwargs)}; it takes text, text_target, "
                "src_lang, tgt_lang, max_length, truncation, padding and return_tensors."
            )
        single = isinstance(text if text is not None else text_target, str)
        sources = [text] if isinstance(text, str) else (list(text) if text is not None else None)
        targets = (
            [text_target] if isinstance(text_target, str) else (list(text_target) if text_target is not None else None)
        )
        if sources is None and targets is None:
            raise ValueError("Pass `text` (sources), `text_target` (targets), or both.")
        if sources is not None and targets is not None and len(sources) != len(targets):
            raise ValueError(f"Got {len(sources)} sources but {len(targets)} targets; they must pair up.")
        batch_size = len(sources if sources is not None else targets)
        src_ids = self._language_ids(src_lang, "src_lang", batch_size)
        tgt_ids = self._language_ids(tgt_lang, "tgt_lang", batch_size)
        if SOURCE_TAG_SIDE.get(self.lang_tag_style) == "source" and sources is not None and src_ids is None:
            raise ValueError(
                f"lang_tag_style={self.lang_tag_style!r} puts the source-language tag before the source, so pass "
                f"src_lang=<code> (one of {self.languages}) or one code per text."
            )
        if (
            self.lang_tag_style != "none"
            and tgt_ids is None
            and (targets is not None or self.lang_tag_style != "both")
        ):
            raise ValueError(
                f"lang_tag_style={self.lang_tag_style!r} puts the target-language tag in the input, so pass "
                f"tgt_lang=<code> (one of {self.languages}) or one code per text."
            )
        limit = max_length if truncation else None
        data: dict[str, Any] = {}
        if sources is not None:
            side = SOURCE_TAG_SIDE.get(self.lang_tag_style)
            tagged = {"target": tgt_ids, "source": src_ids}.get(side)
            tags = [[self.lang_tag_token_ids[t]] for t in tagged] if side else None
            data["input_ids"] = self._encode_side(sources, tags, limit)
            data["attention_mask"] = [[1] * len(ids) for ids in data["input_ids"]]
        if targets is not None:
            tags = (
                [[self.lang_tag_token_ids[t]] for t in tgt_ids] if self.lang_tag_style in ("target", "both") else None
            )
            data["labels"] = self._encode_side(targets, tags, limit, target=True)
        if src_ids is not None:
            data["src_lang_ids"] = src_ids
        if tgt_ids is not None:
            data["tgt_lang_ids"] = tgt_ids
        if padding or return_tensors is not None:
            data = self._pad_batch(data, padding, max_length)
        if single and return_tensors is None:  # as in transformers: tensors keep the batch dimension
            data = {k: v[0] for k, v in data.items()}
        return BatchEncoding(data, tensor_type=return_tensors)

    def encode_sentences(
        self,
        texts: Sequence[str],
        lang: str | Sequence[str],
        text_pairs: Sequence[str] | None = None,
        max_length: int | None = None,
    ) -> list[dict[str, Any]]:
        """Encoder-only inputs (XLM-R layout): `<s> text </s>`, or `<s> text </s> pair </s>` for sentence pairs.

        Returns one feature dict per text (`input_ids`, `src_lang_ids`) for a data collator. The first
        token `<s>` is the summary the sequence classifier reads. With `max_length`, the longer side is
        cut first until the whole sequence fits; without it nothing is cut.
        """
        texts = list(texts)
        ids = self._language_ids(lang, "lang", len(texts))
        if text_pairs is not None and len(text_pairs) != len(texts):
            raise ValueError(f"Got {len(texts)} texts but {len(text_pairs)} text_pairs; they must pair up.")
        firsts = self._encode_side(texts, None, None)
        seconds = self._encode_side(list(text_pairs), None, None) if text_pairs is not None else None
        features = []
        for i, first in enumerate(firsts):
            sides = [first[:-1]] + ([seconds[i][:-1]] if seconds is not None else [])
            if max_length is not None:
                budget = max_length - 1 - len(sides)  # <s> and one </s> per side
                if budget < len(sides):
                    raise ValueError(
                        f"max_length={max_length} leaves no room for text; use at least {2 * len(sides) + 1}."
                    )
                while sum(map(len, sides)) > budget:
                    longest = max(range(len(sides)), key=lambda k: len(sides[k]))
                    sides[longest] = sides[longest][:-1]
            input_ids = [self.bos_token_id] + [t for side in sides for t in [*side, self.eos_token_id]]
            features.append({"input_ids": input_ids, "src_lang_ids": ids[i]})
        return features

    def _encode_side(
        self, texts: list[str], tags: list[list[int]] | None, limit: int | None, target: bool = False
    ) -> list[list[int]]:
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"Text {i} is a {type(t).__name__}, not a string.")
        out = []
        for i, pieces in enumerate(self.encode_text(texts, target)):
            prefix = tags[i] if tags is not None else []
            if limit is not None:
                pieces = pieces[: max(limit - len(prefix) - 1, 0)]
            out.append(prefix + pieces + [self.eos_token_id])
        return out

    def encode_text(self, texts: Sequence[str], target: bool = False) -> list[list[int]]:
        """The subword ids of each text, read as text (no tag, no `</s>`; see the module function); `target`: cut
        as targets are."""
        return encode_text(self, texts, self._control_ids, target)

    def _add_tokens(self, new_tokens: list[Any], special_tokens: bool = False) -> int:
        added = super()._add_tokens(new_tokens, special_tokens=special_tokens)
        target = getattr(self, "_target_tokenizer", None)  # None while transformers' __init__ adds the specials
        if added and target is not None:  # the targets' model gets the same tokens at the same ids
            target = self._target_tokenizer = copy.deepcopy(target)
            new = [t for _, t in sorted(self.added_tokens_decoder.items()) if target.token_to_id(t.content) is None]
            target.add_special_tokens([t for t in new if t.special])
            target.add_tokens([t for t in new if not t.special])
        return added

    def _save_pretrained(self, save_directory: str | os.PathLike, file_names: tuple[str, ...], *args: Any,
                         filename_prefix: str | None = None, **kwargs: Any) -> tuple[str, ...]:  # fmt: skip
        file_names = super()._save_pretrained(save_directory, file_names, *args, filename_prefix=filename_prefix,
                                              **kwargs)  # fmt: skip
        if self._target_tokenizer is None:
            return file_names
        path = os.path.join(
            str(save_directory), (filename_prefix + "-" if filename_prefix else "") + TARGET_TOKENIZER_FILE
        )
        self._target_tokenizer.save(path)
        return (*file_names, path)

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs) -> list[str]:
        """The pieces of `text` (and `pair`), with control-token strings in them spelled out as characters."""
        return self.convert_ids_to_tokens(self.encode(text, pair, add_special_tokens=add_special_tokens, **kwargs))

    def _convert_encoding(self, encoding: Any, **kwargs: Any) -> tuple[dict[str, Any], list[Any]]:
        # transformers' own encode / encode_plus / batch_encode_plus end here: spell out the control pieces the
        # subword model read from the text (those the post-processor added are marked special and kept)
        fields, encodings = super()._convert_encoding(encoding, **kwargs)
        for row, enc in enumerate(encodings):
            ids, added = enc.ids, enc.special_tokens_mask
            if all(i not in self._control_ids or mark for i, mark in zip(ids, added, strict=True)):
                continue
            spans = [
                [i] if i not in self._control_ids or mark
                else spell_out_controls(self.backend_tokenizer, [i], [token], self._control_ids, self.unk_token_id)
                for i, token, mark in zip(ids, enc.tokens, added, strict=True)
            ]  # fmt: skip
            for key, values in fields.items():
                if key == "length":
                    values[row] = sum(map(len, spans))
                elif key == "input_ids":
                    values[row] = [i for span in spans for i in span]
                elif key == "offset_mapping":
                    values[row] = [
                        (start + k, start + k + 1) if end - start == len(span) else (start, end)
                        for (start, end), span in zip(values[row], spans, strict=True)
                        for k in range(len(span))
                    ]  # fmt: skip
                else:  # attention_mask, token_type_ids, special_tokens_mask: a token's value for each character
                    values[row] = [v for v, span in zip(values[row], spans, strict=True) for _ in span]
        return fields, encodings

    def _pad_batch(self, data: dict[str, Any], padding: bool | str, max_length: int | None) -> dict[str, Any]:
        padded = dict(data)
        for key, fill in (("input_ids", self.pad_token_id), ("attention_mask", 0), ("labels", -100)):
            if key not in data:
                continue
            rows = data[key]
            width = max_length if padding == "max_length" and max_length else max(len(r) for r in rows)
            padded[key] = [r + [fill] * (width - len(r)) for r in rows]
        return padded

    # ------------------------------------------------------------------ decoding
    def _decode(self, token_ids: int | list[int], skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        # language tags are never text, whatever skip_special_tokens says
        token_ids = [i for i in token_ids if i not in self._tag_ids and i != -100]
        return super()._decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)


__all__ = ["LangSpecTokenizer", "control_token_ids", "encode_text", "encode_with_template", "target_backend"]
