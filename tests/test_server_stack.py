"""The server as a service (issue 58, items 2-3): LibreTranslate's own client, the OpenAPI schema, limits that
answer 413 / 503 + Retry-After / 504, Prometheus metrics, readiness, and a shutdown that answers what is queued.

A stand-in backend (it reverses words, and can be held at a gate) makes timing exact; that the real backends give
`translate()`'s outputs through the server is test_server.py's."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hf_langspec.export.server import ServerLimits, TranslationServer

pytestmark = pytest.mark.reliability


class Reverser:
    """Directions en-de, de-en, en-fr; a translation is the words reversed; `gate` holds every batch until set."""

    name = "stand-in"
    directions = ["de-en", "en-de", "en-fr"]

    def __init__(self):
        self.gate, self.batches = threading.Event(), []
        self.gate.set()

    def source_lengths(self, direction, texts):
        return [len(text.split()) + 2 for text in texts]

    def max_source_tokens(self, direction):
        return 20

    def translate(self, direction, texts):
        self.gate.wait(30)
        self.batches.append(len(texts))
        return [f"{direction}: " + " ".join(reversed(text.split())) for text in texts]


def expected(text, direction):
    return f"{direction}: " + " ".join(reversed(text.split()))


def call(url, path, payload=None, raw=None, content_type="application/json", method=None):
    data = raw if raw is not None else (None if payload is None else json.dumps(payload).encode())
    request = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def started(backend=None, **kw) -> TranslationServer:
    server = TranslationServer(backend or Reverser(), port=0, max_wait=0.01, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server():
    server = started()
    yield server
    server.backend.gate.set()
    server.close()


def test_the_libretranslate_client_translates_and_lists_languages_unchanged(server):
    """The real `libretranslatepy` client (form-encoded requests, its own URL handling) against the server."""
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server.url)
    assert client.translate("alpha beta gamma", "en", "de") == expected("alpha beta gamma", "en-de")
    assert client.translate("ça va, été", "en", "fr") == expected("ça va, été", "en-fr")  # UTF-8 in a form
    assert client.languages() == [{"code": "de", "name": "de", "targets": ["en"]},
                                  {"code": "en", "name": "en", "targets": ["de", "fr"]}]  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as refused:  # no detection here: a 404 naming the routes
        client.detect("alpha")
    assert refused.value.code == 404 and "POST /translate" in json.loads(refused.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        client.translate("alpha", "en", "xx")
    assert "unknown direction en-xx; this server translates de-en, en-de, en-fr" in json.loads(refused.value.read())["error"]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "answer"),
    [
        ({"q": "a b", "source": "en", "target": "de"}, {"translatedText": "en-de: b a"}),
        ({"q": ["a b", "c"], "source": "de", "target": "en", "format": "text", "api_key": "k"},
         {"translatedText": ["de-en: b a", "de-en: c"]}),
        ({"text": "a b", "src_lang": "en", "tgt_lang": "fr"}, {"translation": "en-fr: b a", "src_lang": "en", "tgt_lang": "fr"}),
    ],
)  # fmt: skip
def test_both_request_forms_as_json(server, body, answer):
    status, _, raw = call(server.url, "/translate", body)
    assert status == 200 and json.loads(raw) == answer


@pytest.mark.parametrize(
    "body", [{"text": "a b", "src_lang": "en", "tgt_lang": "fr"}, {"q": "a b", "source": "en", "target": "fr"}]
)
def test_json_sent_with_curls_default_form_type_is_read_as_json(server, body):
    """`curl -d '{...}'` labels its JSON application/x-www-form-urlencoded (the README's curl line does so)."""
    status, _, raw = call(server.url, "/translate", body, content_type="application/x-www-form-urlencoded")
    assert status == 200 and "en-fr: b a" in raw.decode(), raw


BAD = [
    # (body bytes, content type, status, the message's words)
    (json.dumps({"q": "a", "source": "auto", "target": "de"}), "application/json", 400, "source 'auto' (language detection) is not served"),
    (json.dumps({"q": "a", "source": "en", "target": "de", "format": "html"}), "application/json", 400, "format 'html' is not served; send plain text"),
    (json.dumps({"q": "a", "source": "en", "target": "de", "alternatives": 3}), "application/json", 400, "alternatives=3 are not served"),
    (json.dumps({"q": 5, "source": "en", "target": "de"}), "application/json", 400, "q must be a text or a list of texts"),
    (json.dumps({"q": [], "source": "en", "target": "de"}), "application/json", 400, "q is an empty list"),
    (json.dumps({"q": "a", "target": "de"}), "application/json", 400, "missing or non-string ['source']"),
    ("q=a&source=en&source=de&target=fr", "application/x-www-form-urlencoded", 400, "form fields ['source'] are given more than once"),
    ('{"text": "a", "src_lang": "\\ud800", "tgt_lang": "de"}', "application/json", 400, "src_lang holds a lone surrogate (\\ud800); send valid Unicode"),
    ('{"text": "a\\udfff b", "src_lang": "en", "tgt_lang": "de"}', "application/json", 400, "text holds a lone surrogate"),
    ("[" * 100_000 + "]" * 100_000, "application/json", 400, "the body nests deeper than the JSON parser follows"),
    ('{"text": ' + "9" * 5000 + "}", "application/json", 400, "the body is not JSON (Exceeds the limit"),
    (b"\xff\xfe{}", "application/json", 400, "the body is not UTF-8"),
    ("--x\r\n", "multipart/form-data; boundary=x", 415, "multipart bodies are not read; send JSON or application/x-www-form-urlencoded"),
    (json.dumps([{"text": "a", "src_lang": "en", "tgt_lang": "de"}] * 257), "application/json", 400, "257 texts in one request; send at most 256"),
    (json.dumps({"text": "a " * 19, "src_lang": "en", "tgt_lang": "de"}), "application/json", 400, "the text is 21 tokens long and the model reads at most 20"),
    (json.dumps({"text": "a", "src_lang": "en", "tgt_lang": 3}), "application/json", 400, "missing or non-string ['tgt_lang']"),
]  # fmt: skip


def test_bad_bodies_get_a_4xx_naming_the_fix_and_the_server_keeps_serving(server):
    """issue 59's server findings among them: a lone surrogate got no response at all, deep nesting and huge
    numbers a 500 with a console traceback."""
    for body, kind, status, words in BAD:
        raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
        got, _, answer = call(server.url, "/translate", raw=raw, content_type=kind)
        assert got == status and words in json.loads(answer)["error"], (body[:60], got, answer[:300])
    assert call(server.url, "/translate", {"q": "a", "source": "en", "target": "de"})[0] == 200


def test_a_body_over_the_limit_is_413_before_it_is_read():
    server = started(limits=ServerLimits(max_body_bytes=100))
    try:
        status, _, answer = call(server.url, "/translate", {"q": "a" * 200, "source": "en", "target": "de"})
        assert status == 413 and "send at most 100 bytes per request" in json.loads(answer)["error"]
    finally:
        server.close()


def test_a_full_queue_is_503_with_retry_after_and_a_slow_request_504_then_the_server_serves():
    backend = Reverser()
    backend.gate.clear()  # every batch waits
    server = started(backend, max_batch=2, limits=ServerLimits(max_queue=4, timeout=1.0, retry_after=7))
    one = {"q": ["a", "b"], "source": "en", "target": "de"}
    try:
        with ThreadPoolExecutor(4) as pool:
            first = pool.submit(call, server.url, "/translate", one)  # taken into a batch, held at the gate
            time.sleep(0.3)
            queued = [pool.submit(call, server.url, "/translate", one) for _ in range(2)]  # 4 texts wait: full
            time.sleep(0.3)
            status, headers, answer = call(server.url, "/translate", one)
            assert status == 503 and headers["Retry-After"] == "7", answer
            assert (
                "the server is busy: 4 texts are waiting for en-de, at most 4 may; retry after 7 s"
                in json.loads(answer)["error"]
            )
            for future in [first, *queued]:  # the gate stays shut past the 1 s timeout
                status, _, answer = future.result()
                assert status == 504 and "longer than the server's 1 s timeout" in json.loads(answer)["error"]
        backend.gate.set()
        time.sleep(0.3)
        assert json.loads(call(server.url, "/health")[2])["queue_texts"] == 0  # the abandoned texts left the queue
        status, _, answer = call(server.url, "/translate", one)
        assert status == 200 and json.loads(answer) == {"translatedText": ["en-de: a", "en-de: b"]}
        assert backend.batches == [2, 2]  # the held batch, then this one: the timed-out queued ones were dropped
    finally:
        backend.gate.set()
        server.close()


def test_metrics_count_requests_batches_and_tokens(server):
    for text in ["a b", "c d e"]:
        assert call(server.url, "/translate", {"text": text, "src_lang": "en", "tgt_lang": "de"})[0] == 200
    call(server.url, "/translate", raw=b"{", content_type="application/json")
    call(server.url, "/nowhere")
    status, headers, body = call(server.url, "/metrics")
    text = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/plain")

    def value(name):
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(found.group(1)) if found else None

    assert value('hf_langspec_requests_total{route="/translate",status="200"}') == 2
    assert value('hf_langspec_requests_total{route="/translate",status="400"}') == 1
    assert value('hf_langspec_requests_total{route="other",status="404"}') == 1  # unknown paths: one label
    assert value("hf_langspec_translated_texts_total") == 2
    assert value("hf_langspec_source_tokens_total") == (2 + 2) + (3 + 2)  # the stand-in's lengths
    assert value("hf_langspec_batch_texts_count") == 2 and value("hf_langspec_batch_texts_sum") == 2
    assert value("hf_langspec_queue_texts") == 0
    assert value('hf_langspec_request_seconds_count{route="/translate"}') == 3


def test_the_openapi_schema_describes_both_request_forms(server):
    status, _, body = call(server.url, "/openapi.json")
    assert status == 200
    schema = json.loads(body)
    translate = schema["paths"]["/translate"]["post"]
    request = translate["requestBody"]["content"]
    forms = [
        option.get("$ref") or option["items"]["$ref"] for option in request["application/json"]["schema"]["anyOf"]
    ]
    assert forms == ["#/components/schemas/TranslationItem"] * 2 + ["#/components/schemas/LibreTranslateRequest"]
    assert request["application/x-www-form-urlencoded"]["schema"]["$ref"].endswith("/LibreTranslateRequest")
    components = schema["components"]["schemas"]
    assert components["TranslationItem"]["required"] == ["text", "src_lang", "tgt_lang"]
    assert set(components["LibreTranslateRequest"]["properties"]) >= {"q", "source", "target", "format", "api_key"}
    assert {"400", "413", "503", "504"} <= set(translate["responses"])
    assert {"/health", "/ready", "/languages", "/metrics"} <= set(schema["paths"])
    assert call(server.url, "/docs")[0] == 200


def test_readiness_is_503_once_draining(server):
    assert call(server.url, "/ready")[:1] == (200,)
    server.service.draining = True  # what SIGTERM and close() set first
    status, _, answer = call(server.url, "/ready")
    assert status == 503 and "shutting down" in json.loads(answer)["error"]


def test_close_answers_every_queued_request_then_nothing_listens():
    backend = Reverser()
    backend.gate.clear()
    server = started(backend, max_batch=2)
    items = [{"text": f"w{i} x", "src_lang": "en", "tgt_lang": "de"} for i in range(6)]
    assert call(server.url, "/ready")[0] == 200
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(call, server.url, "/translate", item) for item in items]
        time.sleep(0.5)  # all six are in (one batch held at the gate, the rest queued)
        closing = threading.Thread(target=server.close)
        closing.start()
        time.sleep(0.3)
        assert server.service.draining
        backend.gate.set()
        closing.join(30)
        answers = [future.result() for future in futures]
    assert not closing.is_alive()
    assert [json.loads(body)["translation"] for _, _, body in answers] == [expected(i["text"], "en-de") for i in items]
    with pytest.raises(urllib.error.URLError):  # stopped: nothing listens
        urllib.request.urlopen(server.url + "/health", timeout=5)


def test_sigterm_stops_a_server_process_after_answering_queued_requests(tmp_path):
    """A server in its own process (the main thread, as `hf-langspec serve` runs it): SIGTERM while requests wait in the batch window; each is answered,
    then the process ends by that signal (uvicorn re-raises it after draining, as process managers expect) and
    prints nothing that looks like a traceback."""
    script = tmp_path / "serve.py"
    script.write_text(
        f"import sys, time\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_server_stack import Reverser\n"
        "from hf_langspec.export.server import TranslationServer\n"
        "class Slow(Reverser):\n"
        "    def translate(self, direction, texts):\n"
        "        time.sleep(1.0)\n"
        "        return super().translate(direction, texts)\n"
        "server = TranslationServer(Slow(), port=0, max_batch=1)\n"
        "print(server.url, flush=True)\n"
        "server.serve_forever()\n"
    )
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        url = process.stdout.readline().strip()
        items = [{"text": f"w{i} y", "src_lang": "de", "tgt_lang": "en"} for i in range(3)]
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(call, url, "/translate", item) for item in items]
            time.sleep(0.5)  # one in the 1 s batch, two queued behind it
            process.send_signal(signal.SIGTERM)
            answers = [future.result() for future in futures]
        assert [status for status, _, _ in answers] == [200, 200, 200]
        assert process.wait(timeout=30) == -signal.SIGTERM  # uvicorn ends by the signal once it has drained
        assert "Traceback" not in process.stderr.read()
    finally:
        process.kill()
