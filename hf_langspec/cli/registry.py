"""The command registry: `@command` adds a handler and its arguments to `hf-langspec`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

# every command: (name, add_parser's keyword arguments, the function adding its arguments, its handler), in the
# order their modules define them; "data bible" is the `bible` source of the `data` command
COMMANDS: list[tuple[str, dict[str, Any], Callable[[argparse.ArgumentParser], None], Callable]] = []
GROUP_HELP = {"data": "build or convert corpora into the canonical JSONL schema"}


def command(name: str, arguments: Callable[[argparse.ArgumentParser], None], **parser_kwargs: Any) -> Callable:
    """Register the decorated handler as `hf-langspec NAME`, with `arguments` (defined right above it)."""

    def register(handler: Callable) -> Callable:
        COMMANDS.append((name, parser_kwargs, arguments, handler))
        return handler

    return register
