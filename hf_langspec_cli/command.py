"""A command of `hf-langspec`: its name, its handler (imported only when it runs) and its arguments."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any


class Command:
    """`name` ("train", or "data bible" for the `bible` source of `data`), `handler` as "module:function" (the
    package's hf_langspec.cli, which loads torch), `arguments` adding its arguments to its parser, `check` (what
    can be refused before the package loads: it raises ConfigError or FileNotFoundError with one line), and the
    parser's keyword arguments (`help`, `description`)."""

    def __init__(
        self,
        name: str,
        handler: str,
        arguments: Callable[[argparse.ArgumentParser], None],
        check: Callable[[argparse.Namespace], None] | None = None,
        **kwargs: Any,
    ):
        self.name, self.handler, self.arguments, self.check, self.parser_kwargs = (
            name,
            handler,
            arguments,
            check,
            kwargs,
        )

    def load_handler(self) -> Callable[[argparse.Namespace], None]:
        module, _, function = self.handler.partition(":")
        return getattr(importlib.import_module(module), function)
