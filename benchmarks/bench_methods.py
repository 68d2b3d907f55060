"""Training and generation throughput of each method vs the baseline backbone and MarianMTModel.

One run, one process, the same shape for every model, and the models interleaved measurement by
measurement in a rotating order (one step of A, B, C, then B, C, A, ...) so that the machine's drift hits
every model alike: on this shared 2-core machine, separate processes measured ratios that varied by
+-10% between runs, and blocks of one model's steps still gave two identical networks (the baseline and
MarianMTModel) ratios of 0.86-1.21x in one run. Peak memory is in bench_training.py. Every example
of a batch has its own random source and target language (out of `--languages`), so language routing
works on mixed batches as in multilingual training.

* training: forward + backward + AdamW on a padded batch (see bench_training.py), with the fused AdamW
  that `Seq2SeqTrainer` uses by default (`optim="adamw_torch_fused"`);
* generation: greedy decoding of exactly `--new-tokens` tokens per example (`min_new_tokens`), batch 32,
  twice: on the mixed batch, and on the same sources with one target language for the whole batch (how
  `hf_langspec.evaluation.translate` batches a multilingual test set).

`baseline_ffn6d` is the plain backbone with FCLL's decoder FLOPs (decoder FFN 4d + 2d): the speed
FCLL would have if its language routing cost nothing.

    python benchmarks/bench_methods.py                   # writes BENCHMARKS.md
    python benchmarks/bench_methods.py --rounds 1 --no-write
    python benchmarks/bench_methods.py --kinds hlt1,hlt2,adapter,ls_mnmt   # a subset, in its own section
    python benchmarks/bench_methods.py --kinds cll,baseline_ffn6d --languages 50 --accumulation 8
    python benchmarks/bench_methods.py --kinds cll,baseline_ffn6d,ls_mnmt --languages 50 --glibc-defaults
    python benchmarks/bench_methods.py --device cuda --shape base --vocab 32000   # a GPU: own section
    python benchmarks/bench_methods.py --kinds cll,cll@gather,cll@group --languages 50   # routing strategies

`KIND@STRATEGY` builds a method with `routing_strategy` STRATEGY (auto, gather, group, dense) instead of auto:
how the choice that `LanguageRouter.choose` makes is checked on a device (on an H100, FCLL with 22 target
languages in a batch of 32 trained at 0.35x the backbone under auto, which chose `group` there).

Memory comes from glibc's malloc set to keep freed blocks (`_report.keep_freed_memory`), as a GPU's
caching allocator does; with glibc's defaults every training step of a model with large per-language
gradients page-faults its gradients in anew (`--glibc-defaults` measures that).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch
from _report import interleaved, keep_freed_memory, publish
from bench_training import SHAPES, backbone_kwargs, make_batch, shape_arguments

KINDS = [
    "marian",
    "baseline",
    "xlp",
    "laa",
    "lee",
    "cll",
    "baseline_ffn6d",
    "hlt1",
    "hlt2",
    "adapter",
    "ls_mnmt",
    "lsl",
    "lms",
    "lms_fd",
]
NAMES = {
    "marian": "MarianMTModel",
    "baseline": "baseline backbone",
    "xlp": "XLP (enc + dec projections)",
    "laa": "LAA dec.self",
    "lee": "LEE_{4,5} (tag embeddings)",
    "cll": "FCLL (central l0, LSL inner 2d)",
    "baseline_ffn6d": "baseline with FCLL's FLOPs (decoder FFN 4d + 2d)",
    "hlt1": "HLT-MT stage 1 (T 3, d_h 4d, half hard / half soft)",
    "hlt2": "HLT-MT stage 2 (fixed assignment, universal adapter)",
    "adapter": "monolingual adapters (bottleneck d/2, every layer)",
    "ls_mnmt": "LS-MNMT (one FFN layer per target, decoder top)",
    "lsl": "LSL (encoder: lowest layer per source, top layer per target)",
    "lms": "LMS (pair-wise, rank d/8, every FFN)",
    "lms_fd": "LMS + fuse distillation (training: two passes; generation: the shared route)",
}


def split_kind(kind: str) -> tuple[str, str | None]:
    """`cll@gather` -> ("cll", "gather"); a plain kind has no strategy (the config's default, auto)."""
    method, _, strategy = kind.partition("@")
    return method, strategy or None


def name_of(kind: str) -> str:
    method, strategy = split_kind(kind)
    return NAMES[method] + (f" [routing {strategy}]" if strategy else "")


def build(kind: str, shape: dict, vocab: int, languages: int):
    from transformers import MarianConfig, MarianMTModel

    from hf_langspec import (
        AdapterConfig,
        AdapterForConditionalGeneration,
        CLLConfig,
        CLLForConditionalGeneration,
        HLTConfig,
        HLTForConditionalGeneration,
        LAAConfig,
        LAAForConditionalGeneration,
        LangSpecConfig,
        LangSpecForConditionalGeneration,
        LMSConfig,
        LMSForConditionalGeneration,
        LSLConfig,
        LSLForConditionalGeneration,
        XLPForConditionalGeneration,
        XLPMTConfig,
    )

    kind, strategy = split_kind(kind)
    common = backbone_kwargs(shape, vocab) | ({"routing_strategy": strategy} if strategy else {})
    if kind == "marian":
        return MarianMTModel(MarianConfig(**common, share_encoder_decoder_embeddings=True))
    if kind == "baseline_ffn6d":
        common["decoder_ffn_dim"] = shape["ffn"] + 2 * shape["d_model"]
    contract = dict(languages=[f"l{i}" for i in range(languages)], position_embedding_type="sinusoidal_marian")
    if kind == "xlp":
        return XLPForConditionalGeneration(XLPMTConfig(**common, **contract))
    if kind == "cll":
        inner = 2 * shape["d_model"]  # the authors' 1024 at d 512
        return CLLForConditionalGeneration(
            CLLConfig(**common, **contract, central_language="l0", cll_inner_dim=inner, cll_dropout=0.3)
        )
    if kind in ("hlt1", "hlt2"):
        high = contract["languages"][: max(1, languages // 2)]  # half the languages high-resource
        tags = dict(lang_tag_token_ids=list(range(4, 4 + languages)))
        model = HLTForConditionalGeneration(
            HLTConfig(**common, **contract, **tags, high_resource_languages=high, hlt_num_adapters=3,
                      hlt_hidden_dim=4 * shape["d_model"])
        )  # fmt: skip
        if kind == "hlt2":
            model.fix_assignment()
        return model
    if kind == "adapter":
        preset = dict(adapter_preset="monolingual", adapter_dim=shape["d_model"] // 2)
        return AdapterForConditionalGeneration(AdapterConfig(**common, **contract, **preset))
    if kind == "ls_mnmt":
        return AdapterForConditionalGeneration(AdapterConfig(**common, **contract, adapter_preset="ls_mnmt"))
    if kind == "lsl":  # bible_lsl_cpu.yaml's placement at any depth: the paper's pattern, source low, target high
        top = shape["layers"] - 1  # a 1-layer encoder (the tiny shape) has room for the target-indexed one only
        placement = dict(lsl_encoder_source_layers=[0] if top else [], lsl_encoder_target_layers=[top])
        return LSLForConditionalGeneration(LSLConfig(**common, **contract, **placement))
    if kind in ("lms", "lms_fd"):  # bible6's lms systems: rank 16 at d 128
        lms = dict(lms_rank=shape["d_model"] // 8, lms_fuse_distillation=kind == "lms_fd")
        return LMSForConditionalGeneration(LMSConfig(**common, **contract, **lms))
    if kind in ("laa", "lee"):
        tags = dict(lang_tag_token_ids=list(range(4, 4 + languages)), lang_tag_style="none")
        points = dict(laa_points=["dec_self_attn"]) if kind == "laa" else dict(laa_points=[], lee_points=[4, 5])
        return LAAForConditionalGeneration(LAAConfig(**common, **contract, **tags, **points))
    return LangSpecForConditionalGeneration(LangSpecConfig(**common, **contract))


def chosen_kinds(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """`--kinds` as a list, an unknown name refused with the known ones."""
    kinds = text.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown --kinds {unknown}; choose from {KINDS}")
    return kinds


def room_to_compile(models: int) -> None:
    """The models share their classes' forward code (LangSpecForConditionalGeneration.forward and others), and
    dynamo keeps 8 compiled variants per code object by default: past that it runs later models eagerly (seen on an
    H200 with all 11), so each model gets room for its own."""
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"  # renamed in torch 2.7
    setattr(config, limit, max(getattr(config, limit), 8 * models))


def clock(device: torch.device) -> float:
    """`time.perf_counter()` after the device's queued work has finished (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def autocast(args) -> torch.autocast:
    """bf16 autocast with `--bf16` (the Trainer's `bf16=True`: weights and optimizer stay float32), else off."""
    return torch.autocast(args.device.type, dtype=torch.bfloat16, enabled=args.bf16)


def train_step(model, optimizer, batch: dict, args) -> float:
    """Seconds of one update: `args.accumulation` forward/backward passes and the AdamW step."""
    model.train()
    start = clock(args.device)
    for _ in range(args.accumulation):  # Seq2SeqTrainer's gradient_accumulation_steps
        with autocast(args):
            loss = model(**batch).loss
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return clock(args.device) - start


def generate_once(model, batch: dict, args) -> float:
    """Seconds of one greedy generation of exactly `args.new_tokens` tokens per example."""
    model.eval()
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "src_lang_ids", "tgt_lang_ids")}
    with torch.no_grad(), autocast(args):
        start = clock(args.device)
        model.generate(
            **inputs, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False, num_beams=1
        )
        return clock(args.device) - start


def measure(part: str, kind: str, model, optimizer, inputs: dict, one_target: dict, args) -> float:
    """Seconds of one measurement of `part` ("train", "generate" or "generate_one") for one model."""
    if part == "train":
        return train_step(model, optimizer, inputs, args)
    one = part == "generate_one" and kind != "marian"  # MarianMTModel has no language ids
    return generate_once(model, inputs | one_target if one else inputs, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--tgt-len", type=int, default=32)
    parser.add_argument("--languages", default="2,50", help="languages mixed in a batch, one table per value")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--generation-repeats", type=int, default=5, help="generations per model and round")
    parser.add_argument("--steps", type=int, default=5, help="training steps per model and round")
    parser.add_argument(
        "--accumulation",
        type=int,
        default=1,
        help="batches per optimizer step (the papers update every 16k-48k tokens)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="multiplies --steps and --generation-repeats")
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS[2:]),
        help=f"methods to measure, of {KINDS[2:]}; KIND@STRATEGY routes with STRATEGY (auto, gather, group, dense)",
    )
    parser.add_argument(
        "--glibc-defaults",
        action="store_true",
        help="leave glibc's malloc as it is (large freed blocks go back to the OS; see _report.keep_freed_memory)",
    )
    parser.add_argument("--device", default="cpu", help="where the models run, e.g. cuda")
    parser.add_argument("--bf16", action="store_true", help="train and generate under bf16 autocast (else float32)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.device = torch.device(args.device)
    if args.device.type == "cuda":
        args.allocator = "PyTorch's CUDA caching allocator"
    else:
        args.allocator = "glibc's default malloc" if args.glibc_defaults else keep_freed_memory()
    args.kinds = ["marian", "baseline"] + [k for k in args.kinds.split(",") if k not in ("marian", "baseline")]
    unknown = sorted(k for k in args.kinds if split_kind(k)[0] not in KINDS)
    if unknown:
        parser.error(f"unknown --kinds {unknown}; choose from {KINDS[2:]}")
    from hf_langspec.modeling.configuration_langspec import ROUTING_STRATEGIES

    routed = {k: split_kind(k) for k in args.kinds if "@" in k}
    wrong = sorted(k for k, (method, s) in routed.items() if s not in ROUTING_STRATEGIES or method == "marian")
    if wrong:
        parser.error(f"--kinds {wrong}: a strategy is one of {ROUTING_STRATEGIES}, for a method other than marian")
    tables = [run(args, int(n)) for n in args.languages.split(",")]
    # a subset of the methods gets its own section, so it does not replace the full table
    section = "methods" if args.kinds == KINDS else "methods-" + "-".join(args.kinds[2:]).replace("@", "_")
    if args.accumulation > 1:
        section += f"-accumulation{args.accumulation}"
    if args.glibc_defaults:
        section += "-glibc-defaults"
    if args.device.type != "cpu":
        section += f"-{args.device.type}"
    if args.bf16:
        section += "-bf16"
    title = "Methods vs the baseline backbone and MarianMTModel"
    if section != "methods":
        title += f": {', '.join(name_of(k) for k in args.kinds[2:])}"
    publish(section, title, "\n\n".join(tables), write=not args.no_write)


def language_ids(batch_size: int, languages: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Random source and target language ids per example (seeded), and the same batch with one target.

    The one target is language 1: not FCLL's central l0, which has no LSL.
    """
    g = torch.Generator().manual_seed(1)
    mixed = {
        "src_lang_ids": torch.randint(0, languages, (batch_size,), generator=g),
        "tgt_lang_ids": torch.randint(0, languages, (batch_size,), generator=g),
    }
    return mixed, {"tgt_lang_ids": torch.full_like(mixed["tgt_lang_ids"], min(1, languages - 1))}


def run(args, languages: int) -> str:
    shape = SHAPES[args.shape]
    batch = make_batch(args.batch_size, args.src_len, args.tgt_len, args.vocab)
    lang_ids, one_target = language_ids(args.batch_size, languages)
    batch = {k: v.to(args.device) for k, v in batch.items()}
    lang_ids = {k: v.to(args.device) for k, v in lang_ids.items()}
    models = {}
    for kind in args.kinds:
        torch.manual_seed(0)
        model = build(kind, shape, args.vocab, languages).to(args.device)
        models[kind] = (
            model,
            torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True),
            batch if kind == "marian" else batch | lang_ids,
        )
    one_target = {k: v.to(args.device) for k, v in one_target.items()}
    counts = {
        "train": args.steps * args.rounds,
        "generate": args.generation_repeats * args.rounds,
        "generate_one": args.generation_repeats * args.rounds,
    }
    parts = tuple(counts)
    results: dict[str, dict[str, list[float]]] = {kind: {} for kind in args.kinds}
    for part, count in counts.items():
        jobs = {kind: functools.partial(measure, part, kind, *models[kind], one_target, args) for kind in args.kinds}
        for kind, seconds in interleaved(jobs, count).items():
            results[kind][part] = seconds
    tokens = int(batch["labels"].ne(-100).sum()) * args.accumulation
    base = {part: statistics.median(results["baseline"][part]) for part in parts}
    generated = args.batch_size * args.new_tokens
    label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**shape)
    present = len(set(lang_ids["tgt_lang_ids"].tolist()))
    rows = [
        f"**{languages} languages** ({present} target languages present in the batch). {label}, vocabulary "
        f"{args.vocab}; batch {args.batch_size} x {args.src_len}/{args.tgt_len} tokens with random source/target "
        f"languages per example; training (fused AdamW, {args.accumulation} batch(es) per update): median of {counts['train']} steps, models interleaved step by "
        f"step after a warm-up step; generation: greedy, exactly {args.new_tokens} new tokens per example, median "
        f"of {counts['generate']} runs each, interleaved likewise, on the mixed batch and with one target language for the "
        f"whole batch (`translate`'s batching). Device: {args.device}, {'bf16 autocast' if args.bf16 else 'float32'}; memory: {args.allocator}.",
        "",
        "| model | training target tokens/s | vs baseline | generation tokens/s, mixed | vs baseline "
        "| generation tokens/s, one target | vs baseline |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in args.kinds:
        cells = [name_of(kind)]
        for part, count in (("train", tokens), ("generate", generated), ("generate_one", generated)):
            median = statistics.median(results[kind][part])
            cells += [f"{count / median:,.0f}", f"{base[part] / median:.2f}x"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
