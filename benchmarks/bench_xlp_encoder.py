"""The encoder setting of XLP (Luo et al.: "barely computational overhead"): MLM training and encoding speed.

Compares, in one process with the models interleaved step by step (`_report.interleaved`),
`XLPForMaskedLM` with XLP's projections, with XLM's additive language embedding, and with no language
signal (the same backbone without XLP), and transformers' `XLMWithLMHeadModel` of the same shape
(post-norm, GELU, learned positions, embedding LayerNorm, FFN 4d, language embeddings). Every sentence of a batch has a random language
out of `--languages`, as in multilingual MLM.

* training: forward + backward + AdamW on a batch with 15% of the tokens labelled;
* encoding: a forward pass without gradients (what sentence classification and feature
  extraction cost), median over `--encode-repeats` x `--rounds`.

    python benchmarks/bench_xlp_encoder.py                 # writes its section of BENCHMARKS.md
    python benchmarks/bench_xlp_encoder.py --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch
from _report import interleaved, publish
from bench_training import SHAPES, shape_arguments

KINDS = {
    "xlm": "XLMWithLMHeadModel (transformers)",
    "none": "XLPForMaskedLM, no language signal",
    "additive": "XLPForMaskedLM, additive language embedding (XLM)",
    "projection": "XLPForMaskedLM, XLP projections",
}


def build(kind: str, shape: dict, vocab: int, languages: int) -> torch.nn.Module:
    from transformers import XLMConfig, XLMWithLMHeadModel

    from hf_langspec import XLPConfig, XLPForMaskedLM

    if kind == "xlm":
        return XLMWithLMHeadModel(XLMConfig(
            vocab_size=vocab, emb_dim=shape["d_model"], n_layers=shape["layers"], n_heads=shape["heads"],
            n_langs=languages, use_lang_emb=True, dropout=0.1, attention_dropout=0.0, max_position_embeddings=256,
            pad_token_id=1, bos_token_id=0, eos_token_id=2,
        ))  # fmt: skip
    assert shape["ffn"] == 4 * shape["d_model"], "XLM's FFN is 4 d: keep the shapes comparable"
    return XLPForMaskedLM(XLPConfig(
        vocab_size=vocab, d_model=shape["d_model"], encoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"], encoder_ffn_dim=shape["ffn"], dropout=0.1, attention_dropout=0.0,
        activation_dropout=0.0, activation_function="gelu", position_embedding_type="learned",
        layernorm_embedding=True, max_position_embeddings=256, languages=[f"l{i}" for i in range(languages)],
        language_encoding=kind, pad_token_id=1, bos_token_id=0, eos_token_id=2,
    ))  # fmt: skip


def make_inputs(kind: str, batch_size: int, length: int, vocab: int, languages: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab, (batch_size, length), generator=g)
    lengths = torch.randint(length // 2, length + 1, (batch_size,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    ids = ids.masked_fill(mask.eq(0), 1)
    labels = ids.masked_fill((torch.rand(ids.shape, generator=g) > 0.15) | mask.eq(0), -100)
    lang = torch.randint(0, languages, (batch_size,), generator=g)
    if kind == "xlm":
        return {"input_ids": ids, "attention_mask": mask, "langs": lang[:, None].expand_as(ids), "labels": labels}
    return {"input_ids": ids, "attention_mask": mask, "src_lang_ids": lang, "labels": labels}


def train_step(model, optimizer, inputs: dict) -> float:
    """Seconds of one forward + backward + AdamW update."""
    model.train()
    start = time.perf_counter()
    model(**inputs)[0].backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def encode_once(model, inputs: dict) -> float:
    """Seconds of one forward pass without gradients and without labels."""
    model.eval()
    unlabelled = {k: v for k, v in inputs.items() if k != "labels"}
    with torch.no_grad():
        start = time.perf_counter()
        model(**unlabelled)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape_arguments(parser)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--languages", type=int, default=15, help="XLM15's 15 by default")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--encode-repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    shape = SHAPES[args.shape]
    models = {}
    for kind in KINDS:
        torch.manual_seed(0)
        model = build(kind, shape, args.vocab, args.languages)
        inputs = make_inputs(kind, args.batch_size, args.length, args.vocab, args.languages)
        models[kind] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4), inputs)
    median = {kind: {} for kind in KINDS}
    parts = {
        "train": ({kind: functools.partial(train_step, *models[kind]) for kind in KINDS}, args.steps),
        "encode": ({kind: functools.partial(encode_once, models[kind][0], models[kind][2]) for kind in KINDS},
                   args.encode_repeats),
    }  # fmt: skip
    for part, (jobs, count) in parts.items():
        for kind, times in interleaved(jobs, count * args.rounds).items():
            median[kind][part] = statistics.median(times)
    tokens = int(models["none"][2]["attention_mask"].sum())
    base = median["none"]
    rows = [
        "d{d_model}, {layers} layers, FFN {ffn}".format(**shape) + f", vocabulary {args.vocab}; batch "
        f"{args.batch_size} x up to {args.length} tokens ({tokens} real), a random language out of "
        f"{args.languages} per sentence; training: median of {args.steps * args.rounds} steps, encoding: median of "
        f"{args.encode_repeats * args.rounds} forward passes; models interleaved step by step after a warm-up step.",
        "",
        "| model | training tokens/s | vs no language signal | encoding tokens/s | vs no language signal |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, name in KINDS.items():
        train, encode = median[kind]["train"], median[kind]["encode"]
        rows.append(
            f"| {name} | {tokens / train:,.0f} | {base['train'] / train:.2f}x | {tokens / encode:,.0f} | "
            f"{base['encode'] / encode:.2f}x |"
        )
    publish(
        "xlp_encoder",
        "XLP encoder (MLM) vs the same encoder without it and XLM",
        "\n".join(rows),
        write=not args.no_write,
    )


if __name__ == "__main__":
    main()
