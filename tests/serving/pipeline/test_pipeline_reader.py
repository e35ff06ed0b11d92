"""The reader as the generator (serving/pipeline/reading.py): short answers with cited support,
"does not know" below its score, planning filled with short answers, the gate, the fallback."""

from __future__ import annotations

from searchsmith.models.reader import PassageAnswer, passage_piece

PASSING_READ = {"f1": 0.6, "baselines/sentence_f1": 0.1,
                **{f"f1_vs_sentence_{k}": v for k, v in
                   {"diff": 0.5, "lo": 0.4, "hi": 0.6, "p": 0.001, "n": 60, "direction": 1}.items()}}

CHAIN = {"type": "chain", "nodes": [{"id": "1", "text": "Which class implements Lumen eviction?"},
                                    {"id": "2", "text": "Where are the tests of #1?", "depends_on": ["1"]}]}


class FakeReader:
    """A ``read`` bundle answering with the first of ``spans`` found in the passages read."""

    task = "read"

    def __init__(self, spans, score=0.9, min_score=0.5, figures=None):
        self.spans, self.score, self.min_score = list(spans), score, min_score
        self.manifest = {"task": "read", "heldout_metrics": dict(figures or PASSING_READ)}
        self.questions = []

    def read_batch(self, questions, passages, return_meta=False):
        out = []
        for q, ps in zip(questions, passages):
            self.questions.append(q)
            got = PassageAnswer("", "none", 0.05)
            for i, (title, text) in enumerate(ps):
                piece = passage_piece(title, text)
                hit = next((s for s in self.spans if s in piece), None)
                if hit is not None:
                    at = piece.index(hit)
                    got = PassageAnswer(hit, "span", self.score, i, at, at + len(hit), (i,))
                    break
            out.append(got)
        meta = {"truncated": [], "max_length": 64, "max_question_tokens": 24, "windows": len(out)}
        return (out, meta) if return_meta else out


def test_the_answer_is_the_short_answer_then_its_cited_support(make_pipeline):
    ans = make_pipeline(bundles={"reader": FakeReader(["9.46 trillion kilometres"])}).ask(
        "How far does light travel in one year?")
    assert ans["short_answer"] == "9.46 trillion kilometres"
    assert ans["support"] == ["A light-year is the distance light travels in one year, about 9.46 trillion "
                              "kilometres."]
    assert ans["answer_text"].startswith("9.46 trillion kilometres. A light-year is")
    assert ans["references"] and "[1]" in ans["answer"]  # the support sentence is cited
    assert ans["references"][0]["doc_id"] == "astronomy-1"
    assert ans["trace"]["gates"]["read"]["used"] is True
    assert "reader" in ans["trace"]["stages"]["generation"]["note"]


def test_below_its_score_the_reader_says_it_does_not_know(make_pipeline):
    ans = make_pipeline(bundles={"reader": FakeReader(["9.46 trillion kilometres"], score=0.3)}).ask(
        "How far does light travel in one year?")
    assert ans["answer_text"] == "No answer found in the sources." and ans["short_answer"] == ""
    assert ans["references"] == []
    assert any("generation.reader.min_score 0.5" in n for n in ans["trace"]["notes"])
    # the threshold is a setting: lowered, the same reading answers
    ans = make_pipeline(bundles={"reader": FakeReader(["9.46 trillion kilometres"], score=0.3)},
                        generation={"reader": {"min_score": 0.2}}).ask("How far does light travel in one year?")
    assert ans["short_answer"] == "9.46 trillion kilometres"


def test_extractive_backend_and_a_losing_reader_leave_the_reader_out(make_pipeline):
    # the short answer is then the extractive one (the number of its sentence), not the reader's
    q = "How far does light travel in one year?"
    reader = FakeReader(["light-year"])
    ans = make_pipeline(bundles={"reader": reader}, generation={"backend": "extractive"}).ask(q)
    assert ans["short_answer"] == "9.46 trillion" and "9.46 trillion" in ans["answer_text"] and reader.questions == []
    losing = FakeReader(["light-year"], figures={"f1": 0.1, "baselines/sentence_f1": 0.1})
    ans = make_pipeline(bundles={"reader": losing}).ask(q)
    assert ans["short_answer"] == "9.46 trillion" and losing.questions == []
    assert ans["trace"]["gates"]["read"]["used"] is False
    assert any(n.startswith("read:") for n in ans["trace"]["notes"])


def test_planning_fills_children_with_the_parents_short_answer(make_pipeline, fakes):
    reader = FakeReader(["Evictor", "tests/test_evict.py"])
    ans = make_pipeline(bundles={"decomposer": fakes["decomposer"](CHAIN), "reader": reader},
                        decomposition={"chain_strategy": "auto"},
                        generation={"step_answers": "generator", "reader": {"question": "steps"}}).ask(
        "Where are the tests of the class that implements Lumen eviction?")
    assert ans["trace"]["strategy"] == "planning"  # chain_strategy auto plans with short answers
    first, second = ans["nodes"]
    assert first["answer"] == "Evictor"  # the short answer, not a sentence
    assert second["text"] == "Where are the tests of Evictor?"
    assert ans["short_answer"] == "tests/test_evict.py"
    # the support leads with the sentence behind the first step's answer: both hops are cited
    assert "Evictor class" in ans["support"][0] and "tests/test_evict.py" in ans["support"][-1]
    assert len({r["doc_id"] for r in ans["references"]}) == 2


def test_a_failing_llm_falls_back_to_the_readers_answer(make_pipeline):
    class Broken:
        def complete(self, messages, on_token=None):
            raise RuntimeError("server down")

    ans = make_pipeline(bundles={"reader": FakeReader(["9.46 trillion kilometres"])}, generator=Broken(),
                        generation={"backend": "openai"}).ask("How far does light travel in one year?")
    assert ans["short_answer"] == "9.46 trillion kilometres"
    assert any("server down" in n and "the reader's answer" in n for n in ans["trace"]["notes"])


def test_support_sentences_come_from_the_text_and_ask_prints_the_short_answer_first(make_pipeline):
    from searchsmith.serving.pipeline.cli import format_answer
    from searchsmith.serving.pipeline.reading import body_sentence, span_sentence

    title, text = "Lumen source: lumen/evict.py", "Lumen's eviction is implemented in lumen/evict.py. It frees keys."
    piece = passage_piece(title, text)
    at = piece.index("lumen/evict.py")  # the first occurrence is in the title
    assert span_sentence(title, text, piece.rindex("frees"), piece.rindex("frees") + 5) == "It frees keys."
    assert body_sentence(text, "LUMEN/EVICT.PY") == "Lumen's eviction is implemented in lumen/evict.py."
    assert at < len(title) and body_sentence(text, "nowhere") == ""
    ans = make_pipeline(bundles={"reader": FakeReader(["9.46 trillion kilometres"])}).ask(
        "How far does light travel in one year?")
    out = format_answer(ans).splitlines()
    assert out[0] == "Answer: 9.46 trillion kilometres"
    assert out[2].startswith("Support: A light-year is the distance") and out[2].endswith("[1].")


class ScoredReader:
    """A ``read`` bundle whose answer over its passages is the best-scored of ``spans``
    (span -> score) found in them: its "most answerable window"."""

    task = "read"

    def __init__(self, spans, cut=()):
        self.spans, self.cut, self.calls = dict(spans), set(cut), []

    def read_batch(self, questions, passages, return_meta=False):
        out = []
        self.calls.append([len(ps) for ps in passages])
        for ps in passages:
            found = [(self.spans[s], i, passage_piece(t, x).index(s), s) for i, (t, x) in enumerate(ps)
                     for s in self.spans if s in passage_piece(t, x)]
            if not found:
                out.append(PassageAnswer("", "none", 0.05))
                continue
            score, i, at, s = max(found)
            out.append(PassageAnswer(s, "span", score, i, at, at + len(s), (i,)))
        meta = {"truncated": [j for j, q in enumerate(questions) if q in self.cut], "max_question_tokens": 24}
        return (out, meta) if return_meta else out


def _reading(read, reader):
    from searchsmith.serving.pipeline.config import GenerationConfig, ReaderGenConfig
    from searchsmith.serving.pipeline.reading import ReaderAnswers

    return ReaderAnswers(reader, GenerationConfig(reader=ReaderGenConfig(min_score=0.5, read=read)))


def test_in_order_the_first_ranked_passage_that_answers_wins():
    from searchsmith.serving.pipeline.state import Passage, PipelineState

    ps = [Passage("b#0", "b", "s", "Nothing to see here.", 0.9),
          Passage("a#0", "a", "s", "The code of the cache is in cache.py.", 0.8),
          Passage("c#0", "c", "s", "The licence is Apache-2.0.", 0.7)]
    spans = {"cache.py": 0.6, "Apache-2.0": 0.95}
    reader = ScoredReader(spans)
    (a, read), = _reading("in_order", reader).read(["Where is the code?"], [ps], PipelineState(query="q"))
    assert reader.calls == [[1, 1, 1]]  # one call, each passage read alone
    assert (a.text, a.passage, a.window_passages) == ("cache.py", 1, (1,)) and read[1].doc_id == "a"
    # together: the most answerable window over the joined passages, wherever it is
    (b, _), = _reading("together", ScoredReader(spans)).read(["Where is the code?"], [ps], PipelineState(query="q"))
    assert (b.text, b.passage) == ("Apache-2.0", 2)
    # nothing reaches min_score: the best reading (below it: the node does not answer)
    low = ScoredReader({"cache.py": 0.2, "Apache-2.0": 0.3})
    (c, _), = _reading("in_order", low).read(["q"], [ps], PipelineState(query="q"))
    assert (c.text, c.score, c.passage) == ("Apache-2.0", 0.3, 2)


def test_in_order_readings_keep_each_question_apart_and_count_cut_questions():
    from searchsmith.serving.pipeline.state import Passage, PipelineState

    one = [Passage("a#0", "a", "s", "Oslo is the capital.", 0.9)]
    two = [Passage("b#0", "b", "s", "Nothing.", 0.9), Passage("c#0", "c", "s", "It opened in 1999.", 0.5)]
    reader = ScoredReader({"Oslo": 0.9, "1999": 0.8}, cut={"a long question"})
    st = PipelineState(query="q")
    got = _reading("in_order", reader).read(["a long question", "When?", "empty"], [one, two, []], st)
    assert [a.text if a else None for a, _ in got] == ["Oslo", "1999", None]
    assert got[1][0].passage == 1 and got[2][1] == []
    assert any("1 question(s) over 24 tokens" in n for n in st.trace.notes)


def test_bad_reader_read_setting_is_refused():
    import pytest
    from searchsmith.serving.pipeline.config import ReaderGenConfig

    with pytest.raises(ValueError, match="generation.reader.read must be 'in_order' or 'together'"):
        ReaderGenConfig(read="best")
    with pytest.raises(ValueError, match="generation.reader.question must be 'user' or 'steps'"):
        ReaderGenConfig(question="final")


def test_a_decomposed_question_is_read_whole_over_every_steps_passages(make_pipeline, fakes):
    q = "Where are the tests of the class that implements Lumen eviction?"
    reader = FakeReader(["tests/test_evict.py"])
    ans = make_pipeline(bundles={"decomposer": fakes["decomposer"](CHAIN), "reader": reader}).ask(q)
    first, second = ans["nodes"]
    # step 1 is answered by the names its sentence adds (step_answers: names), not by the reader
    # (its #1 in step 2 is its own words: decomposition.parallel_fill), and the reader reads the
    # user's question, not step 2's text
    assert "Evictor" in first["answer"] and second["text"] == "Where are the tests of class implements Lumen eviction?"
    assert reader.questions and set(reader.questions) == {q}
    assert ans["short_answer"] == "tests/test_evict.py"
    # with the auto chain strategy, names are not the generator's short answers: not planned
    auto = make_pipeline(bundles={"decomposer": fakes["decomposer"](CHAIN), "reader": FakeReader(["x"])},
                         decomposition={"chain_strategy": "auto"}).ask(q)
    assert auto["trace"]["strategy"] == "parallel"
    assert any("generation.step_answers" in n for n in auto["trace"]["notes"])
    # question: steps reads the final step, its #1 filled with the first step's answer
    steps = FakeReader(["Evictor", "tests/test_evict.py"])
    ans = make_pipeline(bundles={"decomposer": fakes["decomposer"](CHAIN), "reader": steps},
                        decomposition={"parallel_fill": "answer"},
                        generation={"step_answers": "generator", "reader": {"question": "steps"}}).ask(q)
    assert ans["nodes"][0]["answer"] == "Evictor"  # step_answers: generator, the reader's span
    assert steps.questions[-1] == ans["nodes"][1]["text"] == "Where are the tests of Evictor?"
