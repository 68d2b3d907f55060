"""Load test of `hf-langspec serve` over many directions: mixed-direction batching against per-direction batching
and folded CTranslate2 directions; memory as languages grow; a soak.

One model of the papers' TED setting (post-norm, fairseq positions, embedding LayerNorm; LAA dec.self + LEE_4)
serving `--directions` directions (l0 <-> l1..lK) three ways, each `hf-langspec serve --port 0` in its own
process on 127.0.0.1:

* `mixed`: the generic model, every direction's requests in one batch (each example through its own modules);
* `per-direction`: the same model with `--per-direction` (a batch per direction, as the server did before);
* `ctranslate2`: the directions folded and exported (`export --directions`: one CTranslate2 model each).

Traffic: single-sentence requests (12-24 words), directions drawn uniformly or skewed (Zipf, weight 1/rank), from
`--concurrency` client threads in this process, each sending its next request when the last is answered. For each
traffic and concurrency the servers take turns (rotating order, each after a warm-up); reported are sentences/s
and output tokens/s over the whole load and p50 / p99 latency per request. Weights are random (speed does not
depend on them), so every output is `--new-tokens` tokens long: each system does the same work.

Memory: the mixed server's resident memory and its `/health` weights (one base + the language modules) with
`--memory-languages` languages (every direction among them served), against the weights of folded copies (the
exported model file's size times the directions). Soak: `--soak-minutes` of uniform traffic at concurrency 32 on
the mixed server, its resident memory sampled every 30 s.

    python benchmarks/bench_server.py                  # writes BENCHMARKS.md
    python benchmarks/bench_server.py --concurrency 1,8 --soak-minutes 0 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from _report import publish
from bench_serving import word_tokenizer
from bench_training import SHAPES, backbone_kwargs, shape_arguments

TED = {"normalize_before": False, "position_embedding_type": "sinusoidal", "layernorm_embedding": True}
SERVERS = {
    "mixed": "generic model, mixed-direction batches",
    "per-direction": "generic model, a batch per direction (`--per-direction`)",
    "ctranslate2": "CTranslate2, one folded model per direction",
}


def build(shape: dict, vocab: int, languages: list[str], beams: int, new_tokens: int):
    """LAA dec.self + LEE_4 on the TED backbone, its language parameters moved off their zero start."""
    from hf_langspec import LAAConfig, LAAForConditionalGeneration

    common = backbone_kwargs(shape, vocab) | TED | {"languages": languages,
                                                  "lang_tag_token_ids": list(range(4, 4 + len(languages)))}  # fmt: skip
    torch.manual_seed(0)
    model = LAAForConditionalGeneration(LAAConfig(**common, laa_points=["dec_self_attn"], lee_points=[4]))
    with torch.no_grad():  # trained-looking language parameters (LAA starts at zero)
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.add_(torch.randn_like(p) * 0.02)
    model.generation_config.num_beams, model.generation_config.max_new_tokens = beams, new_tokens
    return model.eval()


class Server:
    """`hf-langspec serve` in a child process; the URL comes from its first line."""

    def __init__(self, args: list[str], threads: int):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        command = [sys.executable, "-m", "hf_langspec.cli", "serve", "--port", "0", "--timeout", "600", *args]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()
        if " at http://" not in line:
            self.process.kill()
            raise RuntimeError(f"the server did not start: {line!r}")
        self.url = line.split(" at ")[1].split(": ")[0]

    def resident_mib(self) -> float:
        """The server process's resident memory (Linux /proc)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def health(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/health", timeout=60) as response:
            return json.loads(response.read())

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def translate(url: str, item: dict) -> tuple[float, str]:
    request = urllib.request.Request(f"{url}/translate", data=json.dumps(item).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        answer = json.loads(response.read())
    return time.perf_counter() - start, answer["translation"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load(url: str, items: list[dict], clients: int) -> dict:
    """`items` sent by `clients` threads, each sending its next request when the last is answered."""
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda item: translate(url, item), items))
    wall = time.perf_counter() - start
    latencies = [r[0] for r in results]
    tokens = sum(len(r[1].split()) for r in results)  # the word-level vocabulary: one token per word
    return {"sentences_per_s": len(items) / wall, "tokens_per_s": tokens / wall, "p50": statistics.median(latencies),
            "p99": percentile(latencies, 0.99), "outputs": [r[1] for r in results]}  # fmt: skip


def requests(pairs: list[tuple[str, str]], count: int, vocab: int, skewed: bool, seed: int) -> list[dict]:
    """`count` single-sentence requests, directions uniform or Zipf-skewed (the first pair most frequent)."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(pairs))] if skewed else None
    chosen = rng.choices(pairs, weights=weights, k=count)
    return [{"text": " ".join(f"w{rng.randrange(vocab - 20)}" for _ in range(rng.randint(12, 24))),
             "src_lang": s, "tgt_lang": t} for s, t in chosen]  # fmt: skip


def served_pairs(directions: int) -> list[tuple[str, str]]:
    """l0 -> l1..lK and back: `directions` directions (an even number) through English-like hub l0."""
    languages = [f"l{i}" for i in range(1, directions // 2 + 1)]
    return [("l0", t) for t in languages] + [(s, "l0") for s in languages]


def languages_of(pairs: list[tuple[str, str]]) -> list[str]:
    return sorted({code for pair in pairs for code in pair}, key=lambda code: int(code[1:]))


def write_model(folder: Path, shape: dict, args, languages: list[str]):
    """The model and its word-level tokenizer, saved into `folder` for `serve --model`."""
    model, tokenizer = (
        build(shape, args.vocab, languages, args.beams, args.new_tokens),
        word_tokenizer(args.vocab, languages),
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def throughput(args, shape: dict, workdir: Path) -> tuple[dict, bool]:
    """Every (traffic, concurrency, server): a load of max(48, 4 x concurrency) requests after a warm-up."""
    from hf_langspec.export.ct2 import export_directions

    pairs = served_pairs(args.directions)
    export_directions(*write_model(workdir / "model", shape, args, languages_of(pairs)), pairs, workdir / "serve")
    directions = ",".join(f"{s}-{t}" for s, t in pairs)
    commands = {
        "mixed": (["--model", str(workdir / "model"), "--directions", directions], args.threads),
        "per-direction": (["--model", str(workdir / "model"), "--directions", directions, "--per-direction"], args.threads),
        "ctranslate2": (["--export", str(workdir / "serve")], 1),
    }  # fmt: skip
    servers = {name: Server(*command) for name, command in commands.items()}
    results: dict = {}
    try:
        for traffic in ("uniform", "skewed"):
            for c in args.concurrency:
                items = requests(pairs, max(48, 4 * c), args.vocab, traffic == "skewed", seed=c)
                order = list(servers)[c % len(servers) :] + list(servers)[: c % len(servers)]
                for name in order:
                    load(servers[name].url, items[: min(c, 8)], min(c, 8))  # warm-up
                    result = load(servers[name].url, items, c) | {"rss": servers[name].resident_mib()}
                    results[(traffic, c, name)] = result
                    print(traffic, c, name, {k: round(v, 3) for k, v in result.items() if k != "outputs"}, flush=True)
    finally:
        for server in servers.values():
            server.close()
    first = ("uniform", args.concurrency[0])
    same = results[(*first, "mixed")]["outputs"] == results[(*first, "ctranslate2")]["outputs"]
    return results, same and results[(*first, "mixed")]["outputs"] == results[(*first, "per-direction")]["outputs"]


def memory(args, shape: dict, workdir: Path) -> list[dict]:
    """The mixed server with N languages (every direction among them): resident memory and its weights."""
    from hf_langspec.export.ct2 import export_directions

    rows = []
    for n in args.memory_languages:
        languages = [f"l{i}" for i in range(n)]
        folder = workdir / f"memory{n}"
        model, tokenizer = write_model(folder, shape, args, languages)
        export_directions(model, tokenizer, [(languages[0], languages[1])], folder / "one")  # one folded direction
        folded = (folder / "one" / f"{languages[0]}-{languages[1]}" / "ctranslate2" / "model.bin").stat().st_size
        del model, tokenizer
        server = Server(["--model", str(folder)], args.threads)
        try:
            items = requests([(languages[0], languages[1]), (languages[-1], languages[0])], 16, args.vocab, False, 0)
            load(server.url, items, 8)
            weights = server.health()["memory"]
            rows.append({"languages": n, "directions": n * (n - 1), "rss": server.resident_mib(),
                         "base": weights["base_bytes"], "modules": weights["language_modules_bytes"],
                         "folded": folded * n * (n - 1)})  # fmt: skip
        finally:
            server.close()
        print("memory", rows[-1], flush=True)
    return rows


def soak(args, shape: dict, workdir: Path) -> tuple[list[tuple[float, float]], int]:
    """Uniform traffic at concurrency 32 on the mixed server for `--soak-minutes`: (minute, resident MiB) samples
    and the requests answered."""
    items = requests(served_pairs(args.directions), 1000, args.vocab, False, seed=1)
    server = Server(["--model", str(workdir / "model")], args.threads)
    samples, stop, count, lock = [], threading.Event(), [0], threading.Lock()

    def client(first: int) -> None:
        for n in range(first, first + 10**9):
            if stop.is_set():
                return
            translate(server.url, items[n % len(items)])
            with lock:
                count[0] += 1

    try:
        threads = [threading.Thread(target=client, args=(31 * i,), daemon=True) for i in range(32)]
        for thread in threads:
            thread.start()
        start = time.monotonic()
        while (elapsed := time.monotonic() - start) < args.soak_minutes * 60:
            samples.append((elapsed / 60, server.resident_mib()))
            time.sleep(30)
        samples.append(((time.monotonic() - start) / 60, server.resident_mib()))
        stop.set()
        for thread in threads:
            thread.join()
        print("soak", samples, count[0], flush=True)
    finally:
        server.close()
    return samples, count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser, batch_size=False)
    parser.add_argument("--directions", type=int, default=20, help="directions served (l0->lK and back)")
    parser.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8, 32, 64])
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--memory-languages", type=lambda s: [int(n) for n in s.split(",")], default=[10, 50])
    parser.add_argument("--soak-minutes", type=float, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of the generic server")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    workdir = Path(tempfile.mkdtemp(prefix="bench_server_"))
    results, same = throughput(args, shape, workdir)
    memory_rows = memory(args, shape, workdir)
    soaked = soak(args, shape, workdir) if args.soak_minutes > 0 else None
    publish("server", "Serving many directions over HTTP: mixed-direction batches, per-direction batches, CTranslate2",
            report(results, same, memory_rows, soaked, args, shape), write=not args.no_write)  # fmt: skip


def report(results: dict, same: bool, memory_rows: list[dict], soaked, args, shape: dict) -> str:
    label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**shape)
    rows = [
        f"LAA dec.self + LEE_4 on the papers' TED backbone ({label}, vocabulary {args.vocab}, post-norm with fairseq "
        f"positions and an embedding LayerNorm), {args.directions} directions (l0 <-> l1..l{args.directions // 2}) "
        f"in one server process on 127.0.0.1; single-sentence requests of 12-24 words, directions uniform or "
        f"Zipf-skewed (weight 1/rank); max(48, 4 x concurrency) requests per cell, sent by that many client threads "
        f"after a warm-up; beam {args.beams}, {args.new_tokens} new tokens per sentence (random weights); server "
        f"defaults (max 32 texts and 8,192 padded source tokens per batch, 5 ms wait); generic servers "
        f"{args.threads} torch threads, CTranslate2 1 thread per direction. One load per cell, servers taking turns. "
        f"Outputs of the three servers identical: {'yes' if same else 'NO'}.",
        "",
        "| traffic | concurrency | server | sentences/s | output tokens/s | p50 latency (s) | p99 latency (s) | "
        "memory (MiB) | vs per-direction |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (traffic, c, name), r in sorted(results.items(), key=lambda kv: (kv[0][:2], list(SERVERS).index(kv[0][2]))):
        ratio = r["sentences_per_s"] / results[(traffic, c, "per-direction")]["sentences_per_s"]
        rows.append(f"| {traffic} | {c} | {SERVERS[name]} | {r['sentences_per_s']:.1f} | {r['tokens_per_s']:.0f} | "
                    f"{r['p50']:.3f} | {r['p99']:.3f} | {r['rss']:.0f} | {ratio:.2f}x |")  # fmt: skip
    mib = 1 << 20
    rows += [
        "",
        "Memory of the mixed server serving every direction among N languages (after 16 requests): resident memory, "
        "the weights it reports (`/health`: one base + the language modules), and the weights folded copies would "
        "hold (one exported direction's model.bin times the directions; computed, not loaded).",
        "",
        "| languages | directions | resident memory (MiB) | base weights (MiB) | language modules (MiB) | "
        "folded copies' weights (MiB) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for m in memory_rows:
        rows.append(f"| {m['languages']} | {m['directions']:,} | {m['rss']:.0f} | {m['base'] / mib:.1f} | "
                    f"{m['modules'] / mib:.1f} | {m['folded'] / mib:,.0f} |")  # fmt: skip
    if soaked:
        samples, count = soaked
        steady = [rss for minute, rss in samples if minute >= 1] or [samples[-1][1]]
        rows += ["", f"Soak: {samples[-1][0]:.1f} minutes of uniform traffic at concurrency 32 on the mixed server, "
                 f"{count:,} requests answered; resident memory {samples[0][1]:.0f} MiB at the start, "
                 f"{steady[0]:.0f} MiB after a minute, {samples[-1][1]:.0f} MiB at the end (max {max(steady):.0f}; "
                 f"samples every 30 s: {', '.join(f'{rss:.0f}' for _, rss in samples)})."]  # fmt: skip
    return "\n".join(rows)


if __name__ == "__main__":
    main()
