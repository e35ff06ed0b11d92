"""Citation recipe: weak labels and metrics on known values, data and eval-file checks, the
tiny twin end to end (train, layout, reload through CitationModel, interrupt and resume)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
from searchsmith.models import metrics
from searchsmith.models.citation import CitationModel, decode_spans
from searchsmith.models.errors import BundleError, ConfigError, ValidationError
from searchsmith.models.text import entity_spans
from searchsmith.training import citation as cit
from searchsmith.training import cite_data as cd
from searchsmith.training import evaluate_cite as ev
from searchsmith.training.config import load_recipe_config
from searchsmith.training.data import write_jsonl_atomic

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "recipes" / "citation" / "tiny" / "bert-tiny_full.yaml"


# ------------------------------------------------------------------ labels and metrics


def test_weak_labels_are_the_shared_entity_rule_in_the_tagger_types() -> None:
    # The rule itself is tested in tests/models/test_text.py; here: the held-out file carries
    # its spans, and every type it gives is one the tagger has BIO labels for.
    s = "On 12 March 2024, Northwind Labs sold 60 items for $10 via `quarry.yaml`."
    spans = entity_spans(s)
    assert {t for _, _, t in spans} == set(cit.ENTITY_TYPES)
    assert all(f"B-{t}" in cit.LABELS and f"I-{t}" in cit.LABELS for t in cit.ENTITY_TYPES)
    item = cd.eval_items([cd.Pair("k", "synthetic", s, "a passage", 1)])[0]
    assert item["entities"] == [list(x) for x in spans]


def test_token_labels_and_decode_round_trip() -> None:
    offsets = [(0, 0), (0, 4), (5, 9), (10, 12), (13, 17), (0, 0)]  # [CLS] Lake Tana in 1990 [SEP]
    special = [True, False, False, False, False, True]
    spans = [(0, 9, "ENT"), (13, 17, "DATE")]
    ids = cd.token_labels(offsets, spans, special)
    assert [cit.LABELS[i] if i >= 0 else None for i in ids] == [
        None, "B-ENT", "I-ENT", "O", "B-DATE", None]
    assert decode_spans(offsets[1:-1], ids[1:-1], cit.LABELS) == spans


def test_roc_auc_known_values() -> None:
    assert metrics.roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert metrics.roc_auc([0, 1], [0.5, 0.5]) == pytest.approx(0.5)  # ties count half
    assert metrics.roc_auc([1, 0], [0.9, 0.1]) == pytest.approx(1.0)
    assert metrics.roc_auc([1, 1], [0.2, 0.3]) is None


def test_prf_known_values() -> None:
    m = metrics.attribution_metrics([1, 1, 0, 0], [0.9, 0.2, 0.6, 0.1], threshold=0.5)
    assert m["precision"] == pytest.approx(0.5) and m["recall"] == pytest.approx(0.5)
    assert m["f1"] == pytest.approx(0.5) and m["roc_auc"] == pytest.approx(0.75)
    e = metrics.span_prf([[(0, 3, "ENT"), (5, 7, "NUM")]], [[(0, 3, "ENT"), (5, 7, "DATE")]])
    assert e == {"precision": 0.5, "recall": 0.5, "f1": 0.5}


# ------------------------------------------------------------------ data


def test_synthetic_pairs_split_by_claim() -> None:
    data = cd.CitationData(sources=["synthetic"], synthetic_claims=60)
    pairs = cd.load_pairs(data)
    assert {p.label for p in pairs} == {0, 1}
    assert all(p.sentence in p.passage for p in pairs if p.label == 1)
    train_p, eval_p = cd.split_pairs(pairs, data)
    assert not {p.key for p in train_p} & {p.key for p in eval_p}
    assert len(train_p) + len(eval_p) == len(pairs)


def test_real_sources_from_shared_data(shared_data: Path) -> None:
    data = cd.CitationData(
        sources=["wice", "scifact"], wice=str(shared_data / "wice/wice_claim_dev.jsonl"),
        scifact_claims=str(shared_data / "scifact/claims_dev.jsonl"),
        scifact_corpus=str(shared_data / "scifact/corpus_subset.jsonl"))
    pairs = cd.load_pairs(data)
    for src in ("wice", "scifact"):
        labels = [p.label for p in pairs if p.source == src]
        # One positive set and negatives_per_positive=2 same-size negatives per claim.
        assert labels.count(0) >= labels.count(1) > 10


def test_unknown_recipe_key_suggests_closest() -> None:
    with pytest.raises(ConfigError, match="did you mean 'support_threshold'"):
        load_recipe_config(TINY, ["suport_threshold=0.4"])


def test_missing_data_file_names_field_and_fix(tmp_path: Path) -> None:
    data = cd.CitationData(sources=["wice"], wice=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match=r"data\.wice: data file .*nope\.jsonl.*not found.*synthetic"):
        cd.load_pairs(data)


def test_empty_dataset_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_text("\n")
    with pytest.raises(ValidationError, match="no records"):
        cd.load_pairs(cd.CitationData(sources=["wice"], wice=str(p)))


def test_unknown_source_is_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown dataset 'citation/wicee'.*citation/wice"):
        cd.load_pairs(cd.CitationData(sources=["wicee"]))


def test_stage_hashes_ignore_the_other_stage_optimizer() -> None:
    from searchsmith.training.config import config_hash

    base = load_recipe_config(TINY)
    other_scorer = load_recipe_config(TINY, ["optim.lr=5.0e-4"])
    other_tagger = load_recipe_config(TINY, ["tagger.optim.max_steps=9"])

    def h(cfg: object, stage: str) -> str:
        return config_hash(cit._stage_config(cfg, stage))

    # A finished tagger survives a change of the scorer's optimizer, and the other way round.
    assert h(base, "tagger") == h(other_scorer, "tagger") != h(other_tagger, "tagger")
    assert h(base, "scorer") == h(other_tagger, "scorer") != h(other_scorer, "scorer")
    assert h(base, "scorer") != h(load_recipe_config(TINY, ["max_length=48"]), "scorer")


# ------------------------------------------------------------------ tiny twin end to end


class _Interrupt(Exception):
    pass


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """Run the tiny recipe, interrupted in the scorer stage at step 2, then rerun it."""
    run = tmp_path_factory.mktemp("cite_tiny")
    cfg = load_recipe_config(TINY, [f"output_dir={run}"])
    real_train = cit.train

    def interrupted(*args, **kwargs):
        if kwargs.get("run_info", {}).get("stage") == "scorer":
            def stop(step: int, model: object) -> None:
                if step == 2:
                    raise _Interrupt
            kwargs["on_step"] = stop
        return real_train(*args, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(cit, "train", interrupted)
    with pytest.raises(_Interrupt):
        cit.citation(cfg, run)
    mp.undo()
    partial = {"tagger_done": (run / "stages/tagger/model/config.json").is_file(),
               "final_model": (run / "model").exists(),
               "scorer_ckpt": sorted(p.name for p in (run / "stages/scorer/checkpoints").iterdir())}
    final = cit.citation(cfg, run)
    return run, final, partial


def test_interrupted_run_resumes_each_stage(tiny_run: tuple[Path, dict, dict]) -> None:
    run, _, partial = tiny_run
    assert partial == {"tagger_done": True, "final_model": False, "scorer_ckpt": ["step-2"]}
    stages = json.loads((run / "metrics.json").read_text())["stages"]
    assert stages["tagger"]["reused"] is True
    assert stages["scorer"]["resumed_from_step"] == 2 and stages["scorer"]["steps"] == 6


def test_tiny_layout_and_metrics_keys(tiny_run: tuple[Path, dict, dict]) -> None:
    run, final, _ = tiny_run
    for f in ("model/tagger/config.json", "model/scorer/config.json", "model/citation.json",
              "model/tagger/tokenizer.json", "run.json", "training_curve.png", "split.json",
              "heldout.cite.jsonl"):
        assert (run / f).is_file(), f
    meta = json.loads((run / "model/citation.json").read_text())
    assert meta["labels"] == list(cit.LABELS) and meta["trained_steps"] == {"tagger": 4, "scorer": 6}
    assert meta["max_length"] == 64 and meta["support_threshold"] == 0.5
    metrics = json.loads((run / "metrics.json").read_text())
    for k in ("attribution/precision", "attribution/recall", "attribution/f1",
              "attribution/roc_auc", "entity/f1"):
        assert 0.0 <= metrics["final"][k] <= 1.0, k
        assert final[k] == metrics["final"][k]
    assert {"always_support", "untrained_scorer", "untrained_tagger", "data"} <= set(metrics["baselines"])
    assert metrics["baselines"]["always_support"]["attribution/recall"] == 1.0
    assert json.loads((run / "run.json").read_text())["task"] == "cite"


def test_reload_through_citation_model(tiny_run: tuple[Path, dict, dict]) -> None:
    run, _, _ = tiny_run
    m = CitationModel.load(run)  # the run folder works as well as run/model
    sents = ["Northwind Labs shipped Quarry 2.0 on 12 March 2024.", "nothing here"]
    spans = m.entities(sents)
    assert len(spans) == 2
    for s, sp in zip(sents, spans, strict=True):
        assert all(0 <= a < b <= len(s) and t in cit.ENTITY_TYPES for a, b, t in sp)
    probs, meta = m.attribute([("a b", "a b c"), ("x", "y " * 200)], return_meta=True)
    assert probs.shape == (2,) and probs.dtype == np.float32
    assert ((probs > 0) & (probs < 1)).all() and meta == {"truncated": [1], "max_length": 64,
                                                       "tokens": len(m.tokenizer("a b", "a b c")["input_ids"]) + 64}
    with pytest.raises(ValidationError, match=r"attribute\[0\]"):
        m.attribute([("only one",)])


def _cite_file(path: Path, entities: list | None = None, cited: list | None = None) -> Path:
    rec = {"sentence": "Quarry is written in Rust.",
           "documents": [{"id": "a", "text": "Quarry is a vector database written in Rust."},
                         {"id": "b", "text": "Mix the flour with two eggs."}],
           "cited": ["a"] if cited is None else cited}
    if entities is not None:
        rec["entities"] = entities
    rec2 = {"sentence": "Mix the flour with 2 eggs.", "documents": rec["documents"], "cited": ["b"]}
    write_jsonl_atomic(path, [rec, rec2])
    return path


def _args(**kw: object) -> argparse.Namespace:
    base = {"data": None, "checkpoint": None, "bundle": None, "limit": 0, "per_item": None}
    return argparse.Namespace(**{**base, **kw})


def test_eval_cite_matches_the_model(tiny_run: tuple[Path, dict, dict], tmp_path: Path) -> None:
    run, _, _ = tiny_run
    data = _cite_file(tmp_path / "c.jsonl", entities=[[0, 6, "ENT"]])
    per_item = tmp_path / "items.jsonl"
    out = ev.eval_cite(_args(data=str(data), checkpoint=str(run), per_item=str(per_item)))
    m = CitationModel.load(run / "model")
    docs = ["Quarry is a vector database written in Rust.", "Mix the flour with two eggs."]
    pairs = [("Quarry is written in Rust.", d) for d in docs] + \
            [("Mix the flour with 2 eggs.", d) for d in docs]
    probs = m.attribute(pairs)
    assert out["pairs"] == 4 and out["positive_pairs"] == 2 and out["items"] == 2
    assert out["attribution/roc_auc"] == pytest.approx(metrics.roc_auc([1, 0, 0, 1], probs.tolist()))
    assert out["entity_items"] == 1 and "entity/f1" in out
    rows = [json.loads(x) for x in per_item.read_text().splitlines()]
    assert rows[0]["scores"]["a"] == pytest.approx(float(probs[0])) and rows[1]["cited"] == ["b"]
    assert "entities" in rows[0] and "entities" not in rows[1]
    assert ev.eval_cite(_args(data=str(data), checkpoint=str(run), limit=1))["pairs"] == 2


def test_eval_cite_on_the_heldout_file(tiny_run: tuple[Path, dict, dict]) -> None:
    run, final, _ = tiny_run
    out = ev.eval_cite(_args(data=str(run / "heldout.cite.jsonl"), checkpoint=str(run)))
    # The same held-out pairs and weak entities as the recipe's own final evaluation.
    assert out["attribution/roc_auc"] == pytest.approx(final["attribution/roc_auc"], abs=1e-6)
    assert out["entity/f1"] == pytest.approx(final["entity/f1"], abs=1e-6)


def test_eval_entity_span_out_of_range(tiny_run: tuple[Path, dict, dict], tmp_path: Path) -> None:
    data = _cite_file(tmp_path / "c.jsonl", entities=[[3, 99, "ENT"]])
    with pytest.raises(ValidationError, match=r"c\.jsonl:1: entity span \[3, 99, 'ENT'\] is out of "
                                              r"range; expected 0 <= start < end <= 26"):
        ev.eval_cite(_args(data=str(data), checkpoint=str(tiny_run[0])))


def test_eval_entity_label_out_of_range(tiny_run: tuple[Path, dict, dict], tmp_path: Path) -> None:
    data = _cite_file(tmp_path / "c.jsonl", entities=[[0, 6, "PERSON"]])
    with pytest.raises(ValidationError, match="entity label 'PERSON' is out of range.*DATE"):
        ev.eval_cite(_args(data=str(data), checkpoint=str(tiny_run[0])))


def test_eval_cited_id_not_in_documents(tiny_run: tuple[Path, dict, dict], tmp_path: Path) -> None:
    data = _cite_file(tmp_path / "c.jsonl", cited=["zz"])
    with pytest.raises(ValidationError, match=r"'cited' names \['zz'\]"):
        ev.eval_cite(_args(data=str(data), checkpoint=str(tiny_run[0])))


def test_eval_missing_and_empty_files(tiny_run: tuple[Path, dict, dict], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--data: .*does not exist.*--write-eval"):
        ev.eval_cite(_args(data=str(tmp_path / "none.jsonl"), checkpoint=str(tiny_run[0])))
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(ValidationError, match="no records"):
        ev.eval_cite(_args(data=str(tmp_path / "e.jsonl"), checkpoint=str(tiny_run[0])))


def test_eval_needs_exactly_one_model(tmp_path: Path) -> None:
    data = _cite_file(tmp_path / "c.jsonl")
    with pytest.raises(ConfigError, match="give --checkpoint RUN_DIR .* or --bundle DIR"):
        ev.eval_cite(_args(data=str(data)))
    with pytest.raises(ConfigError, match="not both"):
        ev.eval_cite(_args(data=str(data), bundle=str(tmp_path), checkpoint=str(tmp_path)))


def test_untrained_model_folder_is_refused(tmp_path: Path) -> None:
    cfg = load_recipe_config(TINY, [f"output_dir={tmp_path}"])
    tagger, scorer, tok = cit.build_models(cfg)
    root = tmp_path / "model"
    for name, m in (("tagger", tagger), ("scorer", scorer)):
        m.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    meta = {"labels": list(cit.LABELS), "max_length": 64, "support_threshold": 0.5,
            "trained_steps": {"tagger": 0, "scorer": 0}}
    (root / "citation.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match="tagger and scorer model.* never trained"):
        CitationModel.load(root)
    (root / "citation.json").unlink()
    with pytest.raises(BundleError, match="no citation.json"):
        CitationModel.load(root)


def test_write_eval_file_holds_only_heldout_claims(tmp_path: Path) -> None:
    out = cd.write_eval_file(tmp_path / "h.jsonl", TINY)
    items = [json.loads(x) for x in out.read_text().splitlines()]
    cfg = load_recipe_config(TINY)
    train_p, eval_p = cd.split_pairs(cd.load_pairs(cfg.data), cfg.data)
    assert {i["id"] for i in items} == {p.key for p in eval_p}
    assert all(set(i["cited"]) <= {d["id"] for d in i["documents"]} for i in items)


def test_cosine_attribution_baseline_is_the_pipelines_fallback(tmp_path: Path) -> None:
    """Issue 23: the citation gate's baseline scores a pair as serving/pipeline/citation.py does
    without a bundle (best cosine of the sentence with one passage sentence, cut at 0.6)."""
    pairs = [cd.Pair("a", "s", "Quarry listens on port 7420.",
                      "Quarry is a database. Quarry listens on port 7420. It is written in Rust.", 1),
             cd.Pair("a", "s", "Quarry listens on port 7420.", "Knead the bread dough for ten minutes.", 0)]
    scores = cit.cosine_attribution_scores("default", pairs, tmp_path)
    assert scores[0] == pytest.approx(1.0, abs=1e-5) and scores[1] < 0.6
    assert cit.cosine_attribution_baseline([1, 0], scores, 0.6) == {
        "cosine_attribution_precision": 1.0, "cosine_attribution_recall": 1.0, "cosine_attribution_f1": 1.0,
        "cosine_attribution_balanced_accuracy": 1.0, "cosine_attribution_roc_auc": 1.0}
    assert cit.cosine_attribution_baseline([1, 0], [0.5, 0.7], 0.6)["cosine_attribution_f1"] == 0.0


def test_freeze_layers_fixes_both_models_lower_layers_and_a_bad_value_is_refused() -> None:
    from searchsmith.training.citation import build_models

    cfg = load_recipe_config(TINY, ["model.freeze_embeddings=true", "model.freeze_layers=1"])
    tagger, scorer, _ = build_models(cfg)
    for m in (tagger, scorer):
        frozen = {n for n, p in m.named_parameters() if not p.requires_grad}
        assert frozen and all(".embeddings." in f".{n}" or ".layer.0." in n for n in frozen)
        assert any(".layer.1." in n and p.requires_grad for n, p in m.named_parameters())
    with pytest.raises(ConfigError, match=r"model.freeze_layers: expected an int in 0\.\.2"):
        build_models(load_recipe_config(TINY, ["model.freeze_layers=5"]))
