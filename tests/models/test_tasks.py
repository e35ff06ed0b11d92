"""The task registry (models/tasks.py) is the one vocabulary: every per-task table reads it."""

from __future__ import annotations

import inspect

import pytest
from searchsmith.models import tasks
from searchsmith.models.errors import BundleError, ConfigError
from searchsmith.models.roles import role_protocol
from searchsmith.models.runtime import BUNDLE_CLASSES, load_bundle


def test_names_roles_and_run_names_are_unique() -> None:
    assert len(set(tasks.TASK_NAMES)) == len(tasks.TASKS)
    assert len(set(tasks.ROLES)) == len(tasks.TASKS)
    runs = [r for t in tasks.TASKS for r in t.run_names]
    assert len(set(runs)) == len(runs)
    assert tasks.run_task("decompose+rewrite").name == "decompose"
    assert tasks.run_task("nope") is None
    with pytest.raises(ConfigError, match=r"task 'rank' is not one of \['embed', 'rerank'"):
        tasks.get("rank")
    with pytest.raises(ConfigError, match="bundle role 'rerank' is not one of"):
        tasks.by_role("rerank")  # a task name is not a role: the two vocabularies stay apart


def test_every_table_keyed_by_task_is_the_registrys() -> None:
    from searchsmith.serving.pipeline.pipeline import BUNDLE_TASKS
    from searchsmith.serving.serve_config import BUNDLE_ROLES

    assert set(BUNDLE_CLASSES) == set(tasks.TASK_NAMES)
    assert all(cls.TASK == name for name, cls in BUNDLE_CLASSES.items())
    assert BUNDLE_ROLES == {t.role: t.name for t in tasks.TASKS}
    assert BUNDLE_TASKS == {t.role: t.name for t in tasks.TASKS if t.in_pipeline}


def test_every_evaluation_of_the_registry_has_an_evaluator_and_a_cli_task() -> None:
    from searchsmith.serving.main import EVAL_TASKS
    from searchsmith.training.evaluate import EVAL_MODEL_TASKS, EVALUATORS

    evaluations = {e for t in tasks.TASKS for e in t.evaluations}
    assert evaluations - {"route"} == set(EVALUATORS)
    assert set(EVAL_TASKS) == evaluations | {"pipeline", "sweep", "ablate", "bandit", "compare"}
    assert EVAL_MODEL_TASKS["route"] == ("embed", "decompose")
    assert EVAL_MODEL_TASKS["rerank"] == ("rerank",)


@pytest.mark.parametrize("task", tasks.TASK_NAMES)
def test_each_bundle_class_offers_its_roles_protocol(task: str) -> None:
    protocol = role_protocol(task)
    cls = BUNDLE_CLASSES[task]
    for name, member in inspect.getmembers(protocol, inspect.isfunction):
        if name.startswith("_"):
            continue
        assert callable(getattr(cls, name, None)), f"{cls.__name__} lacks {name} of {protocol.__name__}"
        want = list(inspect.signature(member).parameters)
        got = list(inspect.signature(getattr(cls, name)).parameters)
        assert got[: len(want)] == want, (cls.__name__, name, got, want)


def test_load_bundle_refuses_a_bundle_of_another_task(tmp_path) -> None:
    import export_fixtures as fx

    path = fx.bundle("rerank")
    assert load_bundle(path, device="cpu", task="rerank").task == "rerank"
    with pytest.raises(BundleError, match="is a 'rerank' bundle, not the 'cite' bundle wanted here"):
        load_bundle(path, device="cpu", task="cite")


def test_the_exporter_reads_the_run_layout_from_the_registry(tmp_path) -> None:
    import json

    from searchsmith.models.export import run_source

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"task": "cite", "steps": 3, "base_model": "x"}))
    with pytest.raises(BundleError, match=r"has no citation\.json"):
        run_source(run)
    (run / "run.json").write_text(json.dumps({"task": "embed?", "steps": 3}))
    with pytest.raises(BundleError, match=r"is not one of \['cite', 'decompose', 'decompose\+rewrite'"):
        run_source(run)
