"""CLM's cost vs k: training step time and memory of the naive and the fast feature mix, and the baseline.

Equation 2 costs k d^2 multiply-adds per token per CLM module; written naively it also keeps a
`[tokens, k, d]` tensor per module for the backward pass. This script trains sCLM (CLM after every
sublayer, both stacks) for each k with `clm_implementation="naive"` and `"fast"`, next to the baseline
backbone and `MarianMTModel` of the same shape, each in its own subprocess (so its peak RSS is its
own), rounds interleaved. Columns:

* step time and target tokens/s (median over steps and rounds);
* activations kept for backward: the bytes autograd saves during one training forward, counted
  exactly with `torch.autograd.graph.saved_tensors_hooks` (parameters excluded); the memory the
  fast mix is meant to keep flat in k;
* peak RSS of the process (parameters, AdamW state, activations, allocator slack).

    python benchmarks/bench_clm.py                       # k = 16, 64, 194; writes BENCHMARKS.md
    python benchmarks/bench_clm.py --ks 16 --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from _report import publish
from bench_training import SHAPES, backbone_kwargs, make_batch, run_worker_process, shape_arguments, train_and_time

LANGUAGES = 10


def build(kind: str, k: int, shape: dict, vocab: int):
    from transformers import MarianConfig, MarianMTModel

    from hf_langspec import CLMConfig, CLMForConditionalGeneration, LangSpecConfig, LangSpecForConditionalGeneration

    common = backbone_kwargs(shape, vocab)
    if kind == "marian":
        return MarianMTModel(MarianConfig(**common, share_encoder_decoder_embeddings=True))
    contract = dict(languages=[f"l{i}" for i in range(LANGUAGES)], position_embedding_type="sinusoidal_marian")
    if kind == "baseline":
        return LangSpecForConditionalGeneration(LangSpecConfig(**common, **contract))
    return CLMForConditionalGeneration(
        CLMConfig(**common, **contract, clm_num_features=k, clm_implementation=kind.removeprefix("clm-"))
    )


def saved_activation_bytes(model, batch) -> int:
    """Bytes autograd keeps for backward during one training forward, parameters excluded."""
    parameters = {p.data_ptr() for p in model.parameters()}
    total = 0

    def pack(tensor):
        nonlocal total
        if tensor.data_ptr() not in parameters:
            total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    return total


def worker(args) -> None:
    torch.manual_seed(0)
    model = build(args.worker, args.k, SHAPES[args.shape], args.vocab).train()
    batch = make_batch(args.batch_size, args.src_len, args.tgt_len, args.vocab)
    if args.worker != "marian":
        g = torch.Generator().manual_seed(1)
        batch["src_lang_ids"] = torch.randint(0, LANGUAGES, (args.batch_size,), generator=g)
        batch["tgt_lang_ids"] = torch.randint(0, LANGUAGES, (args.batch_size,), generator=g)
    saved = saved_activation_bytes(model, batch)
    print(json.dumps(train_and_time(model, batch, args.steps, args.warmup) | {"saved_mib": saved / 2**20}))


def run_worker(kind: str, k: int, args) -> dict:
    return run_worker_process(__file__, ["--worker", kind, "--k", str(k), "--shape", args.shape], args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.add_argument("--ks", default="16,64,194", help="comma-separated feature numbers k")
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--k", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)

    runs = [("marian", 0), ("baseline", 0)] + [
        (kind, int(k)) for k in args.ks.split(",") for kind in ("clm-naive", "clm-fast")
    ]
    results: dict[tuple[str, int], dict] = {}
    for _ in range(args.rounds):
        for run in runs:
            result = run_worker(*run, args)
            entry = results.setdefault(run, {"times": [], **result})
            entry["times"] += result["times"]
            entry["peak_mib"] = max(entry["peak_mib"], result["peak_mib"])
    baseline = statistics.median(results[("baseline", 0)]["times"])
    names = {"marian": "MarianMTModel", "baseline": "baseline backbone"}
    label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**SHAPES[args.shape])
    rows = [
        f"{label}, vocabulary {args.vocab}; sCLM after every sublayer of both stacks (15 CLM modules); batch "
        f"{args.batch_size} x {args.src_len}/{args.tgt_len} tokens, {LANGUAGES} languages mixed; AdamW; median of "
        f"{args.steps} steps x {args.rounds} interleaved rounds after {args.warmup} warm-up step(s), one process per "
        "model and round.",
        "",
        "| model | k | step (ms) | target tokens/s | step vs baseline | activations kept for backward (MiB) | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for (kind, k), entry in results.items():
        step = statistics.median(entry["times"])
        name = names.get(kind, f"CLM, {kind.removeprefix('clm-')} mix")
        rows.append(
            f"| {name} | {k or '-'} | {step * 1000:,.0f} | {entry['tokens'] / step:,.0f} | {step / baseline:.2f}x | "
            f"{entry['saved_mib']:,.0f} | {entry['peak_mib']:,.0f} |"
        )
    publish("clm", "CLM: the naive and the fast feature mix vs k", "\n".join(rows), write=not args.no_write)


if __name__ == "__main__":
    main()
