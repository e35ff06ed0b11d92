"""The shipped demo knowledge base: formats, counts, consistency and a reproducible generator."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image
from searchsmith.models.demo import corpus_path, demo_dir, qa_path, routing_path
from searchsmith.models.demo import generate as gen
from searchsmith.models.demo.records import load_source
from searchsmith.models.errors import ValidationError


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return _jsonl(corpus_path())


@pytest.fixture(scope="module")
def routing() -> list[dict]:
    return _jsonl(routing_path())


@pytest.fixture(scope="module")
def qa() -> list[dict]:
    return _jsonl(qa_path())


def test_paths_point_into_the_package() -> None:
    assert demo_dir() == Path(gen.__file__).parent
    assert [p.name for p in (corpus_path(), routing_path(), qa_path())] == [
        "corpus.jsonl", "routing.jsonl", "qa.jsonl"]


def test_corpus_format_and_counts(corpus: list[dict]) -> None:
    allowed = {"id", "source", "text", "title", "date", "url", "images"}
    for doc in corpus:
        assert set(doc) <= allowed, doc["id"]
        assert isinstance(doc["text"], str) and doc["text"].strip(), doc["id"]
        assert doc["url"].startswith("https://") and " " not in doc["url"], doc["id"]
    per_source = Counter(d["source"] for d in corpus)
    assert len(corpus) >= 300
    assert len(per_source) >= 5
    assert min(per_source.values()) >= 20, per_source
    ids = [d["id"] for d in corpus]
    assert len(ids) == len(set(ids))


def test_lengths_vary(corpus: list[dict]) -> None:
    words = [len(d["text"].split()) for d in corpus]
    assert min(words) <= 20  # one-sentence documents exist
    assert sum(300 <= w <= 600 for w in words) >= 5  # and long ones that need several chunks


def test_news_dates_are_iso_and_written_in_several_styles(corpus: list[dict]) -> None:
    news = [d for d in corpus if d["source"] == "news"]
    assert len(news) >= 50
    for doc in news:
        assert dt.date.fromisoformat(doc["date"]).isoformat() == doc["date"], doc["id"]
    styles = Counter()
    for doc in news:
        for style in ("dmy", "iso", "mdy", "my"):
            if gen.fmt_date(doc["date"], style) in doc["text"]:
                styles[style] += 1
    assert all(styles[s] > 0 for s in ("dmy", "iso", "mdy")), styles
    assert sum("March 2024" in d["text"] for d in news) >= 1


def test_near_duplicate_reports_exist(corpus: list[dict]) -> None:
    by_id = {d["id"]: d for d in corpus}
    pairs = [(i, i[:-2] + "-b") for i in by_id if i.endswith("-a") and i[:-2] + "-b" in by_id]
    assert len(pairs) >= 4
    for a, b in pairs:
        assert by_id[a]["date"] == by_id[b]["date"]
        assert by_id[a]["text"] != by_id[b]["text"]


def test_images_exist_open_and_are_small(corpus: list[dict]) -> None:
    images = [(d["id"], im) for d in corpus for im in d.get("images", [])]
    assert len(images) >= 8
    for doc_id, im in images:
        path = corpus_path().parent / im["path"]
        assert path.is_file(), (doc_id, im["path"])
        assert path.stat().st_size < 8 * 1024, im["path"]
        with Image.open(path) as img:
            img.load()
            assert img.mode == "P" and max(img.size) <= 200, (im["path"], img.mode, img.size)
        assert im["caption"], doc_id


def test_routing_format_counts_and_gold(routing: list[dict], corpus: list[dict]) -> None:
    sources = {d["source"] for d in corpus}
    assert len(routing) >= 60
    follow_ups = [r for r in routing if r["history"]]
    assert 3 * len(follow_ups) >= len(routing)
    for r in routing:
        assert set(r) == {"history", "query", "sources"}
        assert r["query"].strip() and r["sources"]
        assert set(r["sources"]) <= sources, r
        assert all(t["role"] in ("user", "assistant") and t["content"] for t in r["history"])
    single = {s for r in routing if not r["history"] for s in r["sources"]}
    assert single == sources  # every source has single-turn queries


def test_kimas_follow_up_is_present(routing: list[dict]) -> None:
    hits = [r for r in routing if r["query"] == "Where can I find the code for it?"]
    assert hits and all(r["sources"] == ["code_notes"] for r in hits)
    # the product is only in the history, and the code notes name it
    assert all("code" not in r["history"][0]["content"].lower() for r in hits)


def test_code_notes_name_their_product(corpus: list[dict]) -> None:
    names = [p.name for p in load_source().products]
    for doc in corpus:
        if doc["source"] == "code_notes":
            assert any(n in doc["text"] for n in names), doc["id"]


def test_qa_answers_occur_in_supporting_docs(qa: list[dict], corpus: list[dict]) -> None:
    by_id = {d["id"]: d for d in corpus}
    assert len(qa) >= 30
    assert sum(1 for q in qa if q.get("history")) >= 3
    assert sum(1 for q in qa if len(q["supporting"]) >= 2) >= 3  # multi-hop
    assert len({q["id"] for q in qa}) == len(qa)
    for q in qa:
        assert set(q) <= {"id", "query", "history", "answer", "supporting"}
        union = " ".join(by_id[s]["text"] for s in q["supporting"]).lower()
        assert q["answer"].lower() in union, q["id"]


def test_fmt_date_styles() -> None:
    assert gen.fmt_date("2024-03-12", "dmy") == "12 March 2024"
    assert gen.fmt_date("2024-03-12", "iso") == "2024-03-12"
    assert gen.fmt_date("2024-03-12", "mdy") == "March 12, 2024"
    assert gen.fmt_date("2024-03-12", "my") == "March 2024"
    with pytest.raises(ValueError, match="unknown style 'ymd'"):
        gen.fmt_date("2024-03-12", "ymd")


def test_generator_reproduces_the_committed_files(tmp_path: Path) -> None:
    counts = gen.write_all(tmp_path)
    assert counts["documents"] == len(_jsonl(corpus_path()))
    for name in (gen.CORPUS_FILE, gen.ROUTING_FILE, gen.QA_FILE, gen.STAGES_FILE, gen.NO_ANSWER_FILE, gen.README_FILE):
        assert (tmp_path / name).read_bytes() == (demo_dir() / name).read_bytes(), name
    committed = sorted(p.name for p in (demo_dir() / gen.IMAGES_DIR).glob("*.png"))
    assert sorted(p.name for p in (tmp_path / gen.IMAGES_DIR).glob("*.png")) == committed
    for name in committed:
        # Pixels and palette, not PNG bytes: zlib builds differ between Pillow wheels.
        with Image.open(tmp_path / gen.IMAGES_DIR / name) as new, \
                Image.open(demo_dir() / gen.IMAGES_DIR / name) as old:
            assert new.size == old.size and new.mode == old.mode, name
            assert new.tobytes() == old.tobytes(), name
            assert new.getpalette() == old.getpalette(), name


def test_generator_removes_stale_images(tmp_path: Path) -> None:
    (tmp_path / gen.IMAGES_DIR).mkdir()
    stale = tmp_path / gen.IMAGES_DIR / "old.png"
    stale.write_bytes(b"not a png")
    gen.write_all(tmp_path)
    assert not stale.exists()


def test_generator_rejects_a_file_as_out_dir(tmp_path: Path) -> None:
    target = tmp_path / "corpus.jsonl"
    target.write_text("x")
    with pytest.raises(ValidationError, match="is a file; pass a directory"):
        gen.write_all(target)


def test_check_reports_a_wrong_answer() -> None:
    demo = gen.build()
    demo.qa[0].answer = "definitely not in the text"
    with pytest.raises(ValidationError, match=r"qa-001: answer 'definitely not in the text'"):
        gen.check(demo)


def test_check_reports_a_follow_up_that_names_its_referent() -> None:
    demo = gen.build()
    item = next(i for i in demo.routing if i.history)
    item.query = f"Where is the code for {item.entity}?"
    with pytest.raises(ValidationError, match="follow-up query names its referent"):
        gen.check(demo)


def test_no_answer_questions_ask_what_the_corpus_does_not_hold(corpus: list[dict]) -> None:
    """models/demo/no_answer.jsonl: "answer": null, and the check refuses a question whose
    answer a document about its subject states (as a template that starts stating it would)."""
    items = _jsonl(demo_dir() / gen.NO_ANSWER_FILE)
    assert len(items) >= 10 and all(it["answer"] is None and it["supporting"] == [] for it in items)
    assert len({it["id"] for it in items}) == len(items)
    demo = gen.build()
    founded = next(na for na in demo.no_answer if na.query.startswith("Who founded"))
    doc = next(d for d in demo.docs if founded.subject in d.text)
    doc.text += f" {founded.subject} was founded by Ada Quint in 2011."
    with pytest.raises(ValidationError, match=rf"{founded.id} .*holds 'found': the corpus answers it now"):
        gen.check(demo)


@pytest.mark.parametrize("name", ["answer_audit.jsonl", "answer_heldout.jsonl"])
def test_the_answer_audit_sets_are_pipeline_data_over_the_demo_corpus(corpus: list[dict], name: str) -> None:
    """serving/profiling's two audit sets (RESULTS.md, "Saying no answer ..." and "Off-subject
    answers ..."): `eval pipeline --data` reads them, ids are unique, and every gold answer is
    in the text of the document it names."""
    from searchsmith.serving.evaluate import PIPELINE_FIELDS, read_checked

    path = Path(__file__).resolve().parents[2] / "serving" / "profiling" / name
    items = read_checked(path, PIPELINE_FIELDS, ("query", "answer", "supporting"), "pipeline data")
    assert len(items) >= 80 and len({it["id"] for it in items}) == len(items)
    texts = {d["id"]: d["text"].lower() for d in corpus}
    answerable = [it for it in items if it["answer"] is not None]
    assert 0 < len(answerable) < len(items)  # both kinds
    for it in answerable:
        assert it["supporting"] and all(s in texts for s in it["supporting"]), it["id"]
        if name == "answer_heldout.jsonl":  # its gold answers are copied from the text
            assert any(str(it["answer"]).lower() in texts[s] for s in it["supporting"]), it["id"]
