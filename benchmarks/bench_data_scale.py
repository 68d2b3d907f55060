"""From `train` start to the first optimizer step on OPUS-100-shaped corpora: time and memory, by stage.

Synthetic English-centric corpora (up to 100 languages, directed examples in both directions, sentence lengths
like OPUS-100's: log-normal around 12 words, at most 60; no duplicates) at each size of `--sizes`, each trained
for one step of a tiny model with `hf-langspec train` as a user runs it:

- `cold`: a fresh data cache and output folder (read, check, train the tokenizer on its sample, tokenize, filter);
- `warm`: another run on the same corpus and tokenizer (a second seed or system of a suite: `tokenizer.path`),
  the cache warm;
- `launch x2 cold` / `launch x2 warm`: the same under `accelerate launch --num_processes 2` on the CPU;
- `old`: the data path before the corpus store (a checkout given with `--old-tree`), up to `--old-up-to` pairs.

Stages are read from the run's own progress lines as they appear (start-up and reading up to `tokenizer:`, the
tokenizer's training, tokenizing and filtering up to `training:`, then the sampler and the first step up to the
first logged loss). Memory is sampled every 0.2 s for every process of the run: the largest resident set of one
process (RSS, which counts the pages of memory-mapped files it touched) and of its anonymous memory (RssAnon: what
the process itself holds; the page cache is not).

    python benchmarks/bench_data_scale.py --sizes 100000,1000000,10000000 --old-tree /tmp/oldtree --old-up-to 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
MARKERS = {"tokenizer": "tokenizer: ", "pieces": " pieces, ", "training": "training: stage", "loss": "'loss'"}


def write_corpus(path: Path, pairs: int, languages: int, seed: int = 0) -> None:
    """English-centric directed examples: en->xx and xx->en for `languages - 1` languages, sizes skewed like
    OPUS-100's (many capped at the largest, a tail of small ones), pseudo-words of a vocabulary per language."""
    if path.exists():
        return
    rng = np.random.default_rng(seed)
    others = [f"l{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(languages - 1)]
    share = np.minimum(1.0, rng.pareto(1.0, len(others)) + 0.05)
    counts = np.maximum(1, np.round(share / share.sum() * pairs / 2)).astype(int)
    counts[0] += pairs // 2 - counts.sum()
    syllables = np.array([c + v for c in "bcdfghjklmnprstvz" for v in "aeiou"])
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for lang, n in zip(others, counts, strict=True):
            vocab = np.array(["".join(rng.choice(syllables, rng.integers(1, 4))) + lang[-1] for _ in range(4000)])
            english = np.array(["".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(4000)])
            for start in range(0, n, 50_000):
                size = min(50_000, n - start)
                lengths = np.clip(rng.lognormal(2.5, 0.5, size).astype(int), 1, 60)
                for k, length in enumerate(lengths):
                    src = " ".join(english[rng.integers(0, 4000, length)])
                    tgt = " ".join(vocab[rng.integers(0, 4000, max(1, length + int(rng.integers(-2, 3))))])
                    # a serial word makes every pair distinct (the benchmark measures a corpus without duplicates)
                    src, tgt = f"{src} {start + k}", f"{tgt} {start + k}"
                    f.write(json.dumps({"src_lang": "en", "tgt_lang": lang, "src": src, "tgt": tgt}) + "\n")
                    f.write(json.dumps({"src_lang": lang, "tgt_lang": "en", "src": tgt, "tgt": src}) + "\n")
    tmp.rename(path)


def config(work: Path, corpus: Path, test: Path, name: str, tokenizer: Path | None, num_proc: int) -> Path:
    body = {
        "output_dir": str(work / "runs" / name),
        "data": {"train_files": [str(corpus)], "test_files": {"test": str(test)}, "num_proc": num_proc},
        "tokenizer": {"path": str(tokenizer)} if tokenizer else {"vocab_size": 8000, "sample_size": 200_000},
        "model": {"d_model": 32, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
                  "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64},
        "training": {"max_steps": 1, "per_device_train_batch_size": 8, "logging_steps": 1, "save_strategy": "no",
                     "eval_strategy": "no", "report_to": "none", "use_cpu": True},
        "evaluation": {"splits": []},
    }  # fmt: skip
    path = work / f"{name}.json"
    path.write_text(json.dumps(body))
    shutil.rmtree(body["output_dir"], ignore_errors=True)
    return path


def measure(command: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> dict[str, float]:
    """Run `command`; the time each marker line first appears and the peak memory of its processes."""
    start = time.perf_counter()
    seen: dict[str, float] = {}
    peak = {"rss": 0, "anon": 0}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in tree:
                try:
                    status = Path(f"/proc/{p.pid}/status").read_text()
                except OSError:
                    continue
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                rss = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
                anon = int(fields.get("RssAnon", "0 kB").split()[0]) * 1024
                peak["rss"], peak["anon"] = max(peak["rss"], rss), max(peak["anon"], anon)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with log.open("w") as out:
        for line in proc.stdout:
            out.write(line)
            for name, marker in MARKERS.items():
                if marker in line and name not in seen:
                    seen[name] = time.perf_counter() - start
    code = proc.wait()
    done.set()
    sampler.join()
    if code or "loss" not in seen:
        raise RuntimeError(f"{' '.join(command)} failed ({code}); see {log}")
    return {**seen, "rss": peak["rss"], "anon": peak["anon"]}


def stages(m: dict[str, float]) -> list[str]:
    return [
        f"{m['tokenizer']:.0f}",
        f"{m['pieces'] - m['tokenizer']:.0f}",
        f"{m['training'] - m['pieces']:.0f}",
        f"{m['loss'] - m['training']:.0f}",
        f"**{m['loss']:.0f}**",
        f"{m['rss'] / 1e9:.2f}",
        f"{m['anon'] / 1e9:.2f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000,10000000", help="training pairs (directed examples)")
    parser.add_argument("--languages", type=int, default=100)
    parser.add_argument("--num-proc", type=int, default=os.cpu_count())
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_data_scale"))
    parser.add_argument("--old-tree", type=Path, help="a checkout of the data path to compare with")
    parser.add_argument("--old-up-to", type=int, default=1_000_000)
    parser.add_argument("--no-launch", action="store_true", help="skip the two-process runs")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    test = args.work / "test.jsonl"
    test.write_text(json.dumps({"src_lang": "en", "tgt_lang": "laa", "src": "ba", "tgt": "ba"}) + "\n")
    python = str(Path(sys.executable))
    cli = [python, "-c", "from hf_langspec_cli import main; main()", "train", "--config"]
    launch = [python, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines",
              "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29731",
              "examples/train_translation.py", "--config"]  # fmt: skip
    rows, results = [], {}
    results_file = args.work / "results.json"
    if results_file.exists():
        results = json.loads(results_file.read_text())
    for size in [int(s) for s in args.sizes.split(",")]:
        corpus = args.work / f"corpus-{size}.jsonl"
        write_corpus(corpus, size, args.languages)
        cache = args.work / f"cache-{size}"
        if f"{size}/cold" not in results:  # a cold start: no cache (kept when resuming after it)
            shutil.rmtree(cache, ignore_errors=True)
        env = {**os.environ, "HF_LANGSPEC_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
        runs = [("cold", cli, None), ("warm", cli, "cold")]
        if not args.no_launch:
            runs += [("launch x2 cold", launch, "cold"), ("launch x2 warm", launch, "cold")]
        for name, command, tokenizer_of in runs:
            if f"{size}/{name}" in results:  # resumable: a finished measurement is kept
                continue
            if name == "launch x2 cold":
                shutil.rmtree(cache, ignore_errors=True)
            tag = name.replace(" ", "-")
            tokenizer = args.work / "runs" / f"{size}-{tokenizer_of}" / "tokenizer" if tokenizer_of else None
            path = config(args.work, corpus, test, f"{size}-{tag}", tokenizer, args.num_proc)
            print(f"[{size:,}] {name}", flush=True)
            results[f"{size}/{name}"] = measure([*command, str(path)], env, args.work / f"{size}-{tag}.log")
            if name == "warm":  # the cache of one corpus: read, and tokenized with one tokenizer
                results[f"{size}/cache bytes"] = _entry_bytes(cache)
            results_file.write_text(json.dumps(results, indent=1))
        if args.old_tree and size <= args.old_up_to and f"{size}/old" not in results:
            old_env = {**env, "PYTHONPATH": str(args.old_tree)}
            path = config(args.work, corpus, test, f"{size}-old", None, args.num_proc)
            print(f"[{size:,}] old", flush=True)
            # run from the old checkout: `python -c` puts the working folder first on sys.path, before PYTHONPATH
            results[f"{size}/old"] = measure([*cli, str(path)], old_env, args.work / f"{size}-old.log", args.old_tree)
            if "reusing the tokenized" in (args.work / f"{size}-old.log").read_text():
                raise RuntimeError("the old run imported this checkout's hf_langspec")
            results_file.write_text(json.dumps(results, indent=1))
        for name in [*(r[0] for r in runs), "old"]:
            if f"{size}/{name}" in results:
                rows.append(f"| {size:,} | {name} | " + " | ".join(stages(results[f"{size}/{name}"])) + " |")
    sizes = sorted(int(k.split("/")[0]) for k in results if k.endswith("/cold"))
    small, largest = sizes[0], sizes[-1]
    cold = results[f"{largest}/cold"]
    # per pair, from the slope between the smallest and the largest corpus (start-up and fixed costs cancel)
    read = (cold["tokenizer"] - results[f"{small}/cold"]["tokenizer"]) / max(largest - small, 1)
    prepare = (cold["training"] - cold["pieces"]) - (lambda m: m["training"] - m["pieces"])(results[f"{small}/cold"])
    prepare /= max(largest - small, 1)
    scale, cores = 110_000_000, min(os.cpu_count() or 1, args.num_proc)
    disk = results.get(f"{largest}/cache bytes", 0) * scale / largest
    projection = (
        f"Projection to OPUS-100 (110M examples) on a 16-core node, linear from the slope between the {small:,} and "
        f"{largest:,}-pair cold runs: reading and checks {read * scale / 60:.0f} min (one process: "
        f"{1 / read:,.0f} pairs/s here), tokenizing and filtering {prepare * scale * cores / 16 / 60:.0f} min in 16 "
        f"processes ({1 / prepare / cores:,.0f} pairs/s per core here); both once per corpus and tokenizer, then every "
        f"run, seed and process starts warm. Cache on disk: about {disk / 1e9:.0f} GB."
    )
    table = "\n".join(
        [
            f"Synthetic OPUS-100-shaped corpora ({args.languages} languages, English-centric, both directions); a "
            f"d 32 model trained for one step; tokenizer: 8,000-piece unigram on a 200,000-sentence sample; "
            f"`num_proc` {args.num_proc}, one thread per process. Seconds.",
            "",
            "| pairs | run | start-up, reading, checks | tokenizer | tokenize + filter | sampler + first step "
            "| to first step | peak RSS / process (GB) | peak anonymous / process (GB) |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            projection,
        ]
    )
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _report import publish

    publish("data_scale", "The data path at scale: from `train` start to the first step", table, not args.no_write)


def _entry_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.rglob("*") if p.is_file() and p.suffix != ".db")


if __name__ == "__main__":
    main()
