"""The task registry: the one table of what searchsmith trains, exports, serves and evaluates.

A *task* is what a model does (``rerank``); the same name is a bundle manifest's ``"task"``,
an ``searchsmith eval`` task and a training run's ``run.json`` ``"task"``. A *role* is the
key under which a pipeline or server config names the task's bundle (``bundles.reranker``).
Every other table in the project is read from here or keyed by these names and checked
against them by the tests (``tests/models/test_tasks.py``):

* the runtime's bundle class per task (``models/runtime.py``: each class's ``task``),
* the run-folder layout the exporter reads (``run_meta``, ``tokenizer_subdir`` below),
* the pipeline's and the server's bundle roles (``serving/pipeline/pipeline.py``,
  ``serving/serve_config.py``),
* the evaluators (``searchsmith eval <task>``; ``training/evaluate.py``),
* the typed interface each role offers (``models/roles.py``).

A training run folder of task T holds ``run.json`` (``{"task": one of T.run_names, "steps",
"base_model", ...}``), ``metrics.json`` (held-out "final" figures and "baselines") and
``model/`` with the trained weights; when ``T.run_meta`` is set, ``model/<run_meta>`` holds
the model's settings (labels, lengths, thresholds, steps), and the tokenizer is saved in
``model/<tokenizer_subdir>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from searchsmith.models.errors import ConfigError

__all__ = ["ROLES", "TASKS", "TASK_NAMES", "Task", "by_role", "evaluated_by", "get", "run_names", "run_task"]


@dataclass(frozen=True)
class Task:
    """One task and everything keyed by it.

    Attributes:
        name: the task (manifest ``"task"``, ``searchsmith eval`` task, run name).
        role: the config key of its bundle (``bundles.<role>`` in pipeline and server configs).
        summary: what the model does, in a few words.
        run_names: the ``run.json`` ``"task"`` values of its training runs (empty: not trained
            by a recipe, exported from a pretrained model).
        run_meta: file under ``RUN_DIR/model/`` with the model's settings, or None.
        tokenizer_subdir: folder under ``RUN_DIR/model/`` holding the tokenizer ("" = itself).
        evaluations: the ``searchsmith eval`` tasks that score a model of this task
            (``--bundle`` / ``--checkpoint``).
        in_pipeline: the pipeline config takes a bundle of this task (``bundles.<role>``); the
            embedder is configured by the pipeline's ``bundles.embedder`` path too, but through
            the index's embedder, so it is not a pipeline stage.
    """

    name: str
    role: str
    summary: str
    run_names: tuple[str, ...] = ()
    run_meta: str | None = None
    tokenizer_subdir: str = ""
    evaluations: tuple[str, ...] = ()
    in_pipeline: bool = True

    @property
    def trained(self) -> bool:
        """Whether a recipe trains it (else it is exported from a pretrained model)."""
        return bool(self.run_names)


TASKS: tuple[Task, ...] = (
    Task("embed", "embedder", "sentence embeddings (bi-encoder): indexing, routing, cosine fallbacks",
         evaluations=("retrieve", "route"), in_pipeline=False),
    Task("rerank", "reranker", "cross-encoder relevance of (query, passage) pairs",
         run_names=("rerank",), evaluations=("rerank",)),
    Task("decompose", "decomposer", "question -> sub-question graph, and follow-up rewrite",
         run_names=("decompose", "decompose+rewrite"), run_meta="decomposer.json",
         evaluations=("decompose", "rewrite", "route")),
    Task("cite", "citation", "entity tagging and (sentence, passage) attribution",
         run_names=("cite",), run_meta="citation.json", tokenizer_subdir="tagger", evaluations=("cite",)),
    Task("read", "reader", "extractive question answering: a short answer span, yes / no or none",
         run_names=("read",), run_meta="reader.json", evaluations=("read",)),
    Task("images", "images", "image-paragraph relevance (text and vision towers)",
         run_names=("images",), run_meta="image_relevance.json", tokenizer_subdir="text", evaluations=("images",)),
)
TASK_NAMES: tuple[str, ...] = tuple(t.name for t in TASKS)
ROLES: tuple[str, ...] = tuple(t.role for t in TASKS)
_BY_NAME = {t.name: t for t in TASKS}
_BY_ROLE = {t.role: t for t in TASKS}
_BY_RUN = {run: t for t in TASKS for run in t.run_names}


def _lookup(table: dict[str, Task], key: str, what: str, known: tuple[str, ...]) -> Task:
    try:
        return table[key]
    except (KeyError, TypeError):
        raise ConfigError(f"{what} {key!r} is not one of {list(known)}") from None


def get(name: str) -> Task:
    """The task called ``name``.

    Raises:
        ConfigError: not a task; the message lists them.
    """
    return _lookup(_BY_NAME, name, "task", TASK_NAMES)


def by_role(role: str) -> Task:
    """The task whose bundle a config names ``bundles.<role>``.

    Raises:
        ConfigError: not a role; the message lists them.
    """
    return _lookup(_BY_ROLE, role, "bundle role", ROLES)


def run_task(run_name: object) -> Task | None:
    """The task of a training run's ``run.json`` ``"task"`` value; None when unknown."""
    return _BY_RUN.get(str(run_name))


def evaluated_by(evaluation: str) -> tuple[str, ...]:
    """The tasks whose models ``searchsmith eval <evaluation>`` scores (registry order)."""
    return tuple(t.name for t in TASKS if evaluation in t.evaluations)


def run_names() -> list[str]:
    """Every ``run.json`` ``"task"`` value a run may have, sorted (for messages)."""
    return sorted(_BY_RUN)
