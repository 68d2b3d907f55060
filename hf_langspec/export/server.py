"""`hf-langspec serve`: many directions of one model behind one small HTTP server on localhost.

Two backends answer the same API:

* `CTranslate2Backend`: the folders of `hf-langspec export --directions ...` (one CTranslate2 model per
  direction, the language modules folded in; CTranslate2 keeps no weights outside a model's file, so each
  direction holds its own copy of the shared ones);
* `ModelBackend`: the generic model itself, every direction through one copy of the weights (slower per
  sentence, and the only way for methods that do not fold: CLM, HLT-MT, adapters).

Requests that arrive together are translated together: a worker thread takes what is queued (up to `max_batch`
sentences, waiting at most `max_wait` seconds after the first) and answers every request of that batch. The
generic model batches every direction together (one forward, one beam search, each example through its own
languages' modules; `mixed=False` keeps a worker per direction); CTranslate2 has a worker per direction. The HTTP layer is the standard library's threading server:

    GET  /health     -> {"status": "ok", "backend": ..., "directions": ["en-de", ...]} (and, for the generic
                        model, "memory": {"base_bytes": ..., "language_modules_bytes": ...})
    POST /translate  {"text": ..., "src_lang": ..., "tgt_lang": ...}  or a list of such objects
                     -> {"translation": ..., "src_lang": ..., "tgt_lang": ...}  (or a list, in order)

Bad requests get a 4xx with `{"error": "..."}` naming the fix (unknown direction: the known ones; a text
longer than the model reads: its length and the limit; blank text, wrong JSON, missing or unknown
fields); the server keeps serving. Nothing is truncated silently.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..data.schema import check_direction, split_direction
from ..model_folder import json_problem
from ..tokenization.tokenization_langspec import encode_with_template
from .ct2 import DIRECTION_FILE, generation_budget, translate_ctranslate2

logger = logging.getLogger(__name__)
MAX_BODY_BYTES = 1 << 20  # one request: 1 MiB of JSON
MAX_TEXTS = 256  # texts per request
FIELDS = ("text", "src_lang", "tgt_lang")


class RequestError(ValueError):
    """A request the server refuses: the message goes back to the client with `status`."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST):
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------- backends
def _is_direction(name: str) -> bool:
    """Whether a folder name is a direction (`en-de`, `pt_BR-en`): what `export --directions` names its folders."""
    try:
        split_direction(name)
    except ValueError:
        return False
    return True


class CTranslate2Backend:
    """Directions exported by `export_directions`: every `<src>-<tgt>/ctranslate2` folder under `export_dir`."""

    name = "ctranslate2"

    def __init__(self, export_dir: str | Path, device: str = "cpu", threads: int = 1, compute_type: str = "default"):
        import ctranslate2
        from transformers import AutoTokenizer

        export_dir = Path(export_dir)
        folders = sorted(export_dir.glob(f"*/ctranslate2/{DIRECTION_FILE}"))
        command = "`hf-langspec export --model MODEL --directions en-de,de-en --output-dir DIR`"
        if not folders:
            raise ValueError(f"{export_dir} holds no exported direction (no */ctranslate2/{DIRECTION_FILE}); write one with {command}.")  # fmt: skip
        again = f"export it again with {command}"
        # a direction's folder without its files (an interrupted export, a removed folder) is not served silently
        broken = [f.name for f in sorted(export_dir.iterdir()) if f.is_dir() and _is_direction(f.name) and not (f / "ctranslate2" / DIRECTION_FILE).is_file()]  # fmt: skip
        if broken:
            raise ValueError(f"{export_dir}: {', '.join(broken)} has no ctranslate2/{DIRECTION_FILE}; {again}.")
        self.translators, self.tokenizers, self.settings = {}, {}, {}
        for path in folders:
            folder = path.parent
            damaged = next(filter(None, (json_problem(f) for f in sorted(folder.glob("*.json")))), None)
            if damaged:
                raise ValueError(f"Exported direction {folder}: {damaged}; {again}.")
            try:
                settings = json.loads(path.read_text(encoding="utf-8"))
                direction = f"{settings['src_lang']}-{settings['tgt_lang']}"
                translator = ctranslate2.Translator(
                    str(folder), device=device, inter_threads=1, intra_threads=threads, compute_type=compute_type
                )
                self.tokenizers[direction] = AutoTokenizer.from_pretrained(folder)
            except (ValueError, KeyError, TypeError, RuntimeError, OSError) as err:  # JSON, ctranslate2, tokenizers
                reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise ValueError(f"Exported direction {folder} cannot be loaded ({reason}); {again}.") from None
            self.translators[direction], self.settings[direction] = translator, settings

    @property
    def directions(self) -> list[str]:
        return sorted(self.translators)

    def source_lengths(self, direction: str, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in encode_with_template(self.tokenizers[direction], list(texts))]

    def max_source_tokens(self, direction: str) -> int:
        return self.settings[direction]["max_source_tokens"]

    def translate(self, direction: str, texts: list[str]) -> list[str]:
        settings, tokenizer = self.settings[direction], self.tokenizers[direction]
        ids = translate_ctranslate2(
            self.translators[direction], tokenizer, texts, beam_size=settings["beam_size"],
            max_new_tokens=settings["max_new_tokens"], forced_first_token=settings["forced_first_token"],
            length_penalty=settings["length_penalty"], max_input_length=0,
            suppress_sequences=settings.get("suppress_sequences") or None,  # absent in exports made before them
            no_repeat_ngram_size=settings.get("no_repeat_ngram_size", 0),
        )  # fmt: skip
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


class ModelBackend:
    """The generic model: every direction (or those given) through one copy of the weights, one batch at a time."""

    name = "transformers"

    def __init__(self, model: Any, tokenizer: Any, directions: Sequence[str] | None = None):
        tokenizer.check_model(model)
        self.model, self.tokenizer = model.eval(), tokenizer
        languages = model.config.languages
        self._directions = list(directions or [f"{s}-{t}" for s in languages for t in languages if s != t])
        for direction in self._directions:  # refused here as translate() would refuse each request
            check_direction(*split_direction(direction), model.config)
        self._lock = threading.Lock()  # one torch call at a time: concurrent ones would share the same cores

    @property
    def directions(self) -> list[str]:
        return sorted(self._directions)

    def memory(self) -> dict[str, int]:
        """Bytes of weights: the shared base and the language modules beside it (one copy for every direction)."""
        from ..modeling.modeling_langspec import language_module_parameter

        sizes = {"base_bytes": 0, "language_modules_bytes": 0}
        for name, parameter in self.model.named_parameters():
            key = "language_modules_bytes" if language_module_parameter(name) else "base_bytes"
            sizes[key] += parameter.numel() * parameter.element_size()
        return sizes

    def source_lengths(self, direction: str, texts: Sequence[str]) -> list[int]:
        src, tgt = split_direction(direction)
        return [len(ids) for ids in self.tokenizer(list(texts), src_lang=src, tgt_lang=tgt)["input_ids"]]

    def max_source_tokens(self, direction: str) -> int:
        return self.model.config.max_position_embeddings

    def translate(self, direction: str, texts: list[str]) -> list[str]:
        return self.translate_mixed([direction] * len(texts), texts)

    def translate_mixed(self, directions: list[str], texts: list[str]) -> list[str]:
        """Texts of any directions (one per text) in one batch: one forward and one beam search, each example
        through its own languages' modules."""
        from ..evaluation.translate import translate

        pairs = [split_direction(direction) for direction in directions]
        with self._lock:
            return translate(
                self.model, self.tokenizer, texts, [s for s, _ in pairs], [t for _, t in pairs], batch_size=len(texts),
                max_source_length=None, show_progress=False, one_batch=True, **generation_budget(self.model),
            )  # fmt: skip


# ---------------------------------------------------------------------------- batching
class Batcher:
    """One worker thread that joins the texts of requests queued together into one batch and translates them with
    `translate(directions, texts)` (one direction per text): texts wait at most `max_wait` seconds after the first
    for more, up to `max_batch` of them. A batcher per direction (CTranslate2: a model each) or one for all
    directions (the generic model: `ModelBackend.translate_mixed`, every example its own modules)."""

    def __init__(self, translate: Any, name: str, max_batch: int = 32, max_wait: float = 0.005):
        if max_batch < 1 or not max_wait >= 0:  # a batch of 0 would never be taken; a negative wait raises later
            raise ValueError(f"max_batch={max_batch} must be at least 1 and max_wait={max_wait} at least 0 seconds.")
        self.translate, self.name, self.max_batch, self.max_wait = translate, name, max_batch, max_wait
        self.queue: queue.Queue[tuple[list[str], list[str], Future] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._work, name=f"batcher-{name}", daemon=True)
        self.thread.start()

    def submit(self, directions: list[str], texts: list[str]) -> Future:
        future: Future = Future()
        self.queue.put((directions, texts, future))
        return future

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def _work(self) -> None:
        while (first := self.queue.get()) is not None:
            jobs, size, stop = [first], len(first[1]), False
            while size < self.max_batch:  # what arrives within max_wait joins this batch
                try:
                    job = self.queue.get(timeout=self.max_wait)
                except queue.Empty:
                    break
                if job is None:
                    stop = True
                    break
                jobs.append(job)
                size += len(job[1])
            self._run(jobs)
            if stop:
                return

    def _run(self, jobs: list[tuple[list[str], list[str], Future]]) -> None:
        directions = [direction for job_directions, _, _ in jobs for direction in job_directions]
        texts = [text for _, job_texts, _ in jobs for text in job_texts]
        try:
            outputs = self.translate(directions, texts)
        except Exception as error:  # the requests of this batch fail; the worker keeps serving
            logger.exception("translation of %d texts (%s) failed", len(texts), self.name)
            for _, _, future in jobs:
                future.set_exception(error)
            return
        start = 0
        for _, job_texts, future in jobs:
            future.set_result(outputs[start : start + len(job_texts)])
            start += len(job_texts)


# ---------------------------------------------------------------------------- HTTP
def direction_of(item: dict[str, Any]) -> str:
    return f"{item['src_lang']}-{item['tgt_lang']}"


def rows_by_direction(items: list[dict[str, Any]]) -> dict[str, list[int]]:
    """`{"en-de": [indexes of the items in that direction], ...}`, in order of first appearance."""
    rows: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        rows.setdefault(direction_of(item), []).append(i)
    return rows


def _cannot_listen(host: str, port: int, err: OSError) -> ValueError:
    return ValueError(f"cannot listen on {host}:{port}: {err.strerror}; choose another --port / --host")


def port_problem(port: int) -> str | None:
    """Why `port` cannot be listened on whatever the machine (the CLI's argument check and the server share it)."""
    return None if 0 <= port <= 65535 else f"port {port} is not a TCP port; give one in 1-65535 (0: any free one)"


def check_port_free(host: str, port: int) -> None:
    """Refuse a host and port this machine cannot listen on, before anything expensive (a model) is loaded."""
    import socket

    problem = port_problem(port)
    if problem:
        raise ValueError(f"{problem}.")
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError as err:
            raise _cannot_listen(host, port, err) from None


class TranslationServer(ThreadingHTTPServer):
    """A threading HTTP server over a backend; `serve_forever()` to run, `close()` to stop it and its workers."""

    daemon_threads = True

    def __init__(self, backend: Any, host: str = "127.0.0.1", port: int = 8080, max_batch: int = 32,
                 max_wait: float = 0.005, mixed: bool = True):  # fmt: skip
        self.backend = backend
        try:
            super().__init__((host, port), _Handler)
        except OSError as err:  # the port is taken, or the host is not this machine's
            raise _cannot_listen(host, port, err) from None
        if hasattr(backend, "translate_mixed") and mixed:  # one batch for every direction: the routed model
            batcher = Batcher(backend.translate_mixed, "mixed", max_batch, max_wait)
            self.batchers = dict.fromkeys(backend.directions, batcher)
        else:
            self.batchers = {d: Batcher(lambda _, texts, d=d: backend.translate(d, texts), d, max_batch, max_wait)
                             for d in backend.directions}  # fmt: skip

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def translate_items(self, items: list[dict[str, Any]]) -> list[str]:
        """Translations of checked request items, in order; each direction's texts go to its batcher at once."""
        rows = rows_by_direction(items)
        futures = {d: self.batchers[d].submit([d] * len(members), [items[i]["text"] for i in members])
                   for d, members in rows.items()}  # fmt: skip
        outputs = [""] * len(items)
        for direction, members in rows.items():
            for i, text in zip(members, futures[direction].result(), strict=True):
                outputs[i] = text
        return outputs

    def check_items(self, payload: Any) -> tuple[list[dict[str, Any]], bool]:
        """The request's items (and whether it was a single object), or a RequestError naming the fix."""
        single = isinstance(payload, dict)
        items = [payload] if single else payload
        example = '{"text": "...", "src_lang": "en", "tgt_lang": "de"}'
        if not isinstance(items, list) or not items:
            raise RequestError(f"send a JSON object {example} or a non-empty list of them")
        if len(items) > MAX_TEXTS:
            raise RequestError(f"{len(items)} texts in one request; send at most {MAX_TEXTS} per request")
        known = self.backend.directions
        for n, item in enumerate(items):
            where = "" if single else f"item {n}: "
            if not isinstance(item, dict):
                raise RequestError(f"{where}expected an object {example}, got {type(item).__name__}")
            missing = [f for f in FIELDS if not isinstance(item.get(f), str)]
            extra = sorted(set(item) - set(FIELDS))
            if missing or extra:
                problem = f"missing or non-string {missing}" if missing else f"unknown fields {extra}"
                raise RequestError(f"{where}{problem}; an item is {example}")
            if not item["text"].strip():
                raise RequestError(f"{where}the text is blank; send the sentence to translate")
            if direction_of(item) not in self.batchers:
                raise RequestError(
                    f"{where}unknown direction {direction_of(item)}; this server translates {', '.join(known)}"
                )
        for direction, rows in rows_by_direction(items).items():
            limit = self.backend.max_source_tokens(direction)
            lengths = self.backend.source_lengths(direction, [items[n]["text"] for n in rows])
            for n, length in zip(rows, lengths, strict=True):
                if length > limit:
                    raise RequestError(
                        f"{'' if single else f'item {n}: '}the text is {length} tokens long and the model reads at "
                        f"most {limit}; split it into sentences"
                    )
        return items, single

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        for batcher in set(self.batchers.values()):  # the mixed batcher serves every direction: closed once
            batcher.close()


class _Handler(BaseHTTPRequestHandler):
    server: TranslationServer
    protocol_version = "HTTP/1.1"
    timeout = 60  # seconds a client may take to send its request: a stalled one does not hold a thread forever

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/health":
            backend = self.server.backend
            health = {"status": "ok", "backend": backend.name, "directions": backend.directions}
            if hasattr(backend, "memory"):  # the generic model: one base, the language modules beside it
                health["memory"] = backend.memory()
            self._send(HTTPStatus.OK, health)
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no {self.path}; use GET /health or POST /translate"})

    def do_POST(self) -> None:
        try:
            if self.path.rstrip("/") != "/translate":
                raise RequestError(f"no {self.path}; use POST /translate", HTTPStatus.NOT_FOUND)
            items, single = self.server.check_items(self._json())
            outputs = self.server.translate_items(items)
        except RequestError as error:
            self.close_connection = True  # the body may be unread: this connection's stream is not trusted
            self._send(error.status, {"error": str(error)})
            return
        except Exception as error:  # a failure inside the model: report it, keep serving
            logger.exception("request failed")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"translation failed: {error}"})
            return
        answers = [
            {"translation": text, "src_lang": item["src_lang"], "tgt_lang": item["tgt_lang"]}
            for item, text in zip(items, outputs, strict=True)
        ]
        self._send(HTTPStatus.OK, answers[0] if single else answers)

    def _json(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise RequestError("send the JSON body with a Content-Length header", HTTPStatus.LENGTH_REQUIRED)
        if int(length) > MAX_BODY_BYTES:
            raise RequestError(
                f"the body is {length} bytes; send at most {MAX_BODY_BYTES} per request",
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            )
        body = self.rfile.read(int(length))
        try:
            return json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise RequestError(f"the body is not JSON ({error}); send an object like {FIELDS}") from None

    def _send(self, status: HTTPStatus, payload: Any) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.info("%s %s", self.address_string(), format % args)


__all__ = ["Batcher", "CTranslate2Backend", "ModelBackend", "RequestError", "TranslationServer"]
