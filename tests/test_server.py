"""`hf-langspec serve`: mixed directions over HTTP give `translate()`'s outputs; bad requests get a 4xx that names the fix."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import cli_exit_code
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ct2_export import trained_like
from test_specialize import tiny_tokenizer

from hf_langspec.evaluation.translate import translate
from hf_langspec.export.backends import CTranslate2Backend, ModelBackend
from hf_langspec.export.ct2 import export_directions
from hf_langspec.export.server import TranslationServer

pytest.importorskip("ctranslate2")

DIRECTIONS = [("en", "de"), ("de", "en"), ("fr", "de")]
TEXTS = ["alpha beta gamma", "delta alpha beta beta", "gamma", "beta delta gamma alpha delta", "alpha", "delta delta"]
# the papers' backbone (post-norm, fairseq positions, embedding LayerNorm), which no transformers class holds
BACKBONE = {"normalize_before": False, "position_embedding_type": "sinusoidal", "layernorm_embedding": True}


@pytest.fixture(scope="module")
def model_and_export(tmp_path_factory):
    tokenizer = tiny_tokenizer()
    model = trained_like("laa+lee (tied)", BACKBONE, tokenizer)
    model.generation_config.num_beams, model.generation_config.max_new_tokens = 4, 10
    folder = tmp_path_factory.mktemp("serve")
    export_directions(model, tokenizer, DIRECTIONS, folder)
    return model, tokenizer, folder


def running(backend, mixed: bool = True) -> TranslationServer:
    server = TranslationServer(backend, port=0, max_batch=8, max_wait=0.02, mixed=mixed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def post(url: str, payload, raw: bytes | None = None) -> tuple[int, object]:
    body = raw if raw is not None else json.dumps(payload).encode()
    request = urllib.request.Request(f"{url}/translate", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def requests_mixed() -> list[dict]:
    return [{"text": t, "src_lang": s, "tgt_lang": g} for i, t in enumerate(TEXTS) for s, g in [DIRECTIONS[i % 3]]]


def expected(model, tokenizer, items: list[dict]) -> list[str]:
    return translate(model, tokenizer, [i["text"] for i in items], [i["src_lang"] for i in items],
                     [i["tgt_lang"] for i in items], num_beams=4, max_new_tokens=10, show_progress=False)  # fmt: skip


@pytest.mark.parametrize("backend_name", ["ctranslate2", "transformers", "transformers per direction"])
def test_concurrent_mixed_direction_requests_get_translates_outputs(model_and_export, backend_name):
    """Concurrent single requests and a list request over three directions get `translate()`'s outputs. The generic
    model batches the directions together (issue 58, item 1: one forward and one beam search for what arrives
    together, each example through its own modules), seen here in the batches it was given."""
    model, tokenizer, folder = model_and_export
    backend = CTranslate2Backend(folder) if backend_name == "ctranslate2" else ModelBackend(model, tokenizer)
    batches: list[set[str]] = []
    if backend_name == "transformers":
        mixed = backend.translate_mixed
        backend.translate_mixed = lambda directions, texts: batches.append(set(directions)) or mixed(directions, texts)
    server = running(backend, mixed=backend_name != "transformers per direction")
    backend_name = backend_name.split()[0]
    try:
        with urllib.request.urlopen(f"{server.url}/health", timeout=10) as response:
            health = json.loads(response.read())
        assert health["status"] == "ok" and health["backend"] == backend_name
        assert set(health["directions"]) >= {"en-de", "de-en", "fr-de"}
        if backend_name == "transformers":  # one base and LAA's matrices beside it, counted by their parameters
            laa = sum(p.numel() * 4 for n, p in model.named_parameters() if ".insertions." in n)
            total = sum(p.numel() * 4 for p in model.parameters())
            assert health["memory"] == {"base_bytes": total - laa, "language_modules_bytes": laa} and laa > 0
        items = requests_mixed()
        want = expected(model, tokenizer, items)
        assert any(want)  # the model says something
        # single requests from 6 concurrent clients (batched per direction by the server) and one list request
        with ThreadPoolExecutor(6) as pool:
            singles = list(pool.map(lambda item: post(server.url, item), items * 3))
        assert all(status == 200 for status, _ in singles)
        assert [answer["translation"] for _, answer in singles] == want * 3
        status, answers = post(server.url, items)
        assert status == 200 and [a["translation"] for a in answers] == want
        assert [(a["src_lang"], a["tgt_lang"]) for a in answers] == [(i["src_lang"], i["tgt_lang"]) for i in items]
        if batches:  # the mixed batcher: the list request's three directions went through in one batch
            assert {"en-de", "de-en", "fr-de"} in batches
        from libretranslatepy import LibreTranslateAPI  # LibreTranslate's own client gets the same translations

        client = LibreTranslateAPI(server.url)
        assert [client.translate(i["text"], i["src_lang"], i["tgt_lang"]) for i in items] == want
    finally:
        server.close()


BAD = [
    ({"text": "alpha", "src_lang": "en", "tgt_lang": "xx"}, 400, "unknown direction en-xx; this server translates de-en, en-de, fr-de"),
    ({"text": "  ", "src_lang": "en", "tgt_lang": "de"}, 400, "the text is blank"),
    ({"text": "alpha", "src_lang": "en"}, 400, "missing or non-string ['tgt_lang']"),
    ({"text": "alpha", "src_lang": "en", "tgt_lang": "de", "beam": 5}, 400, "unknown fields ['beam']"),
    ([], 400, "non-empty list"),
    ([{"text": "alpha", "src_lang": "en", "tgt_lang": "de"}, "alpha"], 400, "item 1: expected an object"),
    ({"text": "alpha " * 80, "src_lang": "en", "tgt_lang": "de"}, 400, "tokens long and the model reads at most 64"),
    (b"{not json", 400, "the body is not JSON"),
]  # fmt: skip


def test_bad_requests_get_a_4xx_naming_the_fix_and_the_server_keeps_serving(tmp_path):
    tokenizer = tiny_tokenizer()
    model = trained_like("laa+lee (tied)", BACKBONE | {"max_position_embeddings": 64}, tokenizer)
    export_directions(model, tokenizer, DIRECTIONS, tmp_path / "serve")
    server = running(CTranslate2Backend(tmp_path / "serve"))
    try:
        for payload, status, message in BAD:
            raw = payload if isinstance(payload, bytes) else None
            got, answer = post(server.url, payload, raw=raw)
            assert got == status and message in answer["error"], (payload, got, answer)
        try:
            urllib.request.urlopen(f"{server.url}/nope", timeout=10)
        except urllib.error.HTTPError as error:
            assert error.code == 404 and "GET /health" in json.loads(error.read())["error"]
        good = {"text": "alpha beta", "src_lang": "en", "tgt_lang": "de"}
        assert post(server.url, good)[0] == 200
    finally:
        server.close()


def test_the_cli_exports_directions_and_serves_them(model_and_export, tmp_path):
    model, tokenizer, _ = model_and_export
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    from hf_langspec_cli import main

    main(
        [
            "export",
            "--model",
            str(tmp_path / "model"),
            "--directions",
            "en-de,fr-de",
            "--output-dir",
            str(tmp_path / "serve"),
        ]
    )
    process = subprocess.Popen([sys.executable, "-m", "hf_langspec.cli", "serve", "--export", str(tmp_path / "serve"),
                                "--port", "0"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = process.stdout.readline()
        assert "serving 2 directions (ctranslate2)" in line, line
        url = line.split(" at ")[1].split(":")[0:3]
        url = ":".join(url)
        items = [i for i in requests_mixed() if i["tgt_lang"] == "de"]
        status, answers = post(url, items)
        assert status == 200 and [a["translation"] for a in answers] == expected(model, tokenizer, items)
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "--model", "m", "--directions", "ende", "--output-dir", "o"], "Direction 'ende' must be written 'src-tgt' with two language codes"),
        (["export", "--model", "m", "--directions", "en-de", "--no-ctranslate2", "--output-dir", "o"],
         "--directions writes CTranslate2 models"),
        (["export", "--model", "m", "--src-lang", "en", "--output-dir", "o"], "give one of --src-lang and --tgt-lang"),
        (["export", "--model", "m", "--multilingual", "--directions", "en-de", "--output-dir", "o"],
         "--multilingual (the whole model as a plain checkpoint), --condensed"),
        (["serve"], "give --export DIR (CTranslate2 directions) or --model DIR"),
        (["serve", "--model", "m", "--port", "70000"], "argument --port: port 70000 is not a TCP port; give one in 1-65535 (0: any free one)"),
        (["serve", "--model", "m", "--port", "-1"], "argument --port: port -1 is not a TCP port"),
        (["serve", "--model", "m", "--max-batch", "0"], "argument --max-batch: must be at least 1, got 0"),
        (["serve", "--model", "m", "--max-wait-ms", "-5"], "argument --max-wait-ms: must be a finite number of 0 or more, got -5"),
        (["serve", "--model", "m", "--threads", "0"], "argument --threads: must be at least 1, got 0"),
        (["serve", "--model", "m", "--timeout", "0"], "argument --timeout: must be more than 0, got 0"),
        (["serve", "--model", "m", "--max-queue", "-3"], "argument --max-queue: must be at least 1, got -3"),
        (["serve", "--model", "m", "--port", "0", "--max-batch", "64", "--max-queue", "32"],
         "--max-queue 32 is below --max-batch 64: a full batch must fit in the queue"),
        (["serve", "--model", "m", "--device", "tpu"], "argument --device: 'tpu' is not a PyTorch device"),
    ],
)  # fmt: skip
def test_export_and_serve_usage_errors_are_one_line_before_any_work(args, message, capsys):
    assert cli_exit_code(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_server_refuses_a_port_or_batching_it_cannot_use_before_any_socket_or_thread():
    from hf_langspec.export.batching import Batcher
    from hf_langspec.export.sockets import check_port_free

    with pytest.raises(ValueError, match=r"port 70000 is not a TCP port; give one in 1-65535 \(0: any free one\)"):
        check_port_free("127.0.0.1", 70000)  # the socket's own OverflowError was a traceback
    for batch, wait in [(0, 0.005), (32, -0.001), (32, float("nan"))]:
        with pytest.raises(ValueError, match="must be at least 1 and max_wait"):
            Batcher(translate=None, name="en-de", max_batch=batch, max_wait=wait)


@settings(max_examples=40, deadline=None)
@given(
    jobs=st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=5), min_size=1, max_size=12),
    max_batch=st.integers(1, 8),
    max_tokens=st.one_of(st.none(), st.integers(1, 120)),
)
def test_the_batcher_keeps_each_batch_within_its_text_and_token_budget_and_answers_every_request_in_order(
    jobs, max_batch, max_tokens
):
    """Requests queued while a batch runs are joined while they fit: at most `max_batch` texts and `max_tokens`
    source tokens padded to the longest, a request over them alone is a batch of its own, no request is split,
    and each request gets its own texts' translations in order."""
    import threading

    from hf_langspec.export.batching import Batcher

    release, batches = threading.Event(), []

    def translate(directions, texts):
        release.wait(10)  # the first batch waits until every request is queued
        batches.append(list(texts))
        return [f"{d}|{t}" for d, t in zip(directions, texts, strict=True)]

    batcher = Batcher(translate, "mixed", max_batch=max_batch, max_wait=0.05, max_queue=10_000, max_tokens=max_tokens)
    futures, lengths = [], {}
    for j, tokens in enumerate(jobs):
        texts = [f"r{j}t{i}" for i in range(len(tokens))]
        lengths.update(zip(texts, tokens, strict=True))
        futures.append((texts, batcher.submit(["en-de"] * len(texts), texts, tokens)))
    release.set()
    for texts, future in futures:
        assert future.result(10) == [f"en-de|{t}" for t in texts]
    batcher.close()
    assert [t for batch in batches for t in batch] == [t for texts, _ in futures for t in texts]  # order kept
    for batch in batches:
        requests = {t.split("t")[0] for t in batch}
        padded = len(batch) * max(lengths[t] for t in batch)
        within = len(batch) <= max_batch and (max_tokens is None or padded <= max_tokens)
        assert within or len(requests) == 1, (batch, max_batch, max_tokens)
    assert batcher.waiting == 0


def _remove(folder, name):
    (folder / "en-de" / "ctranslate2" / name).unlink()


def _cut(folder, name):
    path = folder / "en-de" / "ctranslate2" / name
    path.write_bytes(path.read_bytes()[:100])


def _garble(folder, name):
    (folder / "en-de" / "ctranslate2" / name).write_text("{ not json")


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("damage", "name", "message"),
    [
        (_remove, "model.bin", r"Exported direction \S+/en-de/ctranslate2 cannot be loaded \(Unable to open file 'model\.bin'"),
        (_cut, "model.bin", r"Exported direction \S+/en-de/ctranslate2 cannot be loaded \(.*model\.bin is incomplete"),
        (_garble, "config.json", r"Exported direction \S+/en-de/ctranslate2: config\.json is not valid JSON"),
        (_garble, "tokenizer.json", r"Exported direction \S+/en-de/ctranslate2: tokenizer\.json is not valid JSON"),
        (_remove, "direction.json", r"\S+: en-de has no ctranslate2/direction\.json; export it again"),
    ],
)  # fmt: skip
def test_a_damaged_export_is_one_line_naming_the_direction(model_and_export, tmp_path, damage, name, message, capsys):
    """`serve --export` on an export with one direction damaged (a file removed, cut or not JSON): one line naming
    the direction's folder and the fix, never a traceback and never the other directions served without a word."""
    import shutil

    from hf_langspec_cli import main

    folder = shutil.copytree(model_and_export[2], tmp_path / "export")
    damage(folder, name)
    assert main(["serve", "--export", str(folder), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(message, err) and err.rstrip().endswith("--output-dir DIR`."), err
