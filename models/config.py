"""YAML to frozen dataclasses, strictly.

One loader for every config in the project (recipes, index, router, pipeline, server):

* unknown keys are rejected with the closest valid key suggested;
* types are checked (PyYAML reads ``2e-5`` as a string: the error says to write ``2.0e-5``), and
  a float setting must be finite (``.nan`` and ``.inf`` mean nothing in any config);
* every error in the file is reported at once, each with its dotted path;
* ``key.sub=value`` overrides (the CLI form) are applied before validation.

Example::

    @dataclass(frozen=True)
    class Optim:
        lr: float = 3.0e-5

    cfg = load_config(Recipe, "recipes/x.yaml", overrides=["optim.lr=1.0e-4"])
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import numbers
import re
import reprlib
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml
from searchsmith.models.errors import ConfigError

T = TypeVar("T")

_MISSING = object()
_MAX_ERRORS_SHOWN = 30
_YAML11_BOOLS = {"yes", "no", "on", "off", "y", "n", "true", "false"}


def is_int(value: Any, low: int | None = None) -> bool:
    """Whether ``value`` is a whole number, at least ``low`` when given: an int or a numpy
    integer (``np.int64(3)``, what ``argmax`` and array indexing give), never a bool (``True``
    is no count, nor JSON's ``true`` an index). The one rule every count and index check uses."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and (low is None or value >= low)


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number: an int, a float or a numpy one (``np.float32``), not
    a bool. Finite or not: :func:`check_number` says which."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_number(key: str, value: object, low: float = -math.inf, high: float = math.inf, *,
                 low_open: bool = False, note: str = "") -> None:
    """Raise ValueError naming ``key`` unless ``value`` is a finite number in its range (a
    dataclass's ``__post_init__`` check; the loader reports it with the section's path).

    NaN and inf are refused whatever the range: a NaN threshold compares False with every
    score (a stage silently switched off or on), an infinite weight makes every score inf.
    """
    ok = (is_number(value) and math.isfinite(value)
          and (value > low if low_open else value >= low) and value <= high)
    if ok:
        return
    if math.isfinite(low) and math.isfinite(high):
        where = f"in {'(' if low_open else '['}{low:g}, {high:g}]"
    elif math.isfinite(low):
        where = f"{'>' if low_open else '>='} {low:g}"
    else:
        where = f"<= {high:g}"
    raise ValueError(f"{key} must be a finite number {where}{note}, got {value!r}")


def check_count(key: str, value: object, low: int = 1, *, optional: str = "", note: str = "") -> None:
    """Raise ValueError naming ``key`` unless ``value`` is a whole number >= ``low`` (or None
    when ``optional`` says what None means)."""
    if value is None and optional:
        return
    if not is_int(value, low):
        alt = f" or null ({optional})" if optional else ""
        raise ValueError(f"{key} must be a whole number >= {low}{alt}{note}, got {value!r}")


def closest_key(key: str, valid: Iterable[str]) -> str | None:
    """The valid key most like ``key``, or None when nothing is close."""
    matches = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return matches[0] if matches else None


_SHOWN = reprlib.Repr()  # (keyword arguments need Python 3.12)
_SHOWN.maxlevel, _SHOWN.maxdict, _SHOWN.maxlist, _SHOWN.maxtuple = 2, 4, 4, 4
_SHOWN.maxstring = _SHOWN.maxother = 80


def shown(value: Any) -> str:
    """``repr(value)`` cut short for an error message: a value of nested YAML aliases (a few
    hundred bytes of file) would otherwise print as many megabytes."""
    return _SHOWN.repr(value)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _convert(tp: Any, value: Any, path: str, errors: list[str]) -> Any:
    """Check ``value`` against the annotation ``tp``; return it converted, or _MISSING on error."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        sub_errors: list[str] = []
        for arg in args:
            if arg is type(None):
                continue
            trial: list[str] = []
            out = _convert(arg, value, path, trial)
            if not trial:
                return out
            sub_errors.extend(trial)
        errors.append(sub_errors[0] if len(sub_errors) == 1 else
                      f"{path}: expected {_type_name(tp)}, got {shown(value)}")
        return _MISSING
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            hint = closest_key(str(value), [str(a) for a in allowed])
            fix = f" (did you mean {hint!r}?)" if hint else ""
            if isinstance(value, bool) and any(a in _YAML11_BOOLS for a in allowed):
                fix = (" (YAML reads yes/no/on/off without quotes as true/false: write the value in quotes, "
                       "e.g. \"no\")")
            errors.append(f"{path}: expected one of {list(allowed)}, got {shown(value)}{fix}")
            return _MISSING
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            errors.append(f"{path}: expected a mapping for {tp.__name__}, got {type(value).__name__}")
            return _MISSING
        return _build(tp, value, path, errors)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            errors.append(f"{path}: expected a list, got {type(value).__name__} {shown(value)}")
            return _MISSING
        args = get_args(tp)
        item_tp = args[0] if args else Any
        out = [_convert(item_tp, v, f"{path}[{i}]", errors) for i, v in enumerate(value)]
        return tuple(out) if (origin is tuple or tp is tuple) else out
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            errors.append(f"{path}: expected a mapping, got {type(value).__name__}")
            return _MISSING
        args = get_args(tp)
        k_tp, v_tp = args if args else (Any, Any)
        return {
            _convert(k_tp, k, f"{path}.<key>", errors): _convert(v_tp, v, f"{path}.{k}", errors)
            for k, v in value.items()
        }
    if tp is bool:
        if isinstance(value, bool):
            return value
        errors.append(f"{path}: expected true or false, got {shown(value)}")
        return _MISSING
    if tp is int:
        if is_int(value):
            return int(value)  # a numpy integer is stored as the int it is
        errors.append(f"{path}: expected an integer, got {type(value).__name__} {shown(value)}")
        return _MISSING
    if tp is float:
        if is_number(value):
            if math.isfinite(value):
                return float(value)
            # no setting means anything at .nan or .inf: a NaN threshold compares false with
            # everything and silently switched checks off
            errors.append(f"{path}: expected a finite number, got {value}")
            return _MISSING
        hint = ""
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+[eE][+-]?\d+\s*", value):
            hint = " (PyYAML reads numbers like 2e-5 as strings: write 2.0e-5)"
        elif isinstance(value, str) and value.strip().lower() in ("nan", "inf", "-inf", "+inf", "infinity"):
            hint = " (YAML spells these .nan and .inf; a finite number is expected here)"
        errors.append(f"{path}: expected a number, got {type(value).__name__} {shown(value)}{hint}")
        return _MISSING
    if tp is str:
        if isinstance(value, str):
            return value
        errors.append(f"{path}: expected a string, got {type(value).__name__} {shown(value)}")
        return _MISSING
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        errors.append(f"{path}: expected {tp.__name__}, got {type(value).__name__} {shown(value)}")
        return _MISSING
    return value


def _over_factory_default(f: dataclasses.Field, value: Any) -> Any:
    """A mapping given for a section whose default is built with settings of its own
    (``calls: BatcherConfig(max_batch_size=1, ...)``, the citation tagger's ``optim``) keeps
    those settings for the keys it leaves out, as the section's defaults say; it was built on
    the class's defaults instead (``server.calls: {max_queue: 8}`` was then refused for its
    batch size of 32)."""
    if not isinstance(value, Mapping) or f.default_factory is dataclasses.MISSING:
        return value
    base = f.default_factory()
    if not dataclasses.is_dataclass(base) or isinstance(base, type):
        return value
    given = {g.name for g in dataclasses.fields(base) if g.init}
    defaults = {k: v for k, v in to_dict(base).items() if k in given and k not in value}
    return {**defaults, **value}


def _build(cls: type[T], data: Mapping[str, Any], path: str, errors: list[str]) -> T:
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            hint = closest_key(str(key), fields)
            fix = f"; did you mean {hint!r}?" if hint else f"; valid keys: {sorted(fields)}"
            errors.append(f"{where}: unknown key{fix}")
            continue
        out = _convert(hints[key], _over_factory_default(fields[key], value), where, errors)
        if out is not _MISSING:
            kwargs[key] = out
    for name, f in fields.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and name not in data:
            where = f"{path}.{name}" if path else name
            errors.append(f"{where}: required key is missing")
    if errors:
        return _MISSING  # type: ignore[return-value]
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # __post_init__ checks
        errors.append(f"{path or cls.__name__}: {exc}")
        return _MISSING  # type: ignore[return-value]


def from_dict(cls: type[T], data: Mapping[str, Any] | None, *, source: str = "config") -> T:
    """Build the frozen dataclass ``cls`` from ``data``; raise one ConfigError listing every problem."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    errors: list[str] = []
    out = _build(cls, data, "", errors)
    if errors:
        lines = "\n  ".join(errors[:_MAX_ERRORS_SHOWN])
        more = f"\n  ... and {len(errors) - _MAX_ERRORS_SHOWN} more" if len(errors) > _MAX_ERRORS_SHOWN else ""
        raise ConfigError(f"{source}: {len(errors)} error(s)\n  {lines}{more}")
    return out


def to_dict(obj: Any) -> Any:
    """A dataclass (nested) as plain dicts and lists, ready for YAML or JSON."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if type(obj).__module__ == "numpy" and getattr(obj, "ndim", None) == 0:
        # a numpy scalar set from Python (np.int64(20)): JSON and YAML write its int (numpy is not
        # imported here: the batcher layer imports this module and stays light)
        return obj.item()
    return obj


def check_overrides(overrides: Iterable[str]) -> None:
    """Refuse a bare string for a list of overrides: iterated, it would be read a character at
    a time (``override 'r': expected KEY=VALUE``)."""
    if isinstance(overrides, (str, bytes)):
        raise ConfigError(f"overrides: expected a list of KEY=VALUE strings, got the string {overrides!r:.80}; "
                          f"wrap it in a list: [{overrides!r:.80}]")


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a nested dict, in place."""
    check_overrides(overrides)
    for item in overrides:
        if not isinstance(item, str):
            raise ConfigError(f"override {item!r:.80}: expected a KEY=VALUE string, got {type(item).__name__}")
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE, e.g. optim.lr=3.0e-5")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise ConfigError(f"override {item!r}: empty key segment in {key!r}")
        try:
            value = load_yaml(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({exc})") from None
        node = data
        for depth, part in enumerate(parts[:-1], 1):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[:depth])
                raise ConfigError(f"override {item!r}: {where!r} is set to {shown(child)} (in the config file or an "
                                  f"earlier override), not a mapping of keys; fix {where} there, or override it "
                                  "whole")
            node = child
        node[parts[-1]] = value
    return data


class RepeatedYamlKeyError(yaml.YAMLError):
    """A YAML mapping that writes one key twice: PyYAML keeps the last value and drops the
    first without a word (a second ``server:`` section would lose the first's settings)."""

    def __init__(self, key: Any, first: yaml.Mark, again: yaml.Mark) -> None:
        self.key, self.first_line, self.line = key, first.line + 1, again.line + 1
        super().__init__(f"key {key!r} is written twice in one mapping (lines {self.first_line} and {self.line}); "
                         "only the last would count: merge the two into one")


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping writing a key twice (merge keys ``<<`` may
    still be overridden: that is what they are for)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first is not key_node.start_mark:
                raise RepeatedYamlKeyError(key, first, key_node.start_mark)
        return super().construct_mapping(node, deep)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)``, refusing a mapping that writes a key twice.

    Raises:
        RepeatedYamlKeyError: (a ``yaml.YAMLError``) a key written twice in one mapping, with both lines.
        yaml.YAMLError: ``text`` is not YAML.
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; clear errors for a missing file, bad YAML or a non-mapping."""
    if not str(path).strip():
        raise ConfigError("config file path is empty: give the path of a YAML file, or leave the option out "
                          "for the defaults")
    p = Path(path)
    if p.is_dir():
        inside = sorted(q.name for q in p.glob("*.y*ml"))[:3]
        example = f" (it holds {', '.join(inside)})" if inside else ""
        raise ConfigError(f"config file {str(p)!r} is a folder, not a file: give the path of a YAML file"
                          f"{example}")
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist (check the path)")
    try:
        data = load_yaml(p.read_text(encoding="utf-8"))
    except RepeatedYamlKeyError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except yaml.YAMLError as exc:
        hint = ("; YAML indents with spaces, not tabs: replace the tab characters"
                if "found character '\\t'" in str(exc) else "")
        raise ConfigError(f"{p}: not valid YAML: {exc}{hint}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    size = _expanded_size(data)
    if size is None or size > MAX_CONFIG_VALUES:
        what = "refers to itself" if size is None else f"expands to over {MAX_CONFIG_VALUES:,} values"
        raise ConfigError(f"{p}: the YAML {what} through its anchors and aliases (&name / *name); a config "
                          "is far smaller: write the values out")
    return data


MAX_CONFIG_VALUES = 1_000_000  # values of a config with every alias written out


def _expanded_size(root: Any) -> int | None:
    """How many values ``root`` holds with every YAML alias expanded (a shared node counts each
    time it is used; computed once per node); None when a node contains itself."""
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        children = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
        if done:
            active.discard(key)
            sizes[key] = 1 + sum(sizes.get(id(c), 1) for c in children)
            continue
        if key in sizes:
            continue
        if key in active:
            return None
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if isinstance(c, (dict, list)) and id(c) not in sizes)
    return sizes[id(root)]


def _seed_from_defaults(cls: type, raw: dict[str, Any], overrides: Iterable[str]) -> None:
    """Copy into ``raw`` the default mappings an override reaches into but ``raw`` lacks.

    ``presets.large.rerank=false`` on a config that does not set ``presets`` changes one key of
    the default presets; without the defaults copied first, the override's one-entry mapping
    would replace the whole table (the other presets would be lost). A mapping the file sets
    itself is left as the file wrote it.
    """
    try:
        defaults = to_dict(cls())
    except TypeError:  # a config with required fields has no defaults to copy
        return
    for item in overrides:
        if "=" not in item:
            continue  # apply_overrides reports it
        parts = item.split("=", 1)[0].strip().split(".")
        node, default = raw, defaults
        for part in parts[:-1]:
            if not isinstance(default, dict) or not isinstance(node, dict) or part not in default:
                break
            if part not in node and isinstance(default[part], dict):
                node[part] = copy.deepcopy(default[part])
            node, default = node.get(part), default[part]


def load_config(cls: type[T], path: str | Path | None = None,
                overrides: Iterable[str] = (), data: Mapping[str, Any] | None = None) -> T:
    """Load ``cls`` from a YAML file (or ``data``) plus CLI overrides; defaults when neither.

    An override changes one key: a mapping it reaches into that the file does not set starts
    from the default mapping (``presets.large.rerank=false`` keeps the other presets).
    """
    raw: dict[str, Any] = dict(read_yaml(path)) if path is not None else dict(data or {})
    check_overrides(overrides)
    overrides = list(overrides)
    _seed_from_defaults(cls, raw, overrides)
    apply_overrides(raw, overrides)
    return from_dict(cls, raw, source=str(path) if path is not None else cls.__name__)


__all__ = ["apply_overrides", "check_count", "check_overrides", "check_number", "closest_key", "from_dict", "is_int", "is_number", "load_config", "read_yaml", "shown", "to_dict"]

