"""Stage ``generation``: one interface, three backends.

* ``extractive`` (the offline default, no LLM): per sub-question, the sentences of its
  passages are scored by support = cosine(sentence, sub-question) + ``lexical_weight`` x
  the share of the sub-question's content words the sentence contains; the best
  ``sentences_per_node`` (at least the best one) are selected and fused in node order,
  without repeats.
* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint (vLLM, llama.cpp
  server, TGI, a hosted API) over httpx, streamed (server-sent events).
* ``hf``: a local transformers causal LM (greedy decoding).

The LLM prompts are files under ``serving/pipeline/prompts/`` (``[system]`` and ``[user]``
sections; ``{context}``, ``{question}``, ``{subanswers}`` are filled in). When an LLM
backend fails the answer falls back to the extractive one (noted in the trace).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from searchsmith.models.errors import ConfigError, RunnerError
from searchsmith.serving.pipeline.common import content_words, embed, sentences, strip_markers
from searchsmith.serving.pipeline.config import (
    ExtractiveConfig,
    GenerationConfig,
    HFConfig,
    OpenAIConfig,
    Preset,
)
from searchsmith.serving.pipeline.state import NodeResult, Passage, PipelineState, estimate_tokens

log = logging.getLogger(__name__)

PROMPTS_DIR = Path(__file__).parent / "prompts"


# -- prompts ---------------------------------------------------------------------------------
def load_prompt(name: str) -> tuple[str, str]:
    """``(system, user)`` templates from a prompt file (a name under prompts/ or a path)."""
    path = Path(name)
    if not path.is_file():
        path = PROMPTS_DIR / name
    if not path.is_file():
        have = sorted(p.name for p in PROMPTS_DIR.glob("*.txt"))
        raise ConfigError(f"generation.prompt: {name!r} is neither a file nor one of {have}")
    text = path.read_text(encoding="utf-8")
    if "[system]" not in text or "[user]" not in text:
        raise ConfigError(f"generation.prompt {path}: needs a [system] and a [user] section")
    system = text.split("[system]", 1)[1].split("[user]", 1)[0].strip()
    user = text.split("[user]", 1)[1].strip()
    if "{question}" not in user:
        raise ConfigError(f"generation.prompt {path}: the [user] section must contain {{question}}")
    return system, user


def format_context(passages: Sequence[Passage], max_chars: int) -> str:
    """``[1] title: text`` lines in the given (lost-in-the-middle) order, cut at ``max_chars``."""
    lines, used = [], 0
    for i, p in enumerate(passages, 1):
        line = f"[{i}] {p.title + ': ' if p.title else ''}{' '.join(p.text.split())}"
        if used + len(line) > max_chars and lines:
            break
        lines.append(line[:max_chars])
        used += len(line)
    return "\n".join(lines)


def render(template: tuple[str, str], question: str, passages: Sequence[Passage], max_chars: int,
           subanswers: dict[str, str] | None = None, nodes: Sequence[NodeResult] = ()) -> list[dict[str, str]]:
    """Chat messages from a ``(system, user)`` template."""
    system, user = template
    sub = ""
    if subanswers:
        texts = {n.id: n.text for n in nodes}
        sub = "Sub-answers found so far:\n" + "\n".join(
            f"- {texts.get(k, k)}: {v}" for k, v in subanswers.items()) + "\n\n"
    body = (user.replace("{context}", format_context(passages, max_chars))
            .replace("{subanswers}", sub).replace("{question}", question))
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]


# -- backends --------------------------------------------------------------------------------
class Generator(Protocol):
    """Answers a question from passages; reports (text, model calls, tokens in, tokens out)."""

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, int, int]: ...


class ExtractiveGenerator:
    """Selects and fuses the best-supported sentences per sub-question (no LLM)."""

    def __init__(self, embedder: Any, config: ExtractiveConfig | None = None) -> None:
        self.embedder = embedder
        self.config = config or ExtractiveConfig()

    def support(self, question: str, passages: Sequence[Passage],
                state: PipelineState) -> list[tuple[float, str]]:
        """(support, sentence) of the passages' sentences, best first.

        The lexical share is averaged over the sub-question's words and the user's own
        words: a rewrite appends history terms ("Quarry Northwind Labs") that every
        sentence about the topic contains, and they must not outvote the asked-for words.
        """
        cfg = self.config
        cands: list[str] = []
        for p in sorted(passages, key=lambda p: -p.score):
            for s in sentences(p.text):
                s = " ".join(s.split())
                if len(s) > 3 and s not in cands:
                    cands.append(s)
        cands = cands[: cfg.max_sentences]
        if not cands:
            return []
        vecs = embed(state, self.embedder, [question, *cands])  # one encode call: (1 + S, D)
        cos = vecs[1:] @ vecs[0]  # (S,)
        words, own = content_words(question), content_words(state.query)
        lex = np.array([0.5 * len(words & cw) / max(1, len(words)) + 0.5 * len(own & cw) / max(1, len(own))
                        for cw in (content_words(s) for s in cands)])
        score = cos + cfg.lexical_weight * lex
        order = np.argsort(-score, kind="stable")
        return [(float(score[i]), cands[i]) for i in order]

    def select(self, question: str, passages: Sequence[Passage], state: PipelineState,
               n: int | None = None) -> list[str]:
        ranked = self.support(question, passages, state)
        n = n or self.config.sentences_per_node
        return [s for i, (sc, s) in enumerate(ranked[:n]) if i == 0 or sc >= self.config.min_support]

    def answer(self, nodes: Sequence[NodeResult], state: PipelineState) -> str:
        """Fused sentences of the nodes that have no answered child (the final sub-questions)."""
        chosen: list[str] = []
        for node in nodes:
            for s in self.select(node.text, node.passages, state):
                if s not in chosen:
                    chosen.append(s)
        return " ".join(chosen)


class OpenAIGenerator:
    """An OpenAI-compatible chat endpoint, streamed over httpx."""

    def __init__(self, config: OpenAIConfig) -> None:
        import httpx

        self.config = config
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(base_url=config.base_url.rstrip("/"), headers=headers,
                                    timeout=config.timeout_s)

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, int, int]:
        import httpx

        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": messages, "max_tokens": cfg.max_tokens,
                                "temperature": cfg.temperature, "stream": cfg.stream}
        if cfg.stream:
            body["stream_options"] = {"include_usage": True}
        parts: list[str] = []
        usage: dict[str, Any] = {}
        try:
            if cfg.stream:
                with self._client.stream("POST", "/chat/completions", json=body) as r:
                    if r.status_code >= 400:
                        r.read()
                        raise RunnerError(f"generation.openai: {cfg.base_url} answered {r.status_code}: "
                                          f"{r.text[:200]}")
                    for line in r.iter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            break
                        event = json.loads(data)
                        usage = event.get("usage") or usage
                        for choice in event.get("choices") or []:
                            parts.append((choice.get("delta") or {}).get("content") or "")
            else:
                r = self._client.post("/chat/completions", json=body)
                if r.status_code >= 400:
                    raise RunnerError(f"generation.openai: {cfg.base_url} answered {r.status_code}: {r.text[:200]}")
                event = r.json()
                usage = event.get("usage") or {}
                parts.append(event["choices"][0]["message"]["content"] or "")
        except httpx.HTTPError as exc:
            raise RunnerError(f"generation.openai: request to {cfg.base_url} failed ({exc}); "
                              "check generation.openai.base_url and that the server is up") from None
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise RunnerError(f"generation.openai: {cfg.base_url} sent a malformed response ({exc})") from None
        text = "".join(parts).strip()
        tokens_in = int(usage.get("prompt_tokens") or sum(estimate_tokens(m["content"]) for m in messages))
        tokens_out = int(usage.get("completion_tokens") or estimate_tokens(text))
        return text, tokens_in, tokens_out

    def close(self) -> None:
        self._client.close()


class HFGenerator:
    """A local transformers causal LM, greedy decoding."""

    def __init__(self, config: HFConfig) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if not config.model:
            raise ConfigError("generation.hf.model: empty; set a local folder (or hub id) of a causal LM")
        self.config = config
        dev = config.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(dev)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(config.model)
            self.model = AutoModelForCausalLM.from_pretrained(config.model).to(self.device).eval()
        except (OSError, ValueError) as exc:
            raise ConfigError(f"generation.hf.model {config.model!r} cannot be loaded as a causal LM "
                              f"({exc}); give a folder with config.json, weights and a tokenizer") from None

    def _prompt(self, messages: list[dict[str, str]]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(m["content"] for m in messages)

    def complete(self, messages: list[dict[str, str]]) -> tuple[str, int, int]:
        import torch

        enc = self.tokenizer(self._prompt(messages), return_tensors="pt", truncation=True,
                             max_length=self.config.max_input_tokens, add_special_tokens=False)
        ids = enc["input_ids"].to(self.device)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        with torch.inference_mode():
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=self.config.max_new_tokens, pad_token_id=pad)
        new = out[0, ids.shape[1]:]
        text = self.tokenizer.decode(new, skip_special_tokens=True).strip()
        return text, int(ids.shape[1]), int(new.shape[0])


def build_generator(config: GenerationConfig) -> Generator | None:
    """The LLM backend of ``config`` (None for ``extractive``)."""
    if config.backend == "openai":
        return OpenAIGenerator(config.openai)
    if config.backend == "hf":
        return HFGenerator(config.hf)
    return None


# -- the stage -------------------------------------------------------------------------------
class GenerationStage:
    """Reads the nodes and passages; writes ``answer``."""

    name = "generation"
    reads = ("query", "rewrite", "nodes", "passages", "node_answers")
    writes = ("answer",)

    def __init__(self, extractive: ExtractiveGenerator, llm: Generator | None, config: GenerationConfig) -> None:
        self.extractive = extractive
        self.llm = llm
        self.config = config
        self.prompt = load_prompt(config.prompt) if llm is not None else None
        self.node_prompt = load_prompt(config.node_prompt) if llm is not None else None

    def answer_node(self, question: str, passages: list[Passage], state: PipelineState) -> str:
        """A sub-question's short answer (planning fills children with it)."""
        if self.llm is not None:
            try:
                msgs = render(self.node_prompt, question, passages, self.config.max_context_chars)
                text, t_in, t_out = self.llm.complete(msgs)
                state.trace.count("generation.nodes", 1, t_in, t_out)
                if text:
                    return strip_markers(text)
            except Exception as exc:  # noqa: BLE001 - fall back to the extractive answer
                state.trace.note(f"generation: node answer failed ({type(exc).__name__}: {exc}); extractive used")
        picked = self.extractive.select(question, passages, state, n=1)
        return picked[0] if picked else ""

    def run(self, state: PipelineState, preset: Preset) -> None:
        # The final sub-questions: nodes whose answer no other node consumed.
        consumed = set(state.node_answers)
        final = [n for n in state.nodes if n.id not in consumed] or state.nodes
        with state.trace.stage(self.name) as st:
            if not state.passages:
                state.answer = ""
                st.note = "no passages: nothing to answer from"
                return
            if self.llm is not None:
                try:
                    msgs = render(self.prompt, state.question(), state.passages, self.config.max_context_chars,
                                  state.node_answers, state.nodes)
                    text, t_in, t_out = self.llm.complete(msgs)
                    state.trace.count(self.name, 1, t_in, t_out)
                    if text:
                        state.answer = strip_markers(text).strip()
                        return
                    st.note = "the LLM returned an empty answer"
                except Exception as exc:  # noqa: BLE001 - degrade to extractive
                    if not self.config.fallback_extractive:
                        raise
                    st.note = f"{self.config.backend} failed ({type(exc).__name__}: {exc}); extractive answer"
                    state.trace.note(f"generation: {st.note}")
            state.answer = self.extractive.answer(final, state)
