"""Tokens/s and padding fraction in the embed and rerank profiles.

Every row counts the real tokens it processed (as the system tokenizes and truncates them) and
the share of padding among the positions it fed the model, computed from the batches that
system forms. The counts are checked against hand-counted texts and against the attention
masks the models actually receive.
"""

from __future__ import annotations

import json

import pytest
from searchsmith.serving.main import main
from searchsmith.serving.profiling.common import (
    TokenCount,
    batched_count,
    bundle_count,
    padding_fraction,
    sentence_transformers_count,
)

# "cat" is one WordPiece of all-MiniLM-L6-v2's vocabulary: a text of k cats is k + 2 tokens
# with [CLS] and [SEP], cut at max_length.
CATS = (1, 2, 3, 5, 8, 13, 40, 100, 400)


def cats(k: int) -> str:
    return " ".join(["cat"] * k)


def _records(out):
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _check_row(r: dict, items: int, per_s: str, tokens: int) -> None:
    """One measured row: its tokens, and tokens/s and items/s over the same seconds."""
    assert r["tokens"] == tokens, r
    assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["seconds"], rel=1e-9)
    assert r[per_s] == pytest.approx(items / r["seconds"], rel=1e-9)
    assert 0.0 <= r["padding_fraction"] < 1.0


def test_padding_fraction_on_hand_worked_batches() -> None:
    lengths = [5, 3, 2, 7]
    # [7, 5] padded to 2 x 7 = 14 (12 real); [3, 2] padded to 2 x 3 = 6 (5 real): 1 - 17 / 20
    assert padding_fraction(lengths, [[3, 0], [1, 2]]) == pytest.approx(0.15)
    assert padding_fraction(lengths, [[0, 1, 2, 3]]) == pytest.approx(1 - 17 / 28)  # one batch of width 7
    assert padding_fraction(lengths, [[0], [1], [2], [3]]) == 0.0  # one input per batch pads nothing
    assert padding_fraction([4, 4, 4], [[0, 1, 2]]) == 0.0
    assert batched_count(lengths, [[3, 0], [1, 2]]) == TokenCount(17, 20)
    fields = TokenCount(17, 20).fields(2.0)
    assert fields == {"tokens": 17, "tokens_per_s": 8.5, "padding_fraction": pytest.approx(0.15), "seconds": 2.0}
    assert TokenCount(17, 20) + TokenCount(3, 5) == TokenCount(20, 25)
    assert TokenCount(5, None).padding_fraction is None and (TokenCount(5, None) + TokenCount(1, 1)).positions is None


def _feeds_recorder(module):
    """Record (real, positions) of every attention mask ``module`` receives."""
    seen = []

    def hook(mod, args, kwargs):
        # a torch model gets it as a keyword; a sentence-transformers module in its features dict
        mask = kwargs["attention_mask"] if "attention_mask" in kwargs else args[0]["attention_mask"]  # (B, T)
        seen.append((int(mask.sum()), int(mask.numel())))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    return seen, handle


def _total(seen) -> TokenCount:
    return TokenCount(sum(r for r, _ in seen), sum(p for _, p in seen))


def test_counts_are_what_each_system_feeds_its_model(tmp_path, embedder) -> None:
    from searchsmith.models.batching import pack_batches
    from searchsmith.models.runtime import load_bundle
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from searchsmith.serving.profiling import rerank
    from searchsmith.serving.profiling.embed import embedder_count
    from sentence_transformers import CrossEncoder, SentenceTransformer

    texts = [cats(k) for k in CATS] + ["the cat sat on the mat.", "dog", cats(7)]
    # sentence-transformers: sorted by characters, cut every batch_size, padded to the longest
    st = SentenceTransformer(str(embedder.model_path), device="cpu")
    seen, handle = _feeds_recorder(st[0])  # its Transformer module (it calls the HF forward directly)
    st.encode(texts, batch_size=4)
    handle.remove()
    assert len(seen) == 3 and sentence_transformers_count(st, texts, 4) == _total(seen)
    assert _total(seen).tokens == sum(min(k + 2, 256) for k in CATS) + 9 + 3 + 9

    # the embedder: its own count of the batches it packed, and pack_batches gives the same
    emb = Embedder(EmbedderConfig(max_batch_tokens=256, max_batch_size=256))
    emb.model, emb.tokenizer = embedder.model, embedder.tokenizer
    seen, handle = _feeds_recorder(emb.model)
    emb.encode(texts)
    handle.remove()
    assert len(seen) > 2 and embedder_count(emb.last_stats) == _total(seen)
    lengths = [len(ids) for ids in emb.tokenize(texts)]
    assert batched_count(lengths, pack_batches(lengths, 256, 256, 0.75)) == _total(seen)

    # CrossEncoder.predict sorts the pairs too; a bundle packs them under its token budget
    src = rerank.untrained_source(tiny=True)  # max_length 64
    pairs = [(q, cats(k)) for q in ("cat", "dog cat") for k in CATS]
    ce = CrossEncoder(str(src.model_dir), device="cpu", max_length=src.max_length)
    seen, handle = _feeds_recorder(ce[0])
    ce.predict(pairs, batch_size=4, show_progress_bar=False)
    handle.remove()
    assert sentence_transformers_count(ce, pairs, 4) == _total(seen)
    assert _total(seen).tokens == sum(min(len(q.split()) + len(p.split()) + 3, 64) for q, p in pairs)

    bundle = load_bundle(rerank.exported(src, "fp32", False), device="cpu", allow_untrained=True)
    graph, fed = bundle.graphs["model"], []

    def recording(feeds):
        fed.append((int(feeds["attention_mask"].sum()), int(feeds["attention_mask"].size)))
        return graph(feeds)

    bundle.graphs["model"] = recording
    bundle.score_pairs(pairs)
    assert len(fed) > 1 and bundle_count(bundle, [q for q, _ in pairs], [p for _, p in pairs]) == _total(fed)


def test_profile_embed_rows_report_tokens_per_s(tmp_path, monkeypatch) -> None:
    from searchsmith.serving.profiling import embed, readme

    monkeypatch.setenv("SEARCHSMITH_PROFILE_TINY", "1")
    texts = [cats(CATS[i % len(CATS)]) for i in range(24)]  # the tiny run embeds 24 texts
    monkeypatch.setattr(embed, "mixed_texts", lambda n, seed=0: texts[:n])
    out = tmp_path / "p"
    assert main(["profile", "embed", "--quick", "--out", str(out)]) == 0
    recs = _records(out)
    tokens = sum(min(len(t.split()) + 2, 256) for t in texts)  # 400 cats are cut at 256
    rows = [r for r in recs if r.get("impl")]
    # the prefetch rows (tokenize_workers 2 vs 0) embed the same 24 texts, in 4 windows
    assert {r["impl"] for r in rows} == {"searchsmith", "sentence-transformers", "searchsmith-prefetch",
                                         "searchsmith-inline"}
    for r in rows:
        _check_row(r, 24, "texts_per_s", tokens)
    # length-packed batches pad less than 16 texts at a time padded to the longest
    ours = [r for r in rows if r["impl"] == "searchsmith"][0]
    theirs = [r for r in rows if r["impl"] == "sentence-transformers"][0]
    assert ours["padding_fraction"] < theirs["padding_fraction"]
    assert ours["padding_fraction"] == pytest.approx(1 - ours["padding_efficiency"])
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["tokens"] == tokens
    assert summary["searchsmith_tokens_per_s"] == pytest.approx(summary["searchsmith_texts_per_s"] * tokens / 24)
    assert summary["st_default_tokens_per_s"] == pytest.approx(summary["st_default_texts_per_s"] * tokens / 24)
    assert 0.0 <= summary["st_default_padding_fraction"] < 1.0
    row = readme.headline_rows(recs)[0]
    assert f"{summary['searchsmith_tokens_per_s']:.0f} tokens/s, padding" in row["figure"]
    assert f"{summary['st_default_tokens_per_s']:.0f} tokens/s, padding" in row["baseline"]


def test_profile_rerank_rows_report_tokens_per_s(tmp_path, monkeypatch) -> None:
    import searchsmith.models.export as export
    from searchsmith.serving.profiling import readme

    monkeypatch.setenv("SEARCHSMITH_PROFILE_TINY", "1")
    groups = [("cat", [cats(k) for k in CATS] + [cats(4), cats(6), cats(9)]),
              ("dog cat", [cats(k) for k in reversed(CATS)] + [cats(2), cats(70), cats(1)])]
    monkeypatch.setattr(export, "heldout_groups", lambda n, per_query=12, seed=0: groups)
    out = tmp_path / "p"
    assert main(["profile", "rerank", "--quick", "--out", str(out)]) == 0
    recs = _records(out)
    # [CLS] query [SEP] passage [SEP], cut at the tiny model's 64 tokens
    tokens = sum(min(len(q.split()) + len(p.split()) + 3, 64) for q, ps in groups for p in ps)
    rows = {r["impl"]: r for r in recs if r.get("impl")}
    assert set(rows) == {"sentence-transformers", "onnx-int8"}
    for r in rows.values():
        _check_row(r, 24, "pairs_per_s", tokens)
    summary = [r for r in recs if r.get("summary")][0]
    assert summary["tokens"] == tokens
    assert summary["onnx_int8_tokens_per_s"] == pytest.approx(summary["onnx_int8_pairs_per_s"] * tokens / 24)
    assert summary["st_tokens_per_s"] == pytest.approx(summary["st_pairs_per_s"] * tokens / 24)
    assert summary["onnx_fp32_tokens_per_s"] is None  # --quick leaves the fp32 bundle out
    row = readme.headline_rows(recs)[0]
    assert f"{summary['onnx_int8_tokens_per_s']:.0f} tokens/s, padding" in row["figure"]
    assert f"{summary['st_tokens_per_s']:.0f} tokens/s, padding" in row["baseline"]


def test_segment_cosine_baseline_counts_its_input_order_batches(tmp_path) -> None:
    """The baseline for a segment-cosine reranker (CrossEncoder cannot load its head) runs the
    model's own forward 32 pairs at a time in input order, each batch padded to its longest."""
    from searchsmith.models.export import ModelSource
    from searchsmith.models.hub import resolve_model
    from searchsmith.models.reranker import SegmentCosineReranker
    from searchsmith.serving.profiling import rerank
    from transformers import AutoModel, AutoTokenizer, BertConfig

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    encoder = AutoModel.from_config(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=64))
    SegmentCosineReranker(encoder).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    src = ModelSource("rerank", tmp_path / "m", tmp_path / "m", "tiny segment cosine", False, 0, 64)
    groups = [("cat", [cats(k) for k in (2, 100, 1)] * 12)]  # 36 pairs: batches of 32 and 4
    pairs = [(q, p) for q, ps in groups for p in ps]
    name, scores, count = rerank._torch_baseline(src, pairs, groups)
    assert "segment-cosine" in name and [len(s) for s in scores()] == [36]
    lengths = [min(1 + len(p.split()) + 3, 64) for _, p in pairs]  # [CLS] cat [SEP] p [SEP]: 6, 64, 5, ...
    assert count.tokens == sum(lengths) == 12 * (6 + 64 + 5)
    # in input order every batch holds a 100-cat passage, so each is padded to 64
    assert count.positions == 32 * 64 + 4 * 64
