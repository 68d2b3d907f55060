"""Decoding speed with a static cache, eager and compiled, against the growing cache: every model beside the backbone
and MarianMTModel of the same shape.

Beam search as the suites decode their test sets (4 beams, exactly `--new-tokens` new tokens per sentence) over a
batch whose sentences have random source and target languages (bench_methods.py's models and batches), three ways:
transformers' growing cache (the default), its static cache (`cache_implementation="static"`: fixed slots, the
length on the device), and the static cache with the forward compiled (`mode="reduce-overhead"` on a GPU, which
replays one CUDA graph per decoding step; inductor's default mode on a CPU, where CUDA graphs do not exist). The
variants run interleaved call by call after a warm-up call; the first compiled call (compiling both graphs: the
step that fills the cross-attention cache, then every later step) is timed on its own.

    python benchmarks/bench_static_decoding.py                  # the README's CPU shape; writes BENCHMARKS.md
    python benchmarks/bench_static_decoding.py --device cuda --shape base --bf16 --vocab 32000   # gpu_plan.py decoding
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch
from _report import interleaved, keep_freed_memory, publish
from bench_methods import KINDS, NAMES, autocast, build, chosen_kinds, clock, language_ids, room_to_compile
from bench_training import SHAPES, make_batch, shape_arguments

VARIANTS = ("growing", "static", "compiled")


def generate_once(model, inputs: dict, cache: str | None, args) -> float:
    """Seconds of one beam search of exactly `args.new_tokens` new tokens per sentence."""
    with torch.no_grad(), autocast(args):
        start = clock(args.device)
        model.generate(**inputs, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                       num_beams=args.num_beams, do_sample=False, cache_implementation=cache)  # fmt: skip
        return clock(args.device) - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.set_defaults(shape="cpu")
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--languages", type=int, default=6, help="languages mixed in a batch")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="timed generations per variant")
    parser.add_argument("--kinds", default="baseline,marian,laa,adapter,cll", help=f"models to measure, of {KINDS}")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (else float32)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.device = torch.device(args.device)
    allocator = "PyTorch's CUDA caching allocator" if args.device.type == "cuda" else keep_freed_memory()
    kinds = chosen_kinds(parser, args.kinds)
    shape = SHAPES[args.shape]
    batch = make_batch(args.batch_size, args.src_len, 8, args.vocab)
    batch = {k: v.to(args.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
    lang_ids = {k: v.to(args.device) for k, v in language_ids(args.batch_size, args.languages)[0].items()}
    room_to_compile(len(kinds))
    mode = "reduce-overhead" if args.device.type == "cuda" else "default"
    jobs, first_call = {}, {}
    for kind in kinds:
        torch.manual_seed(0)
        model = build(kind, shape, args.vocab, args.languages).to(args.device).eval()
        inputs = batch if kind == "marian" else batch | lang_ids
        compiled = build(kind, shape, args.vocab, args.languages).to(args.device).eval()
        compiled.load_state_dict(model.state_dict())
        compiled.forward = torch.compile(compiled.forward, mode=mode)
        first_call[kind] = generate_once(compiled, inputs, "static", args)
        print(f"{kind}: first compiled call {first_call[kind]:.1f} s", flush=True)
        jobs[(kind, "growing")] = functools.partial(generate_once, model, inputs, None, args)
        jobs[(kind, "static")] = functools.partial(generate_once, model, inputs, "static", args)
        jobs[(kind, "compiled")] = functools.partial(generate_once, compiled, inputs, "static", args)
    start = time.perf_counter()
    times = interleaved(jobs, args.repeats)
    label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**shape)
    rows = [
        f"{label}, vocabulary {args.vocab}; {args.batch_size} sentences of {args.src_len} source tokens, "
        f"{args.languages} languages mixed, beam {args.num_beams}, exactly {args.new_tokens} new tokens each; median of "
        f"{args.repeats} generations per variant, interleaved call by call after a warm-up call "
        f"({time.perf_counter() - start:.0f} s of timing). Compiled: the forward under torch.compile ({mode} mode) "
        f"with the static cache. Device: {args.device}, {'bf16 autocast' if args.bf16 else 'float32'}; memory: "
        f"{allocator}.",
        "",
        "| model | growing cache sentences/s | static cache sentences/s | compiled, static cache sentences/s "
        "| first compiled call (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        growing, static, compiled = (statistics.median(times[(kind, v)]) for v in VARIANTS)
        rate = args.batch_size
        rows.append(f"| {NAMES[kind]} | {rate / growing:.1f} | {rate / static:.1f} ({growing / static:.2f}x) "
                    f"| {rate / compiled:.1f} ({growing / compiled:.2f}x) | {first_call[kind]:.0f} |")  # fmt: skip
    section = "static-decoding" + (f"-{args.device.type}" if args.device.type != "cpu" else "")
    section += "-bf16" if args.bf16 else ""
    publish(section, "Decoding with a static cache, eager and compiled", "\n".join(rows), write=not args.no_write)


if __name__ == "__main__":
    main()
