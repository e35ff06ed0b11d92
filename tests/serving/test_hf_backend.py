"""The ``hf`` generation backend's mechanics on a tiny random causal LM (CPU, seconds).

The model is a one-layer GPT-2 with random weights over the bundled MiniLM tokenizer: its
text is nonsense, but greedy decoding makes it a fixed function of the prompt, which is all
that max_new_tokens, stop strings and streaming need. Expected texts are taken from the
model's own unconstrained output, never written down.
"""

from __future__ import annotations

import time

import pytest
from searchsmith.models.errors import ConfigError, RunnerError
from searchsmith.serving.pipeline.config import HFConfig
from searchsmith.serving.pipeline.generation import HFGenerator

MESSAGES = [{"role": "system", "content": "Answer from the passages."},
            {"role": "user", "content": "Which port does Quarry listen on?"}]
MAX_NEW = 24


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A saved random GPT-2 (n_layer 1, n_embd 32) with the MiniLM tokenizer."""
    import torch
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    # initializer_range 0.2 (not GPT-2's 0.02): with near-zero weights greedy decoding repeats
    # one token, and a stop string could then only cut at the start. No eos: GPT-2's id 50256
    # is outside this vocabulary, and every answer runs to max_new_tokens unless stopped.
    cfg = GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=1, n_head=2, n_positions=256,
                     initializer_range=0.2, bos_token_id=None, eos_token_id=None)
    folder = tmp_path_factory.mktemp("tiny-lm") / "lm"
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def _gen(folder, **cfg) -> HFGenerator:
    return HFGenerator(HFConfig(model=str(folder), device="cpu", max_input_tokens=128,
                                **{"max_new_tokens": MAX_NEW, **cfg}))


@pytest.fixture(scope="module")
def full(tiny_lm):
    """The unconstrained greedy answer ``(text, tokens in, tokens out)``."""
    return _gen(tiny_lm).complete(MESSAGES)


def test_greedy_output_is_deterministic(tiny_lm, full) -> None:
    text, t_in, t_out = full
    assert text and t_in > 0 and t_out == MAX_NEW
    assert _gen(tiny_lm).complete(MESSAGES) == full  # a second load of the same folder


@pytest.mark.parametrize("n", [1, 4, 9])
def test_max_new_tokens_bounds_the_answer(tiny_lm, full, n) -> None:
    text, _, t_out = _gen(tiny_lm, max_new_tokens=n).complete(MESSAGES)
    assert t_out == n
    # greedy: a shorter budget writes a prefix of the longer answer
    assert text and full[0].startswith(text) and len(text) < len(full[0])


def _stop_in_the_middle(text: str, words: int) -> str:
    """``words`` consecutive words of ``text`` whose first occurrence is past its start."""
    ws = text.split()
    for i in range(1, len(ws) - words):
        cand = " ".join(ws[i:i + words])
        if text.find(cand) > 0 and text.find(ws[i]) == text.find(cand):
            return cand
    raise AssertionError(f"the tiny LM's answer has no word to stop at: {text!r}")


@pytest.mark.parametrize("words", [1, 2])  # 2: a stop string spanning streamed pieces
@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_cuts_the_answer_and_ends_generation(tiny_lm, full, words, stream) -> None:
    stop = _stop_in_the_middle(full[0], words)
    pieces: list[str] = []
    text, _, t_out = _gen(tiny_lm, stop=(stop, "never-generated")).complete(
        MESSAGES, on_token=pieces.append if stream else None)
    assert text == full[0][:full[0].find(stop)].strip()
    assert stop not in text and t_out < MAX_NEW  # generation itself stopped early
    if stream:
        assert "".join(pieces).strip() == text
        assert not any(stop.split()[0] in p for p in pieces)  # no piece shows the stop string


def test_a_stop_string_that_never_occurs_changes_nothing(tiny_lm, full) -> None:
    assert _gen(tiny_lm, stop=("never-generated",)).complete(MESSAGES) == full


def test_streaming_pieces_join_to_the_whole_answer(tiny_lm, full) -> None:
    pieces: list[str] = []
    out = _gen(tiny_lm).complete(MESSAGES, on_token=pieces.append)
    assert out == full
    assert len(pieces) > 1 and all(pieces)
    assert "".join(pieces).strip() == full[0]


def test_a_listener_that_raises_stops_the_generation(tiny_lm) -> None:
    """A streamed answer whose client left (the listener raises): the model stops at its next
    step instead of running on to max_new_tokens on its thread."""
    from searchsmith.models.errors import ClientGone

    gen = _gen(tiny_lm, max_new_tokens=400)
    real = gen.model.generate
    steps: list[int] = []

    def counting(*args, **kwargs):
        out = real(*args, **kwargs)
        steps.append(int(out.shape[1] - args[0].shape[1]))
        return out

    gen.model.generate = counting

    def leaves(piece: str) -> None:
        raise ClientGone("gone")

    with pytest.raises(ClientGone):
        gen.complete(MESSAGES, on_token=leaves)
    deadline = time.monotonic() + 30
    while not steps and time.monotonic() < deadline:
        time.sleep(0.01)
    assert steps and steps[0] < 50  # stopped within a few steps of the first piece, not at 400


def test_a_failure_while_streaming_is_a_runner_error(tiny_lm) -> None:
    gen = _gen(tiny_lm)

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    gen.model.generate = broken
    pieces: list[str] = []
    with pytest.raises(RunnerError, match=r"generation.hf: .* failed while generating \(RuntimeError: out of memory"):
        gen.complete(MESSAGES, on_token=pieces.append)
    assert pieces == []


@pytest.mark.parametrize("override,message", [
    ("generation.hf.stop=['']", "an empty string would stop before the first token"),
    ("generation.hf.max_new_tokens=0", "max_new_tokens must be >= 1"),
])
def test_bad_hf_settings_are_config_errors(override, message) -> None:
    from searchsmith.serving.pipeline.config import load_pipeline_config

    with pytest.raises(ConfigError, match=message):
        load_pipeline_config(None, [override])
