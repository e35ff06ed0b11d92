"""Every config key with its type, default and description, read from the code.

The configs are frozen dataclasses (``models/config.py`` loads them). A key's description
is the entry for it under ``Attributes:`` in its class's docstring, or else the comment
lines just above the field in the source. ``searchsmith config NAME`` prints the reference
of one config; ``tests/serving/test_config_docs.py`` fails when a key has no description,
so a new key cannot ship undocumented.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

from searchsmith.models.tasks import TASKS


def _pipeline() -> type:
    from searchsmith.serving.pipeline.config import PipelineConfig

    return PipelineConfig


def _serve() -> type:
    from searchsmith.serving.serve_config import ServeConfig

    return ServeConfig


def _index() -> type:
    from searchsmith.serving.index import IndexConfig

    return IndexConfig


def _router() -> type:
    from searchsmith.serving.router import RouterConfig

    return RouterConfig


def _recipe(name: str) -> Callable[[], type]:
    """A loader of recipe ``name``'s config class, from the training registry."""

    def load() -> type:
        from searchsmith.training.registry import get_recipe

        return get_recipe(name).config_cls

    return load


# config name -> (the function that imports its root dataclass, what the config file is);
# imported on use, so `searchsmith config serve` loads no training code
ROOTS: dict[str, tuple[Callable[[], type], str]] = {
    "pipeline": (_pipeline, "pipeline YAML (searchsmith ask --config, eval pipeline --config, serve.yaml's pipeline:)"),
    "serve": (_serve, "server YAML (searchsmith serve --config)"),
    "index": (_index, "index settings (searchsmith index CORPUS --out DIR key=value ...)"),
    "router": (_router, "router YAML (searchsmith route --config)"),
    # one per trained task: the recipe registry's names are the tasks' bundle roles
    # (tests/serving/test_config_docs.py checks the two lists agree)
    **{f"recipe-{t.role}": (_recipe(t.role), f"{t.role} recipe YAML (recipes/{t.role}/*.yaml; "
                            "searchsmith train R.yaml key=value)") for t in TASKS if t.trained},
}


@dataclass(frozen=True)
class KeyDoc:
    """One config key: dotted path, type, default and description ('' when undocumented)."""

    path: str
    type: str
    default: str
    doc: str


def load_root(name: str) -> type:
    """The root dataclass of config ``name`` (a key of :data:`ROOTS`)."""
    return ROOTS[name][0]()


def _attribute_docs(cls: type) -> dict[str, str]:
    """``{field: text}`` from the ``Attributes:`` section of a Google-style docstring."""
    doc = inspect.getdoc(cls) or ""
    # a docstring that opens with "Attributes:" on its first line is dedented to column 0
    match = (re.search(r"\AAttributes:[ \t]*\n(.*)", doc, re.S)
             or re.search(r"^Attributes:[ \t]*\n(.*?)(?=^\S|\Z)", doc, re.M | re.S))
    if not match:
        return {}
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    if not lines:
        return {}
    base = min(len(line) - len(line.lstrip()) for line in lines)
    out: dict[str, str] = {}
    current = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        head = re.match(r"^(\w+)(?: \([^)]*\))?:\s*(.*)$", line.strip()) if indent == base else None
        if head:
            current = head.group(1)
            out[current] = head.group(2).strip()
        elif current and indent > base:
            out[current] += " " + line.strip()
        else:
            current = None  # prose after the list
    return out


def _comment_docs(cls: type) -> dict[str, str]:
    """``{field: text}`` from ``# ...`` lines directly above each field in the class body."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    comments: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
            continue
        field = re.match(r"^(\w+)\s*:", stripped)
        if field and comments:
            out.setdefault(field.group(1), " ".join(comments))
        comments = []
    return out


def _class_summary(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring on one line; a pointer to the keys below when
    the docstring opens with its ``Attributes:`` list (each key has its own entry)."""
    first = (inspect.getdoc(cls) or "").split("\n\n")[0]
    if first.lstrip().startswith("Attributes:"):
        return f"{cls.__name__}: the keys below"
    return " ".join(first.split())


def _nested(tp: Any) -> type | None:
    """The dataclass inside ``tp`` (``X``, ``X | None``), if any."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in get_args(tp):
        if dataclasses.is_dataclass(arg):
            return arg
    return None


def _type_text(tp: Any) -> str:
    text = getattr(tp, "__name__", None) if not get_args(tp) else None
    return text or str(tp).replace("typing.", "")


def _default_text(f: dataclasses.Field, value: Any = dataclasses.MISSING) -> str:
    if value is not dataclasses.MISSING:
        return "{...}" if dataclasses.is_dataclass(value) else repr(value)
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return "{...}" if dataclasses.is_dataclass(value) else repr(value)
    return "(required)"


def describe(cls: type, prefix: str = "", instance: Any = None) -> list[KeyDoc]:
    """Every key under dataclass ``cls`` (nested dataclasses flattened to dotted paths).

    Defaults are read from ``instance`` (the parent's default for this part) when given, so a
    nested config shows what its parent sets (``tagger.optim.lr``), not its class's own default.
    """
    hints = get_type_hints(cls)
    docs = {**_comment_docs(cls), **_attribute_docs(cls)}
    if instance is None:
        try:
            instance = cls()
        except TypeError:  # a required field: class defaults only
            instance = None
    out: list[KeyDoc] = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        path = f"{prefix}{f.name}"
        tp = hints.get(f.name, f.type)
        nested = _nested(tp)
        doc = docs.get(f.name, "")
        value = getattr(instance, f.name, dataclasses.MISSING) if instance is not None else dataclasses.MISSING
        if nested is not None:
            is_dict = get_origin(tp) is dict
            # a dict of dataclasses (e.g. presets: name -> Preset) documents one entry as <name>
            inner = path + (".<name>." if is_dict else ".")
            section = doc or _class_summary(nested)
            out.append(KeyDoc(path, _type_text(tp) if is_dict else nested.__name__,
                              _default_text(f, value) if is_dict else "{...}", section))
            sub = value if dataclasses.is_dataclass(value) else None
            out.extend(describe(nested, inner, sub))
        else:
            out.append(KeyDoc(path, _type_text(tp), _default_text(f, value), doc))
    return out


def render(name: str, width: int = 100) -> str:
    """The reference of config ``name`` as text: one block per key."""
    blocks = [f"# {name}: {ROOTS[name][1]}"]
    for key in describe(load_root(name)):
        head = f"{key.path}: {key.type} = {key.default}"
        body = textwrap.fill(key.doc or "(undocumented)", width=width, initial_indent="    ",
                             subsequent_indent="    ")
        blocks.append(f"{head}\n{body}")
    return "\n".join(blocks) + "\n"


def configure_config(parser: Any) -> None:
    """``searchsmith config NAME``: print every key of a config with its default and meaning."""
    parser.add_argument("name", choices=sorted(ROOTS), help="which config: " + "; ".join(
        f"{k}: {v[1]}" for k, v in ROOTS.items()))
    parser.set_defaults(func=_run)


def _run(args: Any) -> int:
    print(render(args.name), end="")
    return 0


__all__ = ["KeyDoc", "ROOTS", "configure_config", "describe", "load_root", "render"]
