"""The ``openai`` generation backend against a real llama.cpp server (Gemma 3 270M Q4_K_M).

One server per session (``python -m llama_cpp.server`` on a free loopback port, about 2 s
to start on a CPU); the faults are injected by a small proxy in front of it that relays,
cuts, delays, corrupts or refuses the server's stream and counts the requests it gets.
Needs ``pip install -e '.[llm]'`` (llama-cpp-python compiled from source, and the weights
as a package); without it the module is skipped.
"""

from __future__ import annotations

import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from searchsmith.serving.profiling.llm import (
    MODEL,
    LlamaServer,
    demo_prompts,
    gemma_gguf,
    measure_llm,
    missing_llm_packages,
    summarize,
)
from sse_parse import sse_events

_missing = missing_llm_packages()
if _missing:
    pytest.skip(f"the llama.cpp tests need the llm extra: {_missing}", allow_module_level=True)

pytestmark = pytest.mark.llm

QUESTION = "How long should I knead bread dough?"


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    """A llama.cpp server with the Gemma gguf (assembled into ~/.cache/searchsmith/llm once)."""
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with LlamaServer(gemma_gguf(), n_ctx=2048, startup_timeout_s=120, log_path=log) as server:
        yield server


def _openai(url: str, **cfg):
    from searchsmith.serving.pipeline.config import OpenAIConfig
    from searchsmith.serving.pipeline.generation import OpenAIGenerator

    return OpenAIGenerator(OpenAIConfig(base_url=url, model=MODEL, **{"max_tokens": 24, **cfg}))


MESSAGES = [{"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "Passages:\n[1] Knead the bread dough for ten minutes until it is "
                                        "smooth.\n\nQuestion: How long should I knead bread dough?\nAnswer:"}]


# -- (a) the generator against the real server ---------------------------------------------------
def test_openai_generator_reports_the_servers_usage(llama) -> None:
    import httpx

    text, tokens_in, tokens_out = _openai(llama.url, stream=False).complete(MESSAGES)
    # the server's own count, not an estimate: the same request sent by hand reports the same
    raw = httpx.post(f"{llama.url}/chat/completions", timeout=120, json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 24, "temperature": 0.0}).json()
    assert text and text == raw["choices"][0]["message"]["content"].strip()
    assert (tokens_in, tokens_out) == (raw["usage"]["prompt_tokens"], raw["usage"]["completion_tokens"])
    assert 0 < tokens_out <= 24


def test_streamed_answer_matches_the_whole_answer(llama) -> None:
    pieces: list[str] = []
    whole = _openai(llama.url, stream=False).complete(MESSAGES)
    text, tokens_in, tokens_out = _openai(llama.url).complete(MESSAGES, on_token=pieces.append)
    assert text == whole[0]  # greedy: the same tokens, streamed
    assert len(pieces) > 1 and "".join(pieces).strip() == text
    # llama.cpp sends no usage while streaming: one token per piece, prompt estimated
    assert tokens_out == len(pieces) == whole[2] and tokens_in > 0


def test_concurrent_answers_queue_instead_of_cutting_each_other(llama) -> None:
    """The server runs with --interrupt_requests False: by default a second request would end
    the first one's stream early with a plain data: [DONE]."""
    from concurrent.futures import ThreadPoolExecutor

    whole = _openai(llama.url, stream=False).complete(MESSAGES)
    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(lambda _: _openai(llama.url).complete(MESSAGES), range(3)))
    assert [o[0] for o in outs] == [whole[0]] * 3 and [o[2] for o in outs] == [whole[2]] * 3


# -- (b) /v1/search through the app, streamed ------------------------------------------------
# A pretrained 270M model does not follow the shipped prompt's instructions, and over several
# passages it lists numbers ("[1] 10 minutes [2] 5 minutes ..."); given the one best passage
# and asked to copy, it copies its sentence, which the citation stage can then attribute.
COPY_PROMPT = """[system]
Answer from the passages.
[user]
{context}

Question: {question}
Copy the sentence that answers the question."""


@pytest.fixture(scope="module")
def fresh_llama(tmp_path_factory):
    """A server of its own whose first chat request is the pipeline's: Gemma 3 270M's greedy answer
    to the copy prompt changes with the KV state earlier requests leave (on the portable
    llama.cpp build it then lists "[2] [3] ..." instead of copying the sentence)."""
    log = tmp_path_factory.mktemp("llama_fresh") / "server.log"
    with LlamaServer(gemma_gguf(), n_ctx=2048, startup_timeout_s=120, log_path=log) as server:
        yield server


@pytest.fixture(scope="module")
def app_client(fresh_llama, small_index, embedder, tmp_path_factory):
    from fastapi.testclient import TestClient
    from searchsmith.models.config import from_dict
    from searchsmith.serving.http import create_app
    from searchsmith.serving.index import Index
    from searchsmith.serving.limits import ServerLimits
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    # The model copies the passage's title line too ("cook 1: Knead the dough ..."), and the
    # entity veto rightly refuses a passage for a sentence naming "cook 1", which the passage
    # text does not contain; without the veto the copied sentence is cited.
    prompt = tmp_path_factory.mktemp("prompt") / "copy.txt"
    prompt.write_text(COPY_PROMPT, encoding="utf-8")
    cfg = from_dict(PipelineConfig, {"citation": {"entity_veto": False}, "retrieval": {"retrieve_k": 1}, "generation": {
        "backend": "openai", "prompt": str(prompt),
        "openai": {"base_url": fresh_llama.url, "model": MODEL, "max_tokens": 48, "stop": ["\nQuestion:"]}}})
    pipe = Pipeline(cfg, Index.load(small_index, embedder=embedder), embedder)
    with TestClient(create_app(ServerLimits(stream_chunk_chars=16), pipeline=pipe)) as c:
        yield c


def test_search_streams_the_llm_answer_with_matching_citations(app_client) -> None:
    resp = app_client.post("/v1/search", json={"query": QUESTION, "query_id": "llm-1", "stream": True})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp.text)
    names = [e for e, _ in events]
    n_text = names.count("answer")
    assert n_text >= 1 and names[:n_text] == ["answer"] * n_text
    assert names[n_text:] == ["citations", "timeline", "images", "trace", "message"] and events[-1][1] == "[DONE]"
    got = dict(events)
    trace = got["trace"]["trace"]
    # the answer is the LLM's: one call with the server's tokens, and no fallback
    assert trace["stages"]["generation"]["model_calls"] == 1 and trace["stages"]["generation"]["tokens_out"] > 0
    assert not [n for n in trace["notes"] if "openai failed" in n], trace["notes"]
    # the pieces as llama.cpp generated them, then the final text when it differs (the model's
    # own [n] markers removed): markers come with the citations only
    pieces = [d for e, d in events if e == "answer"]
    assert len(pieces) >= 2  # streamed as generated, not after
    text = pieces[-1].get("replace", "".join(d["delta"] for d in pieces))
    assert text.strip() and not re.search(r"\[\d+\]", text)
    cites = got["citations"]
    marks = [int(n) for n in re.findall(r"\[(\d+)\]", cites["answer"])]
    assert cites["references"], f"nothing of the LLM's answer was cited: {text!r}"
    assert sorted(set(marks)) == [r["n"] for r in cites["references"]] == [1]
    assert cites["references"][0]["doc_id"] == got["trace"]["passages"][0]["doc_id"]  # the one passage given
    # the cited answer is the streamed text with the markers added
    assert re.sub(r" ?\[\d+\]", "", cites["answer"]).split() == text.split()


# -- (c) faults between the pipeline and the server -------------------------------------------
class _Proxy(BaseHTTPRequestHandler):
    """Relays POSTs to the llama server, with one fault; counts the requests it gets."""

    upstream = ""
    fault: str | None = None
    delay_s = 0.0
    requests = 0

    def do_POST(self):  # noqa: N802 - http.server API
        import httpx

        type(self).requests += 1
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.fault == "500":
            self._reply(500, b'{"error": "injected: out of memory"}')
            return
        if self.fault == "slow":
            time.sleep(self.delay_s)
        with httpx.stream("POST", self.upstream + self.path.removeprefix("/v1"), content=body,
                          headers={"Content-Type": "application/json"}, timeout=120) as r:
            self.send_response(r.status_code)
            self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
            self.end_headers()  # HTTP/1.0: the body ends when the connection closes
            data_lines = 0
            for line in r.iter_lines():
                if line.startswith("data:"):
                    data_lines += 1
                    if self.fault == "cut" and data_lines > 3:
                        return  # the server "stops" mid-answer: closed without data: [DONE]
                    if self.fault == "interrupt" and data_lines > 3:
                        line = "data: [DONE]"  # what llama.cpp sends when another request interrupts
                        self.wfile.write((line + "\n\n").encode())
                        return
                    if self.fault == "malformed" and data_lines == 3:
                        line = 'data: {"choices": [{"delta": {"content": "trunc'
                    if self.fault == "trickle":
                        time.sleep(self.delay_s)
                self.wfile.write((line + "\n").encode())
                self.wfile.flush()

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the client hung up on a slow or broken stream: that is the test


@pytest.fixture
def proxy(llama):
    _Proxy.upstream, _Proxy.fault, _Proxy.delay_s, _Proxy.requests = llama.url, None, 0.0, 0
    server = _QuietServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def make_pipe(small_index, embedder):
    from searchsmith.models.config import from_dict
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.config import PipelineConfig
    from searchsmith.serving.pipeline.pipeline import Pipeline

    index = Index.load(small_index, embedder=embedder)

    def make(**generation):
        return Pipeline(from_dict(PipelineConfig, {"generation": generation}), index, embedder)

    return make


@pytest.fixture(scope="module")
def extractive_answer(make_pipe) -> str:
    return make_pipe(backend="extractive").ask(QUESTION)["answer_text"]


def test_the_proxy_relays_the_server_unharmed(proxy, make_pipe, extractive_answer) -> None:
    ans = make_pipe(backend="openai", openai={"base_url": proxy, "model": MODEL, "max_tokens": 24}).ask(QUESTION)
    assert not [n for n in ans["trace"]["notes"] if "openai failed" in n]
    assert ans["trace"]["stages"]["generation"]["model_calls"] == 1 and _Proxy.requests == 1


@pytest.mark.parametrize("fault,settings,requests,message", [
    ("500", {"retries": 1, "retry_backoff_s": 0.05}, 2,
     r"answered 500: .*injected: out of memory.* \(after 2 attempt\(s\); generation.openai.retries=1\)"),
    ("500", {"retries": 3, "retry_backoff_s": 0.01}, 4, r"answered 500: .*\(after 4 attempt\(s\)"),
    ("500", {"retries": 0}, 1, r"answered 500: .*\(after 1 attempt\(s\)"),
    ("cut", {"retries": 2}, 1, r"ended the stream after \d+ pieces without 'data: \[DONE\]'"),
    ("malformed", {"retries": 2}, 1, r"sent a malformed stream chunk \(JSONDecodeError"),
    ("slow", {"retries": 2, "first_token_timeout_s": 0.5}, 1, r"no token from .* within first_token_timeout_s=0.5 s"),
    ("trickle", {"retries": 2, "timeout_s": 1.5}, 1, r"the answer from .* took longer than timeout_s=1.5 s"),
])
def test_a_fault_degrades_to_the_extractive_answer(proxy, make_pipe, extractive_answer, fault, settings,
                                                   requests, message) -> None:
    _Proxy.fault, _Proxy.delay_s = fault, {"slow": 4.0, "trickle": 0.4}.get(fault, 0.0)
    pipe = make_pipe(backend="openai", openai={"base_url": proxy, "model": MODEL, "max_tokens": 24, **settings})
    t0 = time.monotonic()
    ans = pipe.ask(QUESTION)
    elapsed = time.monotonic() - t0
    assert ans["answer_text"] == extractive_answer
    notes = [n for n in ans["trace"]["notes"] if n.startswith("generation: openai failed (RunnerError: ")]
    assert len(notes) == 1 and re.search(message, notes[0]), ans["trace"]["notes"]
    assert "openai failed" in ans["trace"]["stages"]["generation"]["note"]
    assert _Proxy.requests == requests  # retried only a 500, and only as often as configured
    if fault == "slow":
        assert elapsed < _Proxy.delay_s  # gave up at the first-token timeout, not when the server answered
    if fault == "trickle":
        assert elapsed < 1.5 + 2.0


def test_an_answer_ended_without_a_finish_reason_is_logged(proxy, caplog) -> None:
    pieces: list[str] = []
    _Proxy.fault = "interrupt"
    with caplog.at_level("WARNING", logger="searchsmith.serving.pipeline.generation"):
        text, _, tokens_out = _openai(proxy).complete(MESSAGES, on_token=pieces.append)
    assert tokens_out == len(pieces) <= 3 and text == "".join(pieces).strip()
    assert "ended the answer without a finish_reason" in caplog.text and "--interrupt_requests False" in caplog.text
    caplog.clear()
    _Proxy.fault = None
    with caplog.at_level("WARNING", logger="searchsmith.serving.pipeline.generation"):
        _openai(proxy).complete(MESSAGES)  # a whole answer ends with finish_reason "length" or "stop"
    assert "finish_reason" not in caplog.text


def test_a_server_that_is_down_is_retried_then_falls_back(make_pipe, extractive_answer) -> None:
    from searchsmith.serving.profiling.common import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    pipe = make_pipe(backend="openai", openai={"base_url": url, "retries": 2, "retry_backoff_s": 0.05})
    ans = pipe.ask(QUESTION)
    assert ans["answer_text"] == extractive_answer
    assert any(re.search(r"cannot connect to .*\(after 3 attempt\(s\)", n) for n in ans["trace"]["notes"])


# -- (d) configuration errors at start-up ------------------------------------------------------
def test_a_missing_prompt_file_fails_when_the_pipeline_is_built(make_pipe, proxy, tmp_path) -> None:
    from searchsmith.models.errors import ConfigError

    missing = tmp_path / "no-such-prompt.txt"
    with pytest.raises(ConfigError, match=r"generation.prompt: '.*no-such-prompt.txt' is neither a file"):
        make_pipe(backend="openai", prompt=str(missing), openai={"base_url": proxy, "model": MODEL})
    with pytest.raises(ConfigError, match=r"generation.prompt: 'node-missing.txt' is neither a file"):
        make_pipe(backend="openai", node_prompt="node-missing.txt", openai={"base_url": proxy})
    assert _Proxy.requests == 0  # refused at start-up: no question, no request to the server
    make_pipe(backend="openai", openai={"base_url": proxy, "model": MODEL})  # the shipped prompts load


@pytest.mark.parametrize("override,message", [
    ("generation.openai.first_token_timeout_s=0", "first_token_timeout_s must be a finite number of seconds > 0"),
    ("generation.openai.retries=-1", "retries and retry_backoff_s must be >= 0"),
])
def test_bad_openai_settings_are_config_errors(override, message) -> None:
    from searchsmith.models.errors import ConfigError
    from searchsmith.serving.pipeline.config import load_pipeline_config

    with pytest.raises(ConfigError, match=message):
        load_pipeline_config(None, [override])


# -- the profile suite's measurement ---------------------------------------------------------
def test_profile_measures_first_token_and_decoding_rate(llama) -> None:
    prompts = demo_prompts(2)
    assert len(prompts) == 2 and all("Question:" in p["messages"][1]["content"] for p in prompts)
    rows = measure_llm(llama.url, prompts, max_tokens=8)
    assert [r["id"] for r in rows] == [p["id"] for p in prompts]
    for r in rows:
        assert 0 < r["ttft_ms"] <= r["total_ms"] and r["chunks"] <= 8
    s = summarize(rows)
    assert s["answered"] == 2 and s["ttft_p50_ms"] <= s["ttft_p95_ms"]
