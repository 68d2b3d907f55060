"""The commands that use a trained model: `translate`, `evaluate`, `clm-atp`, `typology`, `add-language`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..data.local import iter_rows, read_sentences
from ..data.processing import per_direction
from ..data.text import split_lines
from ..evaluation import copy_baseline, evaluate_model, load_results, results_table, save_results, translate, win_ratio
from ..evaluation.evaluate import check_one_set_per_direction, test_sets_from_files
from ..evaluation.feature_proportions import average_token_proportions, similarity_table
from ..evaluation.language_id import language_identifier
from ..evaluation.metrics import SentencePieceBLEU
from ..evaluation.test_sets import read_test_sets
from ..evaluation.typology import format_typology_table, language_representations, plot_typology, typology_table
from ..files import check_output_dir, check_output_file, write_atomic
from ..model_folder import described_model_problem, model_files_fingerprint, weights_fingerprint
from ..training.new_language import add_language
from .inputs import load_model, read_text


def cmd_translate(args: argparse.Namespace) -> None:
    if args.input and not Path(args.input).is_file():
        what = "is a folder, not a file" if Path(args.input).is_dir() else "does not exist"
        raise FileNotFoundError(f"--input {args.input} {what}.")
    if args.output:
        check_output_file(
            args.output, "--output", args.force, keep=[args.model, *([args.input] if args.input else [])]
        )
    raw = read_text(args.input) if args.input else None  # a file's problem is told before the model loads
    model, tokenizer = load_model(args.model, args.device, [args.src_lang, args.tgt_lang])
    if raw is None:  # stdin after: an interactive user sees a bad model folder at once, not after typing
        raw = read_text(None)
    texts = split_lines(raw)  # at \n only: a U+2028 or a lone \r inside a line does not make two outputs
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


def test_files(items: Sequence[str]) -> dict[str, str]:
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


def cmd_evaluate(args: argparse.Namespace) -> None:
    check_output_dir(args.output_dir, "--output-dir", args.force, keep=[args.model])
    reference = load_results(args.reference) if args.reference else None  # a bad one fails before decoding
    spm = SentencePieceBLEU(args.spm) if args.spm else None  # a missing or foreign file fails before anything is read
    if not args.test and not args.test_set:
        raise ValueError(
            "give --test NAME=FILE.jsonl or --test-set KIND:PATH (e.g. flores200:path/to/flores200_dataset)"
        )
    files = test_files(args.test or [])
    tests = test_sets_from_files(files, args.directions) if files else {}
    if args.test_set:
        tests |= read_test_sets(args.test_set, saved_languages(args.model), args.directions, set(tests))
    check_one_set_per_direction(tests)  # before the model loads
    if args.max_sentences_per_direction:
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
    model, tokenizer = load_model(args.model, args.device)

    off_target = {"none": False, "all": True}.get(args.off_target, args.off_target)
    results = evaluate_model(
        model, tokenizer, tests, batch_size=args.batch_size, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens,
        off_target=off_target, identifier=language_identifier(args.language_identifier) if off_target else None, spm=spm,
    )  # fmt: skip
    if reference:
        results["win_ratio"] = win_ratio(results["directions"], reference["directions"])
    baseline = copy_baseline(tests)

    folder = Path(args.model).is_dir()  # a model folder (not a Hub id): record what was scored
    weights = weights_fingerprint(args.model) if folder else None
    files = model_files_fingerprint(args.model) if folder else None
    save_results(results, args.output_dir, baseline, weights=weights, files=files)
    print(results_table(results, baseline))
    if "win_ratio" in results:
        print(f"win ratio against {args.reference}: {results['win_ratio']:.2f}")


def saved_languages(model: str) -> list[str]:
    """The languages of a saved model folder (its config.json), read before the model is loaded."""
    if Path(model).is_dir() and (problem := described_model_problem(model)):
        raise ValueError(f"Model folder {model}: {problem}.")
    path = Path(model) / "config.json"
    try:
        languages = json.loads(path.read_text(encoding="utf-8")).get("languages")
    except (OSError, ValueError):
        languages = None
    if not isinstance(languages, list) or not languages:
        raise ValueError(f"--test-set names directions in the model's codes: {model} has no config.json with its "
                         "languages; give a model folder saved by the package")  # fmt: skip
    return languages


def cmd_clm_atp(args: argparse.Namespace) -> None:
    if args.output:
        check_output_file(args.output, "--output", args.force, keep=[args.model, args.data])
    rows = [
        r for group in per_direction(iter_rows(args.data), args.max_sentences_per_direction).values() for r in group
    ]
    model, tokenizer = load_model(args.model, args.device)
    atp = average_token_proportions(model, tokenizer, rows, batch_size=args.batch_size)
    table = similarity_table(atp, top=args.top)
    if args.output:
        payload = {d: {side: v.tolist() for side, v in sides.items()} for d, sides in atp.items()}
        write_atomic(args.output, json.dumps({"atp": payload, "table": table}, indent=2))
    print(table)


def cmd_typology(args: argparse.Namespace) -> None:
    for option, path in (("--output", args.output), ("--plot", args.plot)):
        if path:
            check_output_file(path, option, args.force, keep=[args.model])
    model, _ = load_model(args.model, "cpu")
    representations = language_representations(model, args.source)
    table = typology_table(representations)
    label = args.label or Path(args.model).name
    print(format_typology_table(table, label))
    if args.output:
        write_atomic(args.output, json.dumps({label: table}, indent=2))
    if args.plot:
        plot_typology({label: table}, args.plot)


def cmd_add_language(args: argparse.Namespace) -> None:
    check_output_dir(args.output_dir, "--output-dir", args.force, keep=[args.model])  # the model is not replaced
    texts = [line for path in args.texts for line in read_sentences(path)]  # the files checked before the model
    old_texts = None
    if args.old_texts:
        old_texts = {}
        for direction, rows in per_direction(iter_rows(args.old_texts)).items():
            old_texts.setdefault(direction.split("-")[0], []).extend(r["src"] for r in rows)
    model, tokenizer = load_model(args.model, "cpu")
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
