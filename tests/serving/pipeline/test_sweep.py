"""searchsmith eval sweep: one pipeline setting varied, metrics with intervals, the default judged."""

from __future__ import annotations

import json

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.serving.main import main
from searchsmith.serving.sweep import parse_values

ROWS = [{"id": "a", "query": "Which planet is the largest?", "answer": "Jupiter", "supporting": ["astronomy-0"]},
        {"id": "b", "query": "Where are the unit tests for the Lumen eviction code?", "answer": "tests/test_evict.py",
         "supporting": ["code-4"]},
        {"id": "c", "query": "How long do I bake the bread?", "answer": "40 minutes", "supporting": ["cooking-0"]}]


@pytest.fixture
def qa(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def test_sweep_reports_each_value_with_intervals_and_judges_the_default(small_index, qa, tmp_path, capsys) -> None:
    png, per = tmp_path / "sweep.png", tmp_path / "per.jsonl"
    rc = main(["eval", "sweep", "--data", str(qa), "--index", str(small_index), "--param",
               "citation.cosine_threshold", "--values", "0.3,0.6,0.9", "--plot", str(png), "--per-item", str(per),
               "--resamples", "200", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["default"] == 0.6 and out["values"] == [0.3, 0.6, 0.9] and out["n"] == 3
    for point in out["points"]:
        m = point["metrics"]
        for name in ("citation_precision", "citation_recall", "support_recall", "f1"):
            lo, hi = m[f"{name}_ci95"]
            assert lo <= m[name] <= hi
    assert png.stat().st_size > 1000
    rows = [json.loads(line) for line in per.read_text().splitlines()]
    assert len(rows) == 9 and {r["value"] for r in rows} == {0.3, 0.6, 0.9}
    # each point is the mean of its per-item rows; the verdict names the best of them
    for point in out["points"]:
        mine = [r["citation_recall"] for r in rows if r["value"] == point["value"]]
        assert point["metrics"]["citation_recall"] == pytest.approx(sum(mine) / 3, abs=1e-4)
    verdict = out["verdicts"]["citation_recall"]
    best = max(p["metrics"]["citation_recall"] for p in out["points"])
    assert verdict["best"] == best and verdict["default"] == out["points"][1]["metrics"]["citation_recall"]
    assert set(verdict["vs_default"]) == {"0.3", "0.9"}
    for value, c in verdict["vs_default"].items():
        assert c["diff_ci95"][0] <= c["diff"] <= c["diff_ci95"][1] and 0.0 <= c["p_value"] <= 1.0
        assert (value in verdict["beats_default"]) == (c["diff_ci95"][0] > 0)
    assert out["verdicts"]["latency_ms"]["best"] == min(p["metrics"]["latency_ms"] for p in out["points"])
    assert "beats_default" not in out["verdicts"]["latency_ms"]  # timing is reported, not judged


def test_a_setting_that_changes_the_answers_shows_in_the_sweep(small_index, qa, capsys) -> None:
    # one passage kept per question instead of up to ten: retrieval recall can only fall
    assert main(["eval", "sweep", "--data", str(qa), "--index", str(small_index), "--param",
                 "retrieval.retrieve_k", "--values", "1,10", "--resamples", "200", "--json"]) == 0
    by_k = {p["value"]: p["metrics"] for p in json.loads(capsys.readouterr().out)["points"]}
    assert by_k[1]["retrieval_recall"] <= by_k[10]["retrieval_recall"] == 1.0


def test_sweep_refuses_bad_settings_before_asking(small_index, qa, capsys) -> None:
    base = ["eval", "sweep", "--data", str(qa), "--index", str(small_index)]
    assert main([*base, "--values", "1,2"]) == 1
    assert "--param KEY is required" in capsys.readouterr().err
    assert main([*base, "--param", "citation.cosine_treshold", "--values", "0.1,0.2"]) == 1
    assert "cosine_threshold" in capsys.readouterr().err  # the closest key is suggested
    with pytest.raises(ConfigError, match="at least two"):
        parse_values("0.5", "x")
    with pytest.raises(ConfigError, match="listed twice"):
        parse_values("0.5,0.5", "x")


@pytest.fixture(scope="module")
def tiny_lms(tmp_path_factory):
    """Two saved random GPT-2s (one layer, n_embd 32) over the MiniLM tokenizer: nonsense text,
    but no eos in its vocabulary, so every answer runs to max_new_tokens."""
    import torch
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    cfg = GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=1, n_head=2, n_positions=512,
                     bos_token_id=None, eos_token_id=None)
    folders = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        folder = tmp_path_factory.mktemp("tiny-lm") / f"lm{seed}"
        GPT2LMHeadModel(cfg).save_pretrained(folder)
        tok.save_pretrained(folder)
        folders.append(folder)
    return folders


@pytest.fixture
def hf_calls(monkeypatch):
    """``{"loads": [model of every HFGenerator built], "answers": [(max_new_tokens, tokens out)]}``."""
    from searchsmith.serving.pipeline.generation import HFGenerator

    calls: dict[str, list] = {"loads": [], "answers": []}
    real_init, real_complete = HFGenerator.__init__, HFGenerator.complete

    def init(self, config):
        calls["loads"].append(config.model)
        real_init(self, config)

    def complete(self, messages, on_token=None):
        text, t_in, t_out = real_complete(self, messages, on_token)
        calls["answers"].append((self.config.max_new_tokens, t_out))
        return text, t_in, t_out

    monkeypatch.setattr(HFGenerator, "__init__", init)
    monkeypatch.setattr(HFGenerator, "complete", complete)
    return calls


def _hf_sweep(tmp_path, small_index, qa, lm, param, values) -> list[str]:
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(json.dumps({"generation": {"backend": "hf", "hf": {
        "model": str(lm), "device": "cpu", "max_new_tokens": 3, "max_input_tokens": 256}}}))  # JSON is YAML
    return ["eval", "sweep", "--config", str(cfg), "--data", str(qa), "--index", str(small_index), "--param", param,
            "--values", values, "--resamples", "100", "--json"]


@pytest.mark.parametrize(("param", "values"), [("citation.cosine_threshold", "0.3,0.6,0.9"),
                                                ("bundles.threads", "1,2,3")])  # other bundles: loaded per value
def test_the_llm_is_loaded_once_when_the_swept_setting_keeps_its_model(
        small_index, qa, tmp_path, capsys, tiny_lms, hf_calls, param, values) -> None:
    """Each value's pipeline built its own generator: with the hf backend every value loaded
    the model again (all open at once for the interleaved timing)."""
    assert main(_hf_sweep(tmp_path, small_index, qa, tiny_lms[0], param, values)) == 0
    out = json.loads(capsys.readouterr().out)
    assert hf_calls["loads"] == [str(tiny_lms[0])]  # once, not once per value
    assert len(out["points"]) == 3 and hf_calls["answers"] and {n for n, _ in hf_calls["answers"]} == {3}


def test_a_swept_decoding_setting_shares_the_weights_and_a_swept_model_loads_its_own(
        small_index, qa, tmp_path, capsys, tiny_lms, hf_calls) -> None:
    assert main(_hf_sweep(tmp_path, small_index, qa, tiny_lms[0], "generation.hf.max_new_tokens", "2,5")) == 0
    capsys.readouterr()
    assert hf_calls["loads"] == [str(tiny_lms[0])]
    # each value answered under its own max_new_tokens (no eos: every answer runs to it)
    assert {n for n, _ in hf_calls["answers"]} == {2, 5} and all(n == t for n, t in hf_calls["answers"])

    hf_calls["loads"].clear()
    models = ",".join(str(f) for f in tiny_lms)
    assert main(_hf_sweep(tmp_path, small_index, qa, tiny_lms[0], "generation.hf.model", models)) == 0
    capsys.readouterr()
    assert hf_calls["loads"] == [str(f) for f in tiny_lms]  # another model: its own generator
