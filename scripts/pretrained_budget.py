"""Parameters and training memory of each method on a pretrained checkpoint's shape, built on the meta device.

For `facebook/nllb-200-distilled-600M` (which cannot be downloaded here) the model is built from its config fields
on PyTorch's meta device (no memory, no weights), as each method of the package would be on top of it
(`interop.adapt`), and the budget of adapting it with the base frozen (`pretrained.freeze_base`) is printed:
language-module parameters, the trainable share, and the memory of training (float32 weights of the whole model,
plus gradient and AdamW's two moments for the trainable parameters; activations not counted).

    .venv/bin/python scripts/pretrained_budget.py                   # NLLB-200 distilled 600M, 202 languages
    .venv/bin/python scripts/pretrained_budget.py --shape tiny      # the same code path, small
"""

from __future__ import annotations

import argparse

import torch

# NLLB-200 distilled 600M's config.json fields (M2M100Config); its tokenizer has 202 language codes
SHAPES = {
    "nllb-600m": dict(d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                      decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, vocab_size=256206,
                      max_position_embeddings=1024, languages=202),
    "tiny": dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                 encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=300, max_position_embeddings=64, languages=6),
}  # fmt: skip
# (label, method, fields): the package's methods as one would adapt a large checkpoint with them
METHODS = [
    ("language-specific LoRA, r 8, q k v o", "lora", {"lora_rank": 8}),
    ("language-specific LoRA, r 8, q v", "lora", {"lora_rank": 8, "lora_projections": ["q", "v"]}),
    ("monolingual adapters, bottleneck 128", "adapter", {"adapter_preset": "monolingual", "adapter_dim": 128}),
    ("LAA dec.self (a d x d matrix per language)", "laa", {"laa_points": ["dec_self_attn"], "lang_tag_style": "both"}),
    ("FCLL (one central language, LSL inner 2d)", "cll", {"central_language": "l000", "cll_inner_dim": None}),
    ("XLP (a d x d projection per language, both stacks)", "xlp", {}),
]


def budget(shape: dict) -> list[dict]:
    """One row per method: parameters in total and in language modules, and training memory with the base frozen."""
    from hf_langspec.modeling.modeling_langspec import language_module_parameter
    from hf_langspec.training.config import model_classes

    fields = dict(shape)
    count = fields.pop("languages")
    codes = [f"l{i:03d}" for i in range(count)]
    contract = dict(languages=codes, lang_tag_token_ids=list(range(fields["vocab_size"] - count, fields["vocab_size"])),
                    lang_tag_style="both", normalize_before=True, position_embedding_type="sinusoidal",
                    scale_embedding=True, activation_function="relu")  # fmt: skip
    rows = []
    for label, kind, method in METHODS:
        method = dict(method)
        if method.get("cll_inner_dim", 0) is None:
            method["cll_inner_dim"] = 2 * fields["d_model"]
        config_class, model_class = model_classes()[kind]
        with torch.device("meta"):
            model = model_class(config_class(**fields, **{**contract, **method}))
        total = sum(p.numel() for p in model.parameters())
        modules = sum(p.numel() for n, p in model.named_parameters() if language_module_parameter(n))
        rows.append({"method": label, "total": total, "language modules": modules,
                     "memory GiB": (4 * total + 3 * 4 * modules) / 2**30})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="nllb-600m", choices=list(SHAPES))
    args = parser.parse_args()
    rows = budget(SHAPES[args.shape])
    print(f"{args.shape}: base frozen; memory = float32 weights + gradient and AdamW moments of the trainable ones")
    print("| method | parameters | language modules (trainable) | share | training memory (GiB, no activations) |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['method']} | {r['total'] / 1e6:,.1f}M | {r['language modules'] / 1e6:,.2f}M "
              f"| {r['language modules'] / r['total']:.1%} | {r['memory GiB']:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
