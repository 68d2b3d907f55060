"""Decoding a batch that mixes target languages: the bytes each step reads against the machine's bandwidth.

`bench_methods.py` measures LAA and FCLL decoding a batch that mixes 22 target languages at 0.5-0.8x the
baseline on the 2-core CPU, and at about the baseline's speed with one target language per batch. This
script measures why. For each model and routing strategy, over two greedy generations of different
lengths (their difference divided by the extra steps, so the encoder and the prefill cancel):

* the bytes one decoding step reads as matmul right-hand operands (weights, per-example gathered weights,
  the KV cache) plus the bytes per-example weight gathers move (`index_select`, read and write), counted
  by a `TorchDispatchMode` over every aten call;
* the seconds one decoding step takes, models and strategies interleaved generation by generation in a
  rotating order as in bench_methods.py;
* the machine's read bandwidth: the best of several passes of `torch.sum` over 512 MB with every thread.

The ceiling column is the baseline's step time plus the method's extra bytes read at that bandwidth: the
speed the method could reach on this machine if its extra work cost nothing but reading its bytes once at
full bandwidth. Where the ceiling is under 0.9x the 10% target cannot be met on this machine without
reading fewer bytes per step, i.e. without changing the method's arithmetic; with one target language per
batch the language's weights are folded into the backbone's and read like the baseline's.

    python benchmarks/bench_decoding_reads.py                         # writes BENCHMARKS.md
    python benchmarks/bench_decoding_reads.py --shape base --vocab 32000 --repeats 2
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from types import SimpleNamespace

import torch
from _report import interleaved, keep_freed_memory, publish
from bench_methods import NAMES, build, generate_once, language_ids
from bench_training import SHAPES, make_batch, shape_arguments
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# op -> positions of the operands read as "weights": matmul right-hand sides, attention's keys and values
READ_OPERANDS = {
    aten.mm.default: (1,),
    aten.addmm.default: (2,),
    aten.bmm.default: (1,),
    aten.baddbmm.default: (2,),
    aten.mv.default: (0,),
    aten.addmv.default: (1,),
    aten._scaled_dot_product_flash_attention_for_cpu.default: (1, 2),
}
STRATEGIES = ("auto", "group", "gather")


class ReadCounter(TorchDispatchMode):
    """Sums the bytes of the operands in `READ_OPERANDS` and twice the output of every `index_select`."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.unknown: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in READ_OPERANDS:
            self.bytes += sum(args[i].numel() * args[i].element_size() for i in READ_OPERANDS[func])
        elif func is aten.index_select.default:
            self.bytes += 2 * out.numel() * out.element_size()  # a gather reads and writes what it copies
        elif "scaled_dot_product" in str(func) or "grouped_mm" in str(func):
            self.unknown.add(str(func))  # an attention or matmul kernel this table does not know: refuse below
        return out


def read_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes per second of the best of `repeats` passes of `torch.sum` over `megabytes` of float32."""
    x = torch.ones(megabytes * (1 << 20) // 4)
    x.sum()
    best = min(_seconds(lambda: x.sum()) for _ in range(repeats))
    return x.numel() * 4 / best


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.add_argument("--languages", type=int, default=50)
    parser.add_argument("--kinds", default="laa,cll", help="methods, of bench_methods.py's kinds")
    parser.add_argument("--short", type=int, default=8, help="new tokens of the short generation")
    parser.add_argument("--long", type=int, default=40, help="new tokens of the long generation")
    parser.add_argument("--repeats", type=int, default=5, help="timed generations per configuration and length")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.long <= args.short:
        parser.error(f"--long ({args.long}) must exceed --short ({args.short}): per-step values are their difference")
    allocator = keep_freed_memory()
    shape = SHAPES[args.shape]
    batch = make_batch(args.batch_size, 32, 32, args.vocab)
    lang_ids, one_target = language_ids(args.batch_size, args.languages)  # bench_methods.py's batch
    mixed = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], **lang_ids}
    one = mixed | one_target
    kinds = [k for k in args.kinds.split(",") if k]
    configs = [("baseline", "auto", "mixed")]
    configs += [(kind, strategy, "mixed") for kind in kinds for strategy in STRATEGIES]
    configs += [(kind, "auto", "one target") for kind in kinds]
    models = {}
    for kind in ["baseline", *kinds]:
        torch.manual_seed(0)
        models[kind] = build(kind, shape, args.vocab, args.languages).eval()

    def run(config, new_tokens: int) -> float:
        kind, strategy, batch_kind = config
        models[kind].config.routing_strategy = strategy
        settings = SimpleNamespace(new_tokens=new_tokens, device=torch.device("cpu"))
        return generate_once(models[kind], mixed if batch_kind == "mixed" else one, settings)

    lengths = (args.short, args.long)
    read = {}
    for config in configs:
        per_length = []
        for new_tokens in lengths:
            with ReadCounter() as counter:
                run(config, new_tokens)
            if counter.unknown:
                raise RuntimeError(f"{config}: uncounted kernels {sorted(counter.unknown)}; add them to READ_OPERANDS")
            per_length.append(counter.bytes)
        read[config] = (per_length[1] - per_length[0]) / (args.long - args.short)

    jobs = {(config, n): functools.partial(run, config, n) for config in configs for n in lengths}
    seconds = {key: statistics.median(times) for key, times in interleaved(jobs, args.repeats).items()}
    step = {c: (seconds[c, args.long] - seconds[c, args.short]) / (args.long - args.short) for c in configs}
    bandwidth = read_bandwidth()
    base = configs[0]
    present = len(set(mixed["tgt_lang_ids"].tolist()))
    rows = [
        f"d{shape['d_model']}, {shape['layers']}+{shape['layers']} layers, FFN {shape['ffn']}, vocabulary "
        f"{args.vocab}; {args.languages} languages, batch {args.batch_size} with {present} target languages present "
        f"(mixed) or language l1 for every example (one target); greedy decoding, per-step values from "
        f"{args.short} and {args.long} new tokens (median of {args.repeats} generations each, interleaved). "
        f"Read bandwidth (`torch.sum` over 512 MB): {bandwidth / 1e9:.1f} GB/s. Memory: {allocator}.",
        "",
        "| model | batch | routing | MB read per step | ms per step | vs baseline | extra MB | extra ms "
        "| extra GB/s | ceiling at the read bandwidth |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for config in configs:
        kind, strategy, batch_kind = config
        extra_bytes, extra_seconds = read[config] - read[base], step[config] - step[base]
        ceiling = step[base] / (step[base] + max(extra_bytes, 0) / bandwidth)
        rate = f"{extra_bytes / extra_seconds / 1e9:.1f}" if config != base and extra_seconds > 0 else "-"
        cells = [
            NAMES[kind],
            batch_kind,
            strategy,
            f"{read[config] / 1e6:,.1f}",
            f"{step[config] * 1e3:.2f}",
            f"{step[base] / step[config]:.2f}x",
            f"{extra_bytes / 1e6:+,.1f}",
            f"{extra_seconds * 1e3:+.2f}",
            rate,
            f"{ceiling:.2f}x",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    publish(
        f"decoding-reads-{args.shape}",
        f"Decoding reads per step ({args.shape} shape)",
        "\n".join(rows),
        write=not args.no_write,
    )


if __name__ == "__main__":
    main()
