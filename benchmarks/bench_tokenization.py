"""Tokenization throughput on the Bible corpus: LangSpecTokenizer vs the plain `tokenizers` library.

Encodes the same training pairs (source and target) four ways, in one run:

* `tokenizers` `encode_batch` on the sources and targets, ids as lists (the floor: no tags, no language ids);
* `LangSpecTokenizer.__call__` on batches of 1,000 pairs (tags, labels, per-example language ids);
* `datasets.Dataset.map(batched=True)` with that tokenizer, `num_proc=1` and `num_proc=2`.

    python benchmarks/bench_tokenization.py                # 100k pairs of the default Bible build
    python benchmarks/bench_tokenization.py --pairs 20000 --no-write
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict
from pathlib import Path

from datasets import Dataset, disable_caching

from hf_langspec.data.bible import BibleCorpusConfig, build_bible_corpus, default_cache_dir
from hf_langspec.data.local import iter_rows
from hf_langspec.tokenization import LangSpecTokenizer, train_tokenizer


def best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--corpus-dir", type=Path, default=default_cache_dir() / "bible-default")
    parser.add_argument(
        "--tokenizer", type=Path, help="a saved LangSpecTokenizer (default: train one, vocabulary 8000)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    disable_caching()  # map() must really run every time

    corpus = build_bible_corpus(args.corpus_dir, BibleCorpusConfig(), show_progress=False)
    rows = []
    for row in iter_rows(corpus.files["train"]):
        rows.append(row)
        if len(rows) == args.pairs:
            break
    if args.tokenizer:
        tok = LangSpecTokenizer.from_pretrained(args.tokenizer)
    else:
        texts = defaultdict(list)
        for row in rows:
            texts[row["src_lang"]].append(row["src"])
            texts[row["tgt_lang"]].append(row["tgt"])
        tok = train_tokenizer(texts, vocab_size=8000, sample_size=200_000, show_progress=False)
    src = [r["src"] for r in rows]
    tgt = [r["tgt"] for r in rows]
    src_lang = [r["src_lang"] for r in rows]
    tgt_lang = [r["tgt_lang"] for r in rows]
    backend = tok.backend_tokenizer

    def plain():  # the ids as Python lists, which any consumer needs
        [e.ids for e in backend.encode_batch(src, add_special_tokens=False)]
        [e.ids for e in backend.encode_batch(tgt, add_special_tokens=False)]

    def langspec():
        for i in range(0, len(rows), 1000):
            tok(
                src[i : i + 1000],
                text_target=tgt[i : i + 1000],
                src_lang=src_lang[i : i + 1000],
                tgt_lang=tgt_lang[i : i + 1000],
            )

    dataset = Dataset.from_list(rows)

    def encode(batch):
        return tok(batch["src"], text_target=batch["tgt"], src_lang=batch["src_lang"], tgt_lang=batch["tgt_lang"])

    def mapped(num_proc):
        return lambda: dataset.map(
            encode, batched=True, batch_size=1000, num_proc=num_proc, remove_columns=dataset.column_names
        )

    results = [
        ("`tokenizers` encode_batch + ids (no tags, no language ids)", best_of(args.repeats, plain)),
        ("LangSpecTokenizer.__call__, batches of 1000", best_of(args.repeats, langspec)),
        ("datasets.map(batched, num_proc=1)", best_of(args.repeats, mapped(1))),
        ("datasets.map(batched, num_proc=2)", best_of(args.repeats, mapped(2))),
    ]
    floor = results[0][1]
    lines = [
        f"{len(rows):,} Bible training pairs (source + target encoded), {len(tok):,}-piece unigram vocabulary; best of "
        f"{args.repeats}. `tokenizers` parallelism: {os.environ.get('TOKENIZERS_PARALLELISM', 'default')}.",
        "",
        "| method | pairs/s | time (s) | vs `tokenizers` |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {name} | {len(rows) / t:,.0f} | {t:.2f} | {floor / t:.2f}x |" for name, t in results]
    from _report import publish

    publish(
        "tokenization",
        "Tokenization throughput: LangSpecTokenizer vs `tokenizers`",
        "\n".join(lines),
        write=not args.no_write,
    )


if __name__ == "__main__":
    main()
