"""The last profile suites that timed one variant after another, now interleaved.

Each test here failed on the code before it: ``profile kernels`` timed all of torch, then all
of the candidates path, Triton and faiss (a load change between them went to one variant), and
``profile shards`` timed each index kind's queries, then the next kind's. The order of the calls
is what is checked (spies on the variants), never a time.
"""

from __future__ import annotations

import argparse

import faiss
import pytest
import torch
from searchsmith.serving.profiling import kernels as kernel_suite
from searchsmith.serving.profiling import shards as shard_suite
from searchsmith.serving.profiling.common import ProfileContext


def _rounds(names: list[str], warmup: int, rounds: int) -> list[str]:
    """The calls of ``timing.interleave``: each name ``warmup`` times, then rounds rotating by one."""
    out = [n for _ in range(warmup) for n in names]
    for r in range(rounds):
        s = r % len(names)
        out += names[s:] + names[:s]
    return out


# -- kernels: every workload's implementations interleaved -------------------------------------
PLAN = kernel_suite.Plan(name="test", search=((50, 2, 3, torch.float32),), route=((40, 5, 2, 3),), dedup=(30,),
                         pool=((2, 5, torch.float32),), dim=8, repeat=3, warmup=1, faiss_max_flops=float("inf"))


@pytest.fixture
def kernel_calls(monkeypatch) -> list[str]:
    """Every kernel call of the suite, by implementation; Triton's calls run the torch twin (the
    order is under test, not Triton), faiss's searches are logged as ``faiss``."""
    import searchsmith.kernels as kernels

    calls: list[str] = []

    def spy(name: str):
        real = getattr(kernels, name)

        def call(*a, backend=None, **k):
            calls.append(f"{name}:{backend}")
            return real(*a, backend="torch", **k)
        return call

    for name in ("similarity_topk", "route_sources", "dedup_mask", "pool_normalize"):
        monkeypatch.setattr(kernels, name, spy(name))
    real_candidates = kernels.similarity_topk_candidates
    monkeypatch.setattr(kernels, "similarity_topk_candidates",
                        lambda *a, **k: (calls.append("candidates"), real_candidates(*a, **k))[1])
    real_search = faiss.IndexFlatIP.search
    monkeypatch.setattr(faiss.IndexFlatIP, "search",
                        lambda self, *a, **k: (calls.append("faiss"), real_search(self, *a, **k))[1])
    return calls


def test_kernels_search_times_its_implementations_interleaved(tmp_path, kernel_calls) -> None:
    ctx = ProfileContext(out_dir=tmp_path, command="test")
    records = kernel_suite._bench_search(ctx, PLAN, torch.device("cpu"), use_triton=True)
    names = ["similarity_topk:torch", "candidates", "similarity_topk:triton", "faiss"]
    # one warm-up call each, then 3 rounds rotating (the old code: 4 torch calls, then 4 of the
    # candidates path, 4 Triton, 4 faiss, then torch, candidates and Triton again for recall@k)
    assert kernel_calls == _rounds(names, 1, 3)
    assert [r["impl"] for r in records] == ["torch", "candidates", "triton", "faiss_cpu"]  # the rows as before
    assert all(r["n"] == 3 for r in records)
    assert {r["impl"]: r["recall_at_k"] for r in records if "recall_at_k" in r} == {"candidates": 1.0, "triton": 1.0}


def test_kernels_times_faiss_once_in_a_last_round_beside_the_others(tmp_path, kernel_calls) -> None:
    """Above ``faiss_max_flops`` faiss is too slow to warm up and repeat: one call, in one more
    round with a call of each of the others (the old code timed it alone, after the others)."""
    ctx = ProfileContext(out_dir=tmp_path, command="test")
    plan = kernel_suite.Plan(**{**vars(PLAN), "faiss_max_flops": 0.0})
    records = kernel_suite._bench_search(ctx, plan, torch.device("cpu"), use_triton=True)
    names = ["similarity_topk:torch", "candidates", "similarity_topk:triton"]
    assert kernel_calls == _rounds(names, 1, 3) + [*names, "faiss"]
    assert {r["impl"]: r["n"] for r in records} == {"torch": 4, "candidates": 4, "triton": 4, "faiss_cpu": 1}


@pytest.mark.parametrize(("bench", "op"), [("_bench_route", "route_sources"), ("_bench_dedup", "dedup_mask"),
                                           ("_bench_pool", "pool_normalize")])
def test_kernels_times_torch_and_triton_interleaved(tmp_path, kernel_calls, bench, op) -> None:
    ctx = ProfileContext(out_dir=tmp_path, command="test")
    records = getattr(kernel_suite, bench)(ctx, PLAN, torch.device("cpu"), True)
    # the old code: 4 torch calls, then 4 Triton calls
    assert kernel_calls == _rounds([f"{op}:torch", f"{op}:triton"], 1, 3)
    assert [r["impl"] for r in records] == ["torch", "triton"] and records[0]["ratio_vs_torch"] == 1.0


# -- shards: every query under each index kind in turn -----------------------------------------
KINDS = ["flat", "flat_2_shards", "ivf", "ivf_mmap"]


def _kind(index) -> str:
    if isinstance(index, faiss.IndexShards):
        return "flat_2_shards"
    inner = faiss.downcast_index(index.index)
    if isinstance(inner, faiss.IndexFlat):
        return "flat"
    lists = faiss.downcast_InvertedLists(inner.invlists)
    return "ivf_mmap" if isinstance(lists, faiss.OnDiskInvertedLists) else "ivf"


def test_shards_times_the_index_kinds_interleaved(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SEARCHSMITH_PROFILE_TINY", "1")  # 2,000 and 8,000 vectors, 20 queries
    calls: list[tuple[str, int, int]] = []  # (kind, vectors, queries in the call)
    for cls in (faiss.IndexIDMap2, faiss.IndexShards):
        def search(self, x, k, *a, real=cls.search, **kw):
            calls.append((_kind(self), self.ntotal, len(x)))
            return real(self, x, k, *a, **kw)
        monkeypatch.setattr(cls, "search", search)
    ctx = ProfileContext(out_dir=tmp_path, command="test")
    shard_suite.run(ctx, argparse.Namespace())

    first = [(kind, rows) for kind, n, rows in calls if n == 2_000]
    # latency: the first 5 queries under each kind, untimed, then each of the 20 queries under every
    # kind, rotating (the old code: 25 flat queries, then 25 on the shards, then IVF, IVF mmap)
    assert [kind for kind, rows in first if rows == 1] == _rounds(KINDS, 5, 20)
    # batches of the 20 queries: the exact top-10, then queries/s (1 untimed batch each, then 5
    # rounds, rotating; the old code: one kind's 6 batches after the other's), then recall@10
    assert [kind for kind, rows in first if rows > 1] == ["flat", *_rounds(KINDS, 1, 5), *KINDS]
    rows = [r for r in ctx.records if r.get("suite") == "shards"]
    assert [r["vectors"] for r in rows] == [2_000, 8_000]
    for r in rows:  # the record as before: every kind with its figures
        assert set(r["kinds"]) == set(KINDS) and r["speedup_p50_vs_flat"]["flat"] == 1.0
        for figures in r["kinds"].values():
            assert figures["n"] == 20 and figures["queries_per_s_batch32"] > 0
            assert 0 <= figures["recall_at_10"] <= 1
        assert r["kinds"]["flat"]["recall_at_10"] == 1.0
