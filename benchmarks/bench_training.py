"""Training throughput and peak memory: the baseline backbone vs transformers' reference models.

Compares, in one run on one machine, `LangSpecForConditionalGeneration` (post-norm, the papers'
setting) with `MarianMTModel` of the same shape, and the pre-norm backbone with
`M2M100ForConditionalGeneration`. Each model trains in its own subprocess (so peak RSS is its
own), rounds are interleaved so drift of the machine hits every model alike, and the step time
is the median over all measured steps. A step is forward + backward + AdamW update on a batch of
random tokens with padded lengths between half and all of `--src-len` / `--tgt-len`.

The FLOP rate counts matmul FLOPs (projections, FFNs, attention scores and values, output
projection; forward x 3 for training) and is compared with the machine's fp32 matmul rate.

    python benchmarks/bench_training.py                 # small and Transformer-base, writes BENCHMARKS.md
    python benchmarks/bench_training.py --shapes small --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

SHAPES = {
    "tiny": dict(d_model=32, layers=1, heads=2, ffn=64),  # the GPU plan's CPU check of its code path only
    "cpu": dict(d_model=128, layers=2, heads=4, ffn=512),  # the README's and the bible suites' shape
    "small": dict(d_model=256, layers=3, heads=4, ffn=1024),
    "base": dict(d_model=512, layers=6, heads=8, ffn=2048),
}
PAIRS = [("langspec (post-norm)", "marian"), ("langspec (pre-norm)", "m2m100")]


def shape_arguments(parser: argparse.ArgumentParser, batch_size: bool = True) -> None:
    """`--shape`, `--vocab` (and `--batch-size`): the model size options every model benchmark takes."""
    parser.add_argument("--shape", default="small", choices=list(SHAPES))
    parser.add_argument("--vocab", type=int, default=8000)
    if batch_size:
        parser.add_argument("--batch-size", type=int, default=32)


def backbone_kwargs(shape: dict, vocab: int) -> dict:
    """The config fields every compared model shares (Marian, M2M100 and hf_langspec use the same names)."""
    return dict(
        vocab_size=vocab,
        d_model=shape["d_model"],
        encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"],
        max_position_embeddings=256,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_function="relu",
        scale_embedding=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )


def build(kind: str, shape: dict, vocab: int):
    from transformers import M2M100Config, M2M100ForConditionalGeneration, MarianConfig, MarianMTModel

    from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration

    common = backbone_kwargs(shape, vocab)
    if kind == "marian":
        return MarianMTModel(MarianConfig(**common, share_encoder_decoder_embeddings=True))
    if kind == "m2m100":
        return M2M100ForConditionalGeneration(M2M100Config(**common, encoder_layerdrop=0.0, decoder_layerdrop=0.0))
    prenorm = kind == "langspec (pre-norm)"
    position = "sinusoidal" if prenorm else "sinusoidal_marian"
    return LangSpecForConditionalGeneration(
        LangSpecConfig(**common, normalize_before=prenorm, position_embedding_type=position)
    )


def make_batch(batch: int, src_len: int, tgt_len: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(8, vocab, (batch, src_len), generator=g)
    labels = torch.randint(8, vocab, (batch, tgt_len), generator=g)
    src_lengths = torch.randint(src_len // 2, src_len + 1, (batch,), generator=g)
    tgt_lengths = torch.randint(tgt_len // 2, tgt_len + 1, (batch,), generator=g)
    src[torch.arange(src_len) >= src_lengths[:, None]] = 1
    labels[torch.arange(tgt_len) >= tgt_lengths[:, None]] = -100
    decoder_input_ids = torch.cat([torch.full((batch, 1), 2), labels[:, :-1].clamp(min=1)], dim=1)
    return {
        "input_ids": src,
        "attention_mask": src.ne(1).long(),
        "decoder_input_ids": decoder_input_ids,
        "labels": labels,
    }


def training_flops(shape: dict, vocab: int, batch: int, src_len: int, tgt_len: int) -> float:
    """Matmul FLOPs of one training step on padded shapes (forward x 3, 2 FLOPs per multiply-add)."""
    d, f, n = shape["d_model"], shape["ffn"], shape["layers"]
    ns, nt = batch * src_len, batch * tgt_len
    encoder = n * (ns * (4 * d * d + 2 * d * f) + 2 * batch * src_len * src_len * d)
    decoder = n * (
        nt * (4 * d * d + 2 * d * d + 2 * d * f)
        + ns * 2 * d * d
        + 2 * batch * tgt_len * tgt_len * d
        + 2 * batch * tgt_len * src_len * d
    )
    output = nt * vocab * d
    return 2 * 3 * (encoder + decoder + output)


def train_and_time(model, batch: dict, steps: int, warmup: int) -> dict:
    """Forward + backward + AdamW `warmup + steps` times: step times, peak RSS of the process and target tokens."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"times": times, "peak_mib": peak_mib, "tokens": int(batch["labels"].ne(-100).sum())}


def run_worker_process(script: str, worker_args: list[str], args) -> dict:
    """Run `script --worker ...` in a fresh process (its peak RSS is its own) and read its JSON line."""
    command = [sys.executable, script, *worker_args]
    for name in ("batch_size", "src_len", "tgt_len", "vocab", "steps", "warmup"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def worker(args) -> None:
    torch.manual_seed(0)
    model = build(args.worker, SHAPES[args.shape], args.vocab).train()
    batch = make_batch(args.batch_size, args.src_len, args.tgt_len, args.vocab)
    print(json.dumps(train_and_time(model, batch, args.steps, args.warmup)))


def run_worker(kind: str, shape: str, args) -> dict:
    return run_worker_process(__file__, ["--worker", kind, "--shape", shape], args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="small,base", help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print the table without updating BENCHMARKS.md")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    from _report import matmul_peak_gflops, publish

    peak = matmul_peak_gflops()
    rows = [
        f"Batch {args.batch_size} x {args.src_len} source / {args.tgt_len} target tokens (padded lengths between "
        f"half and full), vocabulary {args.vocab}, AdamW, dropout 0.1; median of {args.steps} steps x "
        f"{args.rounds} interleaved rounds after {args.warmup} warm-up steps. Machine fp32 matmul rate: {peak:.0f} GFLOP/s.",
        "",
        "| shape | model | target tokens/s | step (ms) | vs reference | peak RSS (MiB) | matmul GFLOP/s | % of fp32 matmul rate |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for shape in args.shapes.split(","):
        results: dict[str, list] = {}
        for _ in range(args.rounds):
            for pair in PAIRS:
                for kind in pair:
                    result = run_worker(kind, shape, args)
                    entry = results.setdefault(kind, [[], 0.0, result["tokens"]])
                    entry[0].extend(result["times"])
                    entry[1] = max(entry[1], result["peak_mib"])
        flops = training_flops(SHAPES[shape], args.vocab, args.batch_size, args.src_len, args.tgt_len)
        label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**SHAPES[shape])
        for ours, reference in PAIRS:
            ref_time = statistics.median(results[reference][0])
            for kind in (ours, reference):
                times, peak_mib, tokens = results[kind]
                step = statistics.median(times)
                rate = flops / step / 1e9
                ratio = f"{ref_time / step:.2f}x" if kind == ours else "1.00x"
                rows.append(
                    f"| {label} | {kind} | {tokens / step:,.0f} | {step * 1000:.0f} | {ratio} | {peak_mib:,.0f} | "
                    f"{rate:.0f} | {100 * rate / peak:.0f}% |"
                )
    publish(
        "training",
        "Training throughput: baseline backbone vs MarianMTModel / M2M100",
        "\n".join(rows),
        write=not args.no_write,
    )


if __name__ == "__main__":
    main()
