"""The model endpoints of the server: /v1/embeddings, route, rerank, decompose, cite,
images/place, search and feedback (the request and response shapes: ``serving/http.py``).

Each endpoint validates its request, then hands the work to the batcher of its model
(embeddings and rerank pairs, batched across requests) or to its queue with batches of one
(``state.gates``: decompose, cite, images, search). Citation and image placement are the
pipeline's own functions (``pipeline.citation.cite_sentences``, ``pipeline.images.place_images``),
so /v1/cite and /v1/images/place answer as /v1/search cites and places.

Every request that works off the event loop (a thread pool, a model's queue) is counted in
first (``state.admission``): past ``server.max_pending_requests`` in work it is answered 429
at once, so a flood cannot queue in ``asyncio.to_thread``'s executor (whose queue has no
bound) ahead of the models' bounded queues.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from searchsmith.models.errors import (
    ClientGone,
    EmptyInputError,
    NotReadyError,
    PayloadTooLargeError,
    RunnerError,
    ValidationError,
)
from searchsmith.models.text import is_blank
from searchsmith.serving.batcher import DynamicBatcher
from searchsmith.serving.http_errors import error_response, with_param
from searchsmith.serving.pipeline.citation import cite_sentences, support_threshold
from searchsmith.serving.pipeline.images import place_images
from searchsmith.serving.request_checks import (
    check_count,
    check_text,
    decode_image,
    tokenize_inputs,
)
from searchsmith.serving.runner import BundleEmbedder, CallOutcome
from searchsmith.serving.schemas import (
    CiteRequest,
    DecomposeRequest,
    EmbeddingsRequest,
    FeedbackRequest,
    PlaceRequest,
    RerankRequest,
    RouteRequest,
    SearchRequest,
    route_responses,
)
from searchsmith.serving.state import ServingState, check_dimensions, check_model
from starlette.exceptions import HTTPException as StarletteHTTPException

# the image files /v1/images/file serves, by suffix
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp"}
FEEDBACK_OFF = ("feedback is accepted but not used: the protocol router is off, so every answer uses "
                "pipeline.protocol.default_preset; to learn from feedback set pipeline.protocol.enabled: true "
                "(and pipeline.protocol.state_path to keep what it learns) in serve.yaml and restart")


async def _gather(batcher: DynamicBatcher, items: Sequence[Any], lengths: Sequence[int], timeout_s: float,
                  what: str) -> list[Any]:
    """Submit every item to the batcher and await all results (in input order).

    Raises:
        PayloadTooLargeError: more items than the batcher's queue holds: such a request could
            never be queued (it got 429 "retry" for ever).
    """
    if len(items) > batcher.config.max_queue:
        raise PayloadTooLargeError(f"{what}: {len(items)} items, more than the server's queue holds "
                                   f"({batcher.config.max_queue}, its batcher's max_queue); split the request")
    futures: list[Future] = []
    try:
        for item, length in zip(items, lengths, strict=True):
            futures.append(batcher.submit(item, length=length))  # NotReadyError once closed
        gathered = asyncio.gather(*[asyncio.wrap_future(f) for f in futures])
        # a cancelled request (its client left) ends the gather with a CancelledError that no one
        # reads; reading it here keeps asyncio from logging "exception was never retrieved"
        gathered.add_done_callback(lambda g: g.cancelled() or g.exception())
        return list(await asyncio.wait_for(gathered, timeout=timeout_s))
    except TimeoutError as exc:
        if str(exc):
            raise
        raise TimeoutError(
            f"{what}: no answer within {timeout_s} s (server.request_timeout_s); the "
            "server is overloaded, retry later or send fewer items"
        ) from exc
    finally:
        for f in futures:  # on error: queued items are dropped, not run for nobody
            f.cancel()


async def _call(state: ServingState, model: str, fn: Callable[[], Any], what: str) -> Any:
    """Run ``fn()`` through ``model``'s queue (batches of one): 429 when the server has
    ``server.max_pending_requests`` in work or the queue is full, 504 past the timeout.

    A timed-out call that already started runs to its end in its worker (a thread cannot be
    stopped); one still queued is dropped.
    """
    gate = state.gates.get(model)
    if gate is None:
        raise NotReadyError(f"{what}: the server is not ready; retry shortly")
    with state.admission.admit(what):
        (outcome,) = await _gather(gate, [fn], [1], state.config.request_timeout_s, what)
    if not isinstance(outcome, CallOutcome):
        raise RunnerError(f"{what}: the call returned {type(outcome).__name__}, expected a CallOutcome")
    return outcome.unwrap()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow warnings


def _text_encoder(state: ServingState) -> Callable[[list[str]], np.ndarray] | None:
    """The served embedder's ``texts -> (n, D)`` (the fallback of cite and images), or None."""
    embedder = state.embedder
    if embedder is None:
        return None
    if isinstance(embedder, BundleEmbedder):
        return lambda texts: np.asarray(embedder.bundle.encode(texts), dtype=np.float32)
    return lambda texts: np.asarray(embedder.encode(texts), dtype=np.float32)


def _sse(name: str, data: Any) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


def _final_events(ans: dict[str, Any]):
    """The events after the answer text: citations, timeline, images, trace, ``[DONE]``."""
    yield _sse("citations", {"answer": ans.get("answer"), "answer_found": ans.get("answer_found", True),
                             "short_answer": ans.get("short_answer", ""),
                             "support": ans.get("support", []), "references": ans.get("references", []),
                             "sentences": ans.get("sentences", [])})
    yield _sse("timeline", {"timeline": ans.get("timeline", [])})
    yield _sse("images", {"images": ans.get("images", [])})
    yield _sse("trace", {k: ans.get(k) for k in ("query_id", "query", "rewrite", "nodes", "passages", "trace")})
    yield "data: [DONE]\n\n"


async def _search_events(ans: dict[str, Any], chunk_chars: int):
    """Server-Sent Events of a finished answer: the text in chunks, then :func:`_final_events`."""
    text = ans.get("answer_text") or ""
    for i in range(0, len(text), chunk_chars):
        yield _sse("answer", {"delta": text[i: i + chunk_chars]})
    for event in _final_events(ans):
        yield event


def _error_event(exc: BaseException) -> str:
    """An error after the stream began: the status and body the request would have had."""
    resp = error_response(exc)
    return _sse("error", {**json.loads(bytes(resp.body)), "status": resp.status_code})


async def _live_events(first: str, deltas: asyncio.Queue, task: asyncio.Future, gone: threading.Event):
    """Server-Sent Events of an answer an LLM is generating: each piece as it comes, then the
    final text when it differs (``{"delta": "", "replace": text}``) and :func:`_final_events`;
    a failure after the first piece is an ``error`` event (the status is already sent). A
    client that leaves sets ``gone``: the generation's next piece stops it."""
    streamed = [first]
    yield _sse("answer", {"delta": first})
    try:
        while True:
            get = asyncio.ensure_future(deltas.get())
            await asyncio.wait({get, task}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                break
            streamed.append(get.result())
            yield _sse("answer", {"delta": streamed[-1]})
        while not deltas.empty():
            streamed.append(deltas.get_nowait())
            yield _sse("answer", {"delta": streamed[-1]})
        try:
            ans = task.result()
        except Exception as exc:  # noqa: BLE001 - the client hears it as an event
            yield _error_event(exc)
            return
        final = ans.get("answer_text") or ""
        if final != "".join(streamed):
            yield _sse("answer", {"delta": "", "replace": final})
        for event in _final_events(ans):
            yield event
    finally:
        if not task.done():  # the client went away: drop the call if it has not started,
            gone.set()  # and stop its generation at the next piece if it has
            task.cancel()


def add_model_routes(app: FastAPI, state: ServingState, check_auth: Callable[[Request], None]) -> None:
    """The /v1 model endpoints: embeddings, route, rerank, decompose, cite, images, search, feedback."""
    config = state.config
    auth = [Depends(check_auth)]

    @app.post("/v1/embeddings", dependencies=auth, responses=route_responses("/v1/embeddings", body=True))
    async def embeddings(req: EmbeddingsRequest) -> JSONResponse:
        embedder_, batcher = state.embedder, state.batcher
        if embedder_ is None or batcher is None or state.shutting_down:
            raise state.unavailable("/v1/embeddings", "no embedding model is loaded",
                                    "add bundles.embedder to serve.yaml and restart")
        served = check_model(req.model, str(embedder_.model_name), config.embeddings_model, "embeddings_model")
        dims = check_dimensions(req.dimensions, embedder_)
        if req.embedding_dtype == "float16" and req.encoding_format != "base64":
            raise ValidationError("embedding_dtype: float16 is sent as base64 only; add \"encoding_format\": "
                                  "\"base64\", or drop embedding_dtype for JSON floats")
        wire = "<f2" if req.embedding_dtype == "float16" else "<f4"
        texts = [req.input] if isinstance(req.input, str) else req.input
        if not texts:
            raise EmptyInputError("input: the list is empty; send at least one string")
        if len(texts) > config.max_texts_per_request:
            raise PayloadTooLargeError(
                f"input: {len(texts)} texts, the limit is {config.max_texts_per_request} "
                "(server.max_texts_per_request); split the request"
            )
        for i, text in enumerate(texts):
            if is_blank(text):
                raise EmptyInputError(f"input[{i}]: the text is empty (nothing but spaces, control or zero-width "
                                      "characters); send non-blank strings")
            if len(text) > config.max_input_chars and not config.truncate:
                raise PayloadTooLargeError(
                    f"input[{i}]: {len(text)} characters, the limit is {config.max_input_chars} "
                    "(server.max_input_chars); shorten it or enable server.truncate"
                )
        # counted in from the tokenizing (a thread pool whose queue has no bound) to the vectors
        with state.admission.admit("/v1/embeddings"):
            ids, lengths = await asyncio.to_thread(tokenize_inputs, embedder_, texts, config)
            vectors = await _gather(batcher, ids, lengths, config.request_timeout_s, "/v1/embeddings")
        data = []
        for i, vec in enumerate(vectors):
            if dims is not None:  # a Matryoshka prefix, unit length again (as OpenAI's dimensions)
                vec = np.asarray(vec, dtype=np.float32)[:dims]
                vec = vec / max(float(np.linalg.norm(vec)), 1e-12)
            if req.encoding_format == "base64":
                emb: Any = base64.b64encode(np.asarray(vec, dtype=wire).tobytes()).decode()
            else:
                emb = np.asarray(vec, dtype=np.float32).tolist()
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(lengths)
        return JSONResponse({"object": "list", "data": data, "model": served,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    @app.post("/v1/route", dependencies=auth, responses=route_responses("/v1/route", body=True))
    async def route(req: RouteRequest) -> JSONResponse:
        router_ = state.router
        if router_ is None or state.shutting_down:
            raise state.unavailable("/v1/route", "no router is loaded", "start the server with an index "
                                    "(serve.yaml 'index:')")
        query = check_text(req.query, "query", config)  # blank: 400; past server.max_input_chars: cut or 413
        result = await _call(state, "route", lambda: router_.route(query, req.history, req.mode, req.top_k),
                             "/v1/route")
        return JSONResponse(result.to_dict())

    @app.post("/v1/rerank", dependencies=auth, responses=route_responses("/v1/rerank", 500, body=True))
    async def rerank(req: RerankRequest) -> JSONResponse:
        runner, batcher = state.reranker, state.rerank_batcher
        if runner is None or batcher is None or state.shutting_down:
            raise state.unavailable("/v1/rerank", "no reranker is loaded", "add bundles.reranker to serve.yaml "
                                    "and restart")
        served = check_model(req.model, runner.name, config.rerank_model, "rerank_model")
        query = check_text(req.query, "query", config)
        check_count(len(req.documents), config.max_documents_per_request, "documents", "documents",
                    "max_documents_per_request")
        originals = [d if isinstance(d, str) else d.text for d in req.documents]
        docs = [check_text(d, f"documents[{i}]", config) for i, d in enumerate(originals)]
        with state.admission.admit("/v1/rerank"):  # from the tokenizing to the scores, as embeddings
            lengths = await asyncio.to_thread(runner.lengths, query, docs)
            limit = runner.max_length
            if not config.truncate:
                for i, n in enumerate(lengths):
                    if n > limit:
                        raise PayloadTooLargeError(
                            f"documents[{i}]: {n} tokens with the query, the model's limit is {limit} "
                            "(max_length); shorten it or enable server.truncate")
            lengths = [min(n, limit) for n in lengths]
            logits = await _gather(batcher, [(query, d) for d in docs], lengths, config.request_timeout_s,
                                   "/v1/rerank")
        scores = np.asarray(logits, dtype=np.float64).reshape(-1)  # (N,)
        if not req.raw_scores:
            scores = _sigmoid(scores)
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))[: req.top_n or len(docs)]
        results = []
        for i in order:
            row: dict[str, Any] = {"index": i, "relevance_score": float(scores[i])}
            if req.return_documents:
                row["document"] = {"text": originals[i]}
            results.append(row)
        return JSONResponse({"object": "list", "model": served, "results": results,
                             "usage": {"total_tokens": sum(lengths)}})

    @app.post("/v1/decompose", dependencies=auth, responses=route_responses("/v1/decompose", 500, body=True))
    async def decompose(req: DecomposeRequest) -> JSONResponse:
        from searchsmith.serving.rewrite import parse_history

        bundle = state.decomposer
        if bundle is None or state.shutting_down:
            raise state.unavailable("/v1/decompose", "no decomposer is loaded", "add bundles.decomposer to "
                                    "serve.yaml and restart")
        query = check_text(req.query, "query", config)
        turns = parse_history(req.history)  # validates (422 naming the turn), the last turns each cut
        # what the pipeline's rewrite reads: the validated, cut turns, not the history as sent
        history = [{"role": t.role, "content": t.content} for t in turns]

        def work() -> tuple[str, Any]:
            rewrite = bundle.rewrite(history, query) if turns else query
            return rewrite, bundle.decompose(rewrite, max_nodes=req.max_nodes)

        rewrite, graph = await _call(state, "decompose", work, "/v1/decompose")
        body = graph.to_json() if hasattr(graph, "to_json") else dict(graph)
        return JSONResponse({"query": query, "rewrite": rewrite, **body})

    @app.post("/v1/cite", dependencies=auth, responses=route_responses("/v1/cite", 500, body=True))
    async def cite(req: CiteRequest) -> JSONResponse:
        from searchsmith.models.text import sentence_texts

        if (req.sentences is None) == (req.answer is None):
            raise with_param(ValidationError("sentences, answer: send exactly one of them (a list of sentences, "
                                             "or an answer text to split into sentences)"),
                             "answer" if req.sentences is None else "sentences")
        if req.answer is not None:
            answer = check_text(req.answer, "answer", config)
            sentences = sentence_texts(answer) or [answer]
        else:
            sentences = req.sentences or []
        where, what = ("sentences", "sentences") if req.answer is None else ("answer", "sentences once split")
        check_count(len(sentences), config.max_texts_per_request, where, what, "max_texts_per_request")
        sentences = [check_text(s, f"sentences[{i}]", config) for i, s in enumerate(sentences)]
        check_count(len(req.documents), config.max_documents_per_request, "documents", "documents",
                    "max_documents_per_request")
        seen: set[str] = set()
        docs = []
        for i, d in enumerate(req.documents):
            if is_blank(d.id):
                raise ValidationError(f"documents[{i}].id: is empty; give each document a non-blank id (the "
                                      "citations name it)")
            if d.id in seen:
                raise ValidationError(f"documents[{i}].id: {d.id!r} is used twice; ids must be unique")
            seen.add(d.id)
            docs.append((d.id, check_text(d.text, f"documents[{i}].text", config)))
        pairs = len(sentences) * len(docs)
        if pairs > config.max_pairs_per_request:
            raise with_param(PayloadTooLargeError(
                f"documents: {len(sentences)} sentences x {len(docs)} documents = {pairs} pairs, the limit is "
                f"{config.max_pairs_per_request} (server.max_pairs_per_request); send fewer documents"), "documents")
        bundle, encode, cfg = state.citation, _text_encoder(state), state.thresholds().citation
        if (bundle is None and encode is None) or state.shutting_down:
            raise state.unavailable("/v1/cite", "no citation bundle and no embedder are loaded",
                                    "add bundles.citation or bundles.embedder to serve.yaml and restart")
        if encode is None and getattr(bundle, "cosine_residual", None) is not None:
            raise state.unavailable("/v1/cite", "the citation bundle's scorer adds the bi-encoder cosine and no "
                                    "embedder is loaded", "add bundles.embedder to serve.yaml and restart")
        threshold = support_threshold(bundle, cfg) if req.threshold is None else req.threshold
        found = await _call(state, "cite", lambda: cite_sentences(
            sentences, docs, config=cfg, bundle=bundle, encode=encode, threshold=threshold,
            max_per_sentence=req.max_per_sentence), "/v1/cite")
        out = [{"text": c.text,
                "entities": [{"start": a, "end": b, "label": label, "text": c.text[a:b]} for a, b, label in c.entities],
                "citations": [{"id": docs[j][0], "score": round(score, 6)} for j, score in c.citations]}
               for c in found]
        return JSONResponse({"sentences": out, "method": "bundle" if bundle is not None else "embedding",
                             "threshold": float(threshold)})

    @app.post("/v1/images/place", dependencies=auth, responses=route_responses("/v1/images/place", 500, body=True))
    async def images_place(req: PlaceRequest) -> JSONResponse:
        check_count(len(req.paragraphs), config.max_texts_per_request, "paragraphs", "paragraphs",
                    "max_texts_per_request")
        paragraphs = [check_text(p, f"paragraphs[{i}]", config) for i, p in enumerate(req.paragraphs)]
        check_count(len(req.images), config.max_images_per_request, "images", "images", "max_images_per_request")
        seen: set[str] = set()
        for i, im in enumerate(req.images):
            if is_blank(im.id):  # the placements name it
                raise ValidationError(f"images[{i}].id: is empty; give each image a non-blank id (the placements "
                                      "name it)")
            if im.id in seen:
                raise ValidationError(f"images[{i}].id: {im.id!r} is used twice; ids must be unique")
            seen.add(im.id)
            if not im.data and not (im.caption and im.caption.strip()):
                raise ValidationError(f"images[{i}]: no data and no caption; send the image as base64 'data' "
                                      "or give a 'caption' (urls are never fetched)")
        captions = [(check_text(im.caption, f"images[{i}].caption", config) if im.caption and im.caption.strip()
                     else None) for i, im in enumerate(req.images)]
        # the query is optional: blank is absent, as "" always was
        query = check_text(req.query, "query", config) if req.query and req.query.strip() else None

        bundle, encode = state.images, _text_encoder(state)
        if (bundle is None and encode is None) or state.shutting_down:
            raise state.unavailable("/v1/images/place", "no images bundle and no embedder are loaded",
                                    "add bundles.images or bundles.embedder to serve.yaml and restart")
        cfg = state.thresholds().images
        threshold = cfg.threshold if req.threshold is None else req.threshold
        # each image is decoded and made the model's input size at once, in the model's bounded
        # queue (429 when full): decoded in full, concurrent requests held gigabytes of pixels
        fit = getattr(bundle, "fit_image", None)

        def work() -> tuple[np.ndarray, list[int | None], str]:
            pixels = [decode_image(im.data, f"images[{i}].data", config, fit=fit, keep=bundle is not None)
                      if im.data else None for i, im in enumerate(req.images)]
            return place_images(paragraphs, captions, pixels, config=cfg, query=query, bundle=bundle,
                                encode=encode, threshold=threshold)

        scores, where, method = await _call(state, "images", work, "/v1/images/place")
        placements, unplaced = [], []
        for i, (im, p) in enumerate(zip(req.images, where, strict=True)):
            if p is None:
                best = float(scores[:, i].max()) if len(paragraphs) else None
                row = {"id": im.id, "best_score": best}
                if bundle is None and captions[i] is None:  # its pixels were sent, but nothing reads them
                    row["reason"] = ("no caption, and no images bundle to read its pixels (add bundles.images to "
                                     "serve.yaml, or send a caption)")
                unplaced.append(row)
            else:
                row = {"id": im.id, "paragraph": int(p), "score": round(float(scores[p, i]), 6)}
                if im.url is not None:  # echoed as sent ("" too)
                    row["url"] = im.url
                placements.append(row)
        placements.sort(key=lambda r: r["paragraph"])
        return JSONResponse({"placements": placements, "unplaced": unplaced, "method": method,
                             "threshold": threshold})

    @app.post("/v1/search", dependencies=auth, responses=route_responses("/v1/search", 500, body=True))
    async def search(req: SearchRequest) -> Response:
        pipe = state.pipeline
        if pipe is None or state.shutting_down:
            raise state.unavailable("/v1/search", "no pipeline is loaded", "start the server with an index "
                                    "(serve.yaml 'index:')")
        if is_blank(req.query):
            raise EmptyInputError("query: is empty (nothing but spaces, control or zero-width characters); send "
                                  "a question")

        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue[str] = asyncio.Queue()
        gone = threading.Event()  # the client went away (its request was cancelled, or its stream closed)

        def on_delta(piece: str) -> None:  # on the worker thread
            if gone.is_set():  # stops the LLM: the backend closes its connection, no fallback is made
                raise ClientGone("/v1/search: the client went away; generation stopped")
            if req.stream:
                loop.call_soon_threadsafe(deltas.put_nowait, piece)

        def work() -> dict[str, Any]:
            # the listener is passed for a JSON answer too: it is how a generation is stopped
            return pipe.ask(req.query, req.history, query_id=req.query_id, preset=req.preset,
                            strategy=req.strategy, routing_mode=req.routing_mode, on_delta=on_delta)

        task = asyncio.ensure_future(_call(state, "search", work, "/v1/search"))
        try:
            if not req.stream:
                return JSONResponse(await task)
            # The stream starts with the first piece an LLM backend generates, or with the whole
            # answer when the offline backends write it at once: errors before that (429, 504, a
            # bad history) keep their status codes; one after it is an ``error`` event.
            first = asyncio.ensure_future(deltas.get())
            try:
                await asyncio.wait({task, first}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not first.done():
                    first.cancel()
        except asyncio.CancelledError:  # the client left (answer_while_connected): drop the work
            gone.set()
            task.cancel()
            raise
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if first.done() and not first.cancelled():
            return StreamingResponse(_live_events(first.result(), deltas, task, gone), media_type="text/event-stream",
                                     headers=headers)
        ans = task.result()  # raises: the error's own status
        return StreamingResponse(_search_events(ans, config.stream_chunk_chars), media_type="text/event-stream",
                                 headers=headers)

    @app.get("/v1/images/file", dependencies=auth, response_class=Response, responses={
        **route_responses("", 404, 413),
        200: {"content": {media: {} for media in sorted(set(IMAGE_TYPES.values()))},
              "description": "the image file, as the index recorded it"}})
    async def image_file(doc_id: str, image_id: str) -> Response:
        """An image of the index's corpus (an answer's ``images[].doc_id`` and ``image_id``):
        the answer page shows placements with it. The file is the one the index recorded for
        that document; nothing of the request is used as a path."""
        pipe = state.pipeline
        index = getattr(pipe, "index", None)
        if index is None or state.shutting_down:
            raise state.unavailable("/v1/images/file", "no index is loaded", "start the server with one "
                                    "(serve.yaml 'index:')")
        media = None
        found = None
        with state.admission.admit("/v1/images/file"):  # each thread's work counted in, as every endpoint's
            chunks = await asyncio.to_thread(index.store.chunks_of_doc, doc_id)
        for chunk in chunks:
            found = next((im for im in chunk.images if im.get("id") == image_id), None)
            if found is not None:
                break
        if found is not None:
            path = Path(found["path"])
            media = IMAGE_TYPES.get(path.suffix.lower())
        if found is None or media is None or not path.is_file():
            why = ("no such image in the index" if found is None else
                   "the index's file for it is missing" if media is not None else "not an image file")
            raise with_param(StarletteHTTPException(404, f"image_id: {image_id!r} of doc_id {doc_id!r}: {why}"),
                             "image_id", "image_not_found")
        size = path.stat().st_size
        if size > config.max_image_bytes:
            raise with_param(PayloadTooLargeError(
                f"image_id: {image_id!r} has {size} bytes, more than server.max_image_bytes "
                f"{config.max_image_bytes}"), "image_id")
        with state.admission.admit("/v1/images/file"):
            data = await asyncio.to_thread(path.read_bytes)
        return Response(data, media_type=media, headers={"Cache-Control": "private, max-age=3600"})

    @app.post("/v1/feedback", dependencies=auth, responses=route_responses("/v1/feedback", 500, body=True))
    async def feedback(req: FeedbackRequest) -> JSONResponse:
        pipe = state.pipeline
        if pipe is None or state.shutting_down:
            raise state.unavailable("/v1/feedback", "no pipeline is loaded", "start the server with an index "
                                    "(serve.yaml 'index:')")
        if getattr(pipe, "protocol", True) is None:
            # The protocol router is off (the default, and the quickstart's): answers always use
            # protocol.default_preset, so there is nothing to learn. The rating is accepted, not an
            # error a client must handle, and the answer says how to make it count. Answered here,
            # it holds no place in work, but past the bound it is refused as with the router on
            # (the same 429 and refusal count); /metrics counts it as a rating not recorded.
            state.admission.check("/v1/feedback")
            state.metrics.feedback.labels("false").inc()
            return JSONResponse({"query_id": req.query_id, "quality": req.quality, "recorded": False,
                                 "message": FEEDBACK_OFF})
        result = await _call(state, "feedback", lambda: pipe.feedback(req.query_id, req.quality), "/v1/feedback")
        state.metrics.feedback.labels("true").inc()
        return JSONResponse({**result, "recorded": True})
