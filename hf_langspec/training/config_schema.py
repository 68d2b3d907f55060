"""`hf-langspec train --help-config`: every section and key of an experiment config with its type and default, as Markdown,
read from the same key sets, types and signatures that `config.validate_config` checks against."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import typing
from typing import Any

from hf_langspec_cli.config_file import (
    CARD_KEYS,
    EVALUATION_KEYS,
    KEY_TABLE,
    STAGE_KEYS,
    TOKENIZER_KEYS,
    TRANSLATE_KEYS,
)

from ..config_types import describe, type_hints
from ..data.bible import BibleCorpusConfig
from ..files import write_atomic
from ..modeling import LangSpecConfig
from ..modeling.registry import model_classes
from ..tokenization import train_tokenizer
from .config import (
    DATA_ABSENT,
    DATA_DEFAULTS,
    DATA_TYPES,
    EVALUATION_ABSENT,
    EVALUATION_DEFAULTS,
    EVALUATION_TYPES,
    SECTION_HELP,
    class_keys,
)
from .training_args import LangSpecTrainingArguments


def _type_name(annotation: Any) -> str:
    # "or", not "|": the table is Markdown
    return describe(annotation).replace(" | ", " or ") if annotation is not inspect.Parameter.empty else "any"


def _default(key: str, defaults: dict[str, Any], absent: dict[str, str]) -> str:
    return repr(defaults[key]) if key in defaults else absent.get(key, "")


def _signature_rows(target: Any, keys: set[str] | None = None, skip: frozenset[str] = frozenset()) -> list[tuple]:
    """(key, type, default) of a function's or class's parameters, or of a dataclass's fields."""
    if dataclasses.is_dataclass(target):
        hints = type_hints(target, fields=True)
        params = [
            (
                f.name,
                hints.get(f.name, f.type),
                f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default,
            )
            for f in dataclasses.fields(target)
        ]
    else:
        function = target.__init__ if inspect.isclass(target) else target
        hints = typing.get_type_hints(function)
        params = [
            (n, hints.get(n, p.annotation), p.default) for n, p in inspect.signature(function).parameters.items()
        ]
    rows = []
    for name, annotation, default in params:
        if name in skip or name in ("self", "kwargs") or (keys is not None and name not in keys):
            continue
        shown = "required" if default in (inspect.Parameter.empty, dataclasses.MISSING) else repr(default)
        rows.append((name, _type_name(annotation), shown))
    return rows


def schema_table() -> str:
    """Every section and key of an experiment config with its type and default, as Markdown."""

    # the package's own training fields, and those whose default it changes (the papers' optimiser, schedule)
    parent = {f.name: repr(f.default) for f in dataclasses.fields(LangSpecTrainingArguments.__mro__[1])}
    fixed_by_tokenizer = frozenset({"vocab_size", "languages", "lang_tag_token_ids", "lang_tag_style"})
    sections: dict[str, list[tuple]] = {
        "data": [
            *[(k, _type_name(DATA_TYPES[k]), _default(k, DATA_DEFAULTS, DATA_ABSENT)) for k in sorted(DATA_TYPES)],
            *[(f"bible.{n}", t, d) for n, t, d in _signature_rows(BibleCorpusConfig)],
        ],
        "tokenizer": [("path", "str", "(or the keys below)"), *_signature_rows(train_tokenizer, TOKENIZER_KEYS)],
        "model": [
            ("class", "str", "'baseline'"),
            ("init_from", "str", "none"),
            ("init_encoder_from", "str or dict", "none"),
            ("init_from_pretrained", "str", "none"),
            ("freeze_pretrained", "bool", "true if the method adds modules"),
            ("train_pretrained", "list[str]", "[]"),
            ("add_languages", "list[str]", "[] (codes the checkpoint lacks, given a code token)"),
            *_signature_rows(LangSpecConfig, skip=fixed_by_tokenizer),
        ],
        "training": [
            *[row for row in _signature_rows(LangSpecTrainingArguments) if parent.get(row[0]) != row[2]],
            ("...", "", "every other Seq2SeqTrainingArguments field"),
        ],
        "stages": [(k, "", "") for k in sorted(STAGE_KEYS)],
        "evaluation": [
            (k, _type_name(EVALUATION_TYPES[k]), _default(k, EVALUATION_DEFAULTS, EVALUATION_ABSENT))
            for k in sorted(EVALUATION_KEYS)
        ],
        "translate": [(k, "str", "") for k in sorted(TRANSLATE_KEYS)],
        "card": [(k, "str", "") for k in sorted(CARD_KEYS)],
    }
    lines = ["| section | key | type | default |", "|---|---|---|---|"]
    for section in SECTION_HELP:
        lines.append(f"| **{section}** | | | {SECTION_HELP[section]} |")
        lines += [f"| | {key} | {type_} | {default} |" for key, type_, default in sections.get(section, [])]
    classes = ", ".join(f"`{name}` ({config_class.__name__})" for name, (config_class, _) in model_classes().items())
    lines += ["", f"[model] class: {classes}; each class adds its own fields (its config class's docstring)."]
    return "\n".join(lines)


def key_table() -> dict[str, Any]:
    """What `hf-langspec train` checks before it loads the package (hf_langspec_cli/config_keys.json): each model
    class's [model] fields, the [training] and [data.bible] keys, and the `--help-config` table."""
    return {**class_keys(), "help_config": schema_table()}


def write_key_table() -> None:
    """Write `key_table()` to hf_langspec_cli/config_keys.json (after a change to a config class or the training
    arguments; a test fails until it is rewritten)."""
    write_atomic(KEY_TABLE, json.dumps(key_table(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {KEY_TABLE}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-keys"]:
        raise SystemExit("usage: python -m hf_langspec.training.config_schema --write-keys")
    write_key_table()


__all__ = ["key_table", "schema_table", "write_key_table"]
