"""The tokenizer step: the checkpoint's own vocabulary for a pretrained start, a saved one (`[tokenizer] path`),
the run's own (a resumed run), one trained before on the same corpus with the same settings (kept in the cache),
or one trained now; checked against the data's languages.

In: the config's `[tokenizer]`, `[data]` and `[model]` sections, `RunData`. Out: the run's `LangSpecTokenizer`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from hf_langspec_cli.config_file import ConfigError

from ... import tokenization
from ...data.cache import cached_tokenizer_folder, publish_copy
from ...data.columns import language_counts
from ...files import read_json, write_atomic
from ...model_folder import load_tokenizer, tokenizer_problem
from ...pretrained import pretrained_tokenizer
from ...tokenization import LangSpecTokenizer
from .context import RunContext, RunData


def build_tokenizer(config: dict[str, Any], data: RunData, run: RunContext) -> Any:
    """The run's tokenizer (see the module; from the config's [tokenizer], [data] and [model] sections), with every
    training language and test set checked against it."""

    data_section = config.get("data", {})
    trained_languages = sorted(language_counts(data.train))  # one pass over the corpus's language columns
    pretrained = config.get("model", {}).get("init_from_pretrained")
    if pretrained and "path" not in config.get("tokenizer", {}):  # the checkpoint's own vocabulary and codes
        run.say(f"tokenizer: the checkpoint's, {pretrained}")
        try:
            added = config["model"].get("add_languages", [])
            # every language of the data, trained or only tested: a direction among untrained languages is the
            # checkpoint's own (the frozen base), and is evaluated as such
            languages = set(trained_languages) | data.held_out_languages()
            tokenizer = pretrained_tokenizer(pretrained, sorted(languages), added)
        except ValueError as error:
            raise ConfigError(f"[model] init_from_pretrained: {error}") from None
    else:
        cap = data_section.get("max_train_examples_per_direction")
        tokenizer_section = config.get("tokenizer", {})
        kept = cached_tokenizer_folder(data.corpus, {"tokenizer": tokenizer_section, "cap": cap},
                                       data_section.get("cache_dir"))  # fmt: skip
        tokenizer = train_or_reuse_tokenizer(tokenizer_section, data.train, run.output_dir, run.args.main_process_first,
                                             run.say, kept)  # fmt: skip
    run.say(f"tokenizer: {len(tokenizer):,} pieces, {len(tokenizer.languages)} language tags "
        f"(vocabulary {tokenizer.vocabulary_fingerprint()})")  # fmt: skip
    for code in trained_languages:
        tokenizer.language_id(code)  # a language the tokenizer lacks fails before training
    for name, rows in data.tests.items():
        if not rows:
            raise ConfigError(f"The {name} test set is empty; check data.test_files or the corpus settings.")
    return tokenizer


def train_or_reuse_tokenizer(section: dict[str, Any], train_rows: list[dict], output_dir: Path, main_process_first, say=print,
               cached: Path | None = None):  # fmt: skip
    """The run's tokenizer: `[tokenizer] path`'s, the one in `output_dir/tokenizer` (a resumed run; its settings must
    be the section's), the one kept in `cached` (trained before on this corpus with these settings), or one trained
    on `train_rows` now (and kept in `cached`)."""
    if "path" in section:
        say(
            f"tokenizer: loading {section['path']}"
        )  # a saved vocabulary, used with its own tag style or the one given
        style = {"lang_tag_style": section["lang_tag_style"]} if "lang_tag_style" in section else {}
        return load_tokenizer(section["path"], "[tokenizer] path", **style)
    target = output_dir / "tokenizer"
    settings_file = target / "hf_langspec_training.json"  # what the reused tokenizer was trained with
    with main_process_first(desc="training the tokenizer"):
        if (target / "tokenizer.json").exists():
            say(f"tokenizer: reusing {target}")
            recorded = read_json(settings_file) if settings_file.exists() else None
            if recorded != section:
                raise ConfigError(
                    f"{target} holds a tokenizer trained with {recorded}, but [tokenizer] now says {section}. "
                    "Use a new output_dir, or delete that tokenizer (and the checkpoints trained with it)."
                )
        elif cached is not None and cached.is_dir() and tokenizer_problem(cached) is None:
            say(f"tokenizer: the one trained before on this corpus with these settings ({cached})")
            publish_copy(cached, target)
        else:
            say(f"tokenizer: training a {section.get('vocab_size', 8000):,}-piece {section.get('model_type', 'unigram')} vocabulary on "
                f"{len(train_rows):,} sentence pairs")  # fmt: skip
            tokenizer = tokenization.train_tokenizer(train_rows, **section)
            tokenizer.save_pretrained(target)
            write_atomic(settings_file, json.dumps(section, sort_keys=True))
            if cached is not None:  # kept for the next run on this corpus (a damaged entry is replaced)
                shutil.rmtree(cached, ignore_errors=True)
                publish_copy(target, cached)
    return LangSpecTokenizer.from_pretrained(target)


__all__ = ["build_tokenizer", "train_or_reuse_tokenizer"]
