"""Serving one direction: the generic model vs its specialization vs CTranslate2 vs MarianMTModel.

For each method, in one process with every (system, setting) pair interleaved run by run in a rotating
order (`_report.interleaved`, so drift hits all alike), generation speed of:

(a) the generic model with its language modules (`model.generate` with language ids),
(b) its specialization for one direction (`hf_langspec.specialize`: a plain MarianMTModel),
(c) the CTranslate2 export of (b) (`hf_langspec.export.ct2`, float32, one single-threaded worker per torch
    thread, the batch split between them: CTranslate2's own way to use several cores), and the
    same export run with int8 weights (`compute_type="int8_float32"`, CTranslate2's usual CPU setting;
    not bit-identical to float32, so outside the equality tests),
(d) the baseline `MarianMTModel` of the same shape.

Greedy and beam 4, batch 1 and 32, exactly `--new-tokens` new tokens per sentence (transformers:
`min_new_tokens = max_new_tokens`; CTranslate2: `min_decoding_length = max_decoding_length`), so every
system does the same work; weights are random (speed does not depend on them).

    python benchmarks/bench_serving.py                  # writes BENCHMARKS.md
    python benchmarks/bench_serving.py --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from pathlib import Path

import torch
from _report import interleaved, publish
from bench_training import SHAPES, backbone_kwargs, shape_arguments

METHODS = {
    "laa": "LAA dec.self + LEE_{4,5}",
    "cll": "FCLL (central l0, LSL inner 2d)",
    "xlp": "XLP (enc + dec projections)",
}
SETTINGS = [(1, 1), (1, 32), (4, 1), (4, 32)]  # (beams, batch)


def word_tokenizer(vocab: int, languages: list[str]):
    """A `LangSpecTokenizer` over a made-up word-level vocabulary of `vocab` entries (the fairseq layout)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from hf_langspec import LangSpecTokenizer

    tags = [f"<2{code}>" for code in languages]
    words = ["<s>", "<pad>", "</s>", "<unk>", *tags]
    words += [f"w{i}" for i in range(vocab - len(words))]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return LangSpecTokenizer(tokenizer_object=backend, languages=languages, additional_special_tokens=tags)


def build(method: str, shape: dict, vocab: int, languages: list[str]):
    from hf_langspec import (
        CLLConfig,
        CLLForConditionalGeneration,
        LAAConfig,
        LAAForConditionalGeneration,
        XLPForConditionalGeneration,
        XLPMTConfig,
    )

    common = backbone_kwargs(shape, vocab) | dict(
        languages=languages, lang_tag_token_ids=list(range(4, 4 + len(languages))),
        position_embedding_type="sinusoidal_marian", normalize_before=False,
    )  # fmt: skip
    torch.manual_seed(0)
    if method == "laa":
        model = LAAForConditionalGeneration(LAAConfig(**common, laa_points=["dec_self_attn"], lee_points=[4, 5]))
    elif method == "cll":
        inner = 2 * shape["d_model"]
        model = CLLForConditionalGeneration(CLLConfig(**common, central_language=languages[0], cll_inner_dim=inner))
    else:
        model = XLPForConditionalGeneration(XLPMTConfig(**common))
    with torch.no_grad():  # trained-looking language parameters (LAA starts at zero, XLP at the identity)
        for name, p in model.named_parameters():
            if ".insertions." in name:
                p.add_(torch.randn_like(p) * 0.02)
    return model.eval()


def marian(shape: dict, vocab: int):
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    config = MarianConfig(**backbone_kwargs(shape, vocab), share_encoder_decoder_embeddings=True)
    return MarianMTModel(config).eval()


def transformers_runner(model, inputs: dict, new_tokens: int):
    def run(beams: int, batch: int) -> None:
        chosen = {k: v[:batch] for k, v in inputs.items()}
        model.generate(
            **chosen, num_beams=beams, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens
        )

    return run


def ctranslate2_runner(path: Path, tokens: list[list[str]], new_tokens: int, compute_type: str = "float32"):
    """CTranslate2 with one worker per core (`inter_threads`), one thread each, and a batch split between them:
    on this 2-core CPU that decodes beam 4 x 32 in 0.24 s against 0.45 s with one worker of 2 threads."""
    import ctranslate2

    workers = torch.get_num_threads()
    translator = ctranslate2.Translator(
        str(path), device="cpu", compute_type=compute_type, inter_threads=workers, intra_threads=1
    )

    def run(beams: int, batch: int) -> None:
        translator.translate_batch(
            tokens[:batch], beam_size=beams, min_decoding_length=new_tokens, max_decoding_length=new_tokens,
            max_batch_size=-(-batch // workers),
        )  # fmt: skip

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser, batch_size=False)
    parser.add_argument("--languages", type=int, default=10, help="languages of the generic models")
    parser.add_argument("--src-len", type=int, default=24)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each setting per round")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    from hf_langspec.export.ct2 import export_direction

    shape = SHAPES[args.shape]
    languages = [f"l{i}" for i in range(args.languages)]
    tokenizer = word_tokenizer(args.vocab, languages)
    g = torch.Generator().manual_seed(0)
    texts = [" ".join(f"w{i}" for i in torch.randint(0, args.vocab - 20, (args.src_len,), generator=g).tolist())
             for _ in range(32)]  # fmt: skip
    src, tgt = languages[1], languages[2]
    generic_inputs = dict(tokenizer(texts, src_lang=src, tgt_lang=tgt, padding=True, return_tensors="pt"))
    runners: dict[str, object] = {}
    workdir = Path(tempfile.mkdtemp(prefix="bench_serving_"))
    for method in args.methods.split(","):
        model = build(method, shape, args.vocab, languages)
        paths = export_direction(model, tokenizer, src, tgt, workdir / method)
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        plain = AutoModelForSeq2SeqLM.from_pretrained(paths["transformers"]).eval()
        plain_tokenizer = AutoTokenizer.from_pretrained(paths["transformers"])
        plain_inputs = dict(plain_tokenizer(texts, padding=True, return_tensors="pt"))
        pieces = [plain_tokenizer.convert_ids_to_tokens(ids) for ids in plain_tokenizer(texts)["input_ids"]]
        runners[f"{method}:generic"] = transformers_runner(model, generic_inputs, args.new_tokens)
        runners[f"{method}:specialized"] = transformers_runner(plain, plain_inputs, args.new_tokens)
        runners[f"{method}:ctranslate2"] = ctranslate2_runner(paths["ctranslate2"], pieces, args.new_tokens)
        runners[f"{method}:ctranslate2-int8"] = ctranslate2_runner(
            paths["ctranslate2"], pieces, args.new_tokens, "int8_float32"
        )
    baseline_inputs = {k: v for k, v in generic_inputs.items() if k in ("input_ids", "attention_mask")}
    runners["marian"] = transformers_runner(marian(shape, args.vocab), baseline_inputs, args.new_tokens)

    def timed(run, beams: int, batch: int) -> float:
        start = time.perf_counter()
        run(beams, batch)
        return time.perf_counter() - start

    jobs = {(name, s): functools.partial(timed, run, *s) for name, run in runners.items() for s in SETTINGS}
    with torch.no_grad():
        times = interleaved(jobs, args.rounds * args.repeats)
    median = {name: {s: statistics.median(times[name, s]) for s in SETTINGS} for name in runners}
    publish("serving", "Serving one direction: generic vs specialized vs CTranslate2 vs MarianMTModel",
            table(median, args, shape), write=not args.no_write)  # fmt: skip


def table(median: dict, args, shape: dict) -> str:
    label = "d{d_model}, {layers}+{layers} layers, FFN {ffn}".format(**shape)
    head = " | ".join(f"{'greedy' if b == 1 else f'beam {b}'}, batch {n}" for b, n in SETTINGS)
    rows = [
        f"{label}, vocabulary {args.vocab}, generic models with {args.languages} languages; source {args.src_len} "
        f"tokens, exactly {args.new_tokens} new tokens per sentence; median of {args.repeats * args.rounds} runs, "
        "interleaved run by run after a warm-up run. Cells: generated tokens/s (sentences/s). (b) of LAA is a "
        "MarianMTModel of exactly (d)'s shape, so its (b) / (d) row shows the measurement's noise.",
        "",
        f"| model | {head} |",
        "|---|" + "---:|" * len(SETTINGS),
    ]

    def cells(name: str) -> str:
        return " | ".join(
            f"{n * args.new_tokens / median[name][b, n]:,.0f} ({n / median[name][b, n]:,.1f})" for b, n in SETTINGS
        )

    names = {"generic": "(a) generic", "specialized": "(b) specialized", "ctranslate2": "(c) CTranslate2",
             "ctranslate2-int8": "(c') CTranslate2 int8"}  # fmt: skip
    for name in median:
        if name == "marian":
            continue
        method, kind = name.split(":")
        rows.append(f"| {METHODS[method]}: {names[kind]} | {cells(name)} |")
    rows.append(f"| (d) MarianMTModel, same shape | {cells('marian')} |")
    rows += ["", "Ratios (speed of the first over the second, same setting):", ""]
    rows += ["| method | " + head + " |", "|---|" + "---:|" * len(SETTINGS)]
    for method in dict.fromkeys(n.split(":")[0] for n in median if ":" in n):
        for first, second, label_ in (("specialized", "marian", "(b) / (d)"), ("ctranslate2", "specialized", "(c) / (b)"),
                                      ("ctranslate2-int8", "specialized", "(c') / (b)"),
                                      ("specialized", "generic", "(b) / (a)")):  # fmt: skip
            a = f"{method}:{first}"
            b = "marian" if second == "marian" else f"{method}:{second}"
            ratios = " | ".join(f"{median[b][s] / median[a][s]:.2f}x" for s in SETTINGS)
            rows.append(f"| {METHODS[method]} {label_} | {ratios} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
