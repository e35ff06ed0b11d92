"""Request and response schemas of the server, and the one text check of every request body.

Every request body is a :class:`RequestBody`: strict types, unknown fields refused, and every
string in it checked once, before any handler runs, to be encodable as UTF-8 and free of
control characters (:func:`control_character_in`, the rule the query and path values of a
route follow too). The response examples (``RESPONSE_EXAMPLES``) are what /docs shows; tests
compare their keys with real answers, so the docs cannot drift from the code.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator, with_config
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core import ValidationError as PydanticValidationError
from searchsmith.models.config import is_int
from searchsmith.models.errors import ValidationError
from searchsmith.models.jsonl import find_lone_surrogate
from searchsmith.serving.http_errors import json_path, with_param
from searchsmith.serving.limits import ServerLimits
from searchsmith.serving.pipeline.answer import CLOSED, Answer, Json
from typing_extensions import NotRequired, TypedDict

# Every request body is a ``RequestBody``: strict types, unknown fields refused, and every
# string in it (values and keys, at any depth) checked once here, before any handler runs,
# to be encodable as UTF-8 and free of control characters. JSON lets a body carry a lone
# surrogate ("\ud800"), which Python decodes into a str that tokenizers and the response
# encoder then fail on (a 500); and "\u0000" or "\u001b", which no text a model reads holds
# (a NUL ends a C string in a tokenizer or a log, an ESC starts a terminal escape).

# The C0 control characters but tab, newline and carriage return: what XML 1.0 refuses in text.
# DEL and the C1 controls (U+007F-U+009F) are let through, as XML lets them.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def control_character_in(text: str, *, escape: Literal["json", "url"] = "json") -> str | None:
    """What is wrong with ``text`` if it holds a control character (``_CONTROL``), or None.

    The one rule and wording for every text of a request: the strings of a body (``escape``
    "json": the character shown as ``\\u0000``) and the values of a route's query and path
    parameters (``escape`` "url": shown as ``%00``, ``serving.middleware``).
    """
    found = _CONTROL.search(text)
    if found is None:
        return None
    code = ord(found.group())
    shown = f"\\u{code:04x} in JSON" if escape == "json" else f"%{code:02X} in a URL"
    return (f"character {found.start()} is the control character U+{code:04X} ({shown}), which is not text; "
            "remove it (tab, newline and carriage return are the only control characters a text may hold)")


def find_unencodable(value: Any) -> tuple[tuple[Any, ...], str] | None:
    """The first string in a JSON value that UTF-8 cannot encode (a lone surrogate), or None.

    The walk is the JSONL readers' (``models.text.find_lone_surrogate``); the wording is the
    server's.

    Args:
        value: a parsed JSON value (dicts, lists, strings, numbers).

    Returns:
        (location in ``value``, what is wrong) of the first such string or field name, in
        document order; None when every string encodes.
    """
    found = find_lone_surrogate(value)
    if found is None:
        return None
    if found.in_name:
        return found.loc, "a field name contains a lone surrogate, which is not Unicode text; send valid UTF-8"
    return found.loc, (f"character {found.index} is a lone surrogate (U+{ord(found.char):04X}), which is not "
                       "Unicode text; send valid UTF-8 (a \\ud800-\\udbff escape must be followed by a "
                       "\\udc00-\\udfff one)")


def find_control_character(value: object) -> tuple[tuple[int | str, ...], str] | None:
    """The first string in a JSON value holding a control character other than tab, newline
    and carriage return (``_CONTROL``), or None.

    Args:
        value: a parsed JSON value (dicts, lists, strings, numbers).

    Returns:
        (location in ``value``, what is wrong) of the first such string or field name, in
        document order; None when no string holds one.
    """
    stack: list[tuple[tuple[int | str, ...], object]] = [((), value)]  # a stack, not recursion: any depth
    while stack:
        loc, item = stack.pop()
        if isinstance(item, str):
            what = control_character_in(item)
            if what is not None:
                return loc, what
        elif isinstance(item, dict):
            for key in item:
                found = _CONTROL.search(key) if isinstance(key, str) else None
                if found is not None:
                    return loc, f"a field name holds the control character U+{ord(found.group()):04X}; remove it"
            stack.extend(((*loc, k), v) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(((*loc, i), v) for i, v in reversed(list(enumerate(item))))
    return None


def undecodable_body(body: bytes) -> ValidationError | None:
    """A 422 naming the field whose bytes are not UTF-8, or None when ``body`` decodes.

    Only called once parsing failed, so valid requests never pay for it.
    """
    try:
        body.decode("utf-8")
        return None
    except UnicodeDecodeError as exc:
        at = exc.start
    fix = "send the body as UTF-8 encoded JSON"
    try:  # undecodable bytes become lone surrogates (U+DC80..U+DCFF): find_unencodable locates them
        found = find_unencodable(json.loads(body.decode("utf-8-sig", "surrogateescape")))  # a BOM is accepted
    except ValueError:
        found = None
    path = json_path(found[0]) if found is not None else "body"
    return with_param(ValidationError(f"{path}: byte {at} of the body is not valid UTF-8; {fix}"), path,
                      "unencodable_text")


def too_deep_body(body: bytes) -> ValidationError | None:
    """A 422 for JSON the parser refuses though it is valid: nested past the parser's depth
    (Python's recursion limit, about 1,000 levels), or an integer of more digits than Python
    converts (4,300); None when ``body`` parses or fails for another reason."""
    try:
        json.loads(body)
    except RecursionError:
        return with_param(ValidationError("body: JSON nested deeper than the parser allows (about 1,000 levels); "
                                          "flatten the request"), "body", "too_deep")
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # CPython's int_max_str_digits guard
            # its message ends "use sys.set_int_max_str_digits() to increase the limit": the server's
            # fix, not the client's
            digits = re.search(r"value has (\d+) digits", str(exc))
            return with_param(ValidationError(
                f"body: a number has more digits than the parser reads ({digits.group(1) if digits else 'too many'} "
                f"digits, the parser reads at most {sys.get_int_max_str_digits()}); send numbers of ordinary size"),
                "body", "number_too_long")
        return None
    return None


class RequestBody(BaseModel):
    """Base of every request schema: strict, no unknown fields, all text encodable and free of
    control characters but tab, newline and carriage return (422 otherwise)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _text_is_unicode(cls, data: Any) -> Any:
        for find, code in ((find_unencodable, "unencodable_text"), (find_control_character, "control_character")):
            found = find(data)
            if found is not None:
                loc, what = found  # the message gets "<path>: " in front from http_errors.error_response
                raise PydanticValidationError.from_exception_data(cls.__name__, [InitErrorDetails(
                    type=PydanticCustomError(code, "{message}", {"message": what}),
                    loc=loc, input=None)])
        return data


def _examples(*bodies: dict[str, Any]) -> ConfigDict:
    """A request schema's config with ``examples`` (shown by /docs, checked by the tests)."""
    return ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": list(bodies)})


class EmbeddingsRequest(RequestBody):
    """OpenAI ``POST /v1/embeddings`` body (token-array inputs are not supported).

    ``dimensions`` must be the model's dimension, or one of the truncations the bundle was
    trained for (``matryoshka_dims`` in its manifest); ``encoding_format: base64`` returns
    each vector as base64 of little-endian float32, as OpenAI does. ``embedding_dtype:
    float16`` (a searchsmith extension, base64 only) sends little-endian float16 instead: half
    the bytes, about 3 significant digits; OpenAI's clients decode base64 as float32, so decode
    it yourself (``numpy.frombuffer(base64.b64decode(s), "<f2")``).
    """

    model_config = _examples(
        {"input": ["How long should I knead bread dough?", "Saturn's rings are made of ice."],
         "model": "embedder", "encoding_format": "float"},
        {"input": "one text", "encoding_format": "base64"},
        {"input": ["one text", "another"], "encoding_format": "base64", "embedding_dtype": "float16"})

    input: str | list[str]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"

    @field_validator("input", mode="before")
    @classmethod
    def _no_token_arrays(cls, value: Any) -> Any:
        # OpenAI also takes token ids ([1, 2] or [[1, 2]]); said plainly instead of the union's
        # "Input should be a valid string" for each of its members
        if isinstance(value, list) and value and all(
                is_int(v) or (isinstance(v, list) and v and all(is_int(t) for t in v)) for v in value):
            raise PydanticCustomError("token_arrays", "token-id arrays are not supported; send the texts as strings "
                                                      "(a string, or a list of strings)")
        return value
    embedding_dtype: Literal["float32", "float16"] = "float32"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None  # accepted for OpenAI compatibility, unused


class RouteRequest(RequestBody):
    """``POST /v1/route`` body."""

    model_config = _examples(
        {"query": "Where can I find it?", "mode": "auto", "top_k": 2,
         "history": [{"role": "user", "content": "How do I configure the Lumen cache?"},
                     {"role": "assistant", "content": "Set lumen.eviction.policy in lumen.yaml."}]})

    query: str
    history: list[dict[str, Any]] | None = None
    mode: Literal["parallel", "serial", "auto"] | None = None
    top_k: int | None = Field(default=None, ge=1, le=1000)


class RerankDocument(BaseModel):
    """A document as Cohere and Jina send it: ``{"text": ...}``."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    text: str


class RerankRequest(RequestBody):
    """``POST /v1/rerank`` body (the TEI / Cohere / Jina shape)."""

    model_config = _examples(
        {"query": "Which planet has the Great Red Spot?",
         "documents": ["Bananas are yellow.", {"text": "Jupiter's Great Red Spot is a giant storm."}],
         "top_n": 1, "return_documents": True})

    query: str
    documents: list[str | RerankDocument]
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    raw_scores: bool = False  # True: logits; False: sigmoid(logit) in (0, 1), the same order
    model: str | None = None


class DecomposeRequest(RequestBody):
    """``POST /v1/decompose`` body."""

    model_config = _examples(
        {"query": "Compare the populations of Paris and Berlin", "max_nodes": 4},
        {"query": "and what about its rings?", "history": [
            {"role": "user", "content": "Tell me about Saturn"},
            {"role": "assistant", "content": "Saturn is the sixth planet."}]})

    query: str
    history: list[dict[str, Any]] | None = None
    max_nodes: int | None = Field(default=None, ge=1, le=64)


class CiteDocument(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    id: str
    text: str


class CiteRequest(RequestBody):
    """``POST /v1/cite`` body: ``sentences`` or an ``answer`` (split into sentences here)."""

    model_config = _examples(
        {"answer": "Kestrel listens on port 8080. Lumen caches pages.",
         "documents": [{"id": "doc-1", "text": "Kestrel listens on port 8080 by default."},
                       {"id": "doc-2", "text": "Lumen caches rendered pages."}]},
        {"sentences": ["Kestrel listens on port 8080."],
         "documents": [{"id": "doc-1", "text": "Kestrel listens on port 8080 by default."}], "threshold": 0.5})

    sentences: list[str] | None = None
    answer: str | None = None
    documents: list[CiteDocument]
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    max_per_sentence: int | None = Field(default=None, ge=1, le=100)


class PlaceImage(BaseModel):
    """An image of ``/v1/images/place``: pixels as base64 ``data`` and/or a caption (no paths)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    id: str
    caption: str | None = None
    url: str | None = None  # echoed back, never fetched
    data: str | None = None  # base64 PNG / JPEG / ... bytes


class PlaceRequest(RequestBody):
    """``POST /v1/images/place`` body."""

    model_config = _examples(
        {"paragraphs": ["A cat sleeps on the sofa.", "The dog runs in the park."],
         "images": [{"id": "fig-1", "caption": "a dog running on grass", "url": "https://example.com/dog.png"},
                    {"id": "fig-2", "caption": "a cat asleep on a sofa"}],
         "query": "pets at home"})

    paragraphs: list[str]
    images: list[PlaceImage]
    query: str | None = None
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)


class SearchRequest(RequestBody):
    """``POST /v1/search`` body (``stream: true``: Server-Sent Events)."""

    model_config = _examples(
        {"query": "How long should I knead bread dough?", "query_id": "q-0001"},
        {"query": "And at what temperature do I bake it?", "stream": True, "history": [
            {"role": "user", "content": "How long should I knead bread dough?"},
            {"role": "assistant", "content": "About ten minutes."}]})

    query: str
    history: list[dict[str, Any]] | None = None
    preset: str | None = None
    strategy: Literal["direct", "parallel", "planning"] | None = None
    routing_mode: Literal["serial", "parallel", "auto"] | None = None
    query_id: str | None = Field(
        default=None, min_length=1, max_length=128,
        description="the id /v1/feedback rewards this answer by (a fresh one when left out); with the "
                    "protocol router on, one still waiting for its feedback is refused (422), as a second "
                    "answer would take it over")
    stream: bool = False


class FeedbackRequest(RequestBody):
    """``POST /v1/feedback`` body: the quality of an answer in [0, 1] (its ``query_id``)."""

    model_config = _examples({"query_id": "q-0001", "quality": 0.8})

    query_id: str = Field(min_length=1, max_length=128)
    quality: float = Field(ge=0.0, le=1.0)


# ---- the server's request limits, written into /openapi.json -------------------------------------
# (schema, field, what, ServerLimits setting): "items" bounds a list (1 to the setting; 400 when
# empty, 413 past it), "chars" each text of the field (413 past it, unless server.truncate cuts it).
REQUEST_LIMITS: tuple[tuple[str, str, Literal["items", "chars"], str], ...] = (
    ("EmbeddingsRequest", "input", "items", "max_texts_per_request"),
    ("EmbeddingsRequest", "input", "chars", "max_input_chars"),
    ("RouteRequest", "query", "chars", "max_input_chars"),
    ("RerankRequest", "query", "chars", "max_input_chars"),
    ("RerankRequest", "documents", "items", "max_documents_per_request"),
    ("RerankRequest", "documents", "chars", "max_input_chars"),
    ("RerankDocument", "text", "chars", "max_input_chars"),
    ("DecomposeRequest", "query", "chars", "max_input_chars"),
    ("CiteRequest", "sentences", "items", "max_texts_per_request"),
    ("CiteRequest", "sentences", "chars", "max_input_chars"),
    ("CiteRequest", "answer", "chars", "max_input_chars"),
    ("CiteRequest", "documents", "items", "max_documents_per_request"),
    ("CiteDocument", "text", "chars", "max_input_chars"),
    ("PlaceRequest", "paragraphs", "items", "max_texts_per_request"),
    ("PlaceRequest", "paragraphs", "chars", "max_input_chars"),
    ("PlaceRequest", "images", "items", "max_images_per_request"),
    ("PlaceRequest", "query", "chars", "max_input_chars"),
    ("PlaceImage", "caption", "chars", "max_input_chars"),
)


def _members(node: dict[str, Any]) -> list[dict[str, Any]]:
    """``node`` and the members of its ``anyOf`` (a union), for the types they name."""
    return [node, *node.get("anyOf", [])]


def document_limits(spec: dict[str, object], config: ServerLimits) -> dict[str, object]:
    """Write the server's request limits (``config``: its ``ServerLimits``) into an OpenAPI
    ``spec`` in place: ``minItems`` / ``maxItems`` on the lists, ``maxLength`` on the texts
    (left out when ``server.truncate`` cuts long texts instead of refusing them), and the
    setting each comes from in the field's description. Generated clients and request
    fuzzers then keep within what the server takes.

    Returns:
        ``spec``.
    """
    schemas = cast(dict[str, Any], spec.get("components", {})).get("schemas", {})
    for model, field, what, setting in REQUEST_LIMITS:
        prop = schemas.get(model, {}).get("properties", {}).get(field)
        if prop is None:
            raise KeyError(f"REQUEST_LIMITS: {model}.{field} is not in the schema")
        limit = int(getattr(config, setting))
        if what == "items":
            for node in _members(prop):
                if node.get("type") == "array":
                    node["minItems"], node["maxItems"] = 1, limit
            note = f"1 to {limit} items (server.{setting})"
        elif config.truncate:
            note = f"texts past {limit} characters are cut (server.{setting}, server.truncate)"
        else:
            for node in _members(prop):
                strings = [node] + [m for item in [node.get("items", {})] for m in _members(item)]
                for member in strings:
                    if member.get("type") == "string":
                        member["maxLength"] = limit
            note = f"texts of at most {limit} characters (server.{setting})"
        prop["description"] = "; ".join(filter(None, [prop.get("description"), note]))
    return spec


# ---- what /docs shows beside the request schemas -----------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    """Every error: OpenAI's shape; ``type`` is the kind of ERROR_TABLE, ``param`` the field at fault."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"error": {
        "message": "model: 'gpt-4' is not served here; use one of ['embedder'] or omit model (more names: "
                   "server.embeddings_model.aliases in serve.yaml)", "type": "validation_error",
        "param": "model", "code": "model_not_found"}}]})

    error: ErrorDetail


# ---- the 200 answers' types: /openapi.json documents them, tests validate real answers -------
# Keys closed (``CLOSED``): a key an endpoint adds or renames without its type here fails the
# tests (tests/serving/test_http_models.py), so the schema cannot drift from the code.


@with_config(CLOSED)
class EmbeddingData(TypedDict):
    """One vector: JSON floats, or base64 of little-endian float32 / float16 (``encoding_format``)."""

    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


@with_config(CLOSED)
class EmbeddingsUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


@with_config(CLOSED)
class EmbeddingsResponse(TypedDict):
    object: Literal["list"]
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingsUsage


@with_config(CLOSED)
class RoutedSource(TypedDict):
    source: str
    score: float


@with_config(CLOSED)
class RouteResponse(TypedDict):
    """The sources a query is routed to, best first; ``fallback`` when none passed the threshold."""

    sources: list[RoutedSource]
    query: str
    routed_text: str
    rewrite: str | None
    mode: str
    fallback: bool
    warnings: list[str]
    latency_ms: dict[str, float]


@with_config(CLOSED)
class RerankedDocument(TypedDict):
    text: str


@with_config(CLOSED)
class RerankResult(TypedDict):
    """A document's place: its index in the request and its score (``document`` with
    ``return_documents``)."""

    index: int
    relevance_score: float
    document: NotRequired[RerankedDocument]


@with_config(CLOSED)
class RerankUsage(TypedDict):
    total_tokens: int


@with_config(CLOSED)
class RerankResponse(TypedDict):
    object: Literal["list"]
    model: str
    results: list[RerankResult]
    usage: RerankUsage


@with_config(CLOSED)
class GraphNode(TypedDict):
    id: str
    text: str
    depends_on: list[str]


@with_config(CLOSED)
class DecomposeResponse(TypedDict):
    """The query (rewritten from its history when one is sent) as a graph of sub-questions."""

    query: str
    rewrite: str
    type: str
    nodes: list[GraphNode]


@with_config(CLOSED)
class EntitySpan(TypedDict):
    start: int
    end: int
    label: str
    text: str


@with_config(CLOSED)
class DocumentCitation(TypedDict):
    id: str
    score: float


@with_config(CLOSED)
class CitedSentence(TypedDict):
    text: str
    entities: list[EntitySpan]
    citations: list[DocumentCitation]


@with_config(CLOSED)
class CiteResponse(TypedDict):
    """Each sentence's entities (spans) and the documents that support it (``method`` bundle
    or embedding)."""

    sentences: list[CitedSentence]
    method: str
    threshold: float


@with_config(CLOSED)
class Placement(TypedDict):
    id: str
    paragraph: int
    score: float
    url: NotRequired[str]


@with_config(CLOSED)
class Unplaced(TypedDict):
    """An image no paragraph took: its best score (null without paragraphs), and why when it
    could not be read at all."""

    id: str
    best_score: float | None
    reason: NotRequired[str]


@with_config(CLOSED)
class PlaceResponse(TypedDict):
    placements: list[Placement]
    unplaced: list[Unplaced]
    method: str
    threshold: float


@with_config(CLOSED)
class FeedbackResponse(TypedDict):
    """``recorded`` true: the reward the router learned (``preset``, ``reward``, ``cost``);
    false (the router is off): the rating sent back and a ``message`` saying how to use it."""

    query_id: str
    recorded: bool
    preset: NotRequired[str]
    reward: NotRequired[float]
    cost: NotRequired[float]
    quality: NotRequired[float]
    message: NotRequired[str]


@with_config(CLOSED)
class ModelCard(TypedDict):
    """A served model (OpenAI's shape), its endpoint and the other names it answers to;
    ``gate``: for the reranker, whether its held-out figure beat the bi-encoder order."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    endpoint: str
    aliases: list[str]
    gate: NotRequired[Json]


@with_config(CLOSED)
class ModelsResponse(TypedDict):
    object: Literal["list"]
    data: list[ModelCard]


@with_config(CLOSED)
class ReadyResponse(TypedDict):
    """What is loaded (per endpoint) and each configured bundle's gate decision."""

    status: Literal["ready"]
    models: Json
    gates: dict[str, Json]


# what each path answers with 200 (application/json)
RESPONSE_TYPES: dict[str, Any] = {
    "/v1/embeddings": EmbeddingsResponse, "/v1/route": RouteResponse, "/v1/rerank": RerankResponse,
    "/v1/decompose": DecomposeResponse, "/v1/cite": CiteResponse, "/v1/images/place": PlaceResponse,
    "/v1/search": Answer, "/v1/feedback": FeedbackResponse, "/v1/models": ModelsResponse,
    "/v1/models/{model}": ModelCard, "/ready": ReadyResponse,
}


# One answer per endpoint, as the server sends it (shortened lists); tests compare their keys
# with real answers, so the docs cannot drift from the code.
RESPONSE_EXAMPLES: dict[str, dict[str, Any]] = {
    "/v1/embeddings": {"object": "list", "model": "embedder",
                       "data": [{"object": "embedding", "index": 0, "embedding": [0.0213, -0.0442, 0.0871]}],
                       "usage": {"prompt_tokens": 12, "total_tokens": 12}},
    "/v1/route": {"sources": [{"source": "code", "score": 0.61}, {"source": "cooking", "score": 0.12}],
                  "query": "Where can I find it?", "routed_text": "Where can I find the Lumen cache?",
                  "rewrite": "Where can I find the Lumen cache?", "mode": "serial", "fallback": False, "warnings": [],
                  "latency_ms": {"embed": 6.1, "search": 0.4}},
    "/v1/rerank": {"object": "list", "model": "reranker",
                   "results": [{"index": 1, "relevance_score": 0.97,
                                "document": {"text": "Jupiter's Great Red Spot is a giant storm."}}],
                   "usage": {"total_tokens": 31}},
    "/v1/decompose": {"query": "Compare the populations of Paris and Berlin",
                      "rewrite": "Compare the populations of Paris and Berlin", "type": "split",
                      "nodes": [{"id": "1", "text": "What is the population of Paris?", "depends_on": []},
                                {"id": "2", "text": "What is the population of Berlin?", "depends_on": []}]},
    "/v1/cite": {"method": "bundle", "threshold": 0.5, "sentences": [
        {"text": "Kestrel listens on port 8080.", "entities": [{"start": 0, "end": 7, "label": "ENT", "text": "Kestrel"}],
         "citations": [{"id": "doc-1", "score": 0.93}]}]},
    "/v1/images/place": {"placements": [{"id": "fig-1", "paragraph": 1, "score": 0.71,
                                         "url": "https://example.com/dog.png"}],
                         "unplaced": [{"id": "fig-2", "best_score": 0.12}], "method": "captions", "threshold": 0.3},
    "/v1/search": {"query_id": "q-0001", "query": "How long should I knead bread dough?",
                   "rewrite": "How long should I knead bread dough?",
                   "answer": "About ten minutes. Knead the dough for about ten minutes [1].",
                   "answer_text": "About ten minutes. Knead the dough for about ten minutes.", "answer_found": True,
                   "short_answer": "About ten minutes", "support": ["Knead the dough for about ten minutes."],
                   "references": [{"n": 1, "doc_id": "bread-101", "chunk_id": "bread-101#0", "title": "Bread basics",
                                   "source": "cooking", "url": "https://example.com/bread", "score": 0.83,
                                   "text": "Knead the dough for about ten minutes. The recipe was updated on 1 May 2024."}],
                   "sentences": [{"text": "Knead the dough for about ten minutes.", "entities": [],
                                  "citations": [{"n": 1, "score": 0.81, "chunk_id": "bread-101#0",
                                                 "quote": "Knead the dough for about ten minutes."}]}],
                   "timeline": [{"year": "2024", "events": [
                       {"date": "2024-05-01", "precision": "day", "text": "The recipe was updated on 1 May 2024.",
                        "sources": ["bread-101"]}]}], "images": [],
                   "passages": [{"chunk_id": "bread-101#0", "doc_id": "bread-101", "source": "cooking",
                                 "title": "Bread basics", "score": 0.83, "node_id": "1", "date": "2024-05-01",
                                 "url": "https://example.com/bread"}],
                   "nodes": [{"id": "1", "text": "How long should I knead bread dough?", "depends_on": [], "round": 0,
                              "answer": "About ten minutes", "passages": ["bread-101#0"]}],
                   "trace": {"preset": "large", "strategy": "direct", "graph_type": "terminal",
                             "routing": {"mode": "parallel", "routed_text": "How long should I knead bread dough?",
                                         "fallback": False, "sources": [{"source": "cooking", "score": 0.4}]},
                             "sources": ["cooking"],
                             "stages": {"retrieval": {"latency_ms": 1.7, "model_calls": 0, "tokens_in": 0,
                                                      "tokens_out": 0}},
                             "total_ms": 812.4, "model_calls": 1, "tokens_in": 412, "tokens_out": 18, "cost": 0.81,
                             "features": [1.0, 0.22, 0.0, 0.0, 0.0, 0.0, 0.0], "notes": [], "gates": {}}},
    "/v1/feedback": {"query_id": "q-0001", "preset": "large", "reward": 0.71, "cost": 0.9, "recorded": True},
    "/v1/models": {"object": "list", "data": [{"id": "embedder", "object": "model", "created": 0,
                                               "owned_by": "searchsmith", "endpoint": "/v1/embeddings",
                                               "aliases": ["text-embedding-3-small"]}]},
}


# What /docs says of the statuses whose cause is not the route's own (FastAPI would show only
# the reason phrase)
ERROR_DESCRIPTIONS = {
    415: "the body is not JSON in UTF-8: a Content-Type other than application/json (or none), a charset "
         "other than utf-8 (charset= or charset*=), or UTF-16/UTF-32 bytes; send 'Content-Type: application/json'",
    422: "a field, query or path parameter that is invalid (wrong type, a control character, a query parameter "
         "sent twice, a key written twice); the message and param name it",
}


def route_responses(path: str, *extra: int, body: bool = False) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route for /docs: its 200 example and the error body of each status.

    Args:
        path: the route's path, for its 200 type and example (``""``: none).
        *extra: statuses beyond the ones every route may answer.
        body: the route reads a JSON body, so it may answer 415 (``serving.middleware.parse_json_once``).
    """
    out: dict[int | str, dict[str, Any]] = {}
    if path in RESPONSE_TYPES:
        out[200] = {"model": RESPONSE_TYPES[path]}
    if path in RESPONSE_EXAMPLES:
        out.setdefault(200, {})["content"] = {"application/json": {"example": RESPONSE_EXAMPLES[path]}}
    if path == "/v1/search":
        out[200]["content"]["text/event-stream"] = {"example": (
            'event: answer\ndata: {"delta": "Knead the dough for about"}\n\n'
            'event: citations\ndata: {"answer": "...", "references": [...], "sentences": [...]}\n\n'
            "event: timeline\n...\nevent: images\n...\nevent: trace\n...\ndata: [DONE]\n\n")}
    for status in (400, 401, 404, 413, *((415,) if body else ()), 422, 429, 503, 504, *extra):
        out[status] = {"model": ErrorBody}
        if status in ERROR_DESCRIPTIONS:
            out[status]["description"] = ERROR_DESCRIPTIONS[status]
    return out
