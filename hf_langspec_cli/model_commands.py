"""The `model` commands' arguments (their handlers: hf_langspec/cli/model_commands.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .command import Command
from .types import (
    device,
    directions,
    generation_options,
    language_code,
    non_negative,
    non_negative_number,
    positive,
)


def _translate_arguments(p: argparse.ArgumentParser) -> None:
    generation_options(p)
    p.add_argument("--src-lang", required=True)
    p.add_argument("--tgt-lang", required=True)
    p.add_argument("--input", help="input file (default: stdin)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    generation_options(p)
    p.add_argument("--test", nargs="+", help="NAME=FILE.jsonl (zero-shot=... measures off-target)")
    p.add_argument("--test-set", nargs="+", metavar="KIND:PATH",
                   help="a standard test set from its local release files: KIND one of flores200, flores200-dev, flores101, "
                        "ntrex128, tico19, wmt, opus-mt "
                        "(hf_langspec/evaluation/test_sets.py), e.g. flores200:path/to/flores200_dataset; directions "
                        "in the model's codes")  # fmt: skip
    p.add_argument("--spm", type=Path, metavar="FILE",
                   help="a SentencePiece model: adds spBLEU (BLEU over its pieces; FLORES-200's own model gives NLLB's "
                        "spBLEU); nothing is downloaded")  # fmt: skip
    p.add_argument("--directions", type=directions, help="only these directions, comma-separated")
    p.add_argument("--max-sentences-per-direction", type=positive, help="default: every sentence")
    p.add_argument(
        "--off-target",
        help="the test set to measure it on, 'all' or 'none' (default: the set named zero-shot if given, else none)",
    )
    p.add_argument("--language-identifier", choices=["lingua", "langid", "py3langid"], help="default: lingua")
    p.add_argument("--reference", help="a results.json of another run, for the win ratio")
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="write into --output-dir even if it holds files")


def _clm_atp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="test set in the canonical JSONL schema (several directions)")
    p.add_argument("--max-sentences-per-direction", type=positive)
    p.add_argument("--top", type=positive, default=5)
    p.add_argument("--batch-size", type=positive, default=32)
    p.add_argument("--device", type=device)
    p.add_argument("--output", help="write the ATP vectors and the table as JSON")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


def _typology_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--source", default="auto", choices=["auto", "laa", "lee", "tag"])
    p.add_argument("--label", help="the model's name in the table (default: the folder name)")
    p.add_argument("--output", help="write the accuracies as JSON")
    p.add_argument("--plot", help="write Figure 3's plot (accuracy against k) to this image file")
    p.add_argument("--force", action="store_true", help="replace --output and --plot if they exist")


def _add_language_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--language", type=language_code, required=True, help="the new language's code")
    p.add_argument("--texts", nargs="+", required=True, help="the new language's text, one sentence per line")
    p.add_argument("--vocab-size", type=positive, default=8000, help="unigram vocabulary trained on --texts")
    p.add_argument(
        "--noise-std", type=non_negative_number, default=0.01, help="noise on the mean embedding of new rows"
    )
    p.add_argument("--old-texts", help="canonical JSONL of old-language text: count changed segmentations")
    p.add_argument("--seed", type=non_negative, default=0)
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="write into --output-dir even if it holds files")


COMMANDS = [
    Command(
        "translate",
        "hf_langspec.cli.model_commands:cmd_translate",
        _translate_arguments,
        help="translate a file or stdin, one sentence per line",
    ),
    Command(
        "evaluate",
        "hf_langspec.cli.model_commands:cmd_evaluate",
        _evaluate_arguments,
        help="sacreBLEU/chrF per direction, off-target rates, group means",
    ),
    Command(
        "clm-atp",
        "hf_langspec.cli.model_commands:cmd_clm_atp",
        _clm_atp_arguments,
        help="CLM's average token-level feature proportions per direction and the most similar directions",
    ),
    Command(
        "typology",
        "hf_langspec.cli.model_commands:cmd_typology",
        _typology_arguments,
        help="k-NN prediction of URIEL features from the learned language representations (LEE/LAA)",
    ),
    Command(
        "add-language",
        "hf_langspec.cli.model_commands:cmd_add_language",
        _add_language_arguments,
        help="add a language to a trained CLL model: vocabulary, tag, LSLs (old ones frozen)",
    ),
]
