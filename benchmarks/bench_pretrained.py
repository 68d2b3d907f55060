"""Training speed of adapting a pretrained checkpoint: full fine-tuning against per-language modules on a frozen base.

Issue 45 compares, at equal steps, full fine-tuning of a checkpoint with language-specific LoRA and monolingual
adapters trained alone (`pretrained.freeze_base`). Their results (README, "Adapting a pretrained model") give
training seconds measured on a core shared with other runs; this measures the step itself, in one process,
models interleaved step by step (`_report.interleaved`): an NLLB-shaped `M2M100ForConditionalGeneration` (pre-norm,
ReLU, scaled and tied embeddings; random weights: nothing is downloaded) trained whole by transformers, the
package's model holding it (`interop.adapt`, the baseline: full fine-tuning), and LoRA and adapters on it with the
base frozen. A step is forward + backward + AdamW over the trainable parameters on a batch of random tokens whose
examples have random directions among the languages.

    python benchmarks/bench_pretrained.py                           # the stand-in's shape; writes BENCHMARKS.md
    python benchmarks/bench_pretrained.py --shape base --no-write   # Transformer-base, vocabulary 32,000
    python benchmarks/bench_pretrained.py --shape nllb-600m --device cuda --bf16   # NLLB-200 distilled 600M's shape
"""

from __future__ import annotations

import argparse
import functools
import statistics

import torch
from _report import interleaved, keep_freed_memory, publish
from bench_methods import language_ids, train_step
from bench_training import make_batch

# the stand-in NLLB of examples/configs/bible_nllb_standin.yaml; Transformer-base; NLLB-200 distilled 600M
SHAPES = {
    "tiny": dict(d_model=32, layers=1, heads=2, ffn=64, vocab=300),
    "standin": dict(d_model=128, layers=2, heads=4, ffn=512, vocab=6000),
    "base": dict(d_model=512, layers=6, heads=8, ffn=2048, vocab=32000),
    "nllb-600m": dict(d_model=1024, layers=12, heads=16, ffn=4096, vocab=256206),
}
# (label, method, its fields, base frozen): what bible_nllb_adapt.yaml compares
SYSTEMS = [
    ("full fine-tuning (every weight)", "baseline", {}, False),
    ("language-specific LoRA, r 8, q k v o, base frozen", "lora", {"lora_rank": 8}, True),
    ("monolingual adapters, bottleneck 32, base frozen", "adapter", {"adapter_preset": "monolingual",
                                                                     "adapter_dim": 32}, True),
]  # fmt: skip


def checkpoint(shape: dict) -> torch.nn.Module:
    """A random M2M100ForConditionalGeneration with NLLB-200 dense's config fields at `shape`."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(0)
    config = M2M100Config(
        vocab_size=shape["vocab"], d_model=shape["d_model"], encoder_layers=shape["layers"],
        decoder_layers=shape["layers"], encoder_attention_heads=shape["heads"], decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"], decoder_ffn_dim=shape["ffn"], max_position_embeddings=256, dropout=0.1,
        attention_dropout=0.0, activation_dropout=0.0, activation_function="relu", scale_embedding=True,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, tie_word_embeddings=True, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, decoder_start_token_id=2,
    )  # fmt: skip
    return M2M100ForConditionalGeneration(config)


def build(shape: dict, languages: int) -> dict[str, tuple[torch.nn.Module, bool]]:
    """`{label: (model, uses language ids)}`: transformers' M2M-100 and each system adapted from the same weights."""
    from hf_langspec.interop import adapt
    from hf_langspec.pretrained import freeze_base

    source = checkpoint(shape)
    codes = [f"l{i:03d}" for i in range(languages)]
    contract = {"languages": codes, "lang_tag_token_ids": list(range(shape["vocab"] - languages, shape["vocab"])),
                "lang_tag_style": "both"}  # fmt: skip
    models = {"M2M100ForConditionalGeneration, full fine-tuning (transformers)": (source, False)}
    for label, kind, fields, frozen in SYSTEMS:
        model = adapt(source, kind, **contract, **fields)
        if frozen:
            freeze_base(model)
        models[label] = (model, True)
    return models


def shape_arguments(parser: argparse.ArgumentParser) -> None:
    """The checkpoint's shape, the batch and the languages mixed in it (bench_pretrained, bench_peft)."""
    parser.add_argument("--shape", default="standin", choices=list(SHAPES))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--languages", type=int, default=6, help="languages of the model, mixed in the batch")


def training_table(times: dict, counts: dict, tokens: int, reference: float, against: str) -> list[str]:
    """One row per model: trainable / total parameters, target tokens per second at its median step, the speed
    against `reference` (the median seconds of the model named `against`), its gradient and AdamW state."""
    rows = [f"| model | trainable | target tokens/s | vs {against} | gradient + optimizer state |",
            "|---|---:|---:|---:|---:|"]  # fmt: skip
    for label, seconds in times.items():
        trained, total = counts[label]
        median = statistics.median(seconds)
        rows.append(f"| {label} | {trained / 1e6:,.2f}M of {total / 1e6:,.2f}M | {tokens / median:,.0f} "
                    f"| {reference / median:.2f}x | {3 * 4 * trained / 2**20:,.1f} MiB |")  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model")
    parser.add_argument("--accumulation", type=int, default=1, help="batches per update (bench_methods.train_step)")
    parser.add_argument("--device", type=torch.device, default=torch.device("cpu"))
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (weights and AdamW stay float32)")
    parser.add_argument("--glibc-defaults", action="store_true", help="keep glibc's default malloc")
    parser.add_argument("--no-write", action="store_true", help="print the table without updating BENCHMARKS.md")
    args = parser.parse_args()
    allocator = "glibc's default malloc" if args.glibc_defaults else keep_freed_memory()
    shape = SHAPES[args.shape]
    batch = make_batch(args.batch_size, args.src_len, args.tgt_len, shape["vocab"])
    mixed, _ = language_ids(args.batch_size, args.languages)
    batch = {k: v.to(args.device) for k, v in batch.items()}
    mixed = {k: v.to(args.device) for k, v in mixed.items()}
    jobs, counts = {}, {}
    for label, (model, routed) in build(shape, args.languages).items():
        model.to(args.device)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-4)
        jobs[label] = functools.partial(train_step, model, optimizer, batch | mixed if routed else batch, args)
        counts[label] = (sum(p.numel() for p in trainable), sum(p.numel() for p in model.parameters()))
    times = interleaved(jobs, args.steps)
    tokens = int(batch["labels"].ne(-100).sum())
    full = statistics.median(times[SYSTEMS[0][0]])
    rows = [
        f"{args.shape}: d {shape['d_model']}, {shape['layers']}+{shape['layers']} layers, FFN {shape['ffn']}, "
        f"vocabulary {shape['vocab']:,}, {args.languages} languages; batch {args.batch_size} x "
        f"{args.src_len}/{args.tgt_len} tokens, random directions per example; median of {args.steps} steps per "
        f"model, interleaved step by step after a warm-up step; AdamW over the trainable parameters; "
        f"{args.device}, {'bf16 autocast' if args.bf16 else 'float32'}; memory: {allocator}. The optimizer state "
        "column: gradients and AdamW's two moments of the trainable parameters, float32.",
        "",
        *training_table(times, counts, tokens, full, "full fine-tuning"),
    ]
    publish(f"pretrained-adaptation-{args.shape}", f"Adapting a pretrained checkpoint: training speed ({args.shape})",
            "\n".join(rows), write=not args.no_write)  # fmt: skip


if __name__ == "__main__":
    main()
