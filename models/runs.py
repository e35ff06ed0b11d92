"""Training runs as export sources: what a run folder holds, per task (``models/tasks.py``).

:func:`run_source` reads ``run.json``, the task's model settings file and the run's held-out
figures (``metrics.json``) into a :class:`ModelSource`; :func:`embedder_source` does the same
for a pretrained sentence-transformers folder; :func:`find_runs` lists the runs of a folder.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchsmith.models.errors import BundleError, ConfigError
from searchsmith.models.io import read_json_object
from searchsmith.models.tasks import run_names, run_task


@dataclass
class ModelSource:
    """What a task export needs from its model folder."""

    task: str
    model_dir: Path
    tokenizer_dir: Path
    base_model: str
    trained: bool
    trained_steps: int
    max_length: int
    extra: dict[str, Any] = field(default_factory=dict)


def _model_max(model_dir: Path) -> int:
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if "max_position_embeddings" not in cfg and "encoder" in cfg:
        cfg = cfg["encoder"]
    return int(cfg.get("max_position_embeddings", 512))


# ----------------------------------------------------------------------------- runs


def embedder_source(model: str = "default") -> ModelSource:
    """The base sentence-transformers embedder (pretrained: no fine-tuning needed)."""
    from searchsmith.models.hub import model_display_name, read_st_layout, resolve_model

    path = Path(resolve_model(model, field="--model"))
    if not path.is_dir():
        raise ConfigError(f"export embedder --model: {model!r} is not a local folder; download it first")
    pooling, st_max = read_st_layout(path)
    max_len = min(st_max or _model_max(path), _model_max(path))
    return ModelSource("embed", path, path, model_display_name(model), True, 0, max_len, {"pooling": pooling})


def run_source(run_dir: Path, allow_untrained: bool = False) -> ModelSource:
    """Read ``run.json`` (and the task's model metadata) of a training run.

    Raises:
        BundleError: not a run, unknown task, untrained model.
    """
    run_dir = Path(run_dir)
    info_path = run_dir / "run.json"
    if not info_path.is_file():
        raise BundleError(f"export: {str(run_dir)!r} has no run.json; pass a training run folder "
                          "(searchsmith train RECIPE.yaml writes one) or a folder of runs")
    info = read_json_object(info_path, "export", error=BundleError)
    spec = run_task(info.get("task"))
    if spec is None:
        raise BundleError(f"export: run.json task {info.get('task')!r} in {str(run_dir)!r} is not one of "
                          f"{run_names()}")
    task = spec.name
    model_dir = run_dir / "model"
    if not model_dir.is_dir():
        raise BundleError(f"export: {str(run_dir)!r} has no model/ folder; the run did not finish "
                          "(rerun searchsmith train to resume it)")
    raw_steps = info.get("steps", 0) or 0
    # a multi-model run (citation: {"tagger": n, "scorer": m}) counts as trained when all are
    steps = (min(int(v or 0) for v in raw_steps.values()) if isinstance(raw_steps, dict) and raw_steps
             else int(raw_steps) if not isinstance(raw_steps, dict) else 0)
    base = str(info.get("base_model", "unknown"))
    extra: dict[str, Any] = {"run": {"recipe": info.get("recipe"), "path": str(run_dir.resolve())}}
    tok_dir = model_dir / spec.tokenizer_subdir
    meta: dict[str, Any] = {}
    if spec.run_meta:  # the model's settings (models/tasks.py: the run-folder layout)
        meta_path = model_dir / spec.run_meta
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        elif task != "decompose":  # a decomposer saved before it wrote one has the defaults
            raise BundleError(f"export {task}: {str(model_dir)!r} has no {spec.run_meta} (the model's labels, "
                              "lengths and thresholds); rerun the recipe")
    if task == "rerank":
        max_len = int(info.get("max_length") or min(_model_max(model_dir), 512))
        final = heldout_metrics(run_dir)
        if isinstance(final.get("cross_weight"), (int, float)):  # calibrated: models/rerank_mix.py
            # measured against cosine + lexical_weight x BM25 share (a run before it recorded
            # the weight was measured against the cosine alone: 0)
            extra["retrieval_mix"] = {"cross_weight": float(final["cross_weight"]),
                                      "embedder": str(info.get("mix_embedder") or "default"),
                                      "lexical_weight": float(final.get("mix_lexical_weight") or 0.0),
                                      "lexical_min_cosine": float(final.get("mix_lexical_min_cosine") or 0.0)}
    elif task == "decompose":
        steps = int(meta.get("trained_steps", steps))
        max_len = int(meta.get("max_source_tokens", 128))
        extra["generation"] = _generation(model_dir, meta)
    elif task == "cite":
        max_len = int(meta.get("max_length") or 128)
        extra["tagger_max_length"] = int(meta.get("tagger_max_length") or max_len)
        per_model = meta.get("trained_steps")
        if isinstance(per_model, dict):  # {"tagger": n, "scorer": m}: both must be trained
            steps = min(int(per_model.get("tagger", 0) or 0), int(per_model.get("scorer", 0) or 0))
        extra["labels"] = list(meta["labels"])
        extra["thresholds"] = {k: v for k, v in meta.items() if "threshold" in k}
        extra["thresholds"].setdefault("support_threshold", 0.5)
        if meta.get("cosine_residual") is not None:
            extra["cosine_residual"] = meta["cosine_residual"]
    elif task == "read":
        from searchsmith.models.reader import ReaderSettings

        settings = ReaderSettings.from_json(meta)
        max_len = settings.max_length
        steps = int(meta.get("trained_steps", steps) or 0)
        extra["reader"] = settings.to_json()
        extra["thresholds"] = {"no_answer_threshold": float(meta.get("no_answer_threshold", 0.5))}
    else:
        max_len = int(meta.get("max_length") or 64)
        steps = int(meta.get("trained_steps", steps) or 0)
        extra["thresholds"] = {k: v for k, v in meta.items() if "threshold" in k or k == "temperature"}
    extra["heldout_metrics"] = heldout_metrics(run_dir)
    if steps <= 0 and not allow_untrained:
        raise BundleError(f"export: the run {str(run_dir)!r} records {steps} training steps; an untrained "
                          "model would serve noise. Train it (searchsmith train RECIPE.yaml) first")
    return ModelSource(task, model_dir, tok_dir, base, steps > 0, steps, max_len, extra)


def heldout_metrics(run_dir: Path) -> dict[str, float]:
    """The run's final held-out figures and its untrained baselines (``metrics.json``), flat:
    ``{"ndcg@10": .., "baselines/rewrite_f1_copy_query": .., "baselines/bi_encoder/ndcg@10": ..}``
    (a nested baseline group joins its name and key with "/"; the ``data`` group of counts is
    left out); {} when absent. The serving gates read these names to decide whether a model beat
    its baseline (e.g. the pipeline's rewrite gate)."""
    path = Path(run_dir) / "metrics.json"
    fix = "train the run again (the same command resumes it), or restore the file"
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:  # the bundle would have gone out without its figures
        raise BundleError(f"{path}: not valid JSON ({type(exc).__name__}); the gates read the held-out figures "
                          f"in it: {fix}") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path}: expected a JSON object of metrics, got {type(data).__name__}; {fix}")
    out = flat_numbers(data.get("final") or {}, "")
    baselines = {k: v for k, v in (data.get("baselines") or {}).items() if k != "data"}
    out.update(flat_numbers(baselines, "baselines/"))
    return out


def flat_numbers(values: Any, prefix: str = "") -> dict[str, float]:
    """The finite numbers of a nested dict, keys joined with "/" after ``prefix``."""
    out: dict[str, float] = {}
    if not isinstance(values, dict):
        return out
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(flat_numbers(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[f"{prefix}{key}"] = float(value)
    return out


def _generation(model_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    if meta.get("arch") == "tagger":  # no decoder; export adds the depth head from the weights
        return {"arch": "tagger", "tag_depth": int(meta.get("tag_depth", 4)), "tag_drop": bool(meta.get("tag_drop", False)),
                "switch_penalty": float(meta.get("switch_penalty", 0.0)),
                "choice_template": bool(meta.get("choice_template", False)),
                "add_phrases": [str(x) for x in meta.get("add_phrases") or []],
                "max_nodes": int(meta.get("max_nodes", 8)), "max_history_turns": int(meta.get("max_history_turns", 3)),
                "reply_words": int(meta.get("reply_words", 0)), "constrained": False, "rewrite_target": str(meta.get("rewrite_target", "full")),
                "type_head": None, "rewrite_head": meta.get("rewrite_head")}
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    gen_path = model_dir / "generation_config.json"
    gen = json.loads(gen_path.read_text(encoding="utf-8")) if gen_path.is_file() else {}

    def pick(key: str) -> int:
        value = gen.get(key, cfg.get(key))
        if value is None:
            raise BundleError(f"export decompose: {key} is not set in {model_dir}/config.json; re-save the model")
        return int(value[0] if isinstance(value, list) else value)

    return {"decoder_start_token_id": pick("decoder_start_token_id"), "eos_token_id": pick("eos_token_id"),
            "pad_token_id": pick("pad_token_id"), "max_target_tokens": int(meta.get("max_target_tokens", 64)),
            "max_nodes": int(meta.get("max_nodes", 8)), "max_history_turns": int(meta.get("max_history_turns", 3)),
            "reply_words": int(meta.get("reply_words", 0)), "search": "greedy",
            # constrained decoding (models/constrained.py): the runtime's loop applies the same
            # token-level grammar / copy constraint as Decomposer.generate
            "constrained": bool(meta.get("constrained", False)),
            "decompose_vocab": [int(t) for t in meta.get("decompose_vocab", [])],
            "rewrite_vocab": [int(t) for t in meta.get("rewrite_vocab", [])],
            # rewrites as edits (models/rewrite_edit.py) and the graph-type head, as in
            # decomposer.json; older runs have neither (full rewrites, no head)
            "rewrite_target": str(meta.get("rewrite_target", "full")),
            "type_head": meta.get("type_head"), "rewrite_head": meta.get("rewrite_head")}


def find_runs(folder: Path) -> list[Path]:
    """The run folders (holding ``run.json``) directly inside ``folder``, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "run.json").is_file())


__all__ = ["ModelSource", "embedder_source", "find_runs", "flat_numbers", "heldout_metrics", "run_source"]
