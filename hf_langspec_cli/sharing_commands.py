"""The `sharing` commands' arguments (their handlers: hf_langspec/cli/sharing_commands.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .command import Command
from .types import codes, device, directions, non_negative_number, port, positive, positive_number, quantization


def _card_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("--results", help="results.json from `hf-langspec evaluate` or `train`")
    p.add_argument("--model-name")
    p.add_argument("--repo-id")
    p.add_argument("--license", default="apache-2.0")
    p.add_argument("--force", action="store_true", help="replace a README.md that hf_langspec did not write")


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
        "--per-direction",
        action="store_true",
        help="with --model: a batch per direction (before: every direction's requests in one batch, each example "
        "through its own modules)",
    )


def _push_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model")
    p.add_argument("--repo-id", required=True)
    p.add_argument("--private", action="store_true")
    p.add_argument("--allow-pickles", action="store_true", help="upload pickled files too (they can run code)")
    p.add_argument(
        "--include",
        nargs="+",
        default=[],
        metavar="NAME",
        help="files of the folder to upload beside the model's own (anything else refuses the push)",
    )


COMMANDS = [
    Command(
        "card",
        "hf_langspec.cli.sharing_commands:cmd_card",
        _card_arguments,
        help="write README.md (model card with model-index) into a model folder",
    ),
    Command(
        "export",
        "hf_langspec.cli.sharing_commands:cmd_export",
        _export_arguments,
        help="fold directions into plain models: CTranslate2 (every backbone) and Marian/M2M100 where one fits",
    ),
    Command(
        "serve",
        "hf_langspec.cli.sharing_commands:cmd_serve",
        _serve_arguments,
        help="translate many directions over HTTP on localhost (an ASGI app, LibreTranslate-compatible)",
    ),
    Command(
        "push",
        "hf_langspec.cli.sharing_commands:cmd_push",
        _push_arguments,
        help="upload a model folder to the Hugging Face Hub",
    ),
]
