"""The requests `hf-langspec serve` takes and answers, as pydantic models (the OpenAPI schema is built from them),
and the checks that turn a request body into texts to translate or into one line naming the fix.

`POST /translate` takes two forms:

* the package's own: `{"text": ..., "src_lang": ..., "tgt_lang": ...}` or a list of such objects, answered by
  `{"translation": ..., "src_lang": ..., "tgt_lang": ...}` (or a list, in order);
* LibreTranslate's (https://libretranslate.com/docs), so its clients work unchanged: `{"q": text or list,
  "source": ..., "target": ...}` as JSON or form-encoded, answered by `{"translatedText": text or list}`.
  `format` must be `text` and `alternatives` 0 (HTML and alternatives are not served), `source: auto` is refused
  (no language detection), `api_key` is checked when the server has keys (`serve --api-keys`, access.py) and
  ignored otherwise.

Nothing is truncated or dropped silently: a blank text, an unknown direction or a text longer than the model reads
is a 4xx naming the item and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..data.text import is_blank

ITEM_EXAMPLE = '{"text": "...", "src_lang": "en", "tgt_lang": "de"}'
LIBRE_EXAMPLE = '{"q": "...", "source": "en", "target": "de"}'
FORM = "application/x-www-form-urlencoded"
JSON = "application/json"


class RequestError(ValueError):
    """A request the server refuses: the message goes back to the client as `{"error": ...}` with `status`."""

    def __init__(self, message: str, status: HTTPStatus = HTTPStatus.BAD_REQUEST, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


class TranslationItem(BaseModel):
    """One text to translate, in the package's own form."""

    model_config = ConfigDict(extra="forbid", strict=True)
    text: str = Field(description="the sentence to translate (not blank)", examples=["Hello, world."])
    src_lang: str = Field(description="its language: a code of the model's languages", examples=["en"])
    tgt_lang: str = Field(description="the language to translate into", examples=["de"])


class Translation(BaseModel):
    translation: str
    src_lang: str
    tgt_lang: str


class LibreTranslateRequest(BaseModel):
    """LibreTranslate's `/translate` request (https://libretranslate.com/docs)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    q: str | list[str] = Field(description="a text or a list of texts")
    source: str = Field(description="their language (`auto` is not served: no detection)", examples=["en"])
    target: str = Field(description="the language to translate into", examples=["de"])
    format: Literal["text"] = Field("text", description="`text` (HTML is not served)")
    alternatives: Literal[0] = Field(0, description="0 (alternatives are not served)")
    api_key: str | None = Field(None, description="the client's key, where the server has keys (`serve --api-keys`)")


class LibreTranslateResponse(BaseModel):
    translatedText: str | list[str]  # LibreTranslate's field name


class LibreTranslateLanguage(BaseModel):
    code: str
    name: str
    targets: list[str]


class ErrorBody(BaseModel):
    error: str = Field(description="what is wrong with the request and how to fix it")


@dataclass
class TranslationJob:
    """A checked request: its items (text, src_lang, tgt_lang) and how to answer it."""

    items: list[dict[str, str]]
    single: bool  # one object, answered by one object
    libre: bool  # LibreTranslate's form, answered by {"translatedText": ...}

    def answer(self, outputs: list[str]) -> Any:
        if self.libre:
            return {"translatedText": outputs[0] if self.single else outputs}
        answers = [{"translation": text, "src_lang": item["src_lang"], "tgt_lang": item["tgt_lang"]}
                   for item, text in zip(self.items, outputs, strict=True)]  # fmt: skip
        return answers[0] if self.single else answers


def direction_of(item: dict[str, Any]) -> str:
    return f"{item['src_lang']}-{item['tgt_lang']}"


def rows_by_direction(items: list[dict[str, Any]]) -> dict[str, list[int]]:
    """`{"en-de": [indexes of the items in that direction], ...}`, in order of first appearance."""
    rows: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        rows.setdefault(direction_of(item), []).append(i)
    return rows


# ---------------------------------------------------------------------------- the body
def parse_body(body: bytes, content_type: str) -> Any:
    """The JSON (or LibreTranslate's form-encoded) body as Python values, or a RequestError naming the fix. A JSON
    body sent with the form's content type (curl's `-d` default) is read as JSON."""
    kind = content_type.split(";")[0].strip().lower()
    if kind.startswith("multipart/"):
        raise RequestError(f"multipart bodies are not read; send JSON or {FORM}", HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
    if kind not in (JSON, FORM):  # text/plain is what a page elsewhere may post from its user's browser unasked
        raise RequestError(
            f"Content-Type {kind or '(none)'} is not read; send the body as {JSON} (or LibreTranslate's {FORM})",
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
        )
    try:
        text = body.decode("utf-8")
        # `curl -d '{...}'` sends JSON labelled as a form: a form's fields never start with a bracket
        if kind == FORM and not text.lstrip().startswith(("{", "[")):
            return _form(text)
        return json.loads(text)
    except UnicodeDecodeError as error:
        raise RequestError(f"the body is not UTF-8 ({error}); send UTF-8 text") from None
    except RecursionError:  # json's parser recurses once per level
        raise RequestError("the body nests deeper than the JSON parser follows; send a flat object") from None
    except ValueError as error:  # JSONDecodeError, and an integer of more digits than Python converts
        raise RequestError(f"the body is not JSON ({error}); send an object like {ITEM_EXAMPLE}") from None


def _form(text: str) -> dict[str, Any]:
    """A form-encoded LibreTranslate request: `q` may repeat (a list of texts), every other field once."""
    fields = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
    repeated = sorted(key for key, values in fields.items() if key != "q" and len(values) > 1)
    if repeated:
        raise RequestError(f"form fields {repeated} are given more than once; give each once")
    form: dict[str, Any] = {key: values[0] for key, values in fields.items()}
    if len(fields.get("q", [])) > 1:
        form["q"] = fields["q"]
    if "alternatives" in form:  # a form carries text only
        form["alternatives"] = int(form["alternatives"]) if form["alternatives"].isdigit() else form["alternatives"]
    return form


# ---------------------------------------------------------------------------- the request
def check_request(payload: Any, directions: Sequence[str], max_texts: int) -> TranslationJob:
    """The texts of a request body in either form, checked for shape, text and direction (not length)."""
    job = _libre_job(payload) if isinstance(payload, dict) and "q" in payload else _own_job(payload)
    if len(job.items) > max_texts:
        raise RequestError(f"{len(job.items)} texts in one request; send at most {max_texts} per request")
    known = set(directions)
    for n, item in enumerate(job.items):
        where = "" if job.single else f"item {n}: "
        for field, value in item.items():
            if not _is_unicode(value):
                raise RequestError(f"{where}{field} holds a lone surrogate ({ascii(value)[1:-1]}); send valid Unicode")
        if is_blank(item["text"]):
            raise RequestError(f"{where}the text is blank; send the sentence to translate")
        if direction_of(item) not in known:
            raise RequestError(
                f"{where}unknown direction {direction_of(item)}; this server translates {', '.join(sorted(known))}"
            )
    return job


def check_lengths(job: TranslationJob, lengths: Callable[[str, list[str]], list[int]],
                  limit: Callable[[str], int]) -> list[int]:  # fmt: skip
    """Each item's source length in tokens (`lengths(direction, texts)`), or a RequestError for the first text
    longer than its direction's `limit(direction)` (nothing is truncated)."""
    out = [0] * len(job.items)
    for direction, rows in rows_by_direction(job.items).items():
        most = limit(direction)
        for n, length in zip(rows, lengths(direction, [job.items[n]["text"] for n in rows]), strict=True):
            if length > most:
                raise RequestError(
                    f"{'' if job.single else f'item {n}: '}the text is {length} tokens long and the model reads at "
                    f"most {most}; split it into sentences"
                )
            out[n] = length
    return out


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800"); no model reads it
        return False
    return True


def _own_job(payload: Any) -> TranslationJob:
    single = isinstance(payload, dict)
    items = [payload] if single else payload
    if not isinstance(items, list) or not items:
        raise RequestError(f"send a JSON object {ITEM_EXAMPLE} or a non-empty list of them (or LibreTranslate's {LIBRE_EXAMPLE})")  # fmt: skip
    checked = []
    for n, item in enumerate(items):
        where = "" if single else f"item {n}: "
        if not isinstance(item, dict):
            raise RequestError(f"{where}expected an object {ITEM_EXAMPLE}, got {type(item).__name__}")
        try:
            checked.append(TranslationItem.model_validate(item).model_dump())
        except ValidationError as error:
            raise RequestError(f"{where}{_fields_problem(error)}; an item is {ITEM_EXAMPLE}") from None
    return TranslationJob(checked, single, libre=False)


def _libre_job(payload: dict[str, Any]) -> TranslationJob:
    try:
        request = LibreTranslateRequest.model_validate(payload)
    except ValidationError as error:
        fields = {str(e["loc"][0]) for e in error.errors() if e["loc"]}
        if "format" in fields:
            problem = f"format {payload['format']!r} is not served; send plain text with format 'text'"
        elif "alternatives" in fields:
            problem = f"alternatives={payload['alternatives']!r} are not served; leave alternatives out or send 0"
        elif "q" in fields and "q" in payload:
            problem = "q must be a text or a list of texts"
        else:
            problem = _fields_problem(error)
        raise RequestError(f"{problem}; a LibreTranslate request is {LIBRE_EXAMPLE}") from None
    if request.source == "auto":
        raise RequestError("source 'auto' (language detection) is not served; give the texts' language code")
    texts = [request.q] if isinstance(request.q, str) else request.q
    if not texts:
        raise RequestError("q is an empty list; send a text or a non-empty list of texts")
    items = [{"text": text, "src_lang": request.source, "tgt_lang": request.target} for text in texts]
    return TranslationJob(items, single=isinstance(request.q, str), libre=True)


def _fields_problem(error: ValidationError) -> str:
    """pydantic's errors as the package's one line: missing or non-string fields, else unknown ones."""
    errors = error.errors()
    missing = [str(e["loc"][0]) for e in errors if e["loc"] and e["type"] != "extra_forbidden"]
    if missing:
        return f"missing or non-string {list(dict.fromkeys(missing))}"
    return f"unknown fields {sorted(str(e['loc'][0]) for e in errors if e['loc'])}"


__all__ = [
    "ErrorBody",
    "LibreTranslateLanguage",
    "LibreTranslateRequest",
    "LibreTranslateResponse",
    "RequestError",
    "Translation",
    "TranslationItem",
    "TranslationJob",
    "check_lengths",
    "check_request",
    "parse_body",
]
