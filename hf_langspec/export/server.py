"""`hf-langspec serve`: many directions of one model behind one ASGI application (FastAPI under uvicorn).

The routes (the OpenAPI schema at `/openapi.json`, its pages at `/docs`):

    GET  /health     liveness: {"status": "ok", "backend": ..., "directions": [...], "queue_texts": ...} (and,
                     for the generic model, "memory": {"base_bytes": ..., "language_modules_bytes": ...})
    GET  /ready      readiness: 200 while requests are taken, 503 once the server is shutting down
    GET  /languages  LibreTranslate's list: [{"code": "en", "name": "en", "targets": ["de", ...]}, ...]
    GET  /metrics    Prometheus: requests, latency, batch sizes, texts and source tokens translated, queue length
    POST /translate  the package's {"text", "src_lang", "tgt_lang"} (or a list) or LibreTranslate's
                     {"q", "source", "target"} (JSON or form-encoded): see `api.py`
    POST /admin/reload-languages  with `language_dir` (`serve --language-dir`) and an admin token (`serve
                     --admin-token-file`): add the language packs put there since the last load (`language_packs.py`);
                     {"added_languages", "added_directions", "languages"}

Texts go to `Batcher`s (batching.py): the generic model's one batcher takes every direction together (one forward,
one beam search, each example through its own languages' modules; `mixed=False` keeps one per direction), and
CTranslate2 has one per direction. Limits (`ServerLimits`): body size (413), texts per request and text length in
tokens (400), texts waiting (503 with Retry-After), and a per-request timeout (504). Every refusal is
`{"error": "..."}` naming the fix; the server keeps serving. SIGINT / SIGTERM (or `close()`) stop taking
connections, answer the requests already queued, then stop. It listens on 127.0.0.1 unless told otherwise, and
says so when told to listen beyond it without API keys. Who may call it and how much (API keys, the admin token,
per-key and per-address limits, CORS, JSON-only content types): `AccessPolicy` (access.py), 403 / 429 / 413 / 415.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

try:  # the `serve` extra
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.openapi.utils import get_openapi
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
    from starlette.exceptions import HTTPException
    from starlette.middleware.cors import CORSMiddleware
    from starlette.responses import Response
except ImportError as missing:  # pragma: no cover (the test environment has the extra)
    raise RuntimeError(
        f"hf-langspec serve needs FastAPI, uvicorn and prometheus-client ({missing}); pip install 'hf_langspec[serve]'"
    ) from None

from .. import __version__
from ..data.schema import split_direction
from .access import AccessPolicy, bearer_token, is_loopback
from .api import (
    FORM,
    ErrorBody,
    LibreTranslateLanguage,
    LibreTranslateRequest,
    LibreTranslateResponse,
    RequestError,
    Translation,
    TranslationItem,
    TranslationJob,
    check_lengths,
    check_request,
    parse_body,
    rows_by_direction,
)
from .batching import Batcher, QueueFull
from .language_packs import PACK_FILE
from .sockets import listening_socket

logger = logging.getLogger(__name__)
ROUTES = "GET /health, /ready, /languages, /metrics, /docs or POST /translate, /admin/reload-languages"


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask, and how long it may wait."""

    max_body_bytes: int = 1 << 20  # 1 MiB of JSON
    max_texts: int = 256  # texts per request
    max_queue: int = 1024  # texts waiting for a batcher; more: 503 with Retry-After
    timeout: float = 60.0  # seconds a request waits for its translations; more: 504
    retry_after: int = 1  # seconds, in a 503's Retry-After

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_texts", "max_queue", "retry_after"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be a whole number of at least 1.")
        if not self.timeout > 0:
            raise ValueError(f"timeout={self.timeout!r} must be a positive number of seconds.")


# ---------------------------------------------------------------------------- the service behind the routes
class ServerMetrics:
    """The server's Prometheus metrics, in a registry of its own (several servers may share a process)."""

    def __init__(self, queue_texts: Callable[[], int]):
        self.registry = CollectorRegistry()
        kw = {"registry": self.registry}
        self.requests = Counter("hf_langspec_requests", "HTTP requests answered", ["route", "status"], **kw)
        self.latency = Histogram("hf_langspec_request_seconds", "time to answer a request", ["route"], **kw)
        self.batch_texts = Histogram("hf_langspec_batch_texts", "texts per translated batch",
                                     buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), **kw)  # fmt: skip
        self.batch_seconds = Histogram("hf_langspec_batch_seconds", "time to translate one batch", **kw)
        self.texts = Counter("hf_langspec_translated_texts", "texts translated", **kw)
        self.source_tokens = Counter(
            "hf_langspec_source_tokens", "source tokens translated (rate() gives tokens per second)", **kw
        )
        Gauge("hf_langspec_queue_texts", "texts waiting for a batch", **kw).set_function(queue_texts)

    def batch(self, texts: int, seconds: float) -> None:
        self.batch_texts.observe(texts)
        self.batch_seconds.observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class TranslationService:
    """A backend behind its batchers, with the server's limits and metrics: what the routes call."""

    def __init__(self, backend: Any, max_batch: int = 32, max_wait: float = 0.005, mixed: bool = True,
                 limits: ServerLimits | None = None, max_tokens: int | None = None,
                 language_dir: str | Path | None = None):  # fmt: skip
        self.backend, self.limits, self.draining = backend, limits or ServerLimits(), False
        self.metrics = ServerMetrics(self.queue_texts)
        # a max_queue below max_batch is refused by the Batcher (a full batch must fit), not raised in silence
        settings = {"max_batch": max_batch, "max_wait": max_wait, "max_queue": self.limits.max_queue,
                    "max_tokens": max_tokens, "on_batch": self.metrics.batch}  # fmt: skip
        self._settings = settings
        self.mixed = hasattr(backend, "translate_mixed") and mixed  # one batch for every direction: the routed model
        mixed_batcher = Batcher(backend.translate_mixed, "mixed", **settings) if self.mixed else None
        self.batchers = {d: mixed_batcher or self._direction_batcher(d) for d in backend.directions}
        self._closed = False
        self.language_dir, self.loaded_packs = None, set()
        if language_dir is not None:
            if not hasattr(backend, "add_languages"):
                raise ValueError("--language-dir adds language modules to the generic model (--model); exported "
                                 "CTranslate2 directions hold no language modules apart from the base")  # fmt: skip
            self.language_dir = Path(language_dir)
            self.reload_languages()  # the packs already there, before the first request

    def _direction_batcher(self, direction: str) -> Batcher:
        return Batcher(lambda _, texts: self.backend.translate(direction, texts), direction, **self._settings)

    def reload_languages(self) -> dict[str, Any]:
        """Add the language packs in the language folder that are not loaded yet (`export.language_packs`): their
        directions are served from the next batch on. Returns what was added; a ValueError names a pack that does
        not fit (nothing of that reload is added)."""
        if self.language_dir is None:
            raise RequestError("this server takes no language packs: start it with --language-dir DIR (with "
                               "--model) and put each pack's folder in DIR", HTTPStatus.NOT_FOUND)  # fmt: skip
        if not self.language_dir.is_dir():
            raise ValueError(
                f"--language-dir {self.language_dir} is not a folder; create it and put language packs in it"
            )
        folders = sorted(
            f for f in self.language_dir.iterdir() if (f / PACK_FILE).is_file() and f.name not in self.loaded_packs
        )
        added, new = self.backend.add_languages(folders) if folders else ([], [])
        mixed = next(iter(self.batchers.values())) if self.mixed else None
        for direction in new:
            self.batchers[direction] = mixed or self._direction_batcher(direction)
        self.loaded_packs |= {f.name for f in folders}
        return {
            "added_languages": added,
            "added_directions": new,
            "languages": list(self.backend.model.config.languages),
        }

    @property
    def directions(self) -> list[str]:
        return sorted(self.batchers)

    def queue_texts(self) -> int:
        """Texts waiting for a batch, over every batcher (the mixed one serves every direction: counted once)."""
        return sum(batcher.waiting for batcher in set(self.batchers.values()))

    def check(self, payload: Any) -> tuple[TranslationJob, list[int]]:
        """The request's job and each text's source tokens, or a RequestError naming the fix."""
        job = check_request(payload, self.directions, self.limits.max_texts)
        return job, check_lengths(job, self.backend.source_lengths, self.backend.max_source_tokens)

    async def translate(self, job: TranslationJob, lengths: list[int] | None = None) -> list[str]:
        """The job's translations in order; each direction's texts go to its batcher at once (`lengths`: each
        text's source tokens, for the batchers' token budget)."""
        rows = rows_by_direction(job.items)
        futures = {}
        try:
            for direction, members in rows.items():
                texts = [job.items[i]["text"] for i in members]
                tokens = [lengths[i] for i in members] if lengths is not None else None
                futures[direction] = self.batchers[direction].submit([direction] * len(members), texts, tokens)
        except QueueFull as full:
            for future in futures.values():  # what was queued of this request is dropped, not translated
                future.cancel()
            raise RequestError(f"the server is busy: {full}; retry after {self.limits.retry_after} s",
                               HTTPStatus.SERVICE_UNAVAILABLE, {"Retry-After": str(self.limits.retry_after)}) from None  # fmt: skip
        waits = [asyncio.wrap_future(future) for future in futures.values()]
        try:
            results = await asyncio.wait_for(asyncio.gather(*waits), self.limits.timeout)
        except TimeoutError:  # the texts not yet in a batch are cancelled with it
            raise RequestError(
                f"the translation took longer than the server's {self.limits.timeout:g} s timeout; send fewer "
                "texts per request or retry later", HTTPStatus.GATEWAY_TIMEOUT,
            ) from None  # fmt: skip
        outputs = [""] * len(job.items)
        for members, texts in zip(rows.values(), results, strict=True):
            for i, text in zip(members, texts, strict=True):
                outputs[i] = text
        self.metrics.texts.inc(len(outputs))
        return outputs

    def health(self) -> dict[str, Any]:
        backend = self.backend
        health = {"status": "ok", "backend": backend.name, "directions": self.directions,
                  "queue_texts": self.queue_texts()}  # fmt: skip
        if hasattr(backend, "memory"):  # the generic model: one base, the language modules beside it
            health["memory"] = backend.memory()
        return health

    def languages(self) -> list[dict[str, Any]]:
        """LibreTranslate's `/languages`: each source language and the languages it is translated into."""
        targets: dict[str, list[str]] = {}
        for direction in self.directions:
            src, tgt = split_direction(direction)
            targets.setdefault(src, []).append(tgt)
        return [{"code": code, "name": code, "targets": sorted(tgts)} for code, tgts in sorted(targets.items())]

    def close(self) -> None:
        """Answer what is queued, then stop the batchers (once; the mixed batcher serves every direction)."""
        if not self._closed:
            self._closed = True
            for batcher in set(self.batchers.values()):
                batcher.close()


# ---------------------------------------------------------------------------- the ASGI application
class JSONBody(Response):
    """UTF-8 JSON; a text the client sent with a lone surrogate is echoed as an escape, not a crash."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(content, separators=(",", ":")).encode("ascii")


def _schemas() -> tuple[dict[str, Any], dict[str, Any]]:
    """OpenAPI components for the request and response models, and `/translate`'s request and response bodies."""
    from pydantic.json_schema import models_json_schema

    models = [TranslationItem, Translation, LibreTranslateRequest, LibreTranslateResponse]
    _, top = models_json_schema([(m, "validation") for m in models], ref_template="#/components/schemas/{model}")

    def ref(model: type) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    def many(model: type) -> dict[str, Any]:
        return {"type": "array", "items": ref(model)}

    request = {"anyOf": [ref(TranslationItem), many(TranslationItem), ref(LibreTranslateRequest)]}
    response = {"anyOf": [ref(Translation), many(Translation), ref(LibreTranslateResponse)]}
    content = {"application/json": {"schema": request}, FORM: {"schema": ref(LibreTranslateRequest)}}
    answer = {"description": "the translations, in the request's form and order",
              "content": {"application/json": {"schema": response}}}  # fmt: skip
    paths = {"requestBody": {"required": True, "content": content}, "responses": {"200": answer}}
    return top["$defs"], paths


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 past `limit` bytes (declared or streamed) before it is all read."""
    declared = request.headers.get("content-length")
    too_large = f"send at most {limit} bytes per request (split the texts over several)"
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"the body is {declared} bytes; {too_large}", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise RequestError(f"the body is over {limit} bytes; {too_large}", HTTPStatus.REQUEST_ENTITY_TOO_LARGE)
    return bytes(body)


def _answer_refusals_and_measure(app: FastAPI, service: TranslationService) -> None:
    """Refusals answered as `{"error": ...}` naming the fix, and every request counted and timed by route."""

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> Response:
        return JSONBody({"error": str(error)}, status_code=error.status, headers=error.headers)

    @app.exception_handler(HTTPException)  # an unknown route or method
    async def no_route(request: Request, error: HTTPException) -> Response:
        return JSONBody({"error": f"no {request.method} {request.url.path}; use {ROUTES}"}, error.status_code)

    @app.middleware("http")
    async def measure(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        route = request.url.path if request.url.path in app.state.routes else "other"  # bounded label values
        service.metrics.requests.labels(route, str(response.status_code)).inc()
        service.metrics.latency.labels(route).observe(time.perf_counter() - started)
        return response


def create_app(service: TranslationService, access: AccessPolicy | None = None) -> FastAPI:
    """The FastAPI application over a `TranslationService` (run it under any ASGI server), open to whom `access`
    says (access.py; default: everyone, as a loopback server)."""
    access = access or AccessPolicy()
    app = FastAPI(title="hf-langspec translation server", version=__version__, default_response_class=JSONBody)
    app.state.service, app.state.access = service, access
    components, translate_schema = _schemas()
    refusals = {str(int(s)): {"model": ErrorBody} for s in (400, 403, 413, 415, 429, 503, 504)}
    if access.cors_origins:  # without it no CORS header is sent: a browser keeps other sites' pages from the answers
        app.add_middleware(CORSMiddleware, allow_origins=list(access.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])  # fmt: skip

    _answer_refusals_and_measure(app, service)

    @app.get("/health", summary="liveness, the directions served and the memory of the weights")
    async def health() -> dict[str, Any]:
        return service.health()

    @app.get("/ready", summary="200 while requests are taken, 503 while shutting down",
             responses={503: {"model": ErrorBody}})  # fmt: skip
    async def ready() -> Response:
        if service.draining:
            return JSONBody({"error": "shutting down; send requests to another replica"}, 503)
        return JSONBody({"ready": True})

    @app.get("/languages", response_model=list[LibreTranslateLanguage], summary="LibreTranslate's language list")
    async def languages() -> list[dict[str, Any]]:
        return service.languages()

    @app.post("/admin/reload-languages", summary="add the language packs put in --language-dir since the last load")
    async def reload_languages(request: Request) -> dict[str, Any]:
        access.check_admin(bearer_token(request.headers.get("authorization")))
        try:
            return await asyncio.to_thread(service.reload_languages)
        except ValueError as error:  # a pack that does not fit: nothing of it is served, the server keeps serving
            raise RequestError(str(error)) from None

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    async def metrics() -> Response:
        body, content_type = service.metrics.exposition()
        return Response(body, media_type=content_type)

    @app.post("/translate", summary="translate texts (the package's form or LibreTranslate's)",
              openapi_extra=translate_schema, responses=refusals)  # fmt: skip
    async def translate(request: Request) -> Any:
        body = await _read_body(request, service.limits.max_body_bytes)
        payload = parse_body(body, request.headers.get("content-type", ""))
        field = payload.get("api_key") if isinstance(payload, dict) else None
        key = access.check_key(bearer_token(request.headers.get("authorization")), field)
        access.check_rate(key, request.client.host if request.client else None)
        job, lengths = service.check(payload)
        access.check_chars(item["text"] for item in job.items)
        try:
            outputs = await service.translate(job, lengths)
        except RequestError:
            raise
        except Exception as error:  # a failure inside the model: report it, keep serving
            logger.exception("request failed")
            return JSONBody({"error": f"translation failed: {error}"}, 500)
        service.metrics.source_tokens.inc(sum(lengths))
        return job.answer(outputs)

    app.state.routes = {route.path for route in app.routes}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    return app


# ---------------------------------------------------------------------------- the server
class TranslationServer:
    """The application under uvicorn on one socket: `serve_forever()` to run (in the main thread it stops on SIGINT
    or SIGTERM, after answering what is queued), `close()` to stop it from another thread."""

    def __init__(self, backend: Any, host: str = "127.0.0.1", port: int = 8080, max_batch: int = 32,
                 max_wait: float = 0.005, mixed: bool = True, limits: ServerLimits | None = None,
                 max_tokens: int | None = None, language_dir: str | Path | None = None,
                 access: AccessPolicy | None = None, forwarded_allow_ips: str = "127.0.0.1"):  # fmt: skip
        access = access or AccessPolicy()
        self.socket = listening_socket(host, port)
        bound_host, bound_port = self.socket.getsockname()[:2]  # port 0: the one the system chose
        self.url = f"http://[{bound_host}]:{bound_port}" if ":" in bound_host else f"http://{bound_host}:{bound_port}"
        self.warnings = [] if is_loopback(bound_host) or access.api_keys else [
            f"serving on {bound_host}, beyond this machine, without API keys: anyone who reaches port {bound_port} "
            "can translate; give --api-keys FILE, or bind --host 127.0.0.1 behind a reverse proxy"
        ]  # fmt: skip
        for warning in self.warnings:
            logger.warning(warning)
        self.service = TranslationService(backend, max_batch, max_wait, mixed, limits, max_tokens, language_dir)
        self.app = create_app(self.service, access)
        config = uvicorn.Config(
            self.app, log_config=None, access_log=False, lifespan="off", timeout_keep_alive=5,
            timeout_graceful_shutdown=int(self.service.limits.timeout) + 5,  # queued requests end by their timeout
            proxy_headers=True, forwarded_allow_ips=forwarded_allow_ips,  # the client a reverse proxy forwards
        )  # fmt: skip
        service = self.service

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:  # SIGINT / SIGTERM: not ready any more
                service.draining = True
                super().handle_exit(sig, frame)

        self._uvicorn = Server(config)
        self._served, self._stopped = threading.Event(), threading.Event()

    @property
    def backend(self) -> Any:
        return self.service.backend

    def serve_forever(self) -> None:
        self._served.set()
        try:
            self._uvicorn.run(sockets=[self.socket])
        finally:
            self.service.close()  # what was queued is answered first
            self._stopped.set()

    def close(self) -> None:
        """Stop taking connections, answer what is queued, stop (waits for `serve_forever` to return)."""
        self.service.draining = True
        self._uvicorn.should_exit = True
        if self._served.is_set():
            self._stopped.wait()
        else:
            self.service.close()
        self.socket.close()


__all__ = ["ServerLimits", "TranslationServer", "TranslationService", "create_app"]
