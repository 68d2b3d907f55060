"""Reading the files a user writes (experiment configs, suites, `--set` values): one reader, one set of refusals.

YAML and JSON both let a key appear twice and keep the last value without a word: a second `training:` section
silently drops the first, a second `seeds:` silently changes a suite's seeds. Every config reader goes through
`read_config_text`, which refuses a repeated key with the line of both (a YAML merge key `<<:` may still be
overridden, as YAML intends), and turns syntax and encoding errors into one `ConfigError` line naming the file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from .errors import ConfigError


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key written twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: overriding merged keys is the point
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first_line.get(key)
            except TypeError:  # an unhashable key: SafeLoader refuses it below with its own message
                continue
            line = key_node.start_mark.line + 1
            if earlier is not None:
                raise ConstructorError(
                    None, None, f"key {key!r} appears twice (lines {earlier} and {line}), and YAML would silently "
                    "keep only the second; merge the two into one", key_node.start_mark,
                )  # fmt: skip
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, UniqueKeyLoader.construct_mapping)
# `5e-4` is a number (YAML 1.2, and what every learning rate in a paper is written as); PyYAML's YAML 1.1 rule wants
# `5.0e-4` and read it as the string "5e-4", which the type check then refused with a fix that did not help
UniqueKeyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} appears twice, and JSON would silently keep only the second")
        seen[key] = value
    return seen


def read_config_text(text: str, where: str, fmt: str = "yaml") -> Any:
    """The value of a YAML (`fmt="yaml"`) or JSON text, refusing repeated keys; errors are one `ConfigError` line
    that starts with `where` (a file name, or the `--set` item)."""
    try:
        if fmt == "json":
            return json.loads(text, object_pairs_hook=_unique_json_object)
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{where}: not valid YAML{at}: {getattr(err, 'problem', None) or err}.") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where}: not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}.") from None
    except ValueError as err:  # a repeated JSON key
        raise ConfigError(f"{where}: {err}; merge the two into one.") from None


def read_config_file(path: str | os.PathLike) -> Any:
    """`read_config_text` of a file: YAML for `.yaml` / `.yml`, JSON otherwise."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; save it as UTF-8.") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a folder; give the config file inside it.") from None
    return read_config_text(text, str(path), "yaml" if path.suffix in (".yaml", ".yml") else "json")


__all__ = ["UniqueKeyLoader", "read_config_file", "read_config_text"]
