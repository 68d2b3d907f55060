"""Training speed under torch.compile against eager mode, for the backbone, MarianMTModel and every method.

The same models, batches and training step as bench_methods.py (forward + backward + fused AdamW on a padded
batch whose examples have random source and target languages), each in eager mode and compiled with
`torch.compile` (inductor, the Trainer's `torch_compile=True`), the 2 x N variants interleaved step by step
after a warm-up step that compiles; the compile time is reported on its own (inductor keeps compiled code in
an on-disk cache, so a second run of the script reports a warm cache's time). Under compilation the methods
take their static-shape path (language routing by gathered weights, CLL's masked rows, HLT-MT's both-branch
draw; tests/test_compile.py), so a compiled step is one graph.

    python benchmarks/bench_compile.py                          # the README's CPU shape; writes BENCHMARKS.md
    python benchmarks/bench_compile.py --device cuda --shape base --bf16 --vocab 32000   # a GPU: own section
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch
from _report import interleaved, keep_freed_memory, publish
from bench_methods import KINDS, NAMES, build, chosen_kinds, language_ids, room_to_compile, train_step
from bench_training import SHAPES, make_batch, shape_arguments


def compile_seconds(model, optimizer, batch: dict, args) -> float:
    """Seconds of the first compiled step (tracing and code generation included)."""
    return train_step(model, optimizer, batch, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.set_defaults(shape="cpu")
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--languages", type=int, default=6, help="languages mixed in a batch")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per variant")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"models to measure, of {KINDS}")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (else float32)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.device, args.accumulation = torch.device(args.device), 1
    allocator = "PyTorch's CUDA caching allocator" if args.device.type == "cuda" else keep_freed_memory()
    kinds = chosen_kinds(parser, args.kinds)
    shape = SHAPES[args.shape]
    batch = {
        k: v.to(args.device) for k, v in make_batch(args.batch_size, args.src_len, args.tgt_len, args.vocab).items()
    }
    lang_ids = {k: v.to(args.device) for k, v in language_ids(args.batch_size, args.languages)[0].items()}
    room_to_compile(len(kinds))
    variants, compile_time, built = {}, {}, {}
    # every model is built before the first is compiled: building a model class registers it with transformers'
    # output capturing, whose registry size the compiled graphs guard on (a later build recompiled Marian)
    for kind in kinds:
        for compiled in (False, True):
            torch.manual_seed(0)
            model = build(kind, shape, args.vocab, args.languages).to(args.device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=args.device.type != "cpu" or None)
            built[(kind, compiled)] = (torch.compile(model) if compiled else model), optimizer
    for (kind, compiled), (model, optimizer) in built.items():
        inputs = batch if kind == "marian" else batch | lang_ids
        if compiled:
            compile_time[kind] = compile_seconds(model, optimizer, inputs, args)
            # shown as it goes: a run stopped by a machine's time limit still tells what compiling costs
            print(f"{kind}: first compiled step {compile_time[kind]:.1f} s", flush=True)
        variants[(kind, compiled)] = functools.partial(train_step, model, optimizer, inputs, args)
    start = time.perf_counter()
    times = interleaved(variants, args.steps)
    tokens = int(batch["labels"].ne(-100).sum())
    label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**shape)
    rows = [
        f"{label}, vocabulary {args.vocab}; batch {args.batch_size} x {args.src_len}/{args.tgt_len} tokens, "
        f"{args.languages} languages mixed per batch; training step (forward, backward, AdamW), median of "
        f"{args.steps} steps per variant, eager and compiled interleaved step by step after a warm-up step "
        f"({time.perf_counter() - start:.0f} s of timing). torch.compile: inductor, default mode. Device: "
        f"{args.device}, {'bf16 autocast' if args.bf16 else 'float32'}; memory: {allocator}.",
        "",
        "| model | eager target tokens/s | compiled target tokens/s | speed-up | first compiled step (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        eager, compiled = (statistics.median(times[(kind, c)]) for c in (False, True))
        rows.append(f"| {NAMES[kind]} | {tokens / eager:,.0f} | {tokens / compiled:,.0f} | {eager / compiled:.2f}x "
                    f"| {compile_time[kind]:.0f} |")  # fmt: skip
    section = (
        "compile" + (f"-{args.device.type}" if args.device.type != "cpu" else "") + ("-bf16" if args.bf16 else "")
    )
    if kinds != KINDS:  # a subset gets its own section, so that it does not replace the full table
        section += "-" + "-".join(kinds)
    publish(section, "torch.compile against eager mode (training step)", "\n".join(rows), write=not args.no_write)


if __name__ == "__main__":
    main()
