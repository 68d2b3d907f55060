"""A server that can face a network (hf_langspec/export/access.py): API keys, the admin token, per-key and
per-address limits, CORS and JSON-only content types, each through a real HTTP client against a running server."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from conftest import cli_exit_code
from test_server_stack import Reverser, call, expected

from hf_langspec.export.access import AccessPolicy, SlidingWindow, read_secrets
from hf_langspec.export.server import TranslationServer

pytestmark = pytest.mark.reliability
KEY, OTHER, THIRD, ADMIN = "k" * 20, "o" * 20, "t" * 20, "a" * 24
ITEM = {"text": "a b", "src_lang": "en", "tgt_lang": "de"}


def request(url, path, payload=None, headers=None, method=None, raw=None):
    data = raw if raw is not None else (None if payload is None else json.dumps(payload).encode())
    headers = {"Content-Type": "application/json", **(headers or {})}
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


@pytest.fixture
def serving():
    servers = []

    def start(**access) -> TranslationServer:
        forwarded = access.pop("forwarded_allow_ips", "127.0.0.1")
        server = TranslationServer(Reverser(), port=0, max_wait=0.01, access=AccessPolicy(**access),
                                   forwarded_allow_ips=forwarded)  # fmt: skip
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def error(raw: bytes) -> str:
    return json.loads(raw)["error"]


def test_with_keys_translate_needs_one_in_the_body_or_the_header(serving):
    from libretranslatepy import LibreTranslateAPI

    url = serving(api_keys=(KEY, OTHER)).url
    status, _, raw = request(url, "/translate", ITEM)
    assert (
        status == 403
        and "this server needs an API key: send it as api_key or as the header Authorization" in error(raw)
    )
    status, _, raw = request(url, "/translate", ITEM, {"Authorization": "Bearer " + "x" * 20})
    assert status == 403 and "the API key is not one of this server's" in error(raw)
    status, _, raw = request(url, "/translate", {"q": "a b", "source": "en", "target": "de", "api_key": "wrong"})
    assert status == 403 and "not one of this server's" in error(raw)
    assert request(url, "/translate", ITEM, {"Authorization": f"Bearer {KEY}"})[0] == 200
    status, _, raw = request(url, "/translate", {"q": "a b", "source": "en", "target": "de", "api_key": OTHER})
    assert status == 200 and json.loads(raw) == {"translatedText": expected("a b", "en-de")}
    client = LibreTranslateAPI(url, api_key=KEY)  # LibreTranslate's own client: the key in its form body
    assert client.translate("alpha beta", "en", "de") == expected("alpha beta", "en-de")
    assert request(url, "/languages", method="GET")[0] == 200 and request(url, "/health", method="GET")[0] == 200


def test_without_keys_a_libretranslate_key_is_ignored(serving):
    url = serving().url
    assert request(url, "/translate", {"q": "a b", "source": "en", "target": "de", "api_key": "anything"})[0] == 200


def test_admin_routes_are_off_without_a_token_and_need_it_with_one(serving):
    status, _, raw = request(serving().url, "/admin/reload-languages", method="POST", raw=b"")
    assert status == 403 and "the admin routes are off: start the server with --admin-token-file FILE" in error(raw)
    url = serving(admin_token=ADMIN).url
    for headers in ({}, {"Authorization": "Bearer " + "b" * 24}, {"Authorization": f"Basic {ADMIN}"}):
        status, _, raw = request(url, "/admin/reload-languages", headers=headers, method="POST", raw=b"")
        assert status == 403 and "the admin token is missing or wrong" in error(raw), headers
    status, _, raw = request(url, "/admin/reload-languages", headers={"Authorization": f"Bearer {ADMIN}"},
                             method="POST", raw=b"")  # fmt: skip
    assert status != 403  # past the token: this backend has no language folder to reload from


@pytest.mark.parametrize("content_type", ["text/plain", "", "application/xml", "text/html; charset=utf-8"])
def test_a_json_route_refuses_other_content_types(serving, content_type):
    """A page elsewhere may post `text/plain` (a form's `enctype`) from its user's browser without asking: refused."""
    status, _, raw = call(serving().url, "/translate", ITEM, content_type=content_type)
    assert status == 415 and "is not read; send the body as application/json" in error(raw)


def test_cors_is_off_unless_origins_are_named(serving):
    preflight = {"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type"}  # fmt: skip
    _, headers, _ = request(serving().url, "/translate", headers=preflight, method="OPTIONS")
    assert headers.get("Access-Control-Allow-Origin") is None
    url = serving(cors_origins=("https://app.example",)).url
    status, headers, _ = request(url, "/translate", headers={**preflight, "Origin": "https://app.example"},
                                 method="OPTIONS")  # fmt: skip
    assert status == 200 and headers.get("Access-Control-Allow-Origin") == "https://app.example"
    _, headers, _ = request(url, "/translate", headers=preflight, method="OPTIONS")
    assert headers.get("Access-Control-Allow-Origin") is None


def test_requests_per_minute_are_counted_per_address_and_per_key(serving):
    url = serving(api_keys=(KEY, OTHER, THIRD), requests_per_minute=2, forwarded_allow_ips="*").url

    def send(key, address):
        return request(url, "/translate", ITEM, {"Authorization": f"Bearer {key}", "X-Forwarded-For": address})

    assert send(KEY, "10.0.0.1")[0] == send(KEY, "10.0.0.2")[0] == 200
    status, headers, raw = send(KEY, "10.0.0.3")  # a third address, the key's third request in the minute
    assert status == 429 and "this API key sent 2 requests in the last minute" in error(raw)
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert send(OTHER, "10.0.0.4")[0] == send(THIRD, "10.0.0.1")[0] == 200  # 10.0.0.1: its second
    status, headers, raw = send(THIRD, "10.0.0.1")  # the key's second, the address's third
    assert status == 429 and "the address 10.0.0.1 sent 2 requests" in error(raw) and "Retry-After" in headers


def test_characters_per_request_are_limited(serving):
    url = serving(max_chars=10).url
    assert request(url, "/translate", {**ITEM, "text": "a" * 10})[0] == 200
    status, _, raw = request(url, "/translate", [ITEM, {**ITEM, "text": "b" * 9}])
    assert status == 413 and "the request holds 12 characters of text; this server takes at most 10" in error(raw)


def test_binding_beyond_the_loopback_without_keys_is_said(serving):
    assert serving().warnings == []
    assert serving(api_keys=(KEY,)).warnings == []
    server = TranslationServer(Reverser(), host="0.0.0.0", port=0)
    try:
        assert server.warnings and "beyond this machine, without API keys" in server.warnings[0]
        assert "give --api-keys FILE" in server.warnings[0]
    finally:
        server.close()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"holds no secret"),
        ("# only a comment\n\n", r"holds no secret"),
        ("short\n", r"line 1: a secret is at least 16 characters"),
        (f"{KEY}\n{KEY}\n", r"line 2: the secret of line 1 again"),
        (f"{KEY} {OTHER}\n", r"line 1: a secret is at least 16 characters without spaces"),
    ],
)
def test_a_keys_file_that_holds_no_usable_key_is_refused_before_the_model_loads(tmp_path, capsys, text, message):
    path = tmp_path / "keys.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_secrets(path, "--api-keys")
    assert cli_exit_code(["serve", "--model", str(tmp_path / "no-model"), "--api-keys", str(path)]) == 2
    assert f"--api-keys {path}" in capsys.readouterr().err


def test_the_window_lets_a_client_go_again_a_minute_after_its_oldest_request():
    window = SlidingWindow(2)
    for now in (0.0, 10.0):
        assert window.wait("c", now=now) == 0
        window.count("c", now=now)
    assert window.wait("c", now=20.0) == pytest.approx(40.0)
    assert window.wait("d", now=20.0) == 0  # another client
    assert window.wait("c", now=60.0) == 0  # the request at 0 left the window
