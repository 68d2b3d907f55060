"""The package's language-specific LoRA beside peft's LoRA on the same checkpoint: training steps and generation.

One NLLB-shaped checkpoint (bench_pretrained.checkpoint: random weights, nothing downloaded) adapted four ways, each
from the same weights: full fine-tuning (the package's model holding it), peft's LoRA (r 8 on q, k, v and out_proj
of every attention of transformers' M2M100, one adapter), the package's language-specific LoRA (the same factors,
one pair per language, chosen per example) and its monolingual adapters, the base frozen for all but the first.

Training: one update (forward, backward, AdamW over the trainable parameters) on the same batch of random tokens,
models interleaved step by step (`_report.interleaved`); the package's modules route a batch whose examples have
random directions, peft's one adapter trains on the whole batch (it has no per-example language). Generation: a
batch whose examples go to `--languages` target languages, greedy, `--new-tokens` tokens each: the package's LoRA
decodes it in one call; peft, one adapter per language, decodes it as one call per target language with
`set_adapter` between them, as a server holding one peft model would.

    python benchmarks/bench_peft.py --shape standin               # the stand-in NLLB's shape; writes BENCHMARKS.md
    python benchmarks/bench_peft.py --shape nllb-600m --batch-size 8 --steps 3   # NLLB-200 distilled 600M's shape
"""

from __future__ import annotations

import argparse
import functools
import gc
import statistics
import time

import peft
import torch
from _report import interleaved, keep_freed_memory, publish
from bench_methods import language_ids, train_step
from bench_pretrained import SHAPES, checkpoint, shape_arguments, training_table
from bench_training import make_batch

RANK, ALPHA = 8, 16.0
TARGETS = r".*(self_attn|encoder_attn)\.(q_proj|k_proj|v_proj|out_proj)"


def peft_lora(shape: dict, adapters: list[str]) -> torch.nn.Module:
    """transformers' M2M100 with one peft LoRA per name in `adapters` (the first active), base frozen."""
    config = peft.LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS)
    model = peft.get_peft_model(checkpoint(shape), config, adapter_name=adapters[0])
    for name in adapters[1:]:
        model.add_adapter(name, config)
    model.set_adapter(adapters[0])
    return model


def ours(shape: dict, kind: str, codes: list[str], **fields) -> torch.nn.Module:
    from hf_langspec.interop import adapt
    from hf_langspec.pretrained import freeze_base

    contract = {"languages": codes, "lang_tag_token_ids": list(range(shape["vocab"] - len(codes), shape["vocab"])),
                "lang_tag_style": "both"}  # fmt: skip
    model = adapt(checkpoint(shape), kind, **contract, **fields)
    if kind != "baseline":
        freeze_base(model)
    return model


def build(shape: dict, kind: str, codes: list[str], fields: dict) -> torch.nn.Module:
    return peft_lora(shape, codes) if kind == "peft" else ours(shape, kind, codes, **fields)


SYSTEMS = {
    "full fine-tuning (the package's model, every weight)": ("baseline", {}),
    "peft LoRA, r 8, q k v o, one adapter, base frozen": ("peft", {}),
    "language-specific LoRA, r 8, q k v o, base frozen": ("lora", {"lora_rank": RANK, "lora_alpha": ALPHA}),
    "monolingual adapters, bottleneck 32, base frozen": ("adapter", {"adapter_preset": "monolingual",
                                                                     "adapter_dim": 32}),
}  # fmt: skip
SYSTEMS_BY_KIND = {kind: fields for kind, fields in SYSTEMS.values()}


def generate(model, inputs: dict, new_tokens: int) -> None:
    model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1)


@torch.no_grad()
def generation_seconds(models: dict, batch: dict, mixed: dict, codes: list[str], args) -> dict[str, float]:
    """Seconds to decode the mixed-direction batch: the package's LoRA in one call, peft per target language."""
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    targets = mixed["tgt_lang_ids"]

    def package() -> float:
        start = time.perf_counter()
        generate(models["lora"], inputs | mixed, args.new_tokens)
        return time.perf_counter() - start

    def switched() -> float:
        start = time.perf_counter()
        for language in targets.unique().tolist():
            rows = targets == language
            models["peft"].set_adapter(codes[language])
            generate(models["peft"], {k: v[rows] for k, v in inputs.items()}, args.new_tokens)
        return time.perf_counter() - start

    for model in models.values():
        model.eval()
    times = interleaved({"lora": package, "peft": switched}, args.generation_repeats)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per model")
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens generated per example")
    parser.add_argument("--generation-repeats", type=int, default=3)
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="train each model alone, then free it (no interleaving): for shapes whose four models and "
                             "optimizer states do not fit in memory together")  # fmt: skip
    parser.add_argument("--glibc-defaults", action="store_true", help="keep glibc's default malloc")
    parser.add_argument("--no-write", action="store_true", help="print the table without updating BENCHMARKS.md")
    args = parser.parse_args()
    args.accumulation, args.device, args.bf16 = 1, torch.device("cpu"), False  # what bench_methods.train_step reads
    allocator = "glibc's default malloc" if args.glibc_defaults else keep_freed_memory()
    shape = SHAPES[args.shape]
    codes = [f"l{i:03d}" for i in range(args.languages)]
    batch = make_batch(args.batch_size, args.src_len, args.tgt_len, shape["vocab"])
    mixed, _ = language_ids(args.batch_size, args.languages)
    jobs, counts, times = {}, {}, {}
    for label, (kind, fields) in SYSTEMS.items():
        model = build(shape, kind, codes, fields)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=1e-4)
        inputs = batch if kind == "peft" else batch | mixed
        jobs[label] = functools.partial(train_step, model, optimizer, inputs, args)
        counts[label] = (sum(p.numel() for p in trainable), sum(p.numel() for p in model.parameters()))
        if args.one_at_a_time:  # a model, its gradients and AdamW's state at a time: NLLB-600M's shape on 24 GB
            jobs.pop(label)()  # the warm-up step
            times[label] = [train_step(model, optimizer, inputs, args) for _ in range(args.steps)]
            del model, optimizer, trainable
            gc.collect()
    times = times or interleaved(jobs, args.steps)
    jobs.clear()
    gc.collect()
    generators = {kind: build(shape, kind, codes, fields) for kind, fields in (("lora", SYSTEMS_BY_KIND["lora"]),
                                                                               ("peft", {}))}  # fmt: skip
    decoding = generation_seconds(generators, batch, mixed, codes, args)
    tokens = int(batch["labels"].ne(-100).sum())
    peft_label = next(label for label, (kind, _) in SYSTEMS.items() if kind == "peft")
    peft_median = statistics.median(times[peft_label])
    rows = [
        f"{args.shape}: d {shape['d_model']}, {shape['layers']}+{shape['layers']} layers, FFN {shape['ffn']}, "
        f"vocabulary {shape['vocab']:,}, {args.languages} languages; batch {args.batch_size} x "
        f"{args.src_len}/{args.tgt_len} tokens; median of {args.steps} training steps per model, "
        + ("one model at a time" if args.one_at_a_time else "interleaved step by step")
        + f" after a warm-up step; float32 on the CPU; memory: {allocator}. The state column: gradients and "
        "AdamW's two moments of the trainable parameters, float32 (peak memory is measured on a GPU only).",
        "",
        *training_table(times, counts, tokens, peft_median, "peft's LoRA"),
    ]
    sentences = args.batch_size
    present = len(mixed["tgt_lang_ids"].unique())
    rows += [
        "",
        f"Generation, {sentences} sentences into {present} target languages, greedy, {args.new_tokens} tokens each "
        f"(median of {args.generation_repeats}, interleaved):",
        "",
        "| model | how the languages are served | sentences/s |",
        "|---|---|---:|",
        f"| language-specific LoRA | one model, one call for the mixed batch | {sentences / decoding['lora']:,.1f} |",
        f"| peft LoRA, one adapter per language | one call per target language, `set_adapter` between | "
        f"{sentences / decoding['peft']:,.1f} |",
    ]
    publish(f"peft-side-by-side-{args.shape}", f"Language-specific LoRA beside peft's LoRA ({args.shape})",
            "\n".join(rows), write=not args.no_write)  # fmt: skip


if __name__ == "__main__":
    main()
