"""Load test of `hf-langspec serve`: CTranslate2 directions vs the generic model through `transformers.generate`.

One model of the papers' TED setting (post-norm, fairseq positions, embedding LayerNorm; LAA dec.self +
LEE_4) and the baseline backbone of the same shape, each exported for `--directions` directions. Every
server runs in its own process (`hf-langspec serve --port 0`) on 127.0.0.1; `--clients` concurrent clients
in this process each send `--requests` single-sentence requests, directions drawn at random, with a bounded
timeout. Reported: sentences/s over the whole load, p50 / p95 latency per request, and the mean output
length and the server's resident memory after the load (the CTranslate2 and generic outputs are the same translations: tests/test_server.py), for
`--rounds` rounds with the servers taking turns.

Weights are random (speed does not depend on them); the generation config is beam `--beams`, at most
`--new-tokens` new tokens.

    python benchmarks/bench_server.py                  # writes BENCHMARKS.md
    python benchmarks/bench_server.py --rounds 1 --no-write
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
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from _report import publish
from bench_serving import word_tokenizer
from bench_training import SHAPES, backbone_kwargs, shape_arguments

TED = {"normalize_before": False, "position_embedding_type": "sinusoidal", "layernorm_embedding": True}


def build(method: str, shape: dict, vocab: int, languages: list[str], beams: int, new_tokens: int):
    from hf_langspec import LAAConfig, LAAForConditionalGeneration, LangSpecConfig, LangSpecForConditionalGeneration

    common = backbone_kwargs(shape, vocab) | TED | {"languages": languages,
                                                  "lang_tag_token_ids": list(range(4, 4 + len(languages)))}  # fmt: skip
    torch.manual_seed(0)
    if method == "laa":
        model = LAAForConditionalGeneration(LAAConfig(**common, laa_points=["dec_self_attn"], lee_points=[4]))
    else:
        model = LangSpecForConditionalGeneration(LangSpecConfig(**common))
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
        command = [sys.executable, "-m", "hf_langspec.cli", "serve", "--port", "0", *args]
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

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def translate(url: str, item: dict) -> tuple[float, str]:
    request = urllib.request.Request(f"{url}/translate", data=json.dumps(item).encode(),
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())
    return time.perf_counter() - start, answer["translation"]


def load(url: str, items: list[dict], clients: int) -> dict:
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda item: translate(url, item), items))
    wall = time.perf_counter() - start
    latencies = sorted(r[0] for r in results)
    return {
        "sentences_per_s": len(items) / wall,
        "p50": statistics.median(latencies),
        "p95": latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))],
        "words": statistics.mean(len(r[1].split()) for r in results),
        "outputs": [r[1] for r in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser, batch_size=False)
    parser.add_argument("--directions", type=int, default=4, help="directions served (l0->l1, l1->l0, ...)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=25, help="requests per client and round")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of the generic server")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from hf_langspec.export.ct2 import export_directions

    shape = SHAPES[args.shape]
    languages = [f"l{i}" for i in range(max(3, args.directions // 2 + 1))]
    pairs = [(languages[0], t) for t in languages[1:]] + [(s, languages[0]) for s in languages[1:]]
    pairs = pairs[: args.directions]
    tokenizer = word_tokenizer(args.vocab, languages)
    rng = random.Random(0)
    items = [{"text": " ".join(f"w{rng.randrange(args.vocab - 20)}" for _ in range(rng.randint(12, 24))),
              "src_lang": s, "tgt_lang": t} for s, t in (rng.choice(pairs) for _ in range(args.clients * args.requests))]  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="bench_server_"))
    servers: dict[str, tuple[list[str], int]] = {}
    for method in ("laa", "baseline"):
        model = build(method, shape, args.vocab, languages, args.beams, args.new_tokens)
        model.save_pretrained(workdir / method / "model")
        tokenizer.save_pretrained(workdir / method / "model")
        export_directions(model, tokenizer, pairs, workdir / method / "serve")
        servers[f"{method}:ctranslate2"] = (["--export", str(workdir / method / "serve")], 1)
    directions = ",".join(f"{s}-{t}" for s, t in pairs)
    servers["laa:generic"] = (["--model", str(workdir / "laa" / "model"), "--directions", directions], args.threads)
    results: dict[str, list[dict]] = {name: [] for name in servers}
    for round_ in range(args.rounds):
        for name in list(servers)[round_ % len(servers) :] + list(servers)[: round_ % len(servers)]:
            server = Server(*servers[name])
            try:
                load(server.url, items[: args.clients], args.clients)  # warm-up
                results[name].append(load(server.url, items, args.clients) | {"rss": server.resident_mib()})
            finally:
                server.close()
            print(name, {k: v for k, v in results[name][-1].items() if k != "outputs"}, flush=True)
    same = results["laa:ctranslate2"][0]["outputs"] == results["laa:generic"][0]["outputs"]
    publish("server", "Serving many directions over HTTP: CTranslate2 vs the generic model",
            table(results, args, shape, len(pairs), same), write=not args.no_write)  # fmt: skip


def table(results: dict, args, shape: dict, directions: int, same: bool) -> str:
    label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**shape)
    names = {
        "laa:ctranslate2": "LAA dec.self + LEE_4, TED backbone: CTranslate2 (one model per direction)",
        "laa:generic": f"LAA dec.self + LEE_4, TED backbone: generic model, transformers.generate ({args.threads} threads)",
        "baseline:ctranslate2": "baseline backbone, same shape: CTranslate2",
    }
    median = {name: {k: statistics.median(r[k] for r in runs) for k in ("sentences_per_s", "p50", "p95", "words", "rss")}
              for name, runs in results.items()}  # fmt: skip
    rows = [
        f"{label}, vocabulary {args.vocab}, post-norm with fairseq positions and an embedding LayerNorm (no "
        f"transformers class holds it); {directions} directions in one server process on 127.0.0.1; "
        f"{args.clients} concurrent clients x {args.requests} single-sentence requests (12-24 words, random "
        f"directions); beam {args.beams}, at most {args.new_tokens} new tokens; server batches per direction "
        f"(max 32 sentences, 5 ms wait). Median over {args.rounds} rounds (servers take turns, each after a "
        f"warm-up). CTranslate2 and generic outputs identical: {'yes' if same else 'NO'}.",
        "",
        "| server | sentences/s | p50 latency (s) | p95 latency (s) | output words | server memory (MiB) | speed vs generic |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in median.items():
        ratio = m["sentences_per_s"] / median["laa:generic"]["sentences_per_s"]
        rows.append(f"| {names[name]} | {m['sentences_per_s']:.1f} | {m['p50']:.3f} | {m['p95']:.3f} | "
                    f"{m['words']:.1f} | {m['rss']:.0f} | {ratio:.2f}x |")  # fmt: skip
    return "\n".join(rows)


if __name__ == "__main__":
    main()
