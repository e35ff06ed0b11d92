"""A no-answer turn of the history is no context for the follow-up (carried since 2026-12-05: the
answer page sends every turn, and "No answer found in the sources." lent its words to the rewrite)."""

from __future__ import annotations

from searchsmith.serving.pipeline.config import Preset
from searchsmith.serving.pipeline.context import ContextStage
from searchsmith.serving.pipeline.state import PipelineState
from searchsmith.serving.rewrite import HeuristicRewriter, Turn

NO_ANSWER = "No answer found in the sources."


class Recorder:
    def __init__(self):
        self.seen = []

    def rewrite(self, history, query):
        self.seen.append(list(history))
        return HeuristicRewriter().rewrite(history, query)


def _run(stage, history, query="When was it released?"):
    st = PipelineState(query=query, rewrite=query)
    st.history = history
    stage.run(st, Preset())
    return st


def test_the_no_answer_turn_is_left_out_of_the_rewrite_and_the_question_before_it_kept():
    history = [Turn("user", "Who designed the Quarry logo?"), Turn("assistant", NO_ANSWER),
               Turn("user", "What does Quarry store?"), Turn("assistant", "Quarry stores embeddings.")]
    rec = Recorder()
    st = _run(ContextStage(rec, no_answer_text=NO_ANSWER), history)
    assert rec.seen == [[history[0], history[2], history[3]]]
    assert "Quarry" in st.rewrite and "sources" not in st.rewrite.lower()
    assert st.trace.stages["context"].note == "1 no-answer turn(s) of the history left out of the rewrite"
    # its whitespace aside; without the setting, or another answer: every turn, as before
    rec = Recorder()
    _run(ContextStage(rec, no_answer_text=" No answer found\nin the sources. "), history)
    assert len(rec.seen[0]) == 3
    for stage_text in (None, "I do not know."):
        rec = Recorder()
        st = _run(ContextStage(rec, no_answer_text=stage_text), history)
        assert rec.seen == [history] and not st.trace.stages["context"].note


def test_the_pipeline_leaves_out_its_own_no_answer_text(make_pipeline):
    """Through ``Pipeline.ask`` with the heuristic rewrite: its generation's no-answer text (the
    configured one) is no history term of the follow-up."""
    q = "When was it released?"
    history = [{"role": "user", "content": "Who designed the Lumen logo?"},
               {"role": "assistant", "content": "Nothing on that here, sorry."}]
    pipe = make_pipeline(generation={"no_answer_text": "Nothing on that here, sorry."})
    ans = pipe.ask(q, history)
    assert "Lumen" in ans["rewrite"] and "sorry" not in ans["rewrite"].lower()
    assert "no-answer turn" in ans["trace"]["stages"]["context"]["note"]
    other = make_pipeline().ask(q, history)  # the default no-answer text is another: the turn counts
    assert "no-answer turn" not in (other["trace"]["stages"]["context"].get("note") or "")
