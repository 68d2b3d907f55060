"""The commands that share a trained model: `card`, `export`, `serve` and `push`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..data.schema import split_direction
from ..evaluation import load_results
from ..export import push_model, write_model_card
from ..export.ct2 import export_direction, export_directions
from ..export.language_packs import export_language_pack
from ..export.sockets import check_port_free
from ..export.specialize import save_condensed
from ..files import refuse_to_overwrite
from ..model_folder import described_model_problem
from ..pretrained import save_as_checkpoint
from .inputs import load_model


def cmd_card(args: argparse.Namespace) -> None:
    results = load_results(args.results) if args.results else None
    path = write_model_card(
        args.model, results, force=args.force, model_name=args.model_name, repo_id=args.repo_id, license=args.license
    )
    print(f"model card written to {path}")


def cmd_export(args: argparse.Namespace) -> None:
    single = args.src_lang is not None or args.tgt_lang is not None
    modes = [single, args.directions is not None, args.multilingual, args.condensed, args.language_pack is not None]
    if sum(modes) != 1 or (single and not (args.src_lang and args.tgt_lang)):
        raise ValueError(
            "give one of --src-lang and --tgt-lang (one direction), --directions en-de,de-en,... (one CTranslate2 "
            "model each, for `hf-langspec serve`), --multilingual (the whole model as a plain checkpoint), "
            "--condensed (an LMS model trained with fuse distillation as one plain model) or --language-pack xx "
            "(a language's modules, for `serve --language-dir`)"
        )
    if args.condensed:
        _export_condensed(args)
    elif args.multilingual:
        _export_multilingual(args)
    elif args.language_pack is not None:
        _export_language_pack(args)
    else:
        _export_directions(args, single)


def _export_condensed(args: argparse.Namespace) -> None:
    target = Path(args.output_dir) / "transformers"
    refuse_to_overwrite(target, args.force)  # before the model is loaded
    model, tokenizer = load_model(args.model, "cpu")
    save_condensed(model, tokenizer, target)
    print(f"transformers: {target} (one plain model for every direction; translate/serve --model take it)")


def _export_multilingual(args: argparse.Namespace) -> None:
    refuse_to_overwrite(Path(args.output_dir), args.force)  # before the model is loaded
    model, tokenizer = load_model(args.model, "cpu")
    save_as_checkpoint(model, tokenizer, args.output_dir, force=args.force)
    print(f"an M2M100ForConditionalGeneration and its NllbTokenizerFast in {args.output_dir}: "
          "model.init_from_pretrained starts from it")  # fmt: skip


def _export_language_pack(args: argparse.Namespace) -> None:
    output = Path(args.output_dir)
    if not args.language_pack:
        raise ValueError("--language-pack names no language; give the codes whose modules to pack, e.g. fra_Latn")
    if output.exists() and any(output.iterdir()):  # before the model is loaded; a pack is never written over
        raise ValueError(f"--output-dir {output} is not empty; give a new folder for the language pack")
    model, tokenizer = load_model(args.model, "cpu")
    export_language_pack(model, tokenizer, args.language_pack, output)
    print(f"language pack of {', '.join(args.language_pack)}: {output} (put it in a `serve --language-dir` folder)")


def _export_directions(args: argparse.Namespace, single: bool) -> None:
    if args.directions is not None and args.no_ctranslate2:
        raise ValueError("--directions writes CTranslate2 models (for `serve`); drop --no-ctranslate2, or export one "
                         "direction with --src-lang/--tgt-lang")  # fmt: skip
    pairs = [split_direction(direction) for direction in args.directions] if not single else []

    out = Path(args.output_dir)
    if single:
        targets = [out / "transformers"] + ([] if args.no_ctranslate2 else [out / "ctranslate2"])
    else:
        targets = [out / f"{src}-{tgt}" / "ctranslate2" for src, tgt in pairs]
    for target in targets:  # what export_direction(s) refuses, refused before the model is loaded
        refuse_to_overwrite(target, args.force)
    model, tokenizer = load_model(args.model, "cpu")
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
    folders = export_directions(model, tokenizer, pairs, args.output_dir, args.quantization, force=args.force)
    print(f"{len(folders)} directions exported to {args.output_dir}; serve them with "
          f"`hf-langspec serve --export {args.output_dir}`")  # fmt: skip


def cmd_serve(args: argparse.Namespace) -> None:
    from ..export.access import AccessPolicy, read_secrets
    from ..export.backends import CTranslate2Backend, ModelBackend
    from ..export.server import ServerLimits, TranslationServer

    if (args.export is None) == (args.model is None):
        raise ValueError("give --export DIR (CTranslate2 directions) or --model DIR (the generic model)")
    if args.language_dir is not None and (args.model is None or not args.language_dir.is_dir()):
        raise ValueError(f"--language-dir {args.language_dir} adds language packs to --model's languages: give it "
                         "with --model, as an existing folder")  # fmt: skip
    check_port_free(args.host, args.port)  # before a model is loaded
    if args.max_queue < args.max_batch:  # the Batcher would refuse it, but only after the model is loaded
        raise ValueError(f"--max-queue {args.max_queue} is below --max-batch {args.max_batch}: a full batch must "
                         "fit in the queue; raise --max-queue or lower --max-batch")  # fmt: skip
    limits = ServerLimits(max_queue=args.max_queue, timeout=args.timeout)
    access = AccessPolicy(  # the files read before a model is loaded: a bad one is one line at once
        api_keys=read_secrets(args.api_keys, "--api-keys") if args.api_keys else (),
        admin_token=read_secrets(args.admin_token_file, "--admin-token-file")[0] if args.admin_token_file else None,
        requests_per_minute=args.requests_per_minute, max_chars=args.max_chars, cors_origins=tuple(args.cors_origins or ()),
    )  # fmt: skip
    if args.export is not None:
        backend = CTranslate2Backend(args.export, device=args.device, threads=args.threads)
    else:
        if Path(args.model).is_dir() and (problem := described_model_problem(args.model)):
            raise ValueError(f"Not serving {args.model}: {problem}.")
        model, tokenizer = load_model(args.model, args.device)
        backend = ModelBackend(model, tokenizer, args.directions)
    server = TranslationServer(
        backend, args.host, args.port, max_batch=args.max_batch, max_wait=args.max_wait_ms / 1000,
        mixed=not args.per_direction, limits=limits, max_tokens=args.max_batch_tokens, language_dir=args.language_dir,
        access=access, forwarded_allow_ips=args.forwarded_allow_ips,
    )  # fmt: skip
    for warning in server.warnings:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    print(f"serving {len(backend.directions)} directions ({backend.name}) at {server.url}: GET /health, /ready, "
          f"/languages, /metrics, /docs; POST /translate (LibreTranslate's requests too); Ctrl-C stops", flush=True)  # fmt: skip
    server.serve_forever()  # SIGINT / SIGTERM: answers what is queued, then stops


def cmd_push(args: argparse.Namespace) -> None:
    print(push_model(args.model, args.repo_id, private=args.private, allow_pickles=args.allow_pickles,
                     include=args.include))  # fmt: skip
