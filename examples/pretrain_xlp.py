"""XLM-style masked-language-model pre-training of an XLP encoder (Luo et al., section 4.1 and appendix B.1).

    python examples/pretrain_xlp.py                                   # Bible corpus, small CPU model
    python examples/pretrain_xlp.py --language-encoding additive      # the XLM baseline, same budget
    python examples/pretrain_xlp.py --config examples/configs/xlp_pretrain_xlm15.yaml  # the paper's size

Each sentence is `<s> sentence </s>` with its language id; 15% of the tokens are masked (80% <mask>,
10% random, 10% kept). Monolingual text comes from the offline Bible corpus (each language's distinct
verses, built with `hf-langspec data bible` if missing) or from `--text-dir` holding
`train.<lang>.txt` / `valid.<lang>.txt`, one sentence per line (e.g. Wikipedia for the paper's XLM15
languages). The validation sentences of each language are masked once with a fixed seed, and their
MLM loss is reported before and after training (`mlm_eval.json`). The run resumes from its last
complete checkpoint; the model and tokenizer are saved in `--output-dir` for `finetune_xnli.py`.

A config file (`--config`) sets defaults for the flags (keys are the flag names with underscores).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from hf_langspec import LangSpecTokenizer, XLPConfig, XLPForMaskedLM, train_tokenizer
from hf_langspec.data import BibleCorpusConfig, build_bible_corpus, monolingual_texts, read_sentences
from hf_langspec.data.local import iter_rows, read_multiway
from hf_langspec.training import MaskedLMCollator, fixed_masks, last_complete_checkpoint
from hf_langspec_cli.config_file import read_config_file


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="YAML file with defaults for these flags")
    parser.add_argument("--output-dir", default="runs/xlp_pretrain")
    data = parser.add_argument_group("data")
    data.add_argument("--corpus-dir", default="runs/bible", help="the Bible corpus (built here if missing)")
    data.add_argument("--text-dir", help="train.<lang>.txt / valid.<lang>.txt instead of the Bible corpus")
    data.add_argument("--languages", nargs="+", default=["en", "de", "fr", "es", "it", "ru", "vi"])
    data.add_argument("--books", type=int, nargs="+", help="Bible books to build (a quick slice); all by default")
    data.add_argument("--valid-sentences", type=int, default=200, help="validation sentences per language")
    data.add_argument("--vocab-size", type=int, default=8000)
    data.add_argument("--max-length", type=int, default=64, help="pieces per sentence (the paper: 256)")
    model = parser.add_argument_group("model")
    model.add_argument("--language-encoding", default="projection", choices=["projection", "additive", "none"])
    model.add_argument("--d-model", type=int, default=128)
    model.add_argument("--layers", type=int, default=2)
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--ffn-dim", type=int, default=512)
    model.add_argument("--dropout", type=float, default=0.1)
    train = parser.add_argument_group("training (appendix B.1 values in the XLM15 config)")
    train.add_argument("--max-steps", type=int, default=1000)
    train.add_argument("--batch-size", type=int, default=64)
    train.add_argument("--gradient-accumulation-steps", type=int, default=1)
    train.add_argument("--learning-rate", type=float, default=5e-4)
    train.add_argument("--warmup-steps", type=int, default=200)
    train.add_argument("--weight-decay", type=float, default=1e-4)
    train.add_argument("--max-grad-norm", type=float, default=5.0)
    train.add_argument("--save-steps", type=int, default=500)
    train.add_argument("--bf16", action="store_true")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    args, _ = parser.parse_known_args()
    if args.config:
        defaults = read_config_file(args.config) or {}
        known = {a.dest for a in parser._actions}
        unknown = sorted(set(defaults) - known)
        if unknown:
            parser.error(f"{args.config}: unknown keys {unknown}; use the flag names with underscores.")
        parser.set_defaults(**defaults)
    return parser.parse_args()


def monolingual_data(args: argparse.Namespace) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """`({lang: train sentences}, {lang: validation sentences})` from --text-dir or the Bible corpus."""
    if args.text_dir:
        folder = Path(args.text_dir)
        train = {code: read_sentences(folder / f"train.{code}.txt") for code in args.languages}
        valid = {code: read_sentences(folder / f"valid.{code}.txt") for code in args.languages}
    else:
        corpus = build_bible_corpus(
            args.corpus_dir, BibleCorpusConfig(languages=args.languages, pivot=args.languages[0], books=args.books)
        )
        train = monolingual_texts(iter_rows(corpus.files["train"]))
        valid = {code: [] for code in args.languages}
        for texts in read_multiway(corpus.files["valid.multiway"]):
            for code, text in texts.items():
                valid[code].append(text)
    return train, {code: texts[: args.valid_sentences] for code, texts in valid.items()}


def load_or_train_tokenizer(args: argparse.Namespace, train: dict[str, list[str]]) -> LangSpecTokenizer:
    folder = Path(args.output_dir) / "tokenizer"
    if (folder / "tokenizer.json").exists():  # a resumed run must keep its vocabulary
        tokenizer = LangSpecTokenizer.from_pretrained(folder)
        if tokenizer.languages != list(args.languages):
            raise ValueError(
                f"{folder} was trained for {tokenizer.languages}, not {args.languages}; use another --output-dir."
            )
        return tokenizer
    tokenizer = train_tokenizer(
        train, languages=args.languages, vocab_size=args.vocab_size, lang_tag_style="none", mask_token=True
    )
    tokenizer.save_pretrained(folder)
    return tokenizer


def main() -> None:
    args = parse_args()
    output = Path(args.output_dir)
    train_texts, valid_texts = monolingual_data(args)
    tokenizer = load_or_train_tokenizer(args, train_texts)
    train_features = [
        feature
        for code in args.languages
        for feature in tokenizer.encode_sentences(train_texts[code], code, max_length=args.max_length)
    ]
    valid_sets = {
        code: Dataset.from_list(
            fixed_masks(tokenizer.encode_sentences(valid_texts[code], code, max_length=args.max_length), tokenizer)
        )
        for code in args.languages
    }
    print(f"{len(train_features):,} training sentences in {len(args.languages)} languages; "
          f"{sum(len(v) for v in valid_sets.values()):,} validation sentences")  # fmt: skip

    config = XLPConfig(
        **tokenizer.model_config_kwargs(), mask_token_id=tokenizer.mask_token_id,
        language_encoding=args.language_encoding, d_model=args.d_model, encoder_layers=args.layers,
        encoder_attention_heads=args.heads, encoder_ffn_dim=args.ffn_dim, dropout=args.dropout,
        max_position_embeddings=max(args.max_length, 256),
    )  # fmt: skip
    torch.manual_seed(args.seed)
    model = XLPForMaskedLM(config)
    training_args = TrainingArguments(
        output_dir=str(output), max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size, gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate, warmup_steps=args.warmup_steps, lr_scheduler_type="inverse_sqrt",
        adam_beta1=0.9, adam_beta2=0.98, adam_epsilon=1e-8, weight_decay=args.weight_decay,
        max_grad_norm=args.max_grad_norm, bf16=args.bf16, save_steps=args.save_steps, save_total_limit=2,
        logging_steps=50, train_sampling_strategy="group_by_length", seed=args.seed, report_to=[],
        dataloader_pin_memory=torch.cuda.is_available(),
    )  # fmt: skip
    trainer = Trainer(
        model=model, args=training_args, train_dataset=Dataset.from_list(train_features),
        data_collator=MaskedLMCollator(tokenizer), processing_class=tokenizer,
    )  # fmt: skip

    resume = None if args.no_resume else last_complete_checkpoint(output)
    initial_path = output / "mlm_eval_initial.json"
    if resume is None or not initial_path.exists():  # the untrained model's losses, kept across resumes
        initial_path.parent.mkdir(parents=True, exist_ok=True)
        initial_path.write_text(json.dumps(trainer.evaluate(valid_sets), indent=2))
    before = json.loads(initial_path.read_text())
    trainer.train(resume_from_checkpoint=resume)
    after = trainer.evaluate(valid_sets)
    trainer.save_model(str(output))
    tokenizer.save_pretrained(output)

    losses = {
        code: {"before": before[f"eval_{code}_loss"], "after": after[f"eval_{code}_loss"]} for code in args.languages
    }
    (output / "mlm_eval.json").write_text(
        json.dumps({"language_encoding": args.language_encoding, "loss": losses}, indent=2)
    )
    print("\n| language | validation MLM loss before | after |\n|---|---:|---:|")
    for code, row in losses.items():
        print(f"| {code} | {row['before']:.3f} | {row['after']:.3f} |")
    print(f"\nsaved to {output} (model, tokenizer, mlm_eval.json)")


if __name__ == "__main__":
    main()
