"""load_bundle: round trips of every exported task against torch, and every rejected bundle/input."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch
from export_fixtures import (
    bundle,
    cite_run,
    decompose_run,
    embedder_dir,
    images_run,
    rerank_run,
    tokenizer,
)
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.runtime import load_bundle

TEXTS = ["Quarry is a vector database.", "What is the default value of index.ef_construction?",
         "Lumen snapshots every 300 seconds by default, and the interval can be changed."]


def _copy(task: str, tmp_path, **kw):
    out = tmp_path / task
    shutil.copytree(bundle(task, **kw), out)
    return out


def _torch_embed(texts):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(embedder_dir()).eval()
    enc = tokenizer()(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()


def test_embed_round_trip_matches_torch() -> None:
    b = load_bundle(bundle("embed"), device="cpu")
    assert b.task == "embed" and b.backend == "onnx-cpu" and b.manifest["dtype"] == "fp32"
    vecs = b.encode(TEXTS)
    assert vecs.shape == (3, 32) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(vecs, _torch_embed(TEXTS), atol=1e-4)
    int8 = load_bundle(bundle("embed", "int8"), device="cpu", threads=1).encode(TEXTS)
    assert np.sum(int8 * vecs, axis=1).min() >= 0.99
    assert b.encode([]).shape == (0, 32)


def test_token_budget_packs_batches_without_changing_results() -> None:
    texts = ["a", "one two three four five six seven", "a b", "x " * 30, "word"] * 3
    whole = load_bundle(bundle("embed"), device="cpu", batch_size=64, max_batch_tokens=10_000)
    tight = load_bundle(bundle("embed"), device="cpu", batch_size=64, max_batch_tokens=40)
    assert whole.max_batch_tokens == 10_000
    assert load_bundle(bundle("embed"), device="cpu").max_batch_tokens == 512  # ONNX Runtime's CPU default
    torch_b = load_bundle(bundle("embed", torch_weights=True), device="cpu", backend="torch")
    assert torch_b.max_batch_tokens == 2048  # torch's, as the torch embedder
    batches = tight._encode_text(texts)
    assert sorted(i for idx, _ in batches for i in idx) == list(range(len(texts)))
    for idx, feeds in batches:  # under the budget, unless one input alone is over it
        width = feeds["input_ids"].shape[1]
        assert len(idx) * width <= 40 or len(idx) == 1
    assert len(batches) > len(whole._encode_text(texts))
    np.testing.assert_allclose(tight.encode(texts), whole.encode(texts), atol=1e-5)


def test_rerank_round_trip_matches_torch() -> None:
    from searchsmith.training.reranker import score_pairs
    from transformers import AutoModelForSequenceClassification

    b = load_bundle(bundle("rerank"), device="cpu")
    got = b.score(TEXTS[1], TEXTS)
    model = AutoModelForSequenceClassification.from_pretrained(rerank_run() / "model")
    want = score_pairs(model, tokenizer(), [(TEXTS[1], t) for t in TEXTS], max_length=48)
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_array_equal(b.score_pairs([(TEXTS[1], t) for t in TEXTS]), got)


def test_cite_round_trip_matches_citation_model() -> None:
    from searchsmith.models.citation import CitationModel

    b = load_bundle(bundle("cite"), device="cpu")
    ref = CitationModel.load(cite_run() / "model", device="cpu")
    sentences = TEXTS + ["Northwind Labs released Quarry 2.0 on 12 March 2024 in Berlin."]
    assert b.entities(sentences) == ref.entities(sentences)
    # several batches of different widths (per-token outputs padded to the widest)
    split = load_bundle(bundle("cite"), device="cpu", batch_size=2, max_batch_tokens=16)
    assert len(split._encode_text(sentences, max_length=24)) > 1
    assert split.entities(sentences) == ref.entities(sentences)
    pairs = [(TEXTS[0], TEXTS[2]), (TEXTS[1], TEXTS[0]), (sentences[3], "x " * 200)]
    np.testing.assert_allclose(b.attribute(pairs), ref.attribute(pairs), atol=1e-5)
    _, meta = b.entities(["word " * 100], return_meta=True)
    assert meta == {"truncated": [0], "max_length": 24, "tokens": 24}  # the tagger's own limit


def test_cite_bio_decoding_joins_tokens_into_spans() -> None:
    b = load_bundle(bundle("cite"), device="cpu")
    sentence = "Northwind Labs builds Quarry"
    words = b.tokenizer([sentence]).word_ids(0)
    first = {w: words.index(w) for w in set(words) if w is not None}
    logits = np.full((1, len(words), 3), -5.0, dtype=np.float32)
    for t, w in enumerate(words):  # B-ENT on a word's first token, I-ENT after: words 0-1 and 3
        label = 0 if w is None or w == 2 else (1 if t == first[w] and w in (0, 3) else 2)
        logits[0, t, label] = 5.0
    b.graphs["tagger"] = lambda feeds: logits
    assert b.entities([sentence]) == [[(0, 14, "ENT"), (22, 28, "ENT")]]


def test_images_round_trip_matches_the_torch_model() -> None:
    from PIL import Image
    from searchsmith.models.demo import demo_dir
    from searchsmith.models.image_relevance import ImageRelevanceModel

    b = load_bundle(bundle("images"), device="cpu")
    ref = ImageRelevanceModel.load(images_run() / "model", device="cpu")
    np.testing.assert_allclose(b.encode_text(TEXTS), ref.encode_text(TEXTS), atol=1e-4)
    images = [Image.open(p) for p in sorted((demo_dir() / "images").glob("*.png"))[:3]]
    np.testing.assert_allclose(b.preprocess(images), ref.preprocess(images), atol=1e-5)
    np.testing.assert_allclose(b.encode_images(images), ref.encode_images(images), atol=1e-4)
    with pytest.raises(ValidationError, match="item 1 is str, expected a PIL.Image.Image"):
        b.encode_images([images[0], "cat.png"])
    # what a server keeps of a decoded image: the model's input, read exactly as the full image
    size = int(b.manifest["preprocess"]["image_size"])
    fitted = [b.fit_image(im) for im in images]
    assert all(f.size == (size, size) and f.mode == "RGB" for f in fitted) and images[0].size != (size, size)
    np.testing.assert_array_equal(b.preprocess(fitted), b.preprocess(images))


def test_decompose_and_rewrite_match_the_torch_decomposer() -> None:
    from searchsmith.models.decomposer import Decomposer

    b = load_bundle(bundle("decompose"), device="cpu")
    ref = Decomposer.load(decompose_run())
    for q in ["Who founded Northwind Labs and where is it based?", "What is Quarry written in?"]:
        assert b.decompose(q) == ref.decompose(q)
        assert b.decompose(q, max_nodes=1) == ref.decompose(q, max_nodes=1)
    history = [{"role": "user", "content": "Tell me about Quarry"}, {"role": "assistant", "content": "ok"}]
    assert b.rewrite(history, "who wrote it?") == ref.rewrite(history, "who wrote it?")
    assert b.rewrite([], "who wrote it?") == "who wrote it?"
    # both decode under the graph grammar: every output starts with a type word
    assert b.grammar is not None and ref.constrained
    # the type head and the edit form of rewrites travel in the manifest
    assert b.type_head is not None and b.rewrite_target == "edit" == ref.rewrite_target
    assert b.rewrite_head is not None and ref.rewrite_head is not None  # rewrites by the tagger
    for q in ["who wrote it?", "Where is it based?", "Is Quarry fast?"]:
        assert b.rewrite(history, q) == ref.rewrite(history, q)
    qs = ["Which is older, Quarry or Lumen?", "Who founded Northwind Labs?"]
    assert [b.decompose(q).type for q in qs] == [g.type for g, _, _ in ref.decompose_batch(qs)]
    raw = b.generate(["decompose: who founded northwind labs"], constraint=b.grammar)[0]
    # a generation's meta counts what it generated: each row's tokens up to its eos
    got, meta = b.generate(["decompose: who founded northwind labs", "decompose: what is quarry"],
                           return_meta=True, constraint=b.grammar)
    ends = [len(b.tokenizer(g)["input_ids"]) for g in got]  # its text, re-tokenized, with eos
    assert meta["tokens"] == sum(len(b.tokenizer(f"decompose: {q}")["input_ids"]) for q in
                                 ["who founded northwind labs", "what is quarry"])
    assert 2 <= meta["tokens_out"] and abs(meta["tokens_out"] - sum(ends)) <= 2 * len(ends)
    assert raw.split()[0] in ("terminal", "chain", "split")


def test_torch_backend_has_the_same_signature_and_results() -> None:
    onnx = load_bundle(bundle("rerank", torch_weights=True), backend="onnx", device="cpu")
    pt = load_bundle(bundle("rerank", torch_weights=True), backend="torch", device="cpu")
    assert pt.backend == "torch" and onnx.backend == "onnx-cpu"
    np.testing.assert_allclose(pt.score(TEXTS[0], TEXTS), onnx.score(TEXTS[0], TEXTS), atol=1e-4)


def test_torch_backend_without_torch_weights_is_refused() -> None:
    with pytest.raises(BundleError, match="holds no torch weights.*--torch-weights"):
        load_bundle(bundle("rerank"), backend="torch")


def test_unknown_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="backend 'tensorrt' is not one of"):
        load_bundle(bundle("rerank"), backend="tensorrt")


@pytest.mark.parametrize("kwargs,field", [({"max_batch_tokens": 0}, "max_batch_tokens"),
                                          ({"max_batch_tokens": -5}, "max_batch_tokens"),
                                          ({"batch_size": 0}, "batch_size"), ({"batch_size": "8"}, "batch_size"),
                                          ({"threads": 0}, "threads"), ({"max_batch_tokens": True}, "max_batch_tokens")])
def test_bad_batch_settings_are_config_errors(kwargs, field) -> None:
    with pytest.raises(ConfigError, match=f"load_bundle: {field} must be an int >= 1"):
        load_bundle(bundle("rerank"), device="cpu", **kwargs)


# ----------------------------------------------------------------------------- bad bundles


def test_truncated_onnx_is_refused_naming_the_file(tmp_path) -> None:
    path = _copy("rerank", tmp_path)
    data = (path / "model.onnx").read_bytes()
    (path / "model.onnx").write_bytes(data[: len(data) // 2])
    # the bundle's folder is named too: a pipeline loads several bundles
    with pytest.raises(BundleError, match=rf"^bundle {re.escape(repr(str(path)))}: 'model\.onnx' is corrupt or truncated"):
        load_bundle(path)


def test_corrupt_onnx_with_matching_size_is_refused(tmp_path) -> None:
    path = _copy("decompose", tmp_path)
    data = bytearray((path / "decoder.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (path / "decoder.onnx").write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"'decoder\.onnx' is corrupt"):
        load_bundle(path)


def test_newer_manifest_is_refused(tmp_path) -> None:
    path = _copy("rerank", tmp_path)
    m = json.loads((path / "manifest.json").read_text())
    m["format_version"] = 99
    (path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="format_version 99.*reads up to 1. Upgrade searchsmith"):
        load_bundle(path)


@pytest.mark.parametrize("edit,message", [
    ({"graphs": []}, "graphs: expected a non-empty"),
    ({"graphs": {"model": "x"}}, r"graphs.model: expected \{file, inputs"),
    ({"graphs": {}}, "graphs: expected a non-empty"),
    ({"max_length": "abc"}, "max_length: expected an int >= 8"),
    ({"max_length": -1}, "max_length: expected an int >= 8"),
    ({"embedding_dim": "x"}, "embedding_dim: expected an int >= 1"),
    ({"dtype": "int3"}, "dtype: expected fp32, fp16 or int8"),
    ({"pooling": "zzz"}, "pooling: expected mean or cls"),
])
def test_a_hand_edited_manifest_is_refused_naming_the_field(tmp_path, edit, message) -> None:
    """These reached the loader or encode() as AttributeError, KeyError, ValueError or an
    OverflowError from the tokenizer (probed 2026-12-06)."""
    path = _copy("rerank", tmp_path)
    m = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**m, **edit}))
    with pytest.raises(BundleError, match=rf"manifest.json was edited or damaged \(.*{message}"):
        load_bundle(path)


def test_missing_tokenizer_is_refused(tmp_path) -> None:
    path = _copy("rerank", tmp_path)
    shutil.rmtree(path / "tokenizer")
    with pytest.raises(BundleError, match="has no tokenizer"):
        load_bundle(path)


def test_missing_manifest_is_refused(tmp_path) -> None:
    with pytest.raises(BundleError, match="has no manifest.json"):
        load_bundle(tmp_path)


def test_an_index_folder_given_as_a_bundle_says_so(tmp_path) -> None:
    """It once said the manifest "has no 'task'; re-export the bundle"."""
    import json

    (tmp_path / "manifest.json").write_text(json.dumps({"format": "searchsmith-index", "format_version": 1}))
    with pytest.raises(BundleError, match="not a model bundle.*format 'searchsmith-index'.*pass it as --index"):
        load_bundle(tmp_path)


def test_untrained_bundle_is_refused_unless_allowed(tmp_path) -> None:
    from searchsmith.models.export import ExportOptions, export_run

    export_run(rerank_run(steps=0), tmp_path / "b", ExportOptions(allow_untrained=True))
    with pytest.raises(BundleError, match="never fine-tuned"):
        load_bundle(tmp_path / "b")
    b = load_bundle(tmp_path / "b", allow_untrained=True)
    assert b.manifest["trained"] is False and b.score("q", ["p"]).shape == (1,)


# ----------------------------------------------------------------------------- bad inputs


def test_over_long_input_is_truncated_and_reported() -> None:
    b = load_bundle(bundle("embed"), device="cpu")
    long = "quarry " * 2000
    vecs, meta = b.encode(["short", long], return_meta=True)
    short = len(b.tokenizer("short")["input_ids"])  # the tokens the model ran: the long one cut to 128
    assert meta == {"truncated": [1], "max_length": 128, "tokens": short + 128}
    cut = b.tokenizer.decode(b.tokenizer(long, truncation=True, max_length=128)["input_ids"][1:-1])
    np.testing.assert_allclose(vecs[1], b.encode([cut])[0], atol=1e-5)
    r = load_bundle(bundle("rerank"), device="cpu")
    scores, meta = r.score("query", ["short passage", long], return_meta=True)
    pair = len(r.tokenizer("query", "short passage")["input_ids"])
    assert scores.shape == (2,) and meta == {"truncated": [1], "max_length": 48, "tokens": pair + 48}


def test_wrong_input_types_are_validation_errors() -> None:
    b = load_bundle(bundle("embed"), device="cpu")
    with pytest.raises(ValidationError, match="got one string"):
        b.encode("one text")
    with pytest.raises(ValidationError, match="item 1 is int, expected a string"):
        b.encode(["a", 3])
    r = load_bundle(bundle("rerank"), device="cpu")
    with pytest.raises(ValidationError, match=r"pair 0 is .*expected a \(str, str\) tuple"):
        r.score_pairs([("only one",)])
    with pytest.raises(ValidationError, match="query is NoneType"):
        r.score(None, ["p"])


def test_wrong_dtype_is_a_validation_error() -> None:
    b = load_bundle(bundle("rerank"), device="cpu")
    feeds = {k: np.ones((1, 4), dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    assert b.run_graph("model", feeds).shape == (1, 1)
    with pytest.raises(ValidationError, match="input_ids: dtype float32, expected int64"):
        b.run_graph("model", {**feeds, "input_ids": feeds["input_ids"].astype(np.float32)})


def test_wrong_shape_is_a_validation_error() -> None:
    b = load_bundle(bundle("rerank"), device="cpu")
    feeds = {k: np.ones((1, 4), dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    with pytest.raises(ValidationError, match=r"attention_mask: shape \(4,\) has 1 dims, expected 2"):
        b.run_graph("model", {**feeds, "attention_mask": np.ones(4, dtype=np.int64)})
    with pytest.raises(ValidationError, match="sequence length 60 is over max_length 48"):
        b.run_graph("model", {k: np.ones((1, 60), dtype=np.int64) for k in feeds})
    # inputs that share an axis name must agree (ONNX Runtime failed deep in the graph)
    with pytest.raises(ValidationError, match=r"attention_mask: axis 1 \(seq\) is 5 but input_ids's is 4"):
        b.run_graph("model", {**feeds, "attention_mask": np.ones((1, 5), dtype=np.int64)})
    with pytest.raises(ValidationError, match=r"token_type_ids: axis 0 \(batch\) is 2 but input_ids's is 1"):
        b.run_graph("model", {**feeds, "token_type_ids": np.ones((2, 4), dtype=np.int64)})


def test_token_ids_outside_the_vocabulary_and_masks_not_0_1_are_refused() -> None:
    """A too-large id was ONNX Runtime's Gather error; a negative one was read from the end of
    the embedding table without a word; a mask of 7 was taken."""
    b = load_bundle(bundle("rerank"), device="cpu")
    feeds = {k: np.ones((1, 4), dtype=np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
    vocab = len(b.tokenizer)
    for bad in (vocab, -1):
        ids = np.array([[1, bad, 2, 3]], dtype=np.int64)
        with pytest.raises(ValidationError, match=rf"token id {bad} is outside the vocabulary \[0, {vocab}\)"):
            b.run_graph("model", {**feeds, "input_ids": ids})
    with pytest.raises(ValidationError, match=r"attention_mask: values must be 0 or 1.*\[7\]"):
        b.run_graph("model", {**feeds, "attention_mask": np.array([[1, 1, 7, 0]], dtype=np.int64)})
    ids = np.array([[0, vocab - 1, 2, 3]], dtype=np.int64)  # both ends of the vocabulary are ids
    assert b.run_graph("model", {**feeds, "input_ids": ids, "attention_mask": np.array([[1, 1, 1, 0]])}).shape == (1, 1)


def test_bundle_text_methods_refuse_what_their_tokenizers_cannot_take() -> None:
    """A lone surrogate reached every bundle's tokenizer (a raw TypeError from it); read() read a
    string of passages a character at a time (a confident answer "K e s t ..."); tag_labels and
    tag_graphs took a string (one question a character) and no check of max_nodes
    (helper-42's audit, 2026-12-07)."""
    from PIL import Image

    lone = "a\ud800"
    emb = load_bundle(bundle("embed"), device="cpu")
    with pytest.raises(ValidationError, match=r"encode: item 0.*lone surrogate"):
        emb.encode([lone])
    rr = load_bundle(bundle("rerank"), device="cpu")
    with pytest.raises(ValidationError, match=r"score: query.*lone surrogate"):
        rr.score(lone, ["p"])
    with pytest.raises(ValidationError, match=r"score: item 0.*lone surrogate"):
        rr.score("q", [lone])
    with pytest.raises(ValidationError, match=r"pair 0\[1\].*lone surrogate"):
        rr.score_pairs([("q", lone)])
    dec = load_bundle(bundle("decompose"), device="cpu")
    for bad in (lone, "\u0000", "\u200b "):
        with pytest.raises(ValidationError, match="decompose: question"):
            dec.decompose(bad)
    for bad in (True, 0, -1, 2.5):
        with pytest.raises(ValidationError, match="max_nodes must be an int >= 1"):
            dec.decompose("who made x", max_nodes=bad)
    with pytest.raises(ValidationError, match=r"rewrite: history.*lone surrogate"):
        dec.rewrite([{"role": "user", "content": lone}], "and it?")
    # a malformed turn was skipped without a word (the pipeline refuses it); a blank query "rewritten"
    for bad in ([None], [5], [{"role": "robot", "content": "x"}], [{"role": "user"}],
                [{"role": "user", "content": None}], [("user", "Kestrel 2")]):
        with pytest.raises(ValidationError, match=r"rewrite: history\[0\] must be a string or a \{role, content\}"):
            dec.rewrite(bad, "and it?")
    with pytest.raises(ValidationError, match="rewrite: query is empty"):
        dec.rewrite(["Tell me about Kestrel"], " ")
    assert isinstance(dec.rewrite(["Tell me about Kestrel", {"content": "It is a gateway."}], "and it?"), str)
    rd = load_bundle(bundle("read"), device="cpu")
    with pytest.raises(ValidationError, match=r"read: passages is str, expected a list of passages \(wrap"):
        rd.read("When did Kestrel 2 ship?", "Kestrel 2 shipped in 2021.")
    with pytest.raises(ValidationError, match=r"read_batch: passages\[0\] is str"):
        rd.read_batch(["q"], ["Kestrel 2 shipped in March 2021."])
    with pytest.raises(ValidationError, match=r"read_batch: passages\[0\].*lone surrogate"):
        rd.read("q", [lone])
    for blank in ("", " \u200b"):
        with pytest.raises(ValidationError, match="read_batch: question 0 is empty"):
            rd.read(blank, ["Kestrel 2 shipped in 2021."])
    im = load_bundle(bundle("images"), device="cpu")
    with pytest.raises(ValidationError, match="fit_image: image is ndarray"):
        im.fit_image(np.zeros((4, 4, 3), np.uint8))
    assert im.fit_image(Image.new("L", (3, 5))).mode == "RGB"
    with pytest.raises(ValidationError, match=r"encode_text: item 0.*lone surrogate"):
        im.encode_text([lone])


def test_load_bundle_flags_must_be_booleans() -> None:
    """allow_untrained="no" is truthy: it loaded a never fine-tuned model; return_meta="no"
    returned a tuple."""
    import tempfile
    from pathlib import Path

    from searchsmith.models.export import ExportOptions, export_run

    with tempfile.TemporaryDirectory() as tmp:
        export_run(rerank_run(steps=0), Path(tmp) / "b", ExportOptions(allow_untrained=True))
        for bad in ("no", 0, None):
            with pytest.raises(ConfigError, match="allow_untrained must be True or False"):
                load_bundle(Path(tmp) / "b", allow_untrained=bad)
        with pytest.raises(BundleError, match="never fine-tuned"):
            load_bundle(Path(tmp) / "b")
        b = load_bundle(Path(tmp) / "b", allow_untrained=True)
        with pytest.raises(ValidationError, match="return_meta must be True or False"):
            b.score("q", ["p"], return_meta="no")
    for bad in (None, 5, ""):
        with pytest.raises(BundleError, match="expected the path of a bundle folder"):
            load_bundle(bad)
    with pytest.raises(ConfigError, match="task must be one of"):
        load_bundle(bundle("rerank"), task="rerankr")
