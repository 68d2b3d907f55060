"""`hf-langspec`: the command line.

hf-langspec data bible --output-dir data/bible --languages en,de,fr
hf-langspec data hub opus100 --directions en-de,de-en --split train --output data/opus/train.jsonl
hf-langspec data local corpus.de --tgt-path corpus.en --src-lang de --tgt-lang en --output data/local.jsonl
hf-langspec train-tokenizer --train data/bible/train.jsonl --output-dir tok --vocab-size 8000
hf-langspec export --model runs/bible-baseline/model --src-lang en --tgt-lang de --output-dir serve/en-de
hf-langspec export --model runs/bible-baseline/model --directions en-de,de-en --output-dir serve/bible
hf-langspec serve --export serve/bible --port 8080
hf-langspec compare --suite examples/suites/bible3.yaml --workers 2
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from . import data_commands, model_commands, sharing_commands, training_commands
from .command import Command
from .config_file import ConfigError

# the order --help lists the commands in: corpora, training, using a model, sharing it
COMMANDS: list[Command] = [
    *data_commands.COMMANDS,
    *training_commands.COMMANDS,
    *model_commands.COMMANDS,
    *sharing_commands.COMMANDS,
]
GROUP_HELP = {"data": "build or convert corpora into the canonical JSONL schema"}


class OneLineErrors(argparse.ArgumentParser):
    """argparse, with a usage error as one line that points at --help instead of the whole usage text, and list
    options that accumulate: `--set a=1 --set b=2` keeps both (argparse's default for `nargs="+"` keeps the last
    list alone, without a word)."""

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        if kwargs.get("nargs") == "+" and "action" not in kwargs and names and names[0].startswith("-"):
            kwargs["action"] = "extend"
        return super().add_argument(*names, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `hf-langspec` parser: every command of COMMANDS, each with its handler's "module:function" as `func`.
    Building it imports nothing of the package (no torch), so --help and a usage error answer at once."""
    parser = OneLineErrors(
        prog="hf-langspec", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, Any] = {}
    for command in COMMANDS:
        group, _, source = command.name.partition(" ")
        if source:  # `data bible`: a source of the `data` command
            if group not in groups:
                groups[group] = commands.add_parser(group, help=GROUP_HELP[group]).add_subparsers(
                    dest="source", required=True
                )
            sub = groups[group].add_parser(source, **command.parser_kwargs)
        else:
            sub = commands.add_parser(command.name, **command.parser_kwargs)
        command.arguments(sub)
        sub.set_defaults(command_spec=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`hf-langspec`: parse the arguments (here), then run the command's handler in the package."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    command = args.command_spec
    if command.check is not None:
        try:
            command.check(args)
        except (ConfigError, FileNotFoundError) as err:  # a bad config answers before torch loads
            print(f"hf-langspec {args.command}: error: {err}", file=sys.stderr)
            return 2
    from hf_langspec.cli import run  # the package: torch, transformers, the models registered with the Auto classes

    return run(args.command, command.load_handler(), args)
