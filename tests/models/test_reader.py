"""The reader (models/reader.py): windows, decoding, passages, export with parity, the bundle."""

from __future__ import annotations

import numpy as np
import pytest
from export_fixtures import bundle, read_run, tokenizer
from searchsmith.models.errors import ValidationError
from searchsmith.models.int8_cpu import INT8_ISA_ENV
from searchsmith.models.reader import (
    ReadAnswer,
    ReaderSettings,
    Window,
    best_span,
    decode,
    encode_windows,
    join_passages,
    locate,
    passage_piece,
)
from searchsmith.models.reader_model import TorchReader
from searchsmith.models.runtime import load_bundle

SETTINGS = ReaderSettings(max_length=48, stride=12, max_question_tokens=8, max_answer_tokens=5)
LONG = " ".join(f"Sentence number {i} talks about the river {i}." for i in range(40))


def test_windows_read_every_context_token_and_report_a_cut_question() -> None:
    tok = tokenizer()
    wins = encode_windows(tok, ["Which river?", "word " * 30 + "?"], [LONG, "Short context."], SETTINGS)
    assert wins.questions_cut == [1]  # the 31-token question was cut to 8 tokens, and said so
    first = [w for w in wins.windows if w.item == 0]
    assert len(first) > 5  # a long context is read in many windows, never truncated
    assert all(len(w.input_ids) <= SETTINGS.max_length for w in wins.windows)
    covered = set()
    for w in first:
        covered.update(o for o in w.offsets if o is not None)
    want = {tuple(o) for o in tok(LONG, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]}
    assert want <= covered
    # consecutive windows overlap: the stride's tokens are read twice
    a, b = first[0], first[1]
    assert set(o for o in a.offsets if o) & set(o for o in b.offsets if o)


def test_best_span_keeps_order_and_length() -> None:
    start = np.array([0, 5, 0, 0, 1, 0], dtype=np.float32)
    end = np.array([7, 0, 0, 1, 0, 0], dtype=np.float32)
    ctx = np.array([False, True, True, True, True, True])
    s, e, score = best_span(start, end, ctx, max_tokens=3)
    assert (s, e) == (1, 3) and score == 6.0  # end 0 (7) is before every start; e - s < 3
    s, e, _ = best_span(start, end, ctx, max_tokens=1)
    assert s == e  # one-token answers only
    assert best_span(start, end, np.zeros(6, bool), 3)[0] == -1


def _window(item: int, n: int, offsets: list) -> Window:
    return Window(item, list(range(n)), None, offsets)


def test_decode_picks_the_window_most_likely_to_answer_and_its_kind() -> None:
    ctx = "The Nile is long. Yes it is."
    offsets = [None, (0, 3), (4, 8), (9, 11), (12, 16), None]
    wins = [_window(0, 6, offsets), _window(0, 6, offsets), _window(1, 6, offsets)]
    start = np.zeros((3, 6), np.float32)
    end = np.zeros((3, 6), np.float32)
    start[1, 2], end[1, 2] = 5, 5  # "Nile"
    kind = np.array([[0, 0, 0, 9], [9, 0, 0, 0], [0, 8, 0, 0]], np.float32)  # none / span / yes
    got = decode(wins, [ctx, ctx], start, end, kind, 4)
    assert got[0].text == "Nile" and got[0].kind == "span" and got[0].window == 1
    assert (got[0].start, got[0].end) == (4, 8) and got[0].score > 0.99
    assert got[1].text == "yes" and got[1].kind == "yes"
    # an item without windows has no answer
    assert decode([], ["x"], start[:0], end[:0], kind[:0], 4) == [ReadAnswer("", "none", 0.0)]
    # nor has a blank context (read as "."), however answerable its window looks
    blank = decode(wins, [" \n ", ctx], start, end, kind, 4)
    assert blank[0] == ReadAnswer("", "none", 0.0) and blank[1].kind == "yes"


def test_decode_by_span_score_compares_spans_across_windows() -> None:
    ctx = "The Nile is long. Yes it is."
    offsets = [None, (0, 3), (4, 8), (9, 11), (12, 16), None]
    wins = [_window(0, 6, offsets), _window(0, 6, offsets)]
    start = np.zeros((2, 6), np.float32)
    end = np.zeros((2, 6), np.float32)
    start[0, 4], end[0, 4] = 2, 2  # "long": 4, in the window the kind head finds most answerable
    start[1, 2], end[1, 2] = 5, 5  # "Nile": 10, in the other window
    kind = np.array([[9, 0, 0, 0], [3, 0, 0, 2]], np.float32)
    by_kind = decode(wins, [ctx], start, end, kind, 4)[0]
    by_span = decode(wins, [ctx], start, end, kind, 4, select="span")[0]
    assert (by_kind.text, by_kind.window) == ("long", 0)
    assert (by_span.text, by_span.window) == ("Nile", 1)
    assert by_span.score == pytest.approx(by_kind.score)  # the question's best 1 - P(none) either way
    # a yes / no answer still comes from the most answerable window's kind head
    kind[0] = [0, 9, 0, 0]
    assert decode(wins, [ctx], start, end, kind, 4, select="span")[0].kind == "yes"
    with pytest.raises(ValueError, match="select"):
        decode(wins, [ctx], start, end, kind, 4, select="best")


def test_settings_round_trip_and_old_bundles_select_by_answerability() -> None:
    s = ReaderSettings(max_length=64, stride=8, max_question_tokens=16, select="span")
    assert ReaderSettings.from_json(s.to_json()) == s
    assert ReaderSettings.from_json({"max_length": 64, "stride": 8, "max_question_tokens": 16}).select == "answerable"
    with pytest.raises(ValueError, match="select must be one of"):
        ReaderSettings(select="window")


def test_passages_join_and_answers_locate_in_their_passage() -> None:
    ctx, ranges = join_passages([("Nile", "The Nile is 6,650 km long."), ("", "Cairo lies on it.")])
    assert ctx[ranges[1][0]:ranges[1][1]] == "Cairo lies on it."
    assert passage_piece("Nile", "The Nile is long") == "Nile. The Nile is long"
    at = ctx.index("6,650")
    got = locate(ReadAnswer("6,650 km", "span", 0.9, at, at + 8, 0), ranges, None)
    assert got.passage == 0 and passage_piece("Nile", "The Nile is 6,650 km long.")[got.start:got.end] == "6,650 km"
    at = ctx.index("Cairo")
    assert locate(ReadAnswer("Cairo", "span", 0.9, at, at + 5, 0), ranges, None).passage == 1


def test_settings_refuse_impossible_windows() -> None:
    with pytest.raises(ValueError, match="stride"):
        ReaderSettings(max_length=64, stride=40)
    with pytest.raises(ValueError, match="max_question_tokens"):
        ReaderSettings(max_length=64, stride=8, max_question_tokens=40)


def test_export_parity_and_the_bundle_answers_as_torch_does() -> None:
    b = load_bundle(bundle("read"), device="cpu", task="read")
    assert b.manifest["parity"]["passed"] and b.manifest["reader"]["max_length"] == 64
    torch_reader = TorchReader.load(read_run())
    qs = ["Where is the Nile?", "Who wrote Quarry?"]
    ps = [[("Nile", "The Nile flows through Egypt and Sudan."), "Cairo lies on the Nile."],
          [{"title": "Quarry", "text": LONG}]]
    got, meta = b.read_batch(qs, ps, return_meta=True)
    want = torch_reader.read_batch(qs, ps)
    assert [(a.text, a.kind, a.passage) for a in got] == [(a.text, a.kind, a.passage) for a in want]
    assert np.allclose([a.score for a in got], [a.score for a in want], atol=1e-4)
    assert meta["windows"] > 2 and meta["truncated"] == []
    # the tokens read: every window's, what the trace counts (more than the texts': windows overlap)
    assert meta["tokens"] > sum(len(b.tokenizer(q, " ".join(str(p) for p in pp))["input_ids"]) for q, pp in zip(qs, ps))
    assert b.read("Where is the Nile?", ps[0]).text == got[0].text
    for nothing in ([], ["  "], [("", "")]):  # no passage, or only blank ones: no answer, score 0
        assert b.read("Where is the Nile?", nothing)[:3] == ("", "none", 0.0)
    with pytest.raises(ValidationError, match=r"read_batch passages\[0\]\[0\]"):
        b.read_batch(["q"], [[3]])
    with pytest.raises(ValidationError, match="one list of passages per question"):
        b.read_batch(["q", "r"], [["p"]])


@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_int8_reader_logits_stay_close_to_fp32(isa, monkeypatch) -> None:
    """The int8 graph on either int8 path. A random model's answers hang on near ties (0.75 of
    its answers agreed), so this checks the logits; the trained reader's answer agreement is
    checked by its export's parity (``int8_answer_agreement``, limit 0.95)."""
    if isa == "avx2":  # the AVX2 path (7-bit weights) on a VNNI machine too
        monkeypatch.setenv(INT8_ISA_ENV, "avx2")
    from export_fixtures import ROOT
    from searchsmith.models.export import ExportOptions, export_run
    from searchsmith.models.reader import pad_windows

    out = ROOT / f"read-int8-{isa}"
    manifest = export_run(read_run(), out, ExportOptions(dtype="int8", allow_drift=True))
    assert "int8_answer_agreement" in manifest["parity"]["checks"]
    if isa == "avx2":
        assert manifest["int8"]["weight_range"] == "s7"
    b8 = load_bundle(out, device="cpu", task="read")
    b32 = load_bundle(bundle("read"), device="cpu", task="read")
    wins = encode_windows(b32.tokenizer, ["Where is the Nile?"], [LONG], b32.settings)
    feeds = pad_windows(wins.windows, 0)
    for a, b in zip(b32.logits(feeds), b8.logits(feeds), strict=True):
        assert np.abs(a - b).max() <= 0.03 * np.abs(a).max()
