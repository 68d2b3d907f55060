"""Fine-tune a pre-trained XLP (or XLM) encoder on XNLI (Luo et al., section 4.1, Tables 1 and 3).

    # cross-lingual transfer: fine-tune on English, evaluate on every language
    python examples/finetune_xnli.py --model runs/xlp_pretrain --setting transfer
    # translate-train: fine-tune and evaluate each language on its own (machine-translated) data
    python examples/finetune_xnli.py --model runs/xlp_pretrain --setting translate-train
    # a local mirror of the Hub's Parquet export, <data-dir>/<lang>/<split>-*.parquet
    python examples/finetune_xnli.py --model runs/xlp_pretrain --data-dir data/xnli

`--model` is a directory written by `examples/pretrain_xlp.py` (model and tokenizer). Pairs are
encoded as `<s> premise </s> hypothesis </s>` with the language's id, the classifier reads `<s>`,
and the language projections stay frozen (the paper, appendix B.1; `--unfreeze-projections` to
train them). The languages evaluated are those of XNLI the model was pre-trained on, or
`--languages`. Writes `results.json` and `results.md` (accuracy per language, the average, and the
cross-lingual transfer gap of Table 3: English minus the mean of the other languages).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

from hf_langspec import LangSpecTokenizer, XLPForSequenceClassification
from hf_langspec.data import XNLI_LABELS, XNLI_LANGUAGES, load_xnli


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a pre-trained encoder directory (model + tokenizer)")
    parser.add_argument("--output-dir", default="runs/xnli")
    parser.add_argument("--setting", choices=["transfer", "translate-train"], default="transfer")
    parser.add_argument("--train-language", default="en", help="the fine-tuning language of the transfer setting")
    parser.add_argument("--languages", nargs="+", help="languages to evaluate (default: XNLI's that the model knows)")
    parser.add_argument("--data-dir", help="local XNLI mirror <dir>/<lang>/<split>-*.parquet (default: the Hub)")
    parser.add_argument("--eval-split", default="test", choices=["validation", "test"])
    parser.add_argument("--max-train-examples", type=int, help="first N training pairs per language")
    parser.add_argument("--max-eval-examples", type=int, help="first N evaluation pairs per language")
    parser.add_argument("--max-length", type=int, default=128, help="pieces per pair (the paper: 256)")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--batch-size", type=int, default=16, help="8 or 16 in the paper")
    parser.add_argument(
        "--learning-rate", type=float, default=2e-5, help="the paper searches 1e-6 to 8e-6 at XLM15 size"
    )
    parser.add_argument("--warmup-steps", type=int, default=0, help="the paper: 4000")
    parser.add_argument("--unfreeze-projections", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def encode(tokenizer: LangSpecTokenizer, rows: Dataset, max_length: int) -> Dataset:
    features = []
    for lang in dict.fromkeys(rows["lang"]):
        part = rows.filter(lambda r, lang=lang: r["lang"] == lang)
        encoded = tokenizer.encode_sentences(part["premise"], lang, part["hypothesis"], max_length=max_length)
        for feature, label in zip(encoded, part["label"], strict=True):
            features.append(feature | {"labels": label})
    return Dataset.from_list(features)


def fine_tune(args: argparse.Namespace, tokenizer: LangSpecTokenizer, train: Dataset, run_dir: Path) -> Trainer:
    model = XLPForSequenceClassification.from_pretrained(
        args.model, num_labels=len(XNLI_LABELS), id2label=dict(enumerate(XNLI_LABELS)),
        label2id={label: i for i, label in enumerate(XNLI_LABELS)},
        freeze_language_projections=not args.unfreeze_projections,
    )  # fmt: skip
    tokenizer.check_model(model)
    training_args = TrainingArguments(
        output_dir=str(run_dir), num_train_epochs=args.epochs, per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64, learning_rate=args.learning_rate, warmup_steps=args.warmup_steps,
        lr_scheduler_type="inverse_sqrt" if args.warmup_steps else "linear", adam_beta2=0.999, adam_epsilon=1e-8,
        max_grad_norm=5.0, save_strategy="no", logging_steps=50, seed=args.seed, report_to=[],
        dataloader_pin_memory=torch.cuda.is_available(),
    )  # fmt: skip
    trainer = Trainer(
        model=model, args=training_args, train_dataset=encode(tokenizer, train, args.max_length),
        data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer,
    )  # fmt: skip
    trainer.train()
    trainer.save_model(str(run_dir))
    return trainer


def accuracy(trainer: Trainer, tokenizer: LangSpecTokenizer, rows: Dataset, max_length: int) -> float:
    prediction = trainer.predict(encode(tokenizer, rows, max_length))
    return float(np.mean(prediction.predictions.argmax(-1) == prediction.label_ids))


def main() -> None:
    args = parse_args()
    tokenizer = LangSpecTokenizer.from_pretrained(args.model)
    languages = args.languages or [code for code in XNLI_LANGUAGES if code in tokenizer.languages]
    for code in [*languages, args.train_language]:
        tokenizer.language_id(code)  # an unknown language fails here, before any training
    if not languages:
        raise ValueError(
            f"The model knows {tokenizer.languages}, none of them an XNLI language {list(XNLI_LANGUAGES)}."
        )
    output = Path(args.output_dir)

    def data(code: str, split: str, limit: int | None) -> Dataset:
        return load_xnli(code, split, data_dir=args.data_dir, max_examples=limit)

    scores: dict[str, float] = {}
    if args.setting == "transfer":
        trainer = fine_tune(
            args, tokenizer, data(args.train_language, "train", args.max_train_examples), output / "model"
        )
        for code in languages:
            scores[code] = accuracy(
                trainer, tokenizer, data(code, args.eval_split, args.max_eval_examples), args.max_length
            )
    else:
        for code in languages:
            trainer = fine_tune(
                args, tokenizer, data(code, "train", args.max_train_examples), output / f"model-{code}"
            )
            scores[code] = accuracy(
                trainer, tokenizer, data(code, args.eval_split, args.max_eval_examples), args.max_length
            )

    others = [scores[c] for c in scores if c != args.train_language]
    results = {
        "setting": args.setting,
        "model": args.model,
        "split": args.eval_split,
        "accuracy": scores,
        "average": float(np.mean(list(scores.values()))),
        # Table 3: the accuracy on English minus the mean over the other languages
        "transfer_gap": scores[args.train_language] - float(np.mean(others))
        if args.train_language in scores and others
        else None,
    }
    output.mkdir(parents=True, exist_ok=True)
    (output / "results.json").write_text(json.dumps(results, indent=2))
    table = "| " + " | ".join([*scores, "avg"]) + " |\n|" + "---:|" * (len(scores) + 1) + "\n| "
    table += " | ".join(f"{100 * v:.1f}" for v in [*scores.values(), results["average"]]) + " |\n"
    if results["transfer_gap"] is not None:
        table += f"\ntransfer gap ({args.train_language} - mean of the others): {100 * results['transfer_gap']:.1f}\n"
    (output / "results.md").write_text(table)
    print(f"XNLI {args.setting}, {args.eval_split} accuracy (%):\n\n{table}")


if __name__ == "__main__":
    main()
