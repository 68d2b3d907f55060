"""The training loop as `hf-langspec compare` runs it: steps/s, host ops, kernels, device time and syncs per step.

Not a bare forward/backward (bench_methods.py, bench_compile.py) but the whole loop users get: the package's
`LangSpecSeq2SeqTrainer` with a suite's training settings (bible11_gpu's by default: batch 128, label smoothing
0.1, temperature sampling over length-grouped batches, inverse square-root schedule, fused AdamW, bf16 on a GPU,
the compare runner's `include_num_input_tokens_seen`), its collator, over an Arrow dataset of random tokens in the
suite's 20 English-centric directions of 11 languages, source and target lengths uniform in 16..48 (about 4,096
target tokens per batch of 128). Two model settings:

* `bible11_gpu`: the suite's model (d 256, 4+4 pre-norm layers, FFN 1024, vocabulary 8,000);
* `base`: Transformer-base (d 512, 6+6, FFN 2048, 8 heads, vocabulary 32,000) at the same ~4,096 target tokens
  per step, the papers' batch per GPU;

each for the baseline and two routed methods of the suite (FCLL, LAA), and each with these loops:

* `as is`: the suite's settings with the package's defaults (no data-loader workers, blocking host-to-device
  copies; before the GPU-loop work also transformers' NaN/inf filter on the loss, now off by default);
* `loader`: non-blocking copies (`accelerator_config.non_blocking`), two data-loader workers, NaN filter off;
* `compiled` (asked for by `--loops`): `loader` with the Trainer's `torch_compile` (inductor, default mode) over
  batches padded to multiples of 16 (`pad_to_multiple_of`: 9 shapes, so compiled code is reused);
* `graphs` (asked for): `compiled` in `reduce-overhead` mode, CUDA graphs replayed per shape;
* `graph step` and `compiled graph step` (asked for; issue 57): the whole step (loss, backward, clipping, fused
  AdamW) recorded as one CUDA graph per bucket (`training.cuda_graph_step`), over eager kernels or the compiled
  model's; its capture seconds include the compilation (run eagerly on a CPU: the code path only);
* `static` and `static graphs` (asked for; issue 57): `loader` compiled over static shapes (`training.static_shapes:
  auto`: every batch padded to 4 length buckets and the full batch size, `dynamic=False`), every bucket compiled
  and, in `static graphs` (reduce-overhead), its CUDA graphs recorded before the first step; the warm-up's compile
  and capture seconds and the graphs dynamo compiled in the whole run are reported beside the speed.

Each setting first trains one throw-away measurement (the GPU libraries choose kernels for each new shape: in
the first GPU profile the first model measured ran at a quarter of its later speed). Per step, after `--warmup`
steps: steps/s over `--steps` steps (wall clock, data loading included) and the model's FLOP rate (matmul FLOPs
of the mean unpadded batch, `bench_training.training_flops`; on CUDA as a share of the H100's dense bf16 989
TFLOP/s); from the
profiler over `--profile-steps` steps: top-level host ops, kernel launches and summed kernel time (the GPU's busy
share of the step); from `hf_langspec.training.host_syncs` over `--census-steps` steps: host reads and
data-dependent-shape ops inside the step, and on CUDA the device's own count (`set_sync_debug_mode("warn")`).

With `--processes 1,2,4` it answers another question instead: do several runs on one device add up? For each
count N, N processes train the first system with the first loop side by side (each its own seed, so its own data
order and dropout, as `hf-langspec compare --workers N` runs the seeds of a suite), their timed windows started
together, and the table gives each one's steps/s and their sum against one process alone.

    python benchmarks/bench_loop.py --device cuda --json loop.json --label after   # gpu_plan.py profile
    python benchmarks/bench_loop.py --device cuda --systems baseline --loops loader --processes 1,2,4,8
    python benchmarks/bench_loop.py --device cuda --settings bible11_gpu,base --systems baseline \
        --loops "loader,static graphs" --steps 300   # gpu_plan.py static
    python benchmarks/bench_loop.py --settings tiny --steps 3 --no-write # the code path on a CPU
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _report import ROOT, publish
from bench_training import training_flops
from transformers import TrainerCallback

from hf_langspec.modeling.routing import accelerator_path

SUITE = ROOT / "examples" / "suites" / "bible11_gpu.yaml"
# model fields over the suite's base model section, and the vocabulary, per setting
# fmt: off
SETTINGS = {
    "bible11_gpu": {"model": {}, "vocab": 8000},
    "base": {
        "model": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                      decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
        "vocab": 32000,
    },
    "base32k": {  # Transformer-base at ~32k target tokens per step (1,024 sentences of 16-48 tokens)
        "model": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                      decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
        "vocab": 32000, "batch": 1024,
    },
    "tiny": {  # the CPU check of the code path
        "model": dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                      decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64),
        "vocab": 300,
    },
}
# fmt: on
LOADER = {"logging_nan_inf_filter": False, "accelerator_config": {"non_blocking": True}, "dataloader_num_workers": 2}
COMPILED = LOADER | {"torch_compile": True, "pad_to_multiple_of": 16}  # lengths 16-48: 3 x 3 batch shapes
# static: every batch padded to one of 4 buckets (training.static_shapes: auto), compiled once per bucket with
# dynamic=False, every bucket compiled and its CUDA graphs recorded before the first step (issue 57)
STATIC = LOADER | {"torch_compile": True, "static_shapes": "auto"}
# graph step: the whole step (loss, backward, clipping, fused AdamW) recorded as one CUDA graph per bucket
# (training.cuda_graph_step), over eager kernels or over the compiled model's
GRAPH_STEP = LOADER | {"cuda_graph_step": True, "static_shapes": "auto"}
COMPILED_LOOPS = ("compiled", "graphs", "static", "static graphs", "graph step", "compiled graph step")
LOOPS = {"as is": {}, "loader": LOADER, "compiled": COMPILED | {"static_shapes": "off"},
         "graphs": COMPILED | {"static_shapes": "off", "torch_compile_mode": "reduce-overhead"},
         "static": STATIC, "static graphs": STATIC | {"torch_compile_mode": "reduce-overhead"},
         "graph step": GRAPH_STEP, "compiled graph step": GRAPH_STEP | {"torch_compile": True}}  # fmt: skip
PEAK_BF16_TFLOPS = 989.0  # H100 SXM, dense


def suite_configs(systems: list[str]) -> tuple[list[str], dict[str, dict]]:
    """The suite's languages and each system's experiment config (base with the system's overrides)."""
    from hf_langspec.compare.suite import load_suite

    suite = load_suite(str(SUITE))
    unknown = sorted(set(systems) - set(suite.systems))
    if unknown:
        raise SystemExit(f"unknown --systems {unknown}; {SUITE.name} has {sorted(suite.systems)}")
    return suite.base["data"]["bible"]["languages"], {s: suite.system_config(s) for s in systems}


def tokenizer_for(languages: list[str]):
    """A small LangSpecTokenizer with the suite's language tags: the collator pads with it, as in a run."""
    from hf_langspec import train_tokenizer

    words = [f"w{i}" for i in range(60)]
    texts = {code: [" ".join(words[(i + j) % 60] for j in range(8)) for i in range(60)] for code in languages}
    return train_tokenizer(texts, languages=languages, vocab_size=150, show_progress=False)


def random_dataset(tokenizer, vocab: int, examples: int, lengths: tuple[int, int], seed: int = 0):
    """Token rows in the English-centric directions (equal shares), lengths uniform in `lengths`, as Arrow."""
    from datasets import Dataset

    rng = np.random.default_rng(seed)
    languages = list(tokenizer.languages)
    hub = languages.index("en")
    others = [i for i in range(len(languages)) if i != hub]
    pairs = [(hub, o) for o in others] + [(o, hub) for o in others]
    chosen = rng.integers(0, len(pairs), examples)
    first = len(tokenizer)  # ids past the tokenizer's own: plain pieces of the larger vocabulary
    src_len, tgt_len = (rng.integers(lengths[0], lengths[1] + 1, examples) for _ in range(2))
    rows = {
        "input_ids": [rng.integers(first, vocab, n).tolist() for n in src_len],
        "labels": [rng.integers(first, vocab, n).tolist() for n in tgt_len],
        "src_lang_ids": [pairs[c][0] for c in chosen],
        "tgt_lang_ids": [pairs[c][1] for c in chosen],
    }
    rows["attention_mask"] = [[1] * n for n in src_len]
    return Dataset.from_dict(rows), float(tgt_len.mean())


class LoopProbe(TrainerCallback):
    """Times steps `warmup .. warmup + steps`, then profiles the next `profile_steps` (device work awaited at
    each edge, so the window holds exactly its steps' work)."""

    def __init__(self, warmup: int, steps: int, profile_steps: int, device: torch.device, barrier=None):
        self.edges = (warmup, warmup + steps, warmup + steps + profile_steps)
        self.device, self.seconds, self.profiler = device, None, None
        self.barrier = barrier  # processes side by side start their timed windows together

    def _sync(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        step = state.global_step
        if step == self.edges[0]:
            if self.barrier is not None:
                self._sync()
                self.barrier.wait()
            self._start = self._sync()
        elif step == self.edges[1]:
            self.seconds = self._sync() - self._start
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.__enter__()
        elif step == self.edges[2]:
            self._sync()
            self.profiler.__exit__(None, None, None)


def event_counts(profiler, steps: int) -> dict[str, float]:
    """Per step: top-level host ops (aten ops not called by another aten op), kernel launches, device time."""
    from torch.autograd import DeviceType

    events = profiler.events()
    host_ops = launches = 0
    device_us = 0.0
    for event in events:
        if event.device_type == DeviceType.CUDA:
            device_us += event.time_range.elapsed_us()
            continue
        if event.name.startswith(("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")):
            launches += 1
        elif event.name.startswith("aten::"):
            parent = event.cpu_parent
            while parent is not None and not parent.name.startswith("aten::"):
                parent = parent.cpu_parent
            host_ops += parent is None
    return {"host ops": host_ops / steps, "kernel launches": launches / steps, "device ms": device_us / 1e3 / steps}


def measure(setting: str, system: str, loop: str, parts, args, seed: int = 1, barrier=None) -> dict:
    from transformers import DataCollatorForSeq2Seq

    from hf_langspec.training.config import model_classes
    from hf_langspec.training.host_syncs import StepCensus
    from hf_langspec.training.trainer import LangSpecSeq2SeqTrainer
    from hf_langspec.training.training_args import LangSpecTrainingArguments

    config = parts[1][system]
    tokenizer, dataset, mean_target = args.data
    training = config["training"]
    fields = {**config["model"], **SETTINGS[setting]["model"]}
    config_class, model_class = model_classes()[fields.pop("class", "baseline")]
    if isinstance(fields.get("high_resource_languages"), dict):  # HLT-MT's split by data size: in the random
        fields["high_resource_languages"] = list(tokenizer.languages)  # set every language has data into it
    torch.manual_seed(seed - 1)
    kwargs = tokenizer.model_config_kwargs() | {"vocab_size": SETTINGS[setting]["vocab"]}
    kwargs["lang_tag_style"] = config.get("tokenizer", {}).get("lang_tag_style", kwargs["lang_tag_style"])
    model = model_class(config_class(**kwargs, **fields))
    census_start = args.warmup + args.steps + args.profile_steps
    total = census_start + args.census_steps + 1
    cuda = args.device.type == "cuda"
    settings = {
        **{k: v for k, v in training.items() if k not in ("max_steps", "save_steps", "save_total_limit")},
        "per_device_train_batch_size": (args.batch_size or SETTINGS[setting].get("batch")
                                        or training["per_device_train_batch_size"]),
        "max_steps": total, "save_strategy": "no", "logging_steps": 10**6, "seed": seed,
        "include_num_input_tokens_seen": "non_padding",  # as the compare runner sets it
        "bf16": cuda and training.get("bf16", False), "use_cpu": not cuda, **LOOPS[loop],
    }  # fmt: skip
    standing = settings.get("cuda_graph_step") and not cuda  # a CPU takes the GPU's path, run eagerly: the CPU check
    if settings.get("torch_compile") and args.backend != "inductor":
        settings["torch_compile_backend"] = args.backend  # the CPU check: dynamo's tracing, no code generation
    with tempfile.TemporaryDirectory() as output_dir, accelerator_path() if standing else contextlib.nullcontext():
        trainer = LangSpecSeq2SeqTrainer(
            model=model,
            args=LangSpecTrainingArguments(output_dir=output_dir, **settings),
            train_dataset=dataset,
            data_collator=DataCollatorForSeq2Seq(
                tokenizer, model=model, pad_to_multiple_of=settings.get("pad_to_multiple_of")
            ),
            processing_class=tokenizer,
        )
        probe = LoopProbe(args.warmup, args.steps, args.profile_steps, args.device, barrier)
        # compiled loops: the census's function mode would recompile the step (a minute of the GPU's call) and count
        # another graph; the device's own sync count stays
        census = StepCensus(census_start, args.census_steps, sync_debug=cuda, host_ops=loop not in COMPILED_LOOPS)
        trainer.add_callback(probe)
        trainer.add_callback(census)
        graphs_before = dynamo_graphs()
        start = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - start
        graphs = dynamo_graphs() - graphs_before
    capture = trainer.static_capture or {}
    steps_per_s = args.steps / probe.seconds
    batch = settings["per_device_train_batch_size"]
    shape = {
        "d_model": model.config.d_model,
        "layers": model.config.encoder_layers,
        "ffn": model.config.encoder_ffn_dim,
    }
    flops = training_flops(shape, model.config.vocab_size, batch, round(mean_target), round(mean_target))
    result = {
        "setting": setting, "system": system, "loop": loop, "steps/s": steps_per_s,
        "target tokens/s": steps_per_s * batch * mean_target, "model TFLOP/s": steps_per_s * flops / 1e12,
        "ms/step": 1e3 / steps_per_s, **event_counts(probe.profiler, args.profile_steps), **census.per_step(),
        "batch": batch, "buckets": capture.get("static_buckets", capture.get("graph_buckets")),
        "compile s": capture.get("compile_s"), "capture s": capture.get("capture_s", capture.get("graph_capture_s")), "train call s": train_s, "graphs compiled": graphs,
        "per bucket": capture.get("per_bucket"),
        "sync sites": dict(census.census.where.most_common(12)),
    }  # fmt: skip
    print(json.dumps({k: v for k, v in result.items() if k != "sync sites"}), flush=True)
    del trainer, model
    if cuda:
        torch.cuda.empty_cache()
    return result


def dynamo_graphs() -> int:
    """Graphs dynamo has compiled in this process so far (each recompilation is one more)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def count(value: float | None) -> str:
    """A per-step count for the table; '-' where it was not measured (compiled loops' host census, CPU syncs)."""
    return "-" if value is None or value != value else f"{value:.0f}"


def table(results: list[dict], args) -> str:
    device = torch.cuda.get_device_name(0) if args.device.type == "cuda" else "CPU"
    rows = [
        f"The package's Trainer loop with bible11_gpu's training settings on {device} "
        f"({'bf16' if args.device.type == 'cuda' else 'float32'}), batches of random tokens "
        f"(lengths 16-48), {args.steps} timed steps after {args.warmup}; profiler over {args.profile_steps} steps, "
        f"sync census over {args.census_steps}. `as is`: the package's defaults, no loader workers, blocking copies; "
        "`loader`: NaN filter off, non-blocking copies, 2 loader workers; `compiled`: `loader` with torch_compile over "
        "batches padded to multiples of 16; `graphs`: `compiled` in reduce-overhead mode (CUDA graphs); `static`: "
        "`loader` compiled over static shapes (every batch padded to 4 length buckets and the full batch size, "
        "`dynamic=False`, every bucket compiled before the first step; its compile and capture seconds are the "
        "warm-up's); `static graphs`: `static` in reduce-overhead mode. "
        "Host reads and data-dependent shapes are counted "
        "inside the step (forward, backward, optimizer; not in compiled loops, whose census would recompile the "
        "step), device syncs by `torch.cuda.set_sync_debug_mode`.",
        "",
        "| setting | model | loop | batch | steps/s | target tokens/s | model TFLOP/s (MFU) | host ops/step "
        "| kernel launches/step | GPU busy ms/step (share) | host reads/step | data-dependent shapes/step "
        "| device syncs/step | compile s + capture s (graphs in the run) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        cuda = args.device.type == "cuda"
        busy = f"{r['device ms']:.1f} ({r['device ms'] / r['ms/step']:.0%})" if cuda else "-"
        rate = f"{r['model TFLOP/s']:.1f}" + (f" ({r['model TFLOP/s'] / PEAK_BF16_TFLOPS:.1%})" if cuda else "")
        parts = [f"{r[key]:.1f}" if r.get(key) is not None else "-" for key in ("compile s", "capture s")]
        warmup = " + ".join(parts) if parts != ["-", "-"] else "-"
        warmup += f" ({r['graphs compiled']} graphs)" if r.get("graphs compiled") else ""
        rows.append(
            f"| {r['setting']} | {r['system']} | {r['loop']} | {r.get('batch', '-')} | {r['steps/s']:.1f} "
            f"| {r['target tokens/s']:,.0f} | {rate} | {r['host ops']:.0f} | {r['kernel launches']:.0f} | {busy} "
            f"| {count(r['host reads'])} | {count(r['data-dependent shapes'])} | {count(r.get('device syncs'))} "
            f"| {warmup} |"
        )
    return "\n".join(rows)


def _one_side_by_side(index: int, count: int, setting: str, system: str, loop: str, options: dict, barrier, results):
    """Process `index` of `count` side by side (spawned): its own seed, data order and share of the CPU cores."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // count))
    args = argparse.Namespace(**options)
    parts = suite_configs([system])
    tokenizer = tokenizer_for(parts[0])
    args.data = (tokenizer, *random_dataset(tokenizer, SETTINGS[setting]["vocab"], args.examples, (16, 48), index))
    measure(setting, system, loop, parts, args, seed=1 + index)  # thrown away, as in main: a fresh process
    results.put(measure(setting, system, loop, parts, args, seed=1 + index, barrier=barrier))


def side_by_side(setting: str, system: str, loop: str, counts: list[int], args) -> list[dict]:
    """For each count N: N processes training side by side on the one device, each one's steps/s and their sum."""
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    options = {key: getattr(args, key) for key in
               ("device", "examples", "warmup", "steps", "profile_steps", "census_steps", "batch_size")}  # fmt: skip
    rows = []
    for count in counts:
        barrier, results = context.Barrier(count), context.Queue()
        processes = [
            context.Process(
                target=_one_side_by_side, args=(i, count, setting, system, loop, options, barrier, results)
            )
            for i in range(count)
        ]
        for process in processes:
            process.start()
        measured = []
        while len(measured) < count:
            try:
                measured.append(results.get(timeout=5))
            except queue.Empty:
                if any(process.exitcode not in (None, 0) for process in processes):
                    for process in processes:
                        process.terminate()
                    raise SystemExit(f"a process of {count} side by side failed (its traceback is above)") from None
        for process in processes:
            process.join()
        each = [row["steps/s"] for row in measured]
        rows.append({
            "setting": setting, "system": system, "loop": loop, "processes": count, "steps/s each": each,
            "steps/s together": sum(each), "target tokens/s together": sum(r["target tokens/s"] for r in measured),
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    alone = next((row["steps/s together"] for row in rows if row["processes"] == 1), None)
    for row in rows:
        row["x one alone"] = row["steps/s together"] / alone if alone else None
    return rows


def side_by_side_table(rows: list[dict], args) -> str:
    device = torch.cuda.get_device_name(0) if args.device.type == "cuda" else f"CPU ({os.cpu_count()} cores, split)"
    lines = [
        f"Several training processes on one {device}, side by side, as `compare --workers N` runs a suite's seeds: "
        f"the package's Trainer loop with bible11_gpu's training settings, batch {args.batch_size or 128} of random "
        f"tokens, each process its own seed and data order, {args.steps} timed steps after {args.warmup}, the "
        "timed windows started together.",
        "",
        "| setting | model | loop | processes | steps/s of each | steps/s together | x one alone "
        "| target tokens/s together |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        each = ", ".join(f"{v:.1f}" for v in r["steps/s each"])
        ratio = f"{r['x one alone']:.2f}x" if r["x one alone"] else "-"
        lines.append(
            f"| {r['setting']} | {r['system']} | {r['loop']} | {r['processes']} | {each} "
            f"| {r['steps/s together']:.1f} | {ratio} | {r['target tokens/s together']:,.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--settings", default="bible11_gpu,base", help=f"of {list(SETTINGS)}")
    parser.add_argument("--systems", default="baseline,fcll,laa", help="systems of bible11_gpu.yaml")
    parser.add_argument("--loops", default="as is,loader", help=f"of {list(LOOPS)}")
    parser.add_argument("--compiled-systems", default="baseline", help="the systems the compiled loop measures")
    parser.add_argument("--batch-size", type=int, help="default: the suite's (128)")
    parser.add_argument("--examples", type=int, default=20000, help="rows of the random training set")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--census-steps", type=int, default=2)
    parser.add_argument(
        "--backend",
        default="inductor",
        help="compiled loops' torch_compile_backend (aot_eager: the code path on a CPU in seconds)",
    )
    parser.add_argument(
        "--no-throwaway",
        action="store_true",
        help="skip the throw-away first measurement per setting (its --warmup steps choose kernels)",
    )
    parser.add_argument("--json", type=Path, help="also write every figure (and the sync sites) here")
    parser.add_argument("--label", help="BENCHMARKS.md section loop[-DEVICE]-LABEL (keeps an earlier profile's)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--processes", help="counts, e.g. 1,2,4: that many processes side by side (first setting, system and loop)"
    )
    args = parser.parse_args()
    args.device = torch.device(args.device)
    settings, systems, loops = (v.split(",") for v in (args.settings, args.systems, args.loops))
    for name, chosen, known in (("settings", settings, SETTINGS), ("loops", loops, LOOPS)):
        if set(chosen) - set(known):
            parser.error(f"unknown --{name} {sorted(set(chosen) - set(known))}; choose from {list(known)}")
    suffix = (f"-{args.device.type}" if args.device.type != "cpu" else "") + (f"-{args.label}" * bool(args.label))
    if args.processes:
        counts = [int(count) for count in args.processes.split(",")]
        rows = side_by_side(settings[0], systems[0], loops[0], counts, args)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1) + "\n")
        publish("loop-processes" + suffix, "Several training runs on one device, side by side",
                side_by_side_table(rows, args), write=not args.no_write)  # fmt: skip
        return
    parts = suite_configs(systems)
    tokenizer = tokenizer_for(parts[0])
    results = []
    for setting in settings:
        dataset, mean_target = random_dataset(tokenizer, SETTINGS[setting]["vocab"], args.examples, (16, 48))
        args.data = (tokenizer, dataset, mean_target)
        if not args.no_throwaway:
            measure(setting, systems[0], loops[0], parts, args)  # thrown away: kernels chosen for the shapes
        for system in systems:
            for loop in loops:
                if loop in COMPILED_LOOPS and system not in args.compiled_systems.split(","):
                    continue  # a compilation per model and shape costs a minute or more of the GPU's call
                results.append(measure(setting, system, loop, parts, args))
                if args.json:  # after each: a run stopped by the machine's limit keeps what it measured
                    args.json.write_text(json.dumps(results, indent=1) + "\n")
    publish("loop" + suffix, "The training loop as runs use it (Trainer, collator, sampler)", table(results, args),
            write=not args.no_write)  # fmt: skip


if __name__ == "__main__":
    main()
