"""A command of `hf-langspec`: its name, its handler (imported only when it runs) and its arguments."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Command:
    """`name` ("train", or "data bible" for the `bible` source of `data`), `handler` as "module:function" (the
    package's hf_langspec.cli, which loads torch), `arguments` adding its arguments to its parser, and the
    parser's keyword arguments (`help`, `description`)."""

    name: str
    handler: str
    arguments: Callable[[argparse.ArgumentParser], None]
    parser_kwargs: dict[str, Any] = field(default_factory=dict)

    def __init__(self, name: str, handler: str, arguments: Callable[[argparse.ArgumentParser], None], **kwargs: Any):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "handler", handler)
        object.__setattr__(self, "arguments", arguments)
        object.__setattr__(self, "parser_kwargs", kwargs)

    def load_handler(self) -> Callable[[argparse.Namespace], None]:
        module, _, function = self.handler.partition(":")
        return getattr(importlib.import_module(module), function)
