"""A trust sweep of the server's request handling: every POST endpoint (found from the app)
gets a battery of bad requests (bodies that are not JSON, not an object, not UTF-8, nested
10,000 deep; fields of the wrong type, empty, past their limits; unknown and repeated keys;
the wrong Content-Type or charset; lone surrogates and control characters in every string),
GET endpoints get bad and repeated query parameters, query and path values holding control
characters, the static routes odd paths, and the image endpoint corrupt files.

Each answer must be a 4xx with the one error body (``{"error": {"message", "type", "param",
"code"}}``) whose ``param`` names the field at fault and whose message starts with it; never
a 5xx; and the server must still answer good requests afterwards. The models are the fakes
of ``test_http_models`` (no model is loaded), so the module runs in seconds.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import io
import json
from typing import Annotated

import pytest
from fastapi import FastAPI, Query  # module level: the route below's annotations are read from here
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from searchsmith.serving.http import STATIC_DIR, create_app
from searchsmith.serving.http_errors import ERROR_TABLE, MAX_MESSAGE_CHARS
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.profiling.server import LoopbackServer
from searchsmith.serving.rewrite import parse_history
from searchsmith.serving.runner import BundleEmbedder
from searchsmith.serving.schemas import REQUEST_LIMITS
from test_http_models import (
    FakeEmbedBundle,
    FakePipeline,
    FakeRouter,
    _replace,
    _request_examples,
    models,
    png,
)

LIMITS = ServerLimits(max_documents_per_request=5, max_texts_per_request=4, max_input_chars=200, truncate=False,
                      max_body_bytes=200_000, max_images_per_request=3, max_image_bytes=3000,
                      max_image_pixels=100 * 100, max_pairs_per_request=12)
KINDS = {kind for _, _, kind in ERROR_TABLE} | {"http_error"}
JSON = {"content-type": "application/json"}
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark


class RoomyEmbedBundle(FakeEmbedBundle):
    """The fake embedder with room for the documented examples (8 tokens is less than they
    hold, and ``server.truncate`` is off here so that texts past the limits are refused)."""

    manifest, max_length = {"embedding_dim": 3, "max_length": 512}, 512


class CheckingRouter(FakeRouter):
    """The fake router, reading the history as the real one does (``CentroidRouter.route``)."""

    def route(self, query, history=None, mode=None, top_k=None):
        parse_history(history)
        return super().route(query, history, mode, top_k)


@pytest.fixture(scope="module")
def app():
    return create_app(LIMITS, embedder=BundleEmbedder(RoomyEmbedBundle(), "embedder"), router=CheckingRouter(),
                      pipeline=FakePipeline(), **models())


@pytest.fixture(scope="module")
def client(app):
    # raise_server_exceptions off: a crash is seen as the 500 a client would get
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _post_routes(app) -> list[APIRoute]:
    return [r for r in app.routes if isinstance(r, APIRoute) and "POST" in r.methods]


def _model(route: APIRoute):
    return route.body_field.field_info.annotation


def _first_required(route: APIRoute) -> str:
    return next(name for name, f in _model(route).model_fields.items() if f.is_required())


def bad(resp, param: str | None, *, status: int | None = None, code: str | None = None) -> dict:
    """The error of a refused request, after checking it: a 4xx (``status`` when given) with
    the one error body, ``param`` naming the field and the message starting with it."""
    assert 400 <= resp.status_code < 500, (resp.status_code, resp.text[:500])
    if status is not None:
        assert resp.status_code == status, resp.text[:500]
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    err = body["error"]
    assert err["type"] in KINDS and err["message"], err
    assert err["param"] == param, (param, err)
    if param is not None:
        assert err["message"].startswith(f"{param}: "), err
    if code is not None:
        assert err["code"] == code, err
    assert len(err["message"]) <= MAX_MESSAGE_CHARS, f"a message of {len(err['message'])} characters"
    return err


def _answers_good_requests(client, app) -> None:
    """Every endpoint's documented examples still get 200 (in route order: /v1/search answers
    q-0001 before /v1/feedback rewards it)."""
    for route in _post_routes(app):
        for example in _request_examples(app, route.path):
            resp = client.post(route.path, json=example)
            assert resp.status_code == 200, (route.path, example, resp.text[:300])


# ---- bodies that are not a JSON object ------------------------------------------------------------

# (id, body from the route's first required field F, headers, status, param ("F" for F), code, in message)
MALFORMED = [
    ("not-json", lambda f: b"hello", JSON, 422, "body", "json_invalid", "not valid JSON at character 0"),
    ("truncated", lambda f: b'{"%s": "x"' % f, JSON, 422, "body", "json_invalid", "not valid JSON"),
    ("trailing-data", lambda f: b'{"%s": "x"} x' % f, JSON, 422, "body", "json_invalid", "Extra data"),
    ("raw-nul", lambda f: b'{"%s": "a\x00b"}' % f, JSON, 422, "body", "json_invalid", "control character"),
    ("empty", lambda f: b"", JSON, 422, "body", "missing", "body: empty; send one JSON object"),
    ("blank", lambda f: b"  \n", JSON, 422, "body", "json_invalid", "not valid JSON"),
    ("list", lambda f: b'[{"%s": "x"}]' % f, JSON, 422, "body", None, "expected a JSON object, got a list"),
    ("string", lambda f: b'"x"', JSON, 422, "body", None, "expected a JSON object, got a string"),
    ("number", lambda f: b"3", JSON, 422, "body", None, "expected a JSON object, got a number"),
    ("null", lambda f: b"null", JSON, 422, "body", None, "expected a JSON object, got null"),
    ("true", lambda f: b"true", JSON, 422, "body", None, "expected a JSON object, got true"),
    ("lone-surrogate", lambda f: b'{"%s": "a\\ud800"}' % f, JSON, 422, "F", "unencodable_text", "lone surrogate"),
    ("nul", lambda f: b'{"%s": "a\\u0000b"}' % f, JSON, 422, "F", "control_character",
     "character 1 is the control character U+0000 (\\u0000 in JSON), which is not text; remove it"),
    ("escape", lambda f: b'{"%s": "ab\\u001b[31m"}' % f, JSON, 422, "F", "control_character",
     "character 2 is the control character U+001B"),
    ("control-key", lambda f: b'{"%s\\u0007": 1}' % f, JSON, 422, "body", "control_character",
     "a field name holds the control character U+0007"),
    ("surrogate-key", lambda f: b'{"\\udfff": 1}', JSON, 422, "body", "unencodable_text", "field name"),
    ("invalid-utf8", lambda f: b'{"%s": "a\xff"}' % f, JSON, 422, "F", "unencodable_text", "not valid UTF-8"),
    ("utf8-surrogate", lambda f: b'{"%s": "\xed\xa0\x80"}' % f, JSON, 422, "F", "unencodable_text", "UTF-8"),
    ("deep-10000", lambda f: b"[" * 10_000 + b"]" * 10_000, JSON, 422, "body", "too_deep", "nested deeper"),
    ("deep-field", lambda f: b'{"%s": ' % f + b"[" * 10_000 + b"]" * 10_000 + b"}", JSON, 422, "body", "too_deep",
     "nested deeper"),
    ("long-integer", lambda f: b'{"%s": ' % f + b"9" * 5000 + b"}", JSON, 422, "body", "number_too_long",
     "5000 digits, the parser reads at most 4300"),
    ("nan", lambda f: b'{"%s": NaN}' % f, JSON, 422, "F", None, "got a number"),
    ("infinity", lambda f: b'{"%s": -Infinity}' % f, JSON, 422, "F", None, "got a number"),
    ("1e400", lambda f: b'{"%s": 1e400}' % f, JSON, 422, "F", None, "got a number"),
    ("minus-zero", lambda f: b'{"%s": -0}' % f, JSON, 422, "F", None, "got a number"),
    ("repeated-key", lambda f: b'{"%s": "a", "%s": "b"}' % (f, f), JSON, 422, "F", "repeated_key", "written twice"),
    ("bom-repeated-key", lambda f: BOM + b'{"%s": "a", "%s": "b"}' % (f, f), JSON, 422, "F", "repeated_key",
     "written twice"),
    ("bom-invalid-utf8", lambda f: BOM + b'{"%s": "a\xff"}' % f, JSON, 422, "F", "unencodable_text",
     "of the body is not valid UTF-8"),
    *[(f"{enc}-body", lambda f, enc=enc: json.dumps({f.decode(): "x"}).encode(enc), JSON, 415, "body",
       "unsupported_charset", f"body: sent in {enc.upper()} (from its first bytes); JSON bodies are read as UTF-8 only")
      for enc in ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be")],
    *[(f"charset-{charset}", lambda f: b'{"%s": "x"}' % f, {"content-type": f"application/json; charset={charset}"},
       415, "body", "unsupported_charset", f"body: sent with charset {charset.strip(chr(34))!r}")
      for charset in ("latin-1", "ISO-8859-1", "utf-16", "us-ascii", '"windows-1252"', "")],
    # RFC 2231's encoded form, continued, and a second charset parameter: each charset named is checked
    *[(f"charset*-{said}", lambda f: b'{"%s": "x"}' % f, {"content-type": f"application/json; {params}"},
       415, "body", "unsupported_charset", f"body: sent with charset {said!r}")
      for params, said in (("charset*=utf-8''latin-1", "latin-1"), ("charset*=UTF-8'en'us-ascii", "us-ascii"),
                           ("charset*0*=utf-8''utf; charset*1=-16", "utf-16"), ("charset*=utf-8''", ""),
                           ("charset=utf-8; charset*=utf-8''latin-1", "latin-1"),
                           ("charset*=utf-8''utf-8; charset=latin-1", "latin-1"),
                           ("charset=utf-8; charset=windows-1252", "windows-1252"))],
    # a type FastAPI does not read as JSON, or none, is 415 as a charset is (it was 422 content_type)
    *[(f"type-{kind or 'none'}", lambda f: b'{"%s": "x"}' % f, {"content-type": kind} if kind else {}, 415, "body",
       "content_type", "body: sent " + (f"as Content-Type {kind!r}, which this endpoint does not read" if kind
                                        else "without a Content-Type") + "; send the JSON object with 'Content-Type: "
       "application/json'")
      for kind in ("text/plain", "text/json", "application/x-ndjson; charset=utf-8",
                   "multipart/form-data; boundary=x", "")],
    ("form", lambda f: b"%s=x" % f, {"content-type": "application/x-www-form-urlencoded"}, 415, "body",
     "content_type", "as Content-Type 'application/x-www-form-urlencoded'"),  # what curl -d sends
    ("gzip", lambda f: gzip.compress(b'{"%s": "x"}' % f), {**JSON, "content-encoding": "gzip"}, 422, "body",
     "content_encoding", "compressed bodies are not accepted"),
    ("over-max-body-bytes", lambda f: b'{"%s": "%s"}' % (f, b"x" * LIMITS.max_body_bytes), JSON, 413, "body", None,
     "server.max_body_bytes"),
]


@pytest.mark.parametrize("make, headers, status, param, code, said",
                         [pytest.param(*case[1:], id=case[0]) for case in MALFORMED])
def test_a_body_that_is_not_a_json_object_is_4xx_naming_it(client, app, make, headers, status, param, code,
                                                          said) -> None:
    for route in _post_routes(app):
        field = _first_required(route)
        resp = client.post(route.path, content=make(field.encode()), headers=headers)
        err = bad(resp, field if param == "F" else param, status=status, code=code)
        assert said in err["message"], (route.path, err)
        assert "set_int_max_str_digits" not in err["message"]  # a fix for the server, not for the client
    _answers_good_requests(client, app)


def test_a_utf8_body_with_a_byte_order_mark_or_a_utf8_charset_is_read(client, app) -> None:
    """RFC 8259 lets a parser ignore a UTF-8 byte order mark (Python's does); the mark is dropped
    and the body read as without it, on every endpoint, whatever its charset says of UTF-8."""
    utf8 = ["application/json; charset=utf-8", "application/json; charset=UTF-8", 'application/json; charset="utf-8"',
            "application/json;charset=utf8", "application/json", "application/json; charset*=utf-8''utf-8",
            "application/json; charset*=''UTF-8", "application/json; charset=utf-8; charset*=us-ascii''utf8"]
    for route in _post_routes(app):
        for i, example in enumerate(_request_examples(app, route.path)):
            headers = {"content-type": utf8[i % len(utf8)]}
            resp = client.post(route.path, content=BOM + json.dumps(example).encode(), headers=headers)
            assert resp.status_code == 200, (route.path, example, headers, resp.text[:300])
    body = {"query": "crème brûlée", "documents": ["crème brûlée", "bread"]}
    plain = client.post("/v1/rerank", content=json.dumps(body, ensure_ascii=False).encode(), headers=JSON)
    marked = client.post("/v1/rerank", content=BOM + json.dumps(body, ensure_ascii=False).encode(), headers=JSON)
    assert marked.status_code == 200 and marked.json()["results"] == plain.json()["results"]


def _strings(value, loc=()):
    """(location, string) of every string value inside a JSON value."""
    for at, child in _nodes(value, loc):
        if isinstance(child, str):
            yield at, child


@pytest.mark.parametrize("bad_text, code, said", [
    ("a\x00b", "control_character", "character 1 is the control character U+0000"),
    ("ab\x08", "control_character", "character 2 is the control character U+0008"),
    ("\x1fab", "control_character", "character 0 is the control character U+001F"),
    ("a\ud800b", "unencodable_text", "character 1 is a lone surrogate (U+D800)"),
    ("ab\udfff", "unencodable_text", "character 2 is a lone surrogate (U+DFFF)"),
])
def test_every_string_of_every_endpoint_is_checked_for_control_characters_and_surrogates(
        client, app, bad_text, code, said) -> None:
    """NUL and the other C0 controls but tab, newline and carriage return were taken into a
    text (and embedded, ranked, searched); a lone surrogate was a 500 before the schemas checked
    it. Each string field of each documented example, nested ones included, is refused by path."""
    seen = set()
    for route in _post_routes(app):
        for example in _request_examples(app, route.path):
            for loc, _ in _strings(example):
                body = json.dumps(_replace(example, loc, bad_text)).encode()  # a lone surrogate travels escaped
                err = bad(client.post(route.path, content=body, headers=JSON), _path(loc), status=422, code=code)
                assert said in err["message"], (route.path, loc, err)
                assert err["message"].endswith(("remove it (tab, newline and carriage return are the only control "
                                                "characters a text may hold)", "\\udc00-\\udfff one)")), err
                seen.add((route.path, _path(loc)))
    assert {p for p, _ in seen} == {r.path for r in _post_routes(app)}  # every endpoint had a string
    assert len(seen) >= 25, sorted(seen)
    _answers_good_requests(client, app)


def test_tab_newline_and_carriage_return_are_text(client) -> None:
    resp = client.post("/v1/rerank", json={"query": "bread\tflour", "documents": ["knead\r\nthe dough", "a\tb\nc"]})
    assert resp.status_code == 200, resp.text
    resp = client.post("/v1/embeddings", json={"input": ["line one\nline two\r\n\tindented"]})
    assert resp.status_code == 200, resp.text


def test_the_empty_and_non_object_bodies_name_the_fields_to_send(client) -> None:
    for body in (b"", b"[]"):
        msg = bad(client.post("/v1/rerank", content=body, headers=JSON), "body")["message"]
        assert "query, documents" in msg and "top_n" in msg, msg


def test_a_body_of_another_media_type_is_415_saying_what_to_send(client, app) -> None:
    """A JSON body sent as text/plain, as a form (curl -d) or without a Content-Type was 422 while a
    wrong charset was 415; every one is 415 now, with the type to send in ``Accept-Post``. An
    empty body is still the schema's 422 naming the fields, whatever its type."""
    for route in _post_routes(app):
        resp = client.post(route.path, content=b"{}", headers={"content-type": "text/plain"})
        err = bad(resp, "body", status=415, code="content_type")
        assert err["type"] == "unsupported_media_type" and resp.headers["accept-post"] == "application/json", err
        charset = client.post(route.path, content=b"{}", headers={"content-type": "application/json; charset=latin-1"})
        assert bad(charset, "body", status=415)["type"] == "unsupported_media_type"
        assert charset.headers["accept-post"] == "application/json"
        for headers in ({}, {"content-type": "text/plain"}, {"content-type": "text/plain; charset=latin-1"}):
            empty = bad(client.post(route.path, content=b"", headers=headers), "body", status=422, code="missing")
            assert empty["message"].startswith("body: empty; send one JSON object"), (route.path, headers, empty)
    assert "accept-post" not in client.post("/v1/rerank", content=b"{}", headers=JSON).headers  # a 422
    _answers_good_requests(client, app)


# ---- fields: unknown, of the wrong type, empty, past their limits ----------------------------------


def test_an_unknown_field_lists_the_fields_and_the_closest(client, app) -> None:
    for route in _post_routes(app):
        example = _request_examples(app, route.path)[0]
        err = bad(client.post(route.path, json={**example, "zz_unknown": 1}), "zz_unknown", status=422,
                  code="extra_forbidden")
        for name in _model(route).model_fields:
            assert name in err["message"], (route.path, err)
        field = _first_required(route)
        misspelt = {k: v for k, v in example.items() if k != field} | {field[:-1]: example[field]}
        msg = bad(client.post(route.path, json=misspelt), field, status=422)["message"]
        assert f"{field[:-1]}: Extra inputs are not permitted; did you mean '{field}'?" in msg, msg
    # in a nested object, the fields of that object
    err = bad(client.post("/v1/cite", json={"sentences": ["a"], "documents": [{"id": "a", "txt": "b"}]}),
              "documents[0].text")
    assert "documents[0].txt: Extra inputs are not permitted; did you mean 'text'? (the fields here: id, text)" \
           in err["message"], err


def _nodes(value, loc=()):
    """(location, value) of every value inside a JSON value, the value itself left out."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*loc, key), child
        yield from _nodes(child, (*loc, key))


def _path(loc) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _other_types(value) -> list:
    """Values of every other JSON type than ``value``'s (null left out: it is a valid optional)."""
    kinds = {str: "text", bool: True, int: 7, float: 7.5, list: [["nested"]], dict: {"a": 1}}
    return [v for t, v in kinds.items() if not isinstance(value, t) and not (t is int and isinstance(value, float))]


# (path, field, value) of the swaps that are valid requests: the other members of two unions
VALID_SWAPS = {("/v1/embeddings", "input", "text"), ("/v1/rerank", "documents[1]", "text")}


def test_every_field_of_the_wrong_type_is_named(client, app) -> None:
    calls, accepted = 0, set()
    for route in _post_routes(app):
        for example in _request_examples(app, route.path):
            for loc, value in _nodes(example):
                for other in _other_types(value):
                    resp = client.post(route.path, json=_replace(example, loc, other))
                    if resp.status_code == 200:
                        accepted.add((route.path, _path(loc), json.dumps(other)))
                        continue
                    assert resp.status_code < 500, (route.path, loc, other, resp.text[:300])
                    # an object or a list where another one goes is wrong at a field or an item inside
                    # it ({"a": 1} for a document: "documents[0].text: Field required"): that one is named
                    path, sent = _path(loc), resp.json()["error"]["param"]
                    assert sent == path or sent.startswith((f"{path}.", f"{path}[")), (route.path, path, resp.text)
                    err = bad(resp, sent)
                    if resp.status_code == 422 and err["code"] in ("string_type", "list_type", "dict_type",
                                                                   "int_type", "float_type", "bool_type"):
                        assert ", got " in err["message"] and "Input should be" not in err["message"], err
                    calls += 1
    assert calls > 150 and accepted == {(p, f, json.dumps(v)) for p, f, v in VALID_SWAPS}, accepted
    _answers_good_requests(client, app)


def test_a_union_field_says_what_it_takes_once(client) -> None:
    """Every member of a union was reported: 'input: Input should be a valid string; input:
    Input should be a valid list'."""
    msg = bad(client.post("/v1/embeddings", json={"input": {"a": 1}}), "input", status=422)["message"]
    assert msg == "input: expected a string or a list, got an object"
    msg = bad(client.post("/v1/rerank", json={"query": "q", "documents": [None]}), "documents[0]")["message"]
    assert msg == "documents[0]: expected a string or an object, got null"
    # the member the value was closest to speaks: a list whose item is wrong
    msg = bad(client.post("/v1/embeddings", json={"input": ["a", {"b": 1}]}), "input[1]")["message"]
    assert msg == "input[1]: expected a string, got an object"
    msg = bad(client.post("/v1/rerank", json={"query": "q", "documents": [{"text": 3}]}), "documents[0].text")
    assert msg["message"] == "documents[0].text: expected a string, got a number"


def _limited_fields(app):
    """(route, example, field, what, setting) of each top-level field REQUEST_LIMITS bounds."""
    for route in _post_routes(app):
        for schema, field, what, setting in REQUEST_LIMITS:
            if schema == _model(route).__name__:
                example = next(e for e in _request_examples(app, route.path) if field in e)
                yield route, example, field, what, setting


def test_empty_and_over_the_limit_values_name_the_field_and_the_setting(client, app) -> None:
    seen = set()
    for route, example, field, what, setting in _limited_fields(app):
        value, limit = example[field], getattr(LIMITS, setting)
        if what == "items":
            bad(client.post(route.path, json={**example, field: []}), field, status=400, code=None)
            msg = bad(client.post(route.path, json={**example, field: value[:1] * (limit + 1)}), field,
                      status=413)["message"]
        else:
            loc = (field,) if isinstance(value, str) else (field, 0)
            msg = bad(client.post(route.path, json=_replace(example, loc, "x" * (limit + 1))), _path(loc),
                      status=413)["message"]
        assert f"the limit is {limit}" in msg and f"server.{setting}" in msg, msg
        seen.add((route.path, field, what))
    assert len(seen) >= 13
    blank = bad(client.post("/v1/rerank", json={"query": "\u200b \t\n", "documents": ["d"]}), "query", status=400)
    assert "send non-blank text" in blank["message"]


def test_a_long_value_is_not_echoed_whole(client) -> None:
    """An unknown model name, a repeated id, an unknown preset were written back whole: a
    60,000-character value made a 60,000-character message."""
    name = "m" * 60_000
    for path, body, param, fix in (
            ("/v1/embeddings", {"input": "a", "model": name}, "model", "serve.yaml)"),
            ("/v1/rerank", {"query": "q", "documents": ["d"], "model": name}, "model", "serve.yaml)"),
            ("/v1/cite", {"sentences": ["a"], "documents": [{"id": name, "text": "b"}, {"id": name, "text": "c"}]},
             "documents[1].id", "ids must be unique"),
            ("/v1/search", {"query": "q", "preset": name}, "preset", "mmm'")):
        err = bad(client.post(path, json=body), param, status=422)
        assert "mmmm" in err["message"], path  # bad() checked its length
        assert err["message"].endswith(fix), err  # the end of a message (its fix) is kept


# ---- random bodies (hypothesis) ---------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)
FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


@FUZZ
@given(data=st.data())
def test_random_values_in_every_field_are_never_a_5xx(client, app, data) -> None:
    routes = _post_routes(app)
    route = data.draw(st.sampled_from(routes))
    example = data.draw(st.sampled_from(_request_examples(app, route.path)))
    loc = data.draw(st.sampled_from([loc for loc, _ in _nodes(example)]))
    body = _replace(example, loc, data.draw(JSON_VALUES))
    resp = client.post(route.path, content=json.dumps(body).encode(), headers=JSON)  # "\ud800" travels escaped
    assert resp.status_code < 500, (route.path, body, resp.text[:300])
    if resp.status_code >= 400:
        bad(resp, resp.json()["error"]["param"])


@FUZZ
@given(body=st.one_of(st.binary(max_size=200), JSON_VALUES.map(lambda v: json.dumps(v).encode())),
       path=st.sampled_from(["/v1/embeddings", "/v1/route", "/v1/rerank", "/v1/decompose", "/v1/cite",
                             "/v1/images/place", "/v1/search", "/v1/feedback"]))
def test_random_bodies_are_never_a_5xx(client, body, path) -> None:
    resp = client.post(path, content=body, headers=JSON)
    assert resp.status_code < 500, (path, body, resp.text[:300])
    if resp.status_code >= 400:
        bad(resp, resp.json()["error"]["param"])


# ---- corrupt image files ----------------------------------------------------------------------------


def _image(fmt: str, mode: str = "RGB", size=(17, 9)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    bands = Image.getmodebands(mode)
    Image.new(mode, size, 3 if bands == 1 else (200,) * bands).save(buf, format=fmt)
    return buf.getvalue()


def _corrupted(raw: bytes) -> list[bytes]:
    """Cut short at several points, and with header bytes overwritten (byte 11 set to 5: a
    PNG's first chunk, IHDR, said to be 5 bytes long)."""
    cuts = [raw[:n] for n in (1, 8, 16, 20, 26, 33, 40, len(raw) // 2, len(raw) - 1) if n < len(raw)]
    flipped = []
    for at in (0, 12, 16, 19, 24, 30):
        if at < len(raw):
            flipped.append(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:])
    return cuts + flipped + [raw[:24] + b"\xff" * 40, raw[:11] + b"\x05" + raw[12:]]


def _place(client, data: bytes):
    return client.post("/v1/images/place", json={"paragraphs": ["a cat"], "images": [
        {"id": "x", "data": base64.b64encode(data).decode()}]})


def test_a_corrupt_image_is_422_naming_it(client) -> None:
    """A PNG whose header chunk is short (ValueError 'Truncated IHDR chunk') and corrupt files of the
    formats PIL reads beyond the five the server takes (ValueError, NotImplementedError) were
    500s."""
    calls = 0
    for fmt, mode in (("PNG", "RGB"), ("PNG", "I;16"), ("PNG", "P"), ("JPEG", "RGB"), ("JPEG", "CMYK"),
                      ("GIF", "P"), ("BMP", "RGB"), ("WEBP", "RGB"), ("TIFF", "RGB"), ("PPM", "RGB"), ("DDS", "RGBA"),
                      ("QOI", "RGB"), ("SGI", "RGB"), ("XBM", "1"), ("IM", "RGB"), ("ICO", "RGBA")):
        raw = _image(fmt, mode)
        for data in _corrupted(raw):
            resp = _place(client, data)
            assert resp.status_code in (200, 413, 422), (fmt, mode, data[:40], resp.text[:300])
            if resp.status_code == 422:
                assert bad(resp, "images[0].data")["message"].endswith("send PNG, JPEG, GIF, BMP or WebP bytes")
            calls += 1
    assert calls > 200
    raw = _image("PNG")
    short_header = bad(_place(client, raw[:11] + b"\x05" + raw[12:]), "images[0].data", status=422)
    assert short_header["message"].startswith("images[0].data: not an image this server can read (ValueError)")
    assert _place(client, base64.b64decode(png((255, 0, 0)))).status_code == 200


@pytest.mark.parametrize("fmt, mode", [("TIFF", "RGB"), ("PPM", "RGB"), ("DDS", "RGBA"), ("QOI", "RGB"),
                                       ("SGI", "RGB"), ("IM", "RGB"), ("ICO", "RGBA"), ("EPS", "RGB")])
def test_only_the_five_image_formats_are_decoded(client, fmt, mode) -> None:
    """PIL opens dozens of formats, some through decoders of little use here (EPS runs
    Ghostscript where it is installed); the server reads the five it says it takes."""
    err = bad(_place(client, _image(fmt, mode)), "images[0].data", status=422)
    assert err["message"] == ("images[0].data: not an image this server can read (UnidentifiedImageError); send PNG, "
                              "JPEG, GIF, BMP or WebP bytes")


# ---- GET: query parameters and paths ---------------------------------------------------------------


def test_bad_query_parameters_name_the_parameter(client) -> None:
    err = bad(client.get("/v1/images/file"), "doc_id", status=422, code="missing")
    assert "query parameter" in err["message"] and "image_id" in err["message"], err
    bad(client.get("/v1/images/file?doc_id=a"), "image_id", status=422)
    for query in ("doc_id=&image_id=", "doc_id=%7f&image_id=%c2%85", "doc_id=%ff&image_id=%fe",
                  "doc_id=../../etc/passwd&image_id=x", "doc_id=a&image_id=b%",
                  f"doc_id={'x' * 20_000}&image_id={'y' * 20_000}"):  # bad() checks the message's length
        bad(client.get(f"/v1/images/file?{query}"), "image_id", status=404, code="image_not_found")
    for model in ("%7f", "%ff", "..%2f..%2fetc%2fpasswd", "x" * 20_000):
        bad(client.get(f"/v1/models/{model}"), "model", status=404, code="model_not_found")
    for path in ("/health?x=%00", "/ready?%ff", "/openapi.json?%", "/?q=%ff"):
        assert client.get(path).status_code == 200, path


def _query_routes(app) -> list[tuple[APIRoute, list[str]]]:
    """(route, its query parameters) of every route that takes query parameters."""
    out = []
    for route in app.routes:
        if isinstance(route, APIRoute):
            names, stack = [], [route.dependant]
            while stack:
                current = stack.pop()
                names += [p.alias for p in current.query_params]
                stack += current.dependencies
            if names:
                out.append((route, names))
    return out


def _path_routes(app) -> list[tuple[APIRoute, list[str]]]:
    """(route, its path parameters) of every route that takes path parameters."""
    return [(r, [p.alias for p in r.dependant.path_params]) for r in app.routes
            if isinstance(r, APIRoute) and r.dependant.path_params]


def _with_param(route: APIRoute, query: list[str], name: str, value: str) -> str:
    """A URL of ``route`` with ``value`` (already %-encoded) for ``name``, "x" for its other
    query parameters, "x" for its path parameters."""
    path = route.path_format
    for p in route.dependant.path_params:
        path = path.replace("{" + p.alias + "}", value if p.alias == name else "x")
    params = [f"{q}={value if q == name else 'x'}" for q in query]
    return path + ("?" + "&".join(params) if params else "")


@pytest.mark.parametrize("value, at, code", [("%00", 0, 0x00), ("a%1Bb", 1, 0x1B), ("ab%01", 2, 0x01),
                                             ("%08", 0, 0x08), ("x%0Bx", 1, 0x0B), ("%1F", 0, 0x1F)])
def test_a_control_character_in_a_query_or_path_value_is_422_naming_it(client, app, value, at, code) -> None:
    """``?doc_id=%00`` and ``/v1/models/%00`` were looked up and ended in a 404 that did not say
    why; a body's string holding the same character is refused (the same rule and wording)."""
    routes = [(r, q, q) for r, q in _query_routes(app)] + [(r, p, []) for r, p in _path_routes(app)]
    assert {r.path for r, _, _ in routes} == {"/v1/images/file", "/v1/models/{model:path}"}  # a new one is swept too
    for route, names, query in routes:
        method = next(iter(route.methods - {"HEAD"}))
        for name in names:
            err = bad(client.request(method, _with_param(route, query, name, value)), name, status=422,
                      code="control_character")
            assert err["message"] == (f"{name}: character {at} is the control character U+{code:04X} (%{code:02X} in "
                                      "a URL), which is not text; remove it (tab, newline and carriage return are "
                                      "the only control characters a text may hold)"), err


def test_tab_newline_del_and_c1_in_a_query_or_path_value_are_read(client, app) -> None:
    """As in a body: tab, newline, carriage return, DEL and the C1 controls are text; the value
    is looked up (and not found: 404 naming it). A parameter the route does not read is ignored."""
    for value in ("a%09b", "%0A", "a%0D%0A", "%7F", "%C2%85", "%C2%9F"):
        bad(client.get(f"/v1/images/file?doc_id={value}&image_id={value}"), "image_id", status=404,
            code="image_not_found")
        bad(client.get(f"/v1/models/{value}"), "model", status=404, code="model_not_found")
    assert client.get("/health?x=%00").status_code == 200
    bad(client.get("/v1/images/file?doc_id=a&image_id=b&unknown=%00"), "image_id", status=404)


def test_a_control_character_in_a_url_is_refused_over_a_socket(app) -> None:
    """The same through uvicorn, which decodes the path itself (TestClient's transport does not
    parse a request line)."""
    with LoopbackServer(app, lifespan="off") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for target, param in (("/v1/models/a%00b", "model"), ("/v1/images/file?doc_id=%1b&image_id=x", "doc_id")):
            conn.request("GET", target)
            resp = conn.getresponse()
            err = json.loads(resp.read())["error"]
            assert resp.status == 422 and err["param"] == param and err["code"] == "control_character", (target, err)


def test_a_repeated_query_parameter_is_422_naming_it(client, app) -> None:
    """``?doc_id=a&doc_id=b`` was read as doc_id=b, the first value dropped without a word."""
    routes = _query_routes(app)
    assert [r.path for r, _ in routes] == ["/v1/images/file"]  # a new one is swept here too
    for route, names in routes:
        method = next(iter(route.methods - {"HEAD"}))
        for name in names:
            for values in (["a", "b"], ["a", "a"], ["", "x", "y", "z", "w"]):
                query = "&".join([f"{other}=x" for other in names if other != name] + [f"{name}={v}" for v in values])
                err = bad(client.request(method, f"{route.path}?{query}"), name, status=422, code="repeated_parameter")
                assert err["message"].startswith(f"{name}: sent {len(values)} times in the query string ("), err
                assert err["message"].endswith(f"send {name} once (a query parameter)"), err
        # each parameter once is read as ever (no image in the fake pipeline's index: 404 naming it)
        bad(client.get(f"{route.path}?" + "&".join(f"{n}=x" for n in names) + "&unknown=1&unknown=2"), "image_id",
            status=404, code="image_not_found")
    err = bad(client.get("/v1/images/file?doc_id=a&doc_id=b&image_id=c"), "doc_id", status=422)
    assert "('a', 'b')" in err["message"], err


def test_a_list_query_parameter_may_be_repeated() -> None:
    """Only a parameter that takes one value is refused when repeated: a ``list[str]`` one takes each."""
    from searchsmith.serving.middleware import AnswerErrors, single_value_params

    small = FastAPI()
    small.router.route_class = AnswerErrors

    @small.get("/t")
    async def t(k: int, tags: Annotated[list[str] | None, Query()] = None, name: str | None = None) -> dict:
        return {"k": k, "tags": tags}

    route = next(r for r in small.routes if isinstance(r, APIRoute) and r.path == "/t")
    assert single_value_params(route.dependant) == {"k", "name"}
    with TestClient(small, raise_server_exceptions=False) as c:
        assert c.get("/t?k=1&tags=a&tags=b").json() == {"k": 1, "tags": ["a", "b"]}
        bad(c.get("/t?k=1&k=2&tags=a"), "k", status=422, code="repeated_parameter")
        bad(c.get("/t?k=1&name=a&name=b"), "name", status=422, code="repeated_parameter")


# Sent as written (a real socket): HTTP clients would resolve the dot segments first.
ODD_PATHS = ["/ui/../http.py", "/ui/../../serving/http.py", "/ui/..%2fhttp.py", "/ui/%2e%2e/http.py",
             "/ui/%2e%2e%2f%2e%2e%2fserving%2fhttp.py", "/ui/....//http.py", "/ui/%00", "/ui/app.js%00",
             "/ui/app.js%00.png", "/ui/%c0%ae%c0%ae/http.py", "/ui/..%5chttp.py", "/ui//etc/passwd",
             "/ui/%2fetc%2fpasswd", "/docs/assets/../../http.py", "/docs/assets/..%2f..%2fhttp.py", "/..", "/../",
             "/%2e%2e", "/ui/%ff", "/ui/%", "/ui/%zz", "/ui/..", "/ui/" + "%2e%2e/" * 50 + "etc/passwd", "*",
             "/%00/ui/app.js", "/ui/" + "a" * 4000]


def test_odd_paths_of_the_static_routes_are_404_and_never_leave_the_folder(app) -> None:
    served = {p.read_bytes() for p in (STATIC_DIR / "ui").iterdir() if p.is_file()}
    with LoopbackServer(app, lifespan="off") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        for path in ODD_PATHS:
            conn.putrequest("GET", path, skip_accept_encoding=True)
            conn.endheaders()
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 404 and resp.getheader("content-type") == "application/json", (path, resp.status)
            assert json.loads(body)["error"]["type"] == "http_error", path
            assert body not in served and b"def create_app" not in body, path
        conn.request("GET", "/ui/app.js")
        assert conn.getresponse().read() in served  # the same connection still serves the page


def test_long_and_odd_headers_are_answered(client, app) -> None:
    huge = bad(client.post("/v1/rerank", json={"query": "q", "documents": ["d"]},
                           headers={"x-filler": "a" * (LIMITS.max_header_bytes + 1)}), "headers", status=431)
    assert "server.max_header_bytes" in huge["message"]
    with TestClient(create_app(ServerLimits(api_keys=["k1"]), reranker=models()["reranker"]),
                    raise_server_exceptions=False) as keyed:
        for auth in ("Bearer", "Bearer ", "Basic azE=", "Bearer " + "k" * 10_000, "bearer k1x", "k1", "Bearer k1 k1"):
            resp = keyed.post("/v1/rerank", json={"query": "q", "documents": ["d"]}, headers={"authorization": auth})
            assert "Authorization" in bad(resp, None, status=401)["message"], auth
        assert keyed.post("/v1/rerank", json={"query": "q", "documents": ["d"]},
                          headers={"authorization": "Bearer k1"}).status_code == 200
    _answers_good_requests(client, app)
