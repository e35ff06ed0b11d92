"""The packed (padding-free) encoder equals the padded model: tokens, sentence vectors, the Embedder.

Tiny random BERT / RoBERTa models give per-token comparisons against the Hugging Face model's
own padded forward (every attention backend that runs on a CPU, and the varlen call through a
stand-in for torch's CUDA-only ``varlen_attn``); the default all-MiniLM-L6-v2 gives the
end-to-end check through ``Embedder`` (fp32, CPU).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from searchsmith.models.errors import ValidationError
from searchsmith.models.packed import (
    embed_packed,
    pack_sequences,
    packed_encode,
    packing_support,
    position_offset,
    resolve_attention,
    token_batches,
    unpack_tokens,
)

CPU_BACKENDS = ["segments", "padded"]
# Lengths 1 and the model's limit (64) included; odd lengths; unsorted.
LENGTHS = [7, 1, 64, 13, 2, 31, 5]


def _tiny(kind: str) -> torch.nn.Module:
    from transformers import AutoModel, BertConfig, RobertaConfig

    torch.manual_seed(0)
    common = dict(vocab_size=101, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                  intermediate_size=80, type_vocab_size=2)
    if kind == "bert":
        config = BertConfig(max_position_embeddings=64, **common)
    else:  # RoBERTa numbers positions from pad_token_id + 1: 64 tokens need 66 positions
        config = RobertaConfig(max_position_embeddings=66, pad_token_id=1, **common)
    model = AutoModel.from_config(config).eval()
    # init std 0.02 makes every layer nearly the identity; larger weights make the test bite
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module", params=["bert", "roberta"])
def tiny(request) -> torch.nn.Module:
    return _tiny(request.param)


def _sequences(lengths: list[int], vocab: int = 101, low: int = 3) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(low, vocab, (n,), generator=g).tolist() for n in lengths]


def _padded_hidden(model: torch.nn.Module, seqs: list[list[int]], types: list[list[int]] | None = None
                   ) -> list[torch.Tensor]:
    """Hugging Face's own padded forward, cut back to each sequence's real tokens."""
    width = max(map(len, seqs))
    pad = model.config.pad_token_id
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    tt = torch.zeros(len(seqs), width, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(s)
        mask[b, :len(s)] = 1
        if types is not None:
            tt[b, :len(s)] = torch.tensor(types[b])
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state  # (B, T, H)
    return [out[b, :len(s)] for b, s in enumerate(seqs)]


# --------------------------------------------------------------------------- packing


def test_pack_round_trips_and_positions_restart() -> None:
    seqs = [[101, 7, 8, 102], [101, 102], [101, 5, 6, 9, 10, 102], [4]]
    batch = pack_sequences(seqs)
    assert batch.input_ids.tolist() == [t for s in seqs for t in s]
    assert batch.position_ids.tolist() == [0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4, 5, 0]
    assert batch.token_type_ids.tolist() == [0] * 13
    assert batch.cu_seqlens.dtype == torch.int32 and batch.cu_seqlens.tolist() == [0, 4, 6, 12, 13]
    assert batch.max_seqlen == 6 and batch.lengths == (4, 2, 6, 1) and batch.total_tokens == 13
    assert [x.tolist() for x in unpack_tokens(batch.input_ids, batch.cu_seqlens)] == seqs
    shifted = pack_sequences(seqs, position_offset=2, token_type_ids=[[0, 0, 1, 1], [0, 1], [0] * 6, [1]])
    assert shifted.position_ids.tolist()[:6] == [2, 3, 4, 5, 2, 3]
    assert [x.tolist() for x in unpack_tokens(shifted.token_type_ids, shifted.cu_seqlens)] == [
        [0, 0, 1, 1], [0, 1], [0] * 6, [1]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sequences": []}, "sequences is empty"),
        ({"sequences": [[1, 2], [], [3]]}, r"sequences\[1\] is empty \(0 tokens\)"),
        ({"sequences": [[1] * 5, [1] * 9], "max_length": 8, "limit_name": "max_position_embeddings"},
         r"sequences\[1\] has 9 tokens, over the limit max_position_embeddings = 8"),
        ({"sequences": [[1, 2], [3]], "token_type_ids": [[0, 0], [0, 1]]}, "one list per sequence"),
        ({"sequences": "a text"}, "list of token-id lists"),
    ],
    ids=["no-sequences", "empty-sequence", "too-long", "token-types", "string"],
)
def test_pack_rejects_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pack_sequences(**kwargs)


def test_embed_packed_names_the_model_limit() -> None:
    model = _tiny("bert")
    with pytest.raises(ValidationError, match="sequences\\[1\\] has 65 tokens, over the limit max_position_embeddings = 64"):
        embed_packed(model, [[5, 6], [5] * 65])
    roberta = _tiny("roberta")  # 66 positions, starting at pad_token_id + 1 = 2: 64 tokens fit
    assert embed_packed(roberta, [[5] * 64]).shape == (1, 48)
    with pytest.raises(ValidationError, match="max_position_embeddings = 64"):
        embed_packed(roberta, [[5] * 65])
    with pytest.raises(ValidationError, match="sequences is empty"):
        embed_packed(model, [])


def test_token_batches_fill_a_real_token_budget() -> None:
    lengths = [5, 100, 7, 50, 3, 3, 99, 8]
    batches = token_batches(lengths, max_batch_tokens=120, max_batch_size=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert batches[0] == [1]  # 100 + 99 > 120
    for b in batches:
        assert len(b) <= 3 and (sum(lengths[i] for i in b) <= 120 or len(b) == 1)
    assert token_batches([500, 2], 100, 8) == [[0], [1]]  # an item over the budget goes alone


# --------------------------------------------------------------------------- encoder


@pytest.mark.parametrize("attention", CPU_BACKENDS)
def test_packed_tokens_equal_the_padded_model(tiny: torch.nn.Module, attention: str) -> None:
    seqs = _sequences(LENGTHS)
    types = [[int(i >= n // 2) for i in range(n)] for n in LENGTHS]  # sentence pairs: segment ids matter
    batch = pack_sequences(seqs, token_type_ids=types, position_offset=position_offset(tiny))
    with torch.inference_mode():
        got = unpack_tokens(packed_encode(tiny, batch, attention=attention), batch.cu_seqlens)
    want = _padded_hidden(tiny, seqs, types)
    for b in range(len(seqs)):
        torch.testing.assert_close(got[b], want[b], atol=2e-5, rtol=1e-4)


def test_sentence_vectors_equal_padded_mean_and_cls(tiny: torch.nn.Module) -> None:
    seqs = _sequences(LENGTHS)
    want = _padded_hidden(tiny, seqs)
    mean = torch.stack([F.normalize(h.mean(0), dim=0) for h in want])
    cls = torch.stack([F.normalize(h[0], dim=0) for h in want])
    with torch.inference_mode():
        got_mean = embed_packed(tiny, seqs)
        got_cls = embed_packed(tiny, seqs, pooling="cls")
    assert got_mean.shape == (len(seqs), 48) and got_mean.dtype == torch.float32
    assert (got_mean * mean).sum(1).min() >= 0.99999
    assert (got_cls * cls).sum(1).min() >= 0.99999
    # and the sequences are really kept apart: a batch of one gives the same vector
    with torch.inference_mode():
        alone = embed_packed(tiny, [seqs[3]])
    torch.testing.assert_close(alone[0], got_mean[3], atol=1e-5, rtol=1e-5)


def test_varlen_call_matches_torch_api(monkeypatch, tiny: torch.nn.Module) -> None:
    """The CUDA path's call of ``varlen_attn``, run on the CPU through a stand-in with its signature."""
    import torch.nn.attention.varlen as varlen_module

    calls = []

    def fake_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                         window_size=(-1, -1)):
        assert query.dim() == 3 and query.shape == key.shape == value.shape  # (T, heads, d)
        assert cu_seq_q.dtype == torch.int32 and cu_seq_q is cu_seq_k
        assert isinstance(max_q, int) and max_q == max_k == 64
        assert scale is None and window_size == (-1, -1)  # BERT: 1/sqrt(d), not causal
        calls.append(query.shape)
        out = torch.empty_like(query)
        bounds = cu_seq_q.tolist()
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            q, k, v = (x[a:b].transpose(0, 1) for x in (query, key, value))
            out[a:b] = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1).matmul(v).transpose(0, 1)
        return out

    monkeypatch.setattr(varlen_module, "varlen_attn", fake_varlen_attn)
    seqs = _sequences(LENGTHS)
    batch = pack_sequences(seqs, position_offset=position_offset(tiny))
    with torch.inference_mode():
        got = unpack_tokens(packed_encode(tiny, batch, attention="varlen"), batch.cu_seqlens)
    assert calls == [(sum(LENGTHS), 3, 16)] * 2  # once per layer
    for g, w in zip(got, _padded_hidden(tiny, seqs), strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-4)


def test_attention_backend_choice() -> None:
    q = torch.zeros(3, 2, 8)
    assert resolve_attention("auto", q) == "segments"
    assert resolve_attention("padded", q) == "padded"
    with pytest.raises(ValidationError, match="unknown backend 'flash'"):
        resolve_attention("flash", q)


def test_packing_support_names_what_is_missing() -> None:
    from transformers import AutoModel, BertConfig, DistilBertConfig

    assert packing_support(_tiny("bert")) is None
    distil = AutoModel.from_config(DistilBertConfig(vocab_size=50, dim=16, n_layers=1, n_heads=2, hidden_dim=32))
    assert "model_type 'distilbert'" in packing_support(distil)
    decoder = AutoModel.from_config(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=32, is_decoder=True))
    assert "decoder" in packing_support(decoder)
    with pytest.raises(ValidationError, match="embedder.packed: false"):
        embed_packed(distil, [[1, 2]])


# --------------------------------------------------------------------------- the Embedder, default MiniLM

TEXTS = [
    "short",
    "Jupiter has moons.",
    "a somewhat longer sentence about caches and eviction policies in the Lumen server",
    "Quarry " * 400,  # truncated at max_seq_length
    "Knead the bread dough for ten minutes until it is smooth and elastic.",
    "",
    "x",
    "The Andromeda galaxy will collide with the Milky Way in about four billion years, "
    "long after the Sun has become a red giant and swallowed the inner planets.",
    "def chunk(text: str, size: int) -> list[str]",
    "Saturn's rings",
    "Telescopes on mountains avoid much of the atmosphere's turbulence. " * 3,
    "ok?",
]


@pytest.fixture(scope="module")
def embedders():
    from searchsmith.serving.embedder import Embedder, EmbedderConfig

    padded = Embedder(EmbedderConfig(device="cpu", dtype="fp32"))
    packed = Embedder(EmbedderConfig(device="cpu", dtype="fp32", packed=True, max_batch_tokens=256))
    return padded, packed


def test_embedder_packed_equals_padded_on_minilm(embedders) -> None:
    padded, packed = embedders
    assert packed.packed and not padded.packed
    lengths = [len(x) for x in packed.tokenize(TEXTS)]
    assert max(lengths) == packed.max_seq_length == 256 and min(lengths) == 2  # one truncated, one empty
    a = padded.encode(TEXTS)
    b = packed.encode(TEXTS)
    assert b.shape == (12, 384) and b.dtype == np.float32
    cos = np.sum(a * b, axis=1)
    assert cos.min() >= 0.99999, cos
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    stats = packed.last_stats
    assert stats["padded_tokens"] == stats["tokens"] == sum(lengths)  # no padding fed
    assert stats["batches"] >= 2  # the 256-token budget split the window: batches stay apart


def test_embedder_packed_falls_back_for_other_models(tmp_path, caplog) -> None:
    from searchsmith.models.hub import resolve_model
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from transformers import AutoModel, AutoTokenizer, DistilBertConfig

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    AutoModel.from_config(DistilBertConfig(vocab_size=len(tok), dim=16, n_layers=1, n_heads=2,
                                           hidden_dim=32)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO, logger="searchsmith.serving.embedder"):
        emb = Embedder(EmbedderConfig(model=str(tmp_path), device="cpu", packed=True))
    assert not emb.packed
    assert "embedder.packed: model_type 'distilbert'" in caplog.text and "using the padded path" in caplog.text
    assert emb.encode(["two texts", "b"]).shape == (2, 16)


def test_profile_packed_vs_padded_rows_on_cpu(embedders) -> None:
    """The CUDA-only row of ``profile embed``, run here on the CPU (fp32) with the same code."""
    from searchsmith.serving.profiling.embed import packed_vs_padded

    padded, _ = embedders
    reference = padded.encode(TEXTS)
    rows = packed_vs_padded(padded, TEXTS, 1, reference=reference)
    tokens = sum(len(x) for x in padded.tokenize(TEXTS))
    by_impl = {r["impl"]: r for r in rows if "impl" in r}
    assert set(by_impl) == {"searchsmith-padded", "searchsmith-packed"}
    for r in by_impl.values():
        assert r["tokens"] == tokens and r["texts"] == 12
        assert r["tokens_per_s"] == pytest.approx(r["texts_per_s"] * tokens / 12)
    assert by_impl["searchsmith-packed"]["padding_fraction"] == 0.0
    assert by_impl["searchsmith-padded"]["padding_fraction"] > 0.0  # 12 mixed lengths in one window
    (cmp,) = [r for r in rows if r.get("comparison") == "packed_vs_padded"]
    assert cmp["packed"] is True and cmp["attention"] == "segments"
    assert cmp["ratio_packed_vs_padded"] == pytest.approx(cmp["packed_texts_per_s"] / cmp["padded_texts_per_s"])
    assert cmp["min_cosine"] >= 0.99999 and cmp["packed_min_cosine_vs_st"] >= 0.99999
    assert cmp["padded_min_cosine_vs_st"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (varlen attention is FlashAttention)")
def test_cuda_varlen_matches_padded_fp16_and_sentence_transformers() -> None:
    from searchsmith.models.packed import varlen_available
    from searchsmith.serving.embedder import Embedder, EmbedderConfig
    from sentence_transformers import SentenceTransformer

    padded = Embedder(EmbedderConfig(device="cuda", dtype="fp16"))
    packed = Embedder(EmbedderConfig(device="cuda", dtype="fp16", packed=True))
    assert packed.packed and varlen_available()
    assert resolve_attention("auto", torch.zeros(1, 1, 8, device="cuda", dtype=torch.float16)) == "varlen"
    reference = SentenceTransformer(str(padded.model_path), device="cuda").encode(TEXTS, normalize_embeddings=True)
    a, b = padded.encode(TEXTS), packed.encode(TEXTS)
    assert np.sum(a * b, axis=1).min() >= 0.999
    assert np.sum(b * reference, axis=1).min() >= 0.999
