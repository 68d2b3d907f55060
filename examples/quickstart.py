"""Quick start: a multilingual model with per-example language ids, saved and reloaded, and converted.

    python examples/quickstart.py [--output-dir runs/quickstart]

Builds a small baseline (the multilingual Transformer of Johnson et al. with the XLM additive
language embedding), translates a mixed-direction batch with beam search, saves it as a
checkpoint that carries its own modeling code, reloads it through `AutoModelForSeq2SeqLM`, and
converts a Marian-shaped baseline to `MarianMTModel`. The weights are random: training comes
with `hf-langspec train` (see the README).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM

from hf_langspec import LangSpecConfig, LangSpecForConditionalGeneration
from hf_langspec.interop import to_marian


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/quickstart")
    args = parser.parse_args()

    languages = ["en", "de", "fr"]
    shape = dict(
        vocab_size=200,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
    )
    config = LangSpecConfig(
        **shape,
        languages=languages,
        lang_tag_token_ids=[3, 4, 5],
        lang_tag_style="target",
        language_embedding="additive",
    )
    torch.manual_seed(0)
    model = LangSpecForConditionalGeneration(config).eval()
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, languages {config.languages}")

    # three examples, three directions, one batch
    batch = {
        "input_ids": torch.tensor([[10, 11, 12, 2], [20, 21, 2, 1], [30, 2, 1, 1]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]),
        "src_lang_ids": torch.tensor(config.language_ids(["en", "de", "fr"])),
        "tgt_lang_ids": torch.tensor(config.language_ids(["de", "fr", "en"])),
    }
    out = model.generate(**batch, num_beams=4, max_new_tokens=8)
    for row, tgt in zip(out.tolist(), batch["tgt_lang_ids"].tolist(), strict=True):
        print(
            f"  -> {languages[tgt]}: {row}  (starts with the {languages[tgt]} tag id {config.lang_tag_token_ids[tgt]})"
        )

    output_dir = Path(args.output_dir)
    model.save_pretrained(output_dir)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(output_dir).eval()
    assert torch.equal(reloaded.generate(**batch, num_beams=4, max_new_tokens=8), out)
    print(f"saved to {output_dir} (safetensors + modeling code) and reloaded: same beams")

    marian_shaped = LangSpecForConditionalGeneration(
        LangSpecConfig(**shape, position_embedding_type="sinusoidal_marian")
    ).eval()
    marian = to_marian(marian_shaped).eval()
    ids = batch["input_ids"]
    same = torch.equal(
        marian.generate(input_ids=ids, max_new_tokens=8), marian_shaped.generate(input_ids=ids, max_new_tokens=8)
    )
    print(f"converted to {type(marian).__name__}: identical greedy output = {same}")


if __name__ == "__main__":
    main()
