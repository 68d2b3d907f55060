"""Serving one direction: a specialized plain model on disk and its CTranslate2 export.

`export_direction` writes `OUT/transformers` (the `MarianMTModel` / `M2M100ForConditionalGeneration` of
:func:`~hf_langspec.export.specialize.specialize` with its plain tokenizer: loads with transformers alone)
and `OUT/ctranslate2` (the same weights converted by `ctranslate2.converters.TransformersConverter`, for
CTranslate2's fast CPU/GPU decoding). `hf-langspec export` runs both steps.

One fix-up on CTranslate2's Marian loader: it follows Marian's own vocabularies (decoding from a zero
embedding, since Marian starts from `<pad>`; a trailing `<pad>` row dropped). This package's models start
from `</s>` (fairseq), whose embedding is not zero, and keep `<pad>` at id 1, so the conversion uses
the loader without those two conventions.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CT2_MISSING = (
    "CTranslate2 export needs the `ctranslate2` package: pip install 'hf_langspec[export]' (or ctranslate2>=4)."
)


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError(CT2_MISSING) from None
    return ctranslate2


def export_ctranslate2(
    plain_dir: str | os.PathLike, output_dir: str | os.PathLike, quantization: str | None = None, force: bool = False
) -> Path:
    """Convert a saved specialized model (`plain_dir`, with its tokenizer) to a CTranslate2 model directory."""
    _ctranslate2()
    from ctranslate2.converters import transformers as loaders

    class PlainMarianLoader(loaders.MarianMTLoader):
        """Marian's loader without the Marian-vocabulary conventions: decoding starts from `</s>`'s own
        embedding, and no trailing `<pad>` row is dropped (this vocabulary has `<pad>` at id 1)."""

        def get_model_spec(self, model):
            model.config.normalize_before = False
            model.config.normalize_embedding = False
            return loaders.BartLoader.get_model_spec(self, model)

        def set_decoder(self, spec, decoder):
            loaders.BartLoader.set_decoder(self, spec, decoder)

        def get_vocabulary(self, model, tokenizer):
            return loaders.BartLoader.get_vocabulary(self, model, tokenizer)

    registered = loaders._MODEL_LOADERS["MarianConfig"]
    loaders._MODEL_LOADERS["MarianConfig"] = PlainMarianLoader()
    try:
        out = loaders.TransformersConverter(str(plain_dir)).convert(
            str(output_dir), quantization=quantization, force=force
        )
    finally:
        loaders._MODEL_LOADERS["MarianConfig"] = registered
    return Path(out)


def export_direction(
    model: Any,
    tokenizer: Any,
    src_lang: str,
    tgt_lang: str,
    output_dir: str | os.PathLike,
    ctranslate2: bool = True,
    quantization: str | None = None,
    force: bool = False,
) -> dict[str, Path]:
    """Specialize `model` for `src_lang -> tgt_lang` and write it (and its CTranslate2 export) under `output_dir`."""
    from .specialize import specialize

    output_dir = Path(output_dir)
    plain_dir = output_dir / "transformers"
    if plain_dir.exists() and any(plain_dir.iterdir()) and not force:
        raise FileExistsError(f"{plain_dir} is not empty; pass force=True (--force) to overwrite it.")
    plain, plain_tokenizer = specialize(model, src_lang, tgt_lang, tokenizer)
    plain.save_pretrained(plain_dir)
    plain_tokenizer.save_pretrained(plain_dir)
    paths = {"transformers": plain_dir}
    if ctranslate2:
        paths["ctranslate2"] = export_ctranslate2(plain_dir, output_dir / "ctranslate2", quantization, force=True)
        plain_tokenizer.save_pretrained(paths["ctranslate2"])  # the tokenizer travels with the engine's model
    return paths


def translate_ctranslate2(
    translator: Any,
    tokenizer: Any,
    texts: list[str],
    beam_size: int = 4,
    max_new_tokens: int = 128,
    forced_first_token: str | None = None,
    **options: Any,
) -> list[list[int]]:
    """Token ids (`</s>`-free, no start token) that a CTranslate2 `Translator` produces for `texts`.

    `tokenizer` is the specialized model's plain tokenizer; `forced_first_token` is the target tag of a model
    trained with target tags (the generation config's `forced_bos_token_id`). For speed on CPU, build the
    translator with one worker per core (`inter_threads=cores, intra_threads=1`) and pass
    `max_batch_size=ceil(len(texts) / cores)`: on 2 cores that halved beam-4 decoding of 32 sentences
    (benchmarks/bench_serving.py).
    """
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts)["input_ids"]]
    prefix = [[forced_first_token]] * len(texts) if forced_first_token else None
    options.setdefault("min_decoding_length", 0)  # as transformers: </s> may come first (CTranslate2's default is 1)
    results = translator.translate_batch(
        sources, target_prefix=prefix, beam_size=beam_size, max_decoding_length=max_new_tokens, **options
    )
    return [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]


__all__ = ["export_ctranslate2", "export_direction", "translate_ctranslate2"]
