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
from .arguments import (
    codes,
    device,
    directions,
    load_model,
    non_negative_number,
    port,
    positive,
    positive_number,
    quantization,
)
from .registry import command


def _card_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("--results", help="results.json from `hf-langspec evaluate` or `train`")
    p.add_argument("--model-name")
    p.add_argument("--repo-id")
    p.add_argument("--license", default="apache-2.0")
    p.add_argument("--force", action="store_true", help="replace a README.md that hf_langspec did not write")


@command("card", _card_arguments, help="write README.md (model card with model-index) into a model folder")
def cmd_card(args: argparse.Namespace) -> None:
    results = load_results(args.results) if args.results else None
    path = write_model_card(
        args.model, results, force=args.force, model_name=args.model_name, repo_id=args.repo_id, license=args.license
    )
    print(f"model card written to {path}")


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a trained model folder (with its tokenizer)")
    p.add_argument("--src-lang", help="one direction: its source language")
    p.add_argument("--tgt-lang", help="one direction: its target language")
    p.add_argument(
        "--directions", type=directions, help="en-de,de-en,...: one CTranslate2 model per direction, for `serve`"
    )
    p.add_argument(
        "--multilingual", action="store_true",
        help="the whole model (a baseline, NLLB's tag convention) as a plain M2M-100 checkpoint with an NLLB "
        "tokenizer, written into --output-dir: a start for model.init_from_pretrained",
    )  # fmt: skip
    p.add_argument(
        "--condensed", action="store_true",
        help="an LMS model trained with fuse distillation as the plain multilingual Transformer it runs at inference "
        "(its shared matrices merged), with its tokenizer, into --output-dir/transformers: every direction, no "
        "language modules (translate, evaluate and serve --model take it)",
    )  # fmt: skip
    p.add_argument(
        "--language-pack", type=codes, metavar="CODES",
        help="xx,yy: these languages' modules alone, into a new --output-dir, for another model adapted on the same "
        "frozen base (`serve --language-dir` adds them while it serves)",
    )  # fmt: skip
    p.add_argument("--output-dir", required=True, help="gets transformers/ and ctranslate2/ (or SRC-TGT/ each)")
    p.add_argument("--no-ctranslate2", action="store_true", help="write only the plain transformers model")
    p.add_argument("--quantization", type=quantization, help="CTranslate2 weight type, e.g. int8 or int8_float32")
    p.add_argument("--force", action="store_true", help="overwrite an existing export")


@command(
    "export",
    _export_arguments,
    help="fold directions into plain models: CTranslate2 (every backbone) and Marian/M2M100 where one fits",
)
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


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--export", help="a folder written by `export --directions` (CTranslate2)")
    p.add_argument("--model", help="or a trained model folder: every direction through one copy of the weights")
    p.add_argument("--directions", type=directions, help="with --model: only these directions (en-de,de-en,...)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port, default=8080, help="0: any free port (the URL is printed)")
    p.add_argument("--device", type=device, default="cpu")
    p.add_argument("--threads", type=positive, default=1, help="CTranslate2 threads per direction")
    p.add_argument(
        "--max-batch",
        type=positive,
        default=32,
        help="sentences decoded together (of one direction with --export or --per-direction)",
    )
    p.add_argument(
        "--max-batch-tokens", type=positive, default=8192,
        help="source tokens per batch, padded to its longest text (fairseq's --max-tokens)",
    )  # fmt: skip
    p.add_argument(
        "--max-wait-ms", type=non_negative_number, default=5.0, help="how long a batch waits for the next request"
    )
    p.add_argument("--max-queue", type=positive, default=1024,
                   help="texts that may wait for a batch; more get 503 with Retry-After")  # fmt: skip
    p.add_argument("--timeout", type=positive_number, default=60.0,
                   help="seconds a request may wait for its translations; longer gets 504")  # fmt: skip
    p.add_argument(
        "--language-dir", type=Path, metavar="DIR",
        help="with --model: add the language packs (`export --language-pack`) in DIR, at start and at each "
        "POST /admin/reload-languages",
    )  # fmt: skip
    p.add_argument("--api-keys", type=Path, metavar="FILE",
                   help="one key a line: /translate then needs one (LibreTranslate's api_key, or Authorization: Bearer)")  # fmt: skip
    p.add_argument("--admin-token-file", type=Path, metavar="FILE",
                   help="the token the admin routes need (Authorization: Bearer); without it they are off")  # fmt: skip
    p.add_argument("--requests-per-minute", type=positive, metavar="N",
                   help="per API key and per client address; more get 429 with Retry-After")  # fmt: skip
    p.add_argument("--max-chars", type=positive, metavar="N", help="characters of text per request; more get 413")
    p.add_argument("--cors-origins", type=codes, metavar="A,B",
                   help="web origins whose pages may call the server from a browser (none by default)")  # fmt: skip
    p.add_argument("--forwarded-allow-ips", default="127.0.0.1", metavar="IPS",
                   help="reverse proxies whose X-Forwarded-For names the client (its address for the limits)")  # fmt: skip
    p.add_argument(
        "--per-direction", action="store_true",
        help="with --model: a batch per direction (before: every direction's requests in one batch, each example "
        "through its own modules)",
    )  # fmt: skip


@command(
    "serve",
    _serve_arguments,
    help="translate many directions over HTTP on localhost (an ASGI app, LibreTranslate-compatible)",
)
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


def _push_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("--repo-id", required=True)
    p.add_argument("--private", action="store_true")
    p.add_argument("--allow-pickles", action="store_true", help="upload pickled files too (they can run code)")
    p.add_argument("--include", nargs="+", default=[], metavar="NAME",
                   help="files of the folder to upload beside the model's own (anything else refuses the push)")  # fmt: skip


@command("push", _push_arguments, help="upload a model folder to the Hugging Face Hub")
def cmd_push(args: argparse.Namespace) -> None:
    print(push_model(args.model, args.repo_id, private=args.private, allow_pickles=args.allow_pickles,
                     include=args.include))  # fmt: skip
