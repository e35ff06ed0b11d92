"""The typed records behind the demo knowledge base, read from the YAML files in ``source/``.

The facts and prose are data (``source/*.yaml``, edited by hand); ``generate.py`` renders them
into documents. ``load_source`` reads every file into the frozen dataclasses below and checks
each field's type once, here at the boundary, so a number written where text is meant
(``version: 1.0`` instead of ``version: "1.0"``) fails with the fix instead of changing a document.
The products, companies, people and events are fictional; the encyclopedia facts are real and
rounded the way a general encyclopedia rounds them.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml
from searchsmith.models.config import load_yaml
from searchsmith.models.errors import ValidationError

SOURCE_DIR = Path(__file__).parent / "source"
# Each file holds some of Source's fields as top-level keys.
SOURCE_FILES = ("products.yaml", "news.yaml", "faq.yaml", "encyclopedia.yaml", "recipes.yaml")


@dataclass(frozen=True)
class Module:
    """One source file of a product: what it implements and how it is called."""

    feature: str  # "eviction": the words a user would use ("the code for Lumen's eviction")
    path: str
    signature: str
    summary: str
    usage: str


@dataclass(frozen=True)
class ConfigKey:
    key: str
    default: str
    allowed: str
    feature: str  # matches a Module.feature, so a config doc leads to a code note
    description: str


@dataclass(frozen=True)
class ErrorCode:
    code: str
    message: str
    cause: str
    fix: str


@dataclass(frozen=True)
class Release:
    version: str
    date: str  # ISO 8601
    headline: str


@dataclass(frozen=True)
class Product:
    slug: str
    name: str
    kind: str
    maker: str
    tagline: str
    language: str
    repo: str
    port: int
    install: tuple[str, ...]
    requirements: str
    components: tuple[str, ...]  # top to bottom in the architecture diagram
    use_cases: tuple[str, ...]
    modules: tuple[Module, ...]
    config: tuple[ConfigKey, ...]
    limits: dict[str, str]  # what is limited -> the maximum, in page order
    errors: tuple[ErrorCode, ...]
    releases: tuple[Release, ...]  # oldest first
    price_usd_month: int
    test_command: str


@dataclass(frozen=True)
class Company:
    name: str
    city: str
    founded: int
    ceo: str


@dataclass(frozen=True)
class Acquisition:
    acquirer: str
    target: str
    date: str
    price: str


@dataclass(frozen=True)
class Outage:
    product: str
    date: str
    region: str
    duration: str
    cause: str
    error: str  # an ErrorCode.code of the product, so the troubleshooting doc is the follow-up
    fixed_in: str
    reports: int  # 2 = two outlets wrote near-duplicate reports


@dataclass(frozen=True)
class EventKind:
    """A kind of simple dated news: templates for the document id, title and text, and rows of
    facts (one document per row). See ``news.yaml`` for the fields a template may use."""

    id: str
    title: str
    text: str
    rows: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class FaqEntry:
    category: str
    question: str
    answer: str


@dataclass(frozen=True)
class SlaTier:
    plan: str
    uptime: str  # monthly
    support_hours: str
    credit: str  # the service credit when the uptime is missed


@dataclass(frozen=True)
class Planet:
    name: str
    diameter: str
    au: str  # text, not a number: "1.00" is written as is
    mkm: str  # the same distance in km
    year: str  # orbital period
    day: str
    moons: str
    discovery: str
    surface: str  # a free paragraph
    exploration: str  # a free paragraph


@dataclass(frozen=True)
class Article:
    slug: str
    title: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class Recipe:
    slug: str
    name: str
    cuisine: str
    serves: int
    prep_min: int
    cook_min: int  # 0: no cooking
    ingredients: tuple[str, ...]
    steps: tuple[str, ...]
    tip: str


@dataclass(frozen=True)
class Source:
    """Everything the generator renders, in the order it renders it."""

    products: tuple[Product, ...]
    outlets: tuple[str, ...]
    companies: tuple[Company, ...]
    acquisitions: tuple[Acquisition, ...]
    outages: tuple[Outage, ...]
    events: dict[str, EventKind]  # kind -> templates and rows, rendered in file order
    faq: tuple[FaqEntry, ...]  # product prices and SLA answers are added by generate.py
    sla_tiers: tuple[SlaTier, ...]
    uptime_2024: tuple[float, ...]  # percent, January to December
    planets: tuple[Planet, ...]  # from the Sun outwards
    articles: tuple[Article, ...]
    recipes: tuple[Recipe, ...]

    def product(self, name: str) -> Product:
        return next(p for p in self.products if p.name == name)

    def company(self, name: str) -> Company:
        return next(c for c in self.companies if c.name == name)

    def made_by(self, company: str) -> list[Product]:
        return [p for p in self.products if p.maker == company]

    def planet(self, name: str) -> Planet:
        return next(p for p in self.planets if p.name == name)


def load_source(folder: Path = SOURCE_DIR) -> Source:
    """Read and type-check ``folder/*.yaml`` (``SOURCE_FILES``).

    Raises:
        ValidationError: a file is missing or unreadable, a key is unknown, missing or given
            twice, or a value has the wrong type; every problem is listed at once.
    """
    hints = typing.get_type_hints(Source)
    problems: list[str] = []
    values: dict[str, object] = {}
    for name in SOURCE_FILES:
        path = Path(folder) / name
        try:
            data = load_yaml(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            problems.append(f"{path}: {e}")
            continue
        if not isinstance(data, dict):
            problems.append(f"{path}: expected a mapping of {', '.join(hints)}")
            continue
        for key, raw in data.items():
            if key not in hints:
                problems.append(f"{name}: unknown key {key!r}; expected one of {', '.join(hints)}")
            elif key in values:
                problems.append(f"{name}: {key!r} is also given in another file")
            else:
                values[key] = _typed(hints[key], raw, f"{name}: {key}", problems)
    if not problems:
        problems += [f"no file gives {key!r}" for key in hints if key not in values]
    if problems:
        raise ValidationError(f"demo source in {folder} is invalid:\n  " + "\n  ".join(problems))
    return Source(**values)  # type: ignore[arg-type]


_NAMES = {str: "text", int: "an integer", float: "a number"}


def _typed(tp: object, raw: object, where: str, problems: list[str]) -> object:
    """``raw`` (as YAML read it) converted to ``tp``; type errors are appended to ``problems``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in _NAMES:
        ok = isinstance(raw, tp) and not isinstance(raw, bool)
        if tp is float and isinstance(raw, int) and not isinstance(raw, bool):
            return float(raw)
        if not ok:
            fix = f'; quote it: "{raw}"' if tp is str and raw is not None else ""
            got = f"{raw!r} ({type(raw).__name__})"
            problems.append(f"{where}: expected {_NAMES[tp]}, got {got}{fix}")
        return raw
    if origin is tuple:  # tuple[X, ...]
        if not isinstance(raw, list):
            problems.append(f"{where}: expected a list, got {type(raw).__name__}")
            return ()
        return tuple(_typed(args[0], x, f"{where}[{i}]", problems) for i, x in enumerate(raw))
    if origin is dict:
        if not isinstance(raw, dict):
            problems.append(f"{where}: expected a mapping, got {type(raw).__name__}")
            return {}
        return {_typed(args[0], k, f"{where} key", problems):
                _typed(args[1], v, f"{where}.{k}", problems) for k, v in raw.items()}
    assert dataclasses.is_dataclass(tp), tp
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping of {tp.__name__} fields, "
                        f"got {type(raw).__name__}")
        return None
    hints = typing.get_type_hints(tp)
    unknown = [k for k in raw if k not in hints]
    missing = [k for k in hints if k not in raw]
    if unknown or missing:
        problems.append(f"{where}: {tp.__name__} has fields {', '.join(hints)}"
                        + (f"; unknown {unknown}" if unknown else "")
                        + (f"; missing {missing}" if missing else ""))
        return None
    return tp(**{k: _typed(hints[k], raw[k], f"{where}.{k}", problems) for k in hints})
