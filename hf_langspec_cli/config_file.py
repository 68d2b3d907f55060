"""Reading the files a user writes (experiment configs, suites, `--set` values): one reader, one set of refusals,
and the error they raise. It imports no torch, so `hf-langspec train` refuses a config's unknown key at once
(`config_keys.first_check`); the package reads every config through it too.

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


class ConfigError(ValueError):
    """A config that names an unknown key or an impossible value: one line that names the key and the fix (the CLI
    prints it alone)."""


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


def check_keys(section: Any, allowed: set[str], where: str) -> dict[str, Any]:
    """`section` when it is a mapping whose keys are all `allowed`; otherwise a ConfigError naming them."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(section).__name__}.")
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; known keys are {sorted(allowed)}.")
    return section


def set_keys(config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys in place: `{"model.class": "cll", "stages": [...]}` (values already parsed)."""
    for key, value in values.items():
        path = key.split(".")
        if not all(path):
            raise ConfigError(f"Override key {key!r} must look like section.key, e.g. model.clm_num_features.")
        node = config
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"Override {key!r}: {part!r} is not a section.")
        node[path[-1]] = value
    return config


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """`["model.clm_decoder=none", "training.max_steps=100"]` -> `{"model.clm_decoder": "none", ...}`, each value
    read as YAML."""
    parsed = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"Override {item!r} must look like section.key=value, e.g. model.clm_num_features=94.")
        try:
            parsed[key] = read_config_text(value, f"Override {item!r}")
        except ConfigError as err:
            raise ConfigError(str(err).replace(": not valid YAML", ": the value is not valid YAML", 1)) from None
    return parsed


def read_config_mapping(path: str | os.PathLike) -> dict[str, Any]:
    """An experiment config file's sections, unchecked: a missing file, a file that is not YAML / JSON or not a
    mapping raise one line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"Config {path} does not exist.")
    config = read_config_file(path)
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the config must be a mapping of sections, got {type(config).__name__}.")
    return config


__all__ = [
    "ConfigError", "UniqueKeyLoader", "check_keys", "parse_overrides", "read_config_file", "read_config_mapping",
    "read_config_text", "set_keys",
]  # fmt: skip
