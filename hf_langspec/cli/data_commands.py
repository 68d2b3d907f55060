"""`hf-langspec data bible|hub|local` and `train-tokenizer`: corpora and the joint vocabulary."""

from __future__ import annotations

import argparse
from pathlib import Path

from hf_langspec_cli.types import books, codes

from ..data.bible import DEFAULT_LANGUAGES, BibleCorpusConfig, build_bible_corpus, stats_table
from ..data.checks import check_corpus
from ..data.corpus_store import read_corpus, write_corpus
from ..data.hub import load_corpus
from ..data.local import check_row, iter_rows, load_local, read_multiway
from ..data.processing import multiway_pairs
from ..files import check_output_dir, check_output_file
from ..tokenization import train_tokenizer


def cmd_data_bible(args: argparse.Namespace) -> None:
    # the corpus folder may hold an earlier build (it is reused when up to date): only a file there is refused
    check_output_dir(args.output_dir, "--output-dir", force=True)
    config = BibleCorpusConfig(
        languages=codes(args.languages) if args.languages else DEFAULT_LANGUAGES,
        pivot=args.pivot,
        directions=args.directions,
        valid_chapters=args.valid_chapters,
        test_chapters=args.test_chapters,
        seed=args.seed,
        books=books(args.books) if args.books else None,
        allow_restricted=args.allow_restricted,
    )
    corpus = build_bible_corpus(args.output_dir, config, cache_dir=args.cache_dir, wheel=args.wheel, force=args.force)
    print(stats_table(corpus.stats))
    for name, path in corpus.files.items():
        print(f"{name}: {path}")


def cmd_data_hub(args: argparse.Namespace) -> None:
    check_output_file(args.output, "--output", args.force, keep=args.data_files or ())
    dataset = load_corpus(args.corpus, args.directions, split=args.split, data_files=args.data_files)
    # the loaders' row checks (codes, blank sides) on the Hub's rows too, as they are written
    rows = (check_row(row, f"{args.corpus} {args.split} example {i}") for i, row in enumerate(dataset, 1))
    _report_written(write_corpus(args.output, rows), args.output)


def _report_written(count: int, output: Path) -> None:
    """One line for what was written, after the content checks `train` applies (`checks.check_corpus`: read back
    into the corpus store, whose cache `train` then reuses); nothing written, or a corpus those checks refuse, is
    an error that leaves no file behind."""

    if not count:
        output.unlink(missing_ok=True)
        raise ValueError(f"No examples to write to {output}: the input holds none; check the path and directions.")
    try:
        warnings = check_corpus(read_corpus([output], show_progress=False), str(output))
    except ValueError:
        output.unlink(missing_ok=True)
        raise
    print(f"wrote {count} examples to {output}")
    for message in warnings:
        print(f"warning: {message}")


def cmd_data_local(args: argparse.Namespace) -> None:
    check_output_file(
        args.output, "--output", args.force, keep=[args.path, *([args.tgt_path] if args.tgt_path else [])]
    )
    rows = iter_rows(args.path, args.format, args.src_lang, args.tgt_lang, args.tgt_path)  # streamed, line by line
    _report_written(write_corpus(args.output, rows), args.output)


def cmd_train_tokenizer(args: argparse.Namespace) -> None:
    check_output_dir(args.output_dir, "--output-dir", args.force)  # a model folder's vocabulary is not replaced
    if not any(path.endswith(".multiway.jsonl") for path in args.train):
        rows = read_corpus(args.train)  # on disk: only the tokenizer's sample is read from it
    else:
        rows = []
        for path in args.train:
            if path.endswith(".multiway.jsonl"):  # multi-way records: every ordered pair of their texts
                rows += multiway_pairs({"texts": texts} for texts in read_multiway(path)).to_list()
            else:
                rows += load_local(path).to_list()
    tokenizer = train_tokenizer(
        rows,
        languages=codes(args.languages) if args.languages else None,
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
