"""searchsmith eval ablate: each stage's switch really switches it off, the stage metrics, the run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from searchsmith.models.config import from_dict
from searchsmith.models.errors import ConfigError
from searchsmith.serving.ablation import STAGES, parse_stages, render_markdown, verdict
from searchsmith.serving.evaluate import (
    PassageLookup,
    image_metrics,
    pipeline_item_metrics,
    timeline_metrics,
)
from searchsmith.serving.main import main
from searchsmith.serving.pipeline.config import PipelineConfig

OUTAGE = ("On 12 March 2024, Quarry Cloud customers in us-east lost service for two hours after a "
          "compaction bug.")
# Two outlets report the outage in (nearly) the same words; a third note is a near-duplicate passage.
EXTRA = [
    {"id": "news-a", "source": "news", "title": "Quarry Cloud outage", "date": "2024-03-12", "text": OUTAGE},
    {"id": "news-b", "source": "news", "title": "Quarry Cloud outage explained", "date": "2024-03-12",
     "text": OUTAGE.replace("two hours", "2 hours")},
    {"id": "news-c", "source": "news", "title": "Quarry outage report", "date": "2024-03-12",
     "text": "Quarry Cloud customers in us-east lost service for two hours on 12 March 2024 after a compaction bug."},
    {"id": "enc-saturn", "source": "astronomy", "title": "Saturn",
     "text": "Saturn is the sixth planet from the Sun and is famous for its bright rings of ice.",
     "images": [{"id": "bread", "path": "bread.png", "caption": "A loaf of sourdough bread on a wooden board"},
                {"id": "rings", "path": "rings.png", "caption": "Saturn and its bright rings of ice"}]},
]
QA = [
    {"id": "q1", "query": "When did the Quarry Cloud outage happen?", "answer": "12 March 2024",
     "supporting": ["news-a", "news-b"],
     "events": [{"date": "2024-03-12", "sources": ["news-a", "news-b", "news-c"]}]},
    {"id": "q2", "query": "Which planet is famous for its rings of ice?", "answer": "Saturn",
     "supporting": ["enc-saturn"], "images": ["rings"]},
    {"id": "q3", "query": "Which planet is the largest?", "answer": "Jupiter", "supporting": ["astronomy-0"]},
]


@pytest.fixture(scope="module")
def stage_index(tmp_path_factory, embedder, write_corpus):
    from PIL import Image
    from searchsmith.serving.corpus import read_corpus
    from searchsmith.serving.index import CentroidConfig, IndexConfig, build_index

    d = tmp_path_factory.mktemp("stages")
    for name in ("bread", "rings"):
        Image.new("RGB", (64, 48), (200, 150, 90)).save(d / f"{name}.png")
    corpus = write_corpus(d / "corpus.jsonl", EXTRA)
    build_index(read_corpus(corpus), d / "index", IndexConfig(centroids=CentroidConfig(chunks_per_centroid=3)),
                embedder=embedder)
    return d / "index"


@pytest.fixture(scope="module")
def ask(stage_index, embedder):
    """``ask(cfg, query, bundles=None) -> answer`` with a fresh pipeline of ``cfg`` on the stage index."""
    from searchsmith.serving.index import Index
    from searchsmith.serving.pipeline.pipeline import Pipeline

    index = Index.load(stage_index, embedder=embedder)

    def run(cfg: PipelineConfig, query: str, bundles=None):
        return Pipeline(cfg, index, embedder, bundles).ask(query)

    return run


def _cfg(**kw) -> PipelineConfig:
    # every source searched: routing is not under test
    return from_dict(PipelineConfig, {"routing": {"enabled": False}, **kw})


def _off(name: str, cfg: PipelineConfig) -> PipelineConfig:
    return STAGES[name].off(cfg)


# -- each switch changes what the pipeline does --------------------------------------------------
def test_dedup_off_keeps_the_near_duplicate_reports(ask) -> None:
    full = _cfg(retrieval={"keep_ratio": 1.0})
    docs = lambda cfg: {p["doc_id"] for p in ask(cfg, QA[0]["query"])["passages"]}  # noqa: E731
    on, off = docs(full), docs(_off("dedup", full))
    assert len(on & {"news-a", "news-b", "news-c"}) == 1  # one report survives dedup at 0.8
    assert {"news-a", "news-b", "news-c"} <= off


def test_keep_ratio_off_gives_every_deduplicated_passage(ask) -> None:
    full = _cfg()
    on, off = ask(full, QA[2]["query"])["passages"], ask(_off("keep_ratio", full), QA[2]["query"])["passages"]
    assert len(off) > len(on) and {p["chunk_id"] for p in on} < {p["chunk_id"] for p in off}


def test_rerank_off_skips_the_reranker_and_is_inactive_without_one(ask) -> None:
    from searchsmith.serving.ablation import STAGES

    class Reranker:  # prefers passages about rings; its held-out figures pass the gate
        task = "rerank"
        manifest = {"task": "rerank", "heldout_metrics": {
            "ndcg@10": 0.9, "baselines/bi_encoder_ndcg@10": 0.8, "baselines/bm25_ndcg@10": 0.7,
            **{f"ndcg@10_vs_{base}_{k}": v for base in ("bi_encoder", "bm25") for k, v in
               {"diff": 0.1, "lo": 0.05, "hi": 0.15, "p": 0.001, "n": 100, "direction": 1}.items()}}}

        def score(self, query, passages):
            return np.array([float("rings" in p) for p in passages], dtype=np.float32)

    full = _cfg()
    on = ask(full, QA[2]["query"], {"reranker": Reranker()})
    off = ask(_off("rerank", full), QA[2]["query"], {"reranker": Reranker()})
    assert not on["trace"]["stages"]["rerank"].get("skipped") and off["trace"]["stages"]["rerank"]["skipped"]
    assert on["passages"][0]["doc_id"] == "enc-saturn" != off["passages"][0]["doc_id"]
    plain = ask(full, QA[2]["query"])
    assert STAGES["rerank"].inactive(None, [plain]) and not STAGES["rerank"].inactive(None, [on])


def test_edge_order_off_keeps_the_passages_best_first(ask) -> None:
    full = _cfg(retrieval={"keep_ratio": 1.0})
    scores = lambda cfg: [p["score"] for p in ask(cfg, QA[2]["query"])["passages"]]  # noqa: E731
    on, off = scores(full), scores(_off("edge_order", full))
    assert len(on) >= 3 and sorted(on) == sorted(off)
    assert off == sorted(off, reverse=True) and on != off  # lost in the middle: the second best is last
    assert on[-1] == off[1]


def test_lexical_off_searches_by_the_cosine_alone(ask) -> None:
    full = _cfg(retrieval={"keep_ratio": 1.0})
    on, off = ask(full, QA[0]["query"]), ask(_off("lexical", full), QA[0]["query"])
    assert on["trace"]["stages"]["retrieval.lexical"]["latency_ms"] > 0
    assert "retrieval.lexical" not in off["trace"]["stages"]
    # the BM25 share is added to the best passages' cosines ("Quarry Cloud outage" matches their words)
    assert max(p["score"] for p in on["passages"]) > max(p["score"] for p in off["passages"]) + 0.05


def test_citation_fallback_off_cites_nothing(ask) -> None:
    full = _cfg()
    assert ask(full, QA[1]["query"])["references"]
    off = ask(_off("citation_fallback", full), QA[1]["query"])
    assert off["references"] == [] and off["answer_text"]


def test_timeline_merge_off_lists_the_reports_as_separate_events(ask) -> None:
    # every passage's events count and dedup keeps all three reports: only the merge is under test
    full = _cfg(retrieval={"dedup_threshold": 1.0, "keep_ratio": 1.0}, timeline={"used_passages_only": False})
    events = lambda cfg: [e for g in ask(cfg, QA[0]["query"])["timeline"] for e in g["events"]  # noqa: E731
                          if e["date"] == "2024-03-12"]
    on, off = events(full), events(_off("timeline_merge", full))
    assert len(on) < len(off) and len(off) >= 3
    assert any(len(e["sources"]) >= 2 for e in on)
    assert timeline_metrics(off, QA[0]["events"])["timeline_duplicates"] > timeline_metrics(
        on, QA[0]["events"])["timeline_duplicates"]


def test_image_threshold_off_places_the_unrelated_image(ask) -> None:
    # an answer of several sentences: each takes at most one image, so both can be placed
    full = _cfg(generation={"extractive": {"sentences_per_node": 3, "min_relative_score": 0.0, "min_support": 0.0}})
    placed = lambda cfg: {im["image_id"] for im in ask(cfg, QA[1]["query"])["images"]}  # noqa: E731
    on, off = placed(full), placed(_off("image_threshold", full))
    assert on == {"rings"} and off == {"rings", "bread"}


def test_every_stage_has_a_switch_and_a_test() -> None:
    tested = {"dedup", "keep_ratio", "lexical", "rerank", "edge_order", "citation_fallback", "timeline_merge",
              "image_threshold"}
    assert set(STAGES) == tested
    base = _cfg()
    for st in STAGES.values():
        assert st.off(base) != base and st.metrics and st.claim


# -- the stage metrics on hand-built answers -----------------------------------------------------
def _answer(**kw) -> dict:
    ans = {"answer_text": "It was on 12 March 2024.", "references": [{"doc_id": "a"}], "passages": [
        {"chunk_id": "a#0", "doc_id": "a"}, {"chunk_id": "b#0", "doc_id": "b"}], "timeline": [], "images": [],
        "trace": {"model_calls": 0, "tokens_in": 0, "tokens_out": 0, "total_ms": 5.0}}
    return {**ans, **kw}


def test_timeline_metrics_count_duplicates_against_the_gold_events() -> None:
    gold = [{"date": "2024-03-12", "sources": ["a", "b"]}, {"date": "2024-05-01", "sources": ["c"]}]
    events = [{"date": "2024-03-12", "sources": ["a"]}, {"date": "2024-03", "sources": ["b"]},  # same event twice
              {"date": "2024-03-12", "sources": ["z"]}]  # not a report of it
    m = timeline_metrics(events, gold)
    assert m == {"timeline_duplicates": 1.0, "timeline_recall": 0.5, "timeline_precision": pytest.approx(1 / 3),
                 "timeline_f1": pytest.approx(2 / 5)}
    merged = timeline_metrics([{"date": "2024-03-12", "sources": ["a", "b"]}], gold)
    assert merged["timeline_duplicates"] == 0.0 and merged["timeline_precision"] == 1.0
    assert "timeline_precision" not in timeline_metrics([], gold)  # nothing listed: precision undefined


def test_image_metrics_count_wrong_placements() -> None:
    assert image_metrics(["x", "y"], ["x"]) == {"image_wrong": 1.0, "image_f1": pytest.approx(2 / 3),
                                                "image_precision": 0.5, "image_recall": 1.0}
    assert image_metrics([], []) == {"image_wrong": 0.0, "image_f1": 1.0}  # none belongs, none placed
    assert image_metrics(["x"], []) == {"image_wrong": 1.0, "image_f1": 0.0, "image_precision": 0.0}


def test_item_metrics_leave_out_what_the_item_has_no_gold_for() -> None:
    ans = _answer(timeline=[{"year": "2024", "events": [{"date": "2024-03-12", "sources": ["a"]}]}],
                  images=[{"image_id": "x"}])
    plain = pipeline_item_metrics(ans, {"answer": "12 March 2024", "supporting": ["a"]})
    assert plain["passages"] == 2.0 and plain["timeline_events"] == 1.0 and plain["images_placed"] == 1.0
    assert not any(k.startswith(("timeline_d", "timeline_p", "timeline_r", "image_")) for k in plain)
    gold = pipeline_item_metrics(ans, {"answer": "12 March 2024", "supporting": ["a"], "images": [],
                                       "events": [{"date": "2024-03-12", "sources": ["a"]}]})
    assert gold["timeline_recall"] == 1.0 and gold["timeline_duplicates"] == 0.0 and gold["image_wrong"] == 1.0


def test_passage_lookup_measures_context_and_redundancy() -> None:
    from types import SimpleNamespace

    class Store:
        def chunks_of_doc(self, doc):
            texts = {"a": "one two three", "b": "one two three four", "c": "five"}
            return [SimpleNamespace(chunk_id=f"{doc}#0", text=texts[doc])]

    class Embedder:
        vecs = {"one two three": [1.0, 0.0], "one two three four": [0.9, np.sqrt(1 - 0.81)], "five": [0.0, 1.0]}

        def encode(self, texts):
            return np.asarray([self.vecs[t] for t in texts], dtype=np.float32)

    lookup = PassageLookup(SimpleNamespace(index=SimpleNamespace(store=Store()), embedder=Embedder()))
    m = lookup.metrics(_answer(passages=[{"chunk_id": f"{d}#0", "doc_id": d} for d in "abc"]))
    assert m["context_tokens"] == 8.0
    assert m["redundancy"] == pytest.approx(1 / 3)  # (a, b) at cosine 0.9 of three pairs
    assert "redundancy" not in lookup.metrics(_answer(passages=[{"chunk_id": "c#0", "doc_id": "c"}]))


def test_summaries_average_a_metric_over_the_items_that_have_it() -> None:
    from searchsmith.serving.evaluate import _summary as pipeline_summary
    from searchsmith.serving.sweep import _summary as sweep_summary
    from searchsmith.serving.sweep import _verdicts

    rows = [{"f1": 1.0, "latency_ms": 3.0, "image_wrong": 1.0}, {"f1": 0.0, "latency_ms": 5.0}]
    s = sweep_summary(rows, 200, 0)
    assert s["f1"] == 0.5 and s["image_wrong"] == 1.0 and s["image_wrong_n"] == 1 and "f1_n" not in s
    assert "timeline_recall" not in s  # no item has events
    p = pipeline_summary(rows)
    assert p["image_wrong"] == 1.0 and p["image_wrong_n"] == 1 and p["n"] == 2 and p["latency_ms_p50"] == 4.0
    other = [{"f1": 1.0, "latency_ms": 3.0, "image_wrong": 0.0}, {"f1": 1.0, "latency_ms": 5.0}]
    points = [{"value": 0.3, "metrics": s}, {"value": 0.5, "metrics": sweep_summary(other, 200, 0)}]
    v = _verdicts(points, 0.3, {"0.3": rows, "0.5": other}, 200, 0)
    assert v["image_wrong"]["best_value"] == 0.5 and v["image_wrong"]["vs_default"]["0.5"]["diff"] == -1.0
    assert "timeline_recall" not in v


def test_verdict_reads_the_interval_in_the_metric_direction() -> None:
    assert verdict("f1", [0.1, 0.3]) == "helps" and verdict("f1", [-0.3, -0.1]) == "hurts"
    assert verdict("redundancy", [-0.3, -0.1]) == "helps" and verdict("image_wrong", [0.1, 0.2]) == "hurts"
    assert verdict("f1", [-0.1, 0.2]) == "no measurable effect"


# -- the command -----------------------------------------------------------------------------------
def test_unknown_stage_is_refused_with_the_known_names(stage_index, tmp_path, capsys) -> None:
    assert parse_stages(None) == list(STAGES) and parse_stages("dedup, rerank") == ["dedup", "rerank"]
    with pytest.raises(ConfigError, match="timeline_merge") as err:
        parse_stages("dedup,merge")
    assert "'merge'" in str(err.value)
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in QA))
    assert main(["eval", "ablate", "--data", str(data), "--index", str(stage_index), "--stages", "nope"]) == 1
    assert "unknown stage(s) ['nope']; the stages are dedup, keep_ratio" in capsys.readouterr().err


def test_eval_ablate_end_to_end(stage_index, tmp_path, capsys) -> None:
    data, png, per = tmp_path / "qa.jsonl", tmp_path / "ablate.png", tmp_path / "per.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in QA))
    assert main(["eval", "ablate", "--data", str(data), "--index", str(stage_index), "--limit", "3",
                 "--stages", "keep_ratio,timeline_merge", "--plot", str(png), "--per-item", str(per),
                 "--resamples", "200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["task"] == "ablate" and out["n"] == 3 and set(out["stages"]) == {"keep_ratio", "timeline_merge"}
    keep = out["stages"]["keep_ratio"]
    assert keep["switch"] == "retrieval.keep_ratio=1.0" and keep["claim"]
    tokens = keep["metrics"]["context_tokens"]
    assert tokens["n"] == 3 and tokens["lower_is_better"] and tokens["with"] < tokens["without"]
    assert tokens["diff"] == pytest.approx(tokens["with"] - tokens["without"], abs=1e-3)
    assert tokens["diff_ci95"][0] <= tokens["diff"] <= tokens["diff_ci95"][1] and 0 <= tokens["p_value"] <= 1
    assert keep["verdict"] == tokens["verdict"] and set(keep["latency_ms_p50"]) == {"with", "without"}
    assert out["stages"]["timeline_merge"]["metrics"]["timeline_duplicates"]["n"] == 1  # only q1 has events
    assert png.stat().st_size > 1000 and out["plot"] == str(png)
    rows = [json.loads(line) for line in per.read_text().splitlines()]
    assert [r["variant"] for r in rows].count("full") == 3 and len(rows) == 9
    table = render_markdown(out)
    assert table[0].startswith("| stage") and any("context_tokens" in line for line in table)


def test_the_generator_reproduces_the_stage_gold() -> None:
    from searchsmith.models.demo import demo_dir
    from searchsmith.models.demo import generate as gen

    demo = gen.build()
    gen.check(demo)
    committed = [json.loads(line) for line in (demo_dir() / gen.STAGES_FILE).read_text().splitlines()]
    assert committed == json.loads(json.dumps(demo.stages))
    assert sum("events" in s for s in committed) >= 5 and sum("images" in s for s in committed) >= 8
    assert any(s.get("images") == [] for s in committed)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A saved random GPT-2 (one layer, n_embd 32) over the MiniLM tokenizer: nonsense answers."""
    import torch
    from searchsmith.models.hub import resolve_model
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-lm") / "lm"
    GPT2LMHeadModel(GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=1, n_head=2, n_positions=512,
                               bos_token_id=None, eos_token_id=None)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_the_llm_is_loaded_once_for_every_stage_off(stage_index, tmp_path, capsys, tiny_lm, monkeypatch) -> None:
    """Each stage-off pipeline built its own generator: with the hf backend every variant loaded
    the model again (all open at once for the interleaved timing)."""
    from searchsmith.serving.pipeline.generation import HFGenerator

    loads: list[str] = []
    real_init = HFGenerator.__init__

    def init(self, config):
        loads.append(config.model)
        real_init(self, config)

    monkeypatch.setattr(HFGenerator, "__init__", init)
    cfg, data = tmp_path / "pipeline.yaml", tmp_path / "qa.jsonl"
    cfg.write_text(json.dumps({"generation": {"backend": "hf", "hf": {  # JSON is YAML
        "model": str(tiny_lm), "device": "cpu", "max_new_tokens": 2, "max_input_tokens": 256}}}))
    data.write_text("".join(json.dumps(r) + "\n" for r in QA))
    assert main(["eval", "ablate", "--config", str(cfg), "--data", str(data), "--index", str(stage_index),
                 "--limit", "2", "--stages", "dedup,keep_ratio,edge_order", "--resamples", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["generation"] == "hf" and set(out["stages"]) == {"dedup", "keep_ratio", "edge_order"}
    assert all("metrics" in st and st["metrics"] for st in out["stages"].values())
    assert loads == [str(tiny_lm)]  # once, not once per variant (was 4: the full config and 3 stages off)
