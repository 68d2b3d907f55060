"""Integrating a new language into a trained CLL model by fine-tuning (Qu & Watanabe 2022, section 4.4, appendix A).

`add_language` extends the vocabulary with the new language's pieces (old ids unchanged; new embedding
rows = the mean of the old rows plus Gaussian noise), adds the language and its tag to the language
contract, gives it an LSL and a t_l per CLL layer initialised as the mean of the existing languages', and
freezes the existing languages' LSLs (`cll_frozen_languages`). Training then continues on the new
language's data with the old data mixed in: `hf-langspec train` with `model.init_from` (see
`hf-langspec add-language --help`).

Right after integration the old languages' hidden states, and their logits over the old vocabulary,
are exactly the old model's: only the new rows of the output projection are new.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from ..data.checks import check_code
from ..tokenization import LangSpecTokenizer, changed_segmentations, extend_tokenizer


def add_language(
    model: Any,
    tokenizer: LangSpecTokenizer,
    code: str,
    texts: Iterable[str],
    vocab_size: int = 8000,
    noise_std: float = 0.01,
    seed: int = 0,
    old_texts: Mapping[str, Iterable[str]] | None = None,
    show_progress: bool = True,
) -> tuple[Any, LangSpecTokenizer, dict[str, Any]]:
    """Add language `code` to a CLL model (or a baseline without language modules) and its tokenizer.

    Args:
        texts: the new language's sentences, for its pieces.
        vocab_size: the size of the unigram vocabulary trained on `texts` (its new pieces are appended).
        noise_std: standard deviation of the noise added to the mean embedding of each new row.
        old_texts: `{language: sentences}` of existing languages, to count sentences whose segmentation the
            new pieces change (reported, not hidden).

    Returns `(model, tokenizer, report)`; the model is changed in place.
    """
    check_code(code, "add_language")
    if not 0 <= noise_std < float("inf"):  # NaN made every new embedding NaN
        raise ValueError(f"add_language: noise_std={noise_std} must be a finite number of 0 or more.")
    tokenizer.check_model(model)
    config = model.config
    modules = {
        f"{side}.{point}": type(m).__name__
        for side in ("encoder", "decoder")
        for point, m in getattr(model.model, side).insertions.items()
    }
    if config.model_type not in ("langspec_cll", "langspec_base") or (
        config.model_type == "langspec_base" and modules
    ):
        raise ValueError(
            f"add_language integrates a language into CLL models (section 4.4) or a baseline without language "
            f"modules; this is a {config.model_type!r} model with {modules or 'no modules'}."
        )
    new_tokenizer = extend_tokenizer(tokenizer, texts, code, vocab_size=vocab_size, show_progress=show_progress)
    old_size = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(len(new_tokenizer), mean_resizing=False)
    with torch.no_grad():
        embeddings = model.get_input_embeddings().weight
        generator = torch.Generator().manual_seed(seed)
        noise = torch.randn(embeddings.shape[0] - old_size, embeddings.shape[1], generator=generator) * noise_std
        embeddings[old_size:] = embeddings[:old_size].mean(0) + noise.to(embeddings)
    model.tie_weights()
    config.languages = [*config.languages, code]
    config.lang_tag_token_ids = list(new_tokenizer.lang_tag_token_ids)
    config.vocabulary_fingerprint = new_tokenizer.vocabulary_fingerprint()
    if config.model_type == "langspec_cll":
        cll = model.cll()
        config.cll_frozen_languages = list(cll.specific)
        cll.add_language(code, config.languages)
        cll.frozen = set(config.cll_frozen_languages)
    new_tokenizer.check_model(model)
    report = {
        "language": code,
        "new_pieces": len(new_tokenizer) - len(tokenizer) - 1,
        "tag_id": new_tokenizer.lang_tag_token_ids[-1],
        "frozen_languages": list(getattr(config, "cll_frozen_languages", [])),
        "changed_segmentations": {
            lang: changed_segmentations(tokenizer, new_tokenizer, sentences)
            for lang, sentences in (old_texts or {}).items()
        },
    }
    return model, new_tokenizer, report


__all__ = ["add_language"]
