"""`pipeline("langspec-translation", ...)`: multilingual translation with language ids.

transformers 5 removed the `translation` task (`pipeline("translation")` raises a KeyError in
5.23). This pipeline restores it for hf_langspec models and does what the old one could not:
each input names its own direction, and the pipeline hands `src_lang_ids` / `tgt_lang_ids` to
`generate()` and applies the model's tag style.

    >>> translate = pipeline("langspec-translation", model=model, tokenizer=tokenizer)
    >>> translate("Hello world", src_lang="en", tgt_lang="de", num_beams=4)
    >>> translate([{"text": "Hallo", "src_lang": "de", "tgt_lang": "fr"}, ...], batch_size=16)

A list is translated target language by target language (longest texts first), so every batch holds one
target language, and the results come back in input order; see `group_by_target`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY

from .data.schema import check_direction
from .modeling.configuration_langspec import source_tag_side
from .tokenization.tokenization_langspec import encode_with_template

TASK = "langspec-translation"


def group_by_target(targets: Sequence[Hashable], lengths: Sequence[int]) -> list[list[int]]:
    """Indexes per target language (in order of first appearance), longest text first within each.

    Batches cut from one group hold one target language, which matters for speed: a decoding step of a
    language-specific module reads the weights of every language in the batch (LAA's matrices, CLL's LSLs,
    adapters), and on a batch of one language LAA and CLL fold theirs into the backbone's weights.
    Longest first keeps the padding per batch low.
    """
    groups: dict[Hashable, list[int]] = {}
    for index, code in enumerate(targets):
        groups.setdefault(code, []).append(index)
    return [sorted(indexes, key=lambda i: lengths[i], reverse=True) for indexes in groups.values()]


class LangSpecTranslationPipeline(Pipeline):
    """Translate text with a hf_langspec model; `src_lang` / `tgt_lang` are codes of `config.languages`."""

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a tokenizer of another vocabulary decodes garbage or nothing: refused here, as translate() does
        if hasattr(self.tokenizer, "check_model"):
            self.tokenizer.check_model(self.model)
        elif len(self.tokenizer) > self.model.config.vocab_size:
            raise ValueError(
                f"This tokenizer has {len(self.tokenizer)} tokens, the model's vocabulary {self.model.config.vocab_size}: "
                "they do not belong together. Load the tokenizer saved with the model."
            )

    def __call__(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Translate a text, a `{"text", "src_lang", "tgt_lang"}` dict, or a list of either (see the module doc).

        A blank text translates to "" (as in `translate()`): a model asked to translate nothing loops."""
        single = not isinstance(inputs, list)
        items = [inputs] if single else inputs
        for index, item in enumerate(items):  # a number or a dict without text failed inside (AttributeError)
            text = item.get("text") if isinstance(item, dict) else item
            if not isinstance(text, str):
                raise ValueError(
                    f"Input {index} is {type(item).__name__} {item!r:.60}; give a text, a {{'text', 'src_lang', "
                    "'tgt_lang'} dict, or a list of either."
                )
        for name in ("src_lang", "tgt_lang"):  # one code for every input; per-input codes go in the dicts
            if kwargs.get(name) is not None and not isinstance(kwargs[name], str):
                raise ValueError(
                    f"{name}={kwargs[name]!r}: give one code for every input, or per input as "
                    f"{{'text': ..., '{name}': ...}} dicts."
                )
        beams = kwargs.get("num_beams")
        if beams is not None and not (isinstance(beams, int) and beams >= 1):  # 0 failed in generate, dividing by it
            raise ValueError(f"num_beams={beams!r} must be a whole number of at least 1.")
        texts = [item["text"] if isinstance(item, dict) else item for item in items]
        default = kwargs.get("tgt_lang")
        targets = [item.get("tgt_lang", default) if isinstance(item, dict) else default for item in items]
        results: list[Any] = [[{"translation_text": ""}] for _ in items]
        todo = [i for i, text in enumerate(texts) if text.strip()]
        for group in group_by_target([targets[i] for i in todo], [len(texts[i]) for i in todo]):
            indexes = [todo[i] for i in group]  # one call per target language: no batch mixes two
            translated = super().__call__([items[i] for i in indexes], *args, **kwargs)
            for index, result in zip(indexes, translated, strict=True):
                results[index] = result
        return results[0] if single else results

    def _sanitize_parameters(self, src_lang: str | None = None, tgt_lang: str | None = None, **generate_kwargs):
        preprocess = {k: v for k, v in (("src_lang", src_lang), ("tgt_lang", tgt_lang)) if v is not None}
        return preprocess, generate_kwargs, {}

    def preprocess(self, inputs: str | dict[str, str], src_lang: str | None = None, tgt_lang: str | None = None):
        if isinstance(inputs, dict):
            text = inputs["text"]
            src_lang, tgt_lang = inputs.get("src_lang", src_lang), inputs.get("tgt_lang", tgt_lang)
        else:
            text = inputs
        config = self.model.config
        if src_lang is not None and tgt_lang is not None and getattr(config, "languages", None):
            check_direction(src_lang, tgt_lang, config)
        if hasattr(self.tokenizer, "lang_tag_style"):  # a LangSpecTokenizer applies tags and ids itself
            return self.tokenizer(text, src_lang=src_lang, tgt_lang=tgt_lang, return_tensors="pt")
        if getattr(self.tokenizer, "is_fast", False):  # the text read as text, never as control tokens
            ids = torch.tensor(encode_with_template(self.tokenizer, [text]))
            encoded = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        else:  # a SentencePiece tokenizer never reads its control symbols from text
            encoded = self.tokenizer(text, return_tensors="pt", split_special_tokens=True)
        if getattr(config, "languages", None):  # a plain model (a folded direction) has no language contract
            if tgt_lang is None:
                raise ValueError(
                    f"Pass tgt_lang=<code> (one of {config.languages}) to translate with this multilingual model."
                )
            tgt_id = config.language_id(tgt_lang)
            encoded["tgt_lang_ids"] = torch.tensor([tgt_id])
            if src_lang is not None:
                encoded["src_lang_ids"] = torch.tensor([config.language_id(src_lang)])
            side = source_tag_side(config.lang_tag_style)
            if side == "source" and src_lang is None:
                raise ValueError(
                    f"This model puts the source language's tag before the source (lang_tag_style="
                    f"{config.lang_tag_style!r}): pass src_lang=<code> (one of {config.languages})."
                )
            if side and config.lang_tag_token_ids is not None:
                tagged = tgt_id if side == "target" else config.language_id(src_lang)
                tag = torch.tensor([[config.lang_tag_token_ids[tagged]]])
                encoded["input_ids"] = torch.cat([tag, encoded["input_ids"]], dim=1)
                encoded["attention_mask"] = torch.cat([torch.ones_like(tag), encoded["attention_mask"]], dim=1)
        return encoded

    def _forward(self, model_inputs: dict[str, torch.Tensor], **generate_kwargs: Any) -> dict[str, torch.Tensor]:
        return {"output_ids": self.model.generate(**model_inputs, **generate_kwargs)}

    def postprocess(self, model_outputs: dict[str, torch.Tensor]) -> list[dict[str, str]]:
        return [
            {"translation_text": self.tokenizer.decode(ids, skip_special_tokens=True)}
            for ids in model_outputs["output_ids"]
        ]


def register_pipeline() -> None:
    if TASK not in PIPELINE_REGISTRY.get_supported_tasks():
        PIPELINE_REGISTRY.register_pipeline(
            TASK, pipeline_class=LangSpecTranslationPipeline, pt_model=AutoModelForSeq2SeqLM
        )


__all__ = ["TASK", "LangSpecTranslationPipeline", "group_by_target", "register_pipeline"]
