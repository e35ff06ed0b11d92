"""Generate the demo knowledge base: corpus, images, routing set, QA set, stage gold set and README.

Run ``python -m searchsmith.models.demo.generate [--out DIR]`` (default: this folder). The
output is a pure function of the data in ``source/*.yaml`` (read by ``records.py``), the
templates here and ``SEED``: running it twice gives the same bytes for the JSONL and Markdown
files and the same pixels for the PNG files.

Every routing gold label and QA answer is derived from the same tables that render the
documents, and ``check`` verifies them against the rendered text before anything is written,
so a wording change that breaks a label fails here rather than in an evaluation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import random
import re
import string
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont
from searchsmith.models.demo.records import (
    SOURCE_DIR,
    SOURCE_FILES,
    ConfigKey,
    ErrorCode,
    Module,
    Planet,
    Product,
    Release,
    Source,
    load_source,
)
from searchsmith.models.errors import ValidationError

SEED = 20240312
CORPUS_FILE = "corpus.jsonl"
ROUTING_FILE = "routing.jsonl"
QA_FILE = "qa.jsonl"
STAGES_FILE = "stages.jsonl"
NO_ANSWER_FILE = "no_answer.jsonl"
README_FILE = "README.md"
IMAGES_DIR = "images"
SOURCE_GLOB = f"{SOURCE_DIR.name}/*.yaml"  # read, never written

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
# Written dates vary on purpose so a timeline extractor must normalise them.
DATE_STYLES = ("dmy", "iso", "mdy")


def fmt_date(iso: str, style: str) -> str:
    """Render an ISO date as "12 March 2024" (dmy), "2024-03-12" (iso), "March 12, 2024" (mdy)
    or "March 2024" (my)."""
    d = dt.date.fromisoformat(iso)
    month = MONTHS[d.month - 1]
    if style == "dmy":
        return f"{d.day} {month} {d.year}"
    if style == "iso":
        return d.isoformat()
    if style == "mdy":
        return f"{month} {d.day}, {d.year}"
    if style == "my":
        return f"{month} {d.year}"
    raise ValueError(f"fmt_date: unknown style {style!r}; use one of dmy, iso, mdy, my")


def _slug(text: str) -> str:
    out = "".join(c.lower() if c.isalnum() else "-" for c in text)
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")


@dataclass
class Doc:
    id: str
    source: str
    title: str
    text: str
    url: str
    date: str | None = None
    images: list[dict[str, str]] = field(default_factory=list)

    def record(self) -> dict[str, object]:
        """The corpus-format dict, keys in a fixed order so the file is byte-stable."""
        rec: dict[str, object] = {"id": self.id, "source": self.source, "title": self.title}
        if self.date is not None:
            rec["date"] = self.date
        rec["url"] = self.url
        rec["text"] = self.text
        if self.images:
            rec["images"] = self.images
        return rec


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------

DOCS_URL = "https://docs.example.com"
CODE_URL = "https://code.example.com"
NEWS_URL = "https://news.example.com"
WIKI_URL = "https://encyclopedia.example.org/wiki"
FAQ_URL = "https://help.stackyard.example.com"
RECIPE_URL = "https://recipes.example.net"


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _code_lang(p: Product) -> str:
    return {"Rust": "rust", "Go": "go", "Python": "python"}[p.language]


def _test_path(p: Product, m: Module) -> str:
    stem = Path(m.path).stem
    if p.language == "Go":
        return m.path.replace(".go", "_test.go")
    if p.language == "Rust":
        return f"{p.slug}/tests/{stem if stem != 'mod' else Path(m.path).parent.name}.rs"
    return f"tests/test_{stem}.py"


def _errors_path(p: Product) -> str:
    return {"Rust": f"{p.slug}/src/error.rs", "Go": f"{p.slug}/errors/codes.go",
            "Python": f"{p.slug}/errors.py"}[p.language]


def _a(noun: str, capital: bool = False) -> str:
    """``noun`` with its indefinite article ("an in-memory cache", "a key-value store"; "An ..."
    with ``capital``)."""
    article = "an" if noun[:1].lower() in "aeiou" else "a"
    return f"{article.capitalize() if capital else article} {noun}"


def product_doc_id(p: Product, kind: str) -> str:
    return f"docs-{p.slug}-{kind}"


def config_doc_id(p: Product, c: ConfigKey) -> str:
    return product_doc_id(p, "config-" + _slug(c.key))


def error_doc_id(p: Product, e: ErrorCode) -> str:
    return product_doc_id(p, "error-" + e.code.lower())


def code_doc_id(p: Product, m: Module) -> str:
    return f"code-{p.slug}-{_slug(m.feature)}"


def release_doc_id(p: Product, r: Release) -> str:
    return f"news-{r.date}-{p.slug}-{_slug(r.version)}-release"


def pricing_doc_id(p: Product) -> str:
    return f"faq-pricing-{p.slug}"


def product_docs(rng: random.Random, p: Product) -> list[Doc]:
    """Twelve pages of a product's documentation; the overview is the long one."""
    url = f"{DOCS_URL}/{p.slug}"
    latest = p.releases[-1]
    flow = " to ".join(p.components)
    first_limit = next(iter(p.limits))
    overview = [
        f"{p.name} is {_a(p.kind)} developed by {p.maker}. It {p.tagline}. {p.name} is written in "
        f"{p.language} and published under the Apache-2.0 licence.",
        f"A {p.name} deployment is built from five parts: {_and(list(p.components))}. Work flows from "
        f"{flow}, and each part can be scaled on its own: the diagram on this page shows the path a "
        f"request takes. {p.components[0]} is the only part clients talk to directly, so it is "
        f"also where authentication and input validation happen.",
        f"Teams use {p.name} for {_and(list(p.use_cases))}. It is designed to run unattended: "
        f"every part exposes health and metrics endpoints, and configuration is a single YAML file, "
        f"{p.slug}.yaml, whose keys are documented one per page.",
        f"The current major version is {latest.version}, which added {latest.headline}. Upgrades "
        f"between minor versions need no downtime; the upgrade guide lists the steps for a major one.",
        f"{p.name} needs {p.requirements}. By default the server listens on port {p.port}. The most "
        f"important settings are {_and([f'`{c.key}`' for c in p.config])}; the limits page lists the "
        f"hard limits, such as a maximum {first_limit} of {p.limits[first_limit]}.",
        " ".join(f"The {m.feature} code {m.summary}." for m in p.modules),
        "Out of the box, " + "; ".join(f"`{c.key}` is `{c.default}` ({c.description.split(';')[0]})"
                                       for c in p.config) + ".",
        f"A managed edition, {p.name} Cloud, is sold on the Stackyard hosting platform for teams that "
        f"would rather not operate it themselves.",
    ]
    docs = [Doc(product_doc_id(p, "overview"), "product_docs", f"{p.name} overview",
                "\n\n".join(overview), f"{url}/overview")]
    docs.append(Doc(product_doc_id(p, "glossary"), "product_docs", f"What is {p.name}?",
                    f"{p.name} is {_a(p.kind)} made by {p.maker}.", f"{url}/glossary"))
    verify = rng.choice(("curl", "health"))
    check = (f"`curl http://localhost:{p.port}/health` should answer `ok`." if verify == "curl"
             else f"`{p.slug} status` should report every part as healthy on port {p.port}.")
    container = next(cmd for cmd in p.install if cmd.startswith("docker"))
    package = next(cmd for cmd in p.install if cmd != container)
    docs.append(Doc(
        product_doc_id(p, "install"), "product_docs", f"Installing {p.name}",
        f"There are two supported ways to install {p.name}.\n\nWith a container:\n\n    {container}\n\n"
        f"From a package:\n\n    {package}\n\n"
        f"Requirements: {p.requirements}. After the first start, {check}",
        f"{url}/install"))
    for c in p.config:
        section, _, leaf = c.key.partition(".")
        when = rng.choice(("after a restart", "on the next reload (`kill -HUP` or `{s} reload`)",
                           "immediately for new connections")).format(s=p.slug)
        docs.append(Doc(
            config_doc_id(p, c), "product_docs", f"Configuring {p.name}: {c.key}",
            f"The `{c.key}` setting controls {c.description}. It belongs to the {c.feature} part of "
            f"{p.name}.\n\nDefault: `{c.default}`. Allowed values: {c.allowed}.\n\nSet it in "
            f"{p.slug}.yaml:\n\n    {section}:\n      {leaf}: {c.default}\n\nChanges take effect {when}.",
            f"{url}/config/{_slug(c.key)}"))
    rows = "\n".join(f"- Maximum {name}: {value}" for name, value in p.limits.items())
    docs.append(Doc(product_doc_id(p, "limits"), "product_docs", f"Limits of {p.name}",
                    f"{p.name} enforces these hard limits:\n\n{rows}\n\nRequests above a limit are "
                    f"rejected with an error that names the limit; the limits cannot be raised by "
                    f"configuration.", f"{url}/limits"))
    for e in p.errors:
        docs.append(Doc(error_doc_id(p, e), "product_docs", f"Troubleshooting {e.code}: {e.message}",
                        f"{p.name} reports `{e.code} {e.message}` when {e.cause}. To fix it, {e.fix}.",
                        f"{url}/troubleshooting/{e.code.lower()}"))
    prev = p.releases[-2]
    docs.append(Doc(
        product_doc_id(p, "upgrade"), "product_docs", f"Upgrading {p.name} to {latest.version}",
        f"To upgrade from {p.name} {prev.version} to {latest.version}, back up the data directory, "
        f"read the release notes and upgrade one node at a time; nodes of the two versions can run "
        f"side by side during the upgrade. Version {latest.version} brings {latest.headline}.",
        f"{url}/upgrade"))
    env = p.slug.upper() + "_TOKEN"
    docs.append(Doc(
        product_doc_id(p, "security"), "product_docs", f"Securing {p.name}",
        f"Turn on TLS by pointing `tls.cert_file` and `tls.key_file` in {p.slug}.yaml at a "
        f"certificate and its key. Clients authenticate with a bearer token, read from the {env} "
        f"environment variable by the official clients. Tokens are scoped per project and can be "
        f"revoked without a restart. Never expose port {p.port} to the Internet without TLS.",
        f"{url}/security"))
    return docs


def code_notes(rng: random.Random, p: Product) -> list[Doc]:
    """Eight code notes per product; every one names the product, so "the code for it" needs the
    product from the conversation to find them."""
    lang = _code_lang(p)
    url = f"{CODE_URL}/{p.slug}"
    docs = []
    for m in p.modules:
        opener = rng.choice((
            "The code for {name}'s {feature} lives in `{path}`.",
            "{name}'s {feature} is implemented in `{path}`.",
            "In the {name} repository, `{path}` holds the {feature} code.",
        )).format(name=p.name, feature=m.feature, path=m.path)
        docs.append(Doc(
            code_doc_id(p, m), "code_notes", f"{p.name} source: {m.path}",
            f"{opener} The entry point is\n\n    {m.signature}\n\nwhich {m.summary}. Example:\n\n"
            f"```{lang}\n{m.usage}\n```\n\nThe unit tests for this file are in `{_test_path(p, m)}`.",
            f"{url}/{m.path}"))
    layout = "\n".join(f"- `{m.path}`: {m.feature}" for m in p.modules)
    docs.append(Doc(f"code-{p.slug}-layout", "code_notes", f"{p.name} repository layout",
                    f"The {p.name} repository is at {p.repo}. Its main {p.language} modules are:\n\n"
                    f"{layout}", f"{url}/layout"))
    docs.append(Doc(f"code-{p.slug}-tests", "code_notes", f"Running the {p.name} test suite",
                    f"Clone {p.repo} and run `{p.test_command}` in the repository root to run "
                    f"{p.name}'s unit tests.", f"{url}/tests"))
    codes = _and([e.code for e in p.errors])
    docs.append(Doc(f"code-{p.slug}-errors", "code_notes", f"{p.name} error codes in the source",
                    f"{p.name}'s error codes ({codes}) are defined in `{_errors_path(p)}`; every "
                    f"code maps to one error type, and new codes must be added there with a test.",
                    f"{url}/errors"))
    return docs


class _EventFormatter(string.Formatter):
    """``str.format`` for the event templates of news.yaml, with more format specs: ``{x:slug}``,
    ``{x:lower}``, ``{x:my}`` (ISO date as "March 2024") and ``{x:drawn}`` (ISO date in the
    style drawn for the row)."""

    def __init__(self, style: str) -> None:
        self.style = style

    def format_field(self, value: object, format_spec: str) -> str:
        if format_spec == "slug":
            return _slug(str(value))
        if format_spec == "lower":
            return str(value).lower()
        if format_spec in ("my", "drawn"):
            return fmt_date(str(value), self.style if format_spec == "drawn" else format_spec)
        return super().format_field(value, format_spec)


@dataclass
class NewsFacts:
    """Where the news generator put things, for routing and QA to refer to."""

    acquisition_docs: dict[str, list[str]] = field(default_factory=dict)  # target -> doc ids
    outage_docs: dict[str, list[str]] = field(default_factory=dict)  # product -> doc ids


def news_docs(rng: random.Random, src: Source) -> tuple[list[Doc], NewsFacts]:
    """Dated news: releases, patches, outages (some reported twice), deals, people, advisories."""
    docs: list[Doc] = []
    where = NewsFacts()

    def add(doc_id: str, iso: str, title: str, text: str, outlet: str) -> Doc:
        doc = Doc(doc_id, "news", title, text, f"{NEWS_URL}/{iso[:4]}/{doc_id}", date=iso)
        doc.text += f"\n\n({outlet})"
        docs.append(doc)
        return doc

    for p in src.products:
        for i, r in enumerate(p.releases):
            style = rng.choice(DATE_STYLES)
            text = f"{p.maker} released {p.name} {r.version} on {fmt_date(r.date, style)}. "
            if i == 0:
                text += f"{p.name} {r.version} is {r.headline} of the {p.kind}."
            else:
                prev = p.releases[i - 1]
                text += (f"The release brings {r.headline}. It follows {p.name} {prev.version}, "
                         f"released in {fmt_date(prev.date, 'my')}.")
            add(release_doc_id(p, r), r.date, f"{p.name} {r.version} released", text,
                rng.choice(src.outlets))
        latest = p.releases[-1]
        patch_iso = (dt.date.fromisoformat(latest.date) + dt.timedelta(days=21)).isoformat()
        add(f"news-{patch_iso}-{p.slug}-patch", patch_iso, f"{p.name} {latest.version}.1",
            f"{p.name} {latest.version}.1 is out ({fmt_date(patch_iso, rng.choice(DATE_STYLES))}): "
            f"a bug-fix release for the {latest.version} line.", rng.choice(src.outlets))

    for o in src.outages:
        p = src.product(o.product)
        ids = []
        a = add(f"news-{o.date}-{p.slug}-outage-a", o.date, f"{p.name} Cloud outage in {o.region}",
                f"On {fmt_date(o.date, 'dmy')}, {p.name} Cloud customers in {o.region} lost service "
                f"for {o.duration}. According to {p.maker}'s incident report, {o.cause}. Clients saw "
                f"`{o.error}` errors until engineers intervened. The fix shipped in {p.name} "
                f"{o.fixed_in}.", src.outlets[0])
        ids.append(a.id)
        if o.reports == 2:
            b = add(f"news-{o.date}-{p.slug}-outage-b", o.date,
                    f"{p.maker} explains {p.name} Cloud outage",
                    f"{p.maker} has published the post-mortem of the {o.duration} {p.name} Cloud "
                    f"outage that hit the {o.region} region on {fmt_date(o.date, 'iso')}: {o.cause}, "
                    f"and requests failed with `{o.error}`. Version {o.fixed_in} contains the fix, "
                    f"the company said.", src.outlets[1])
            ids.append(b.id)
        where.outage_docs[p.name] = ids

    for acq in src.acquisitions:
        acquirer, target, iso = acq.acquirer, acq.target, acq.date
        made = _and([f"{p.name}, the {p.kind}" for p in src.made_by(target)])
        slug = _slug(target)
        a = add(f"news-{iso}-acquisition-{slug}-a", iso, f"{acquirer} acquires {target}",
                f"{acquirer} announced on {fmt_date(iso, 'dmy')} that it has acquired {target}, the "
                f"{src.company(target).city} company behind {made}, for {acq.price}. {target}'s "
                f"products keep their names, and its {src.company(target).ceo}-led team joins "
                f"{acquirer}.", src.outlets[0])
        b = add(f"news-{iso}-acquisition-{slug}-b", iso, f"Deal: {acquirer} buys {target}",
                f"{acquirer} is buying {target} for {acq.price}, the two companies said on "
                f"{fmt_date(iso, 'mdy')}. The deal brings {_and([p.name for p in src.made_by(target)])} "
                f"under the same roof as {_and([p.name for p in src.made_by(acquirer)])}.", src.outlets[2])
        where.acquisition_docs[target] = [a.id, b.id]

    for kind, event in src.events.items():
        for row in event.rows:
            # One date style, then one outlet, drawn per row: the order fixes the output bytes.
            fmt = _EventFormatter(rng.choice(DATE_STYLES))
            fields = dict(row)
            if "product" in row:
                fields["product_maker"] = src.product(row["product"]).maker
            if "company" in row:
                fields["company_products"] = _and([p.name for p in src.made_by(row["company"])])
            try:
                iso = row["date"]
                doc_id, title, text = (fmt.format(t, **fields) for t in (event.id, event.title, event.text))
            except (KeyError, ValueError) as e:
                raise ValidationError(f"news.yaml: events.{kind}: cannot render row {row}: {e!r}; "
                                      f"every row needs an ISO date, and templates may use the "
                                      f"row's fields, product_maker and company_products") from e
            add(doc_id, iso, title, text, rng.choice(src.outlets))
    for year in ("2023", "2024"):
        # Second reports of the same event ("-b") are left out: a review lists each event once.
        events = sorted((d for d in docs if d.date and d.date.startswith(year)
                         and not d.id.endswith("-b")), key=lambda d: (d.date, d.id))
        lines = [f"In {fmt_date(d.date, 'my')}: {d.title}." for d in events if d.date]
        iso = f"{year}-12-30"
        add(f"news-{iso}-year-in-review", iso, f"{year} in review",
            f"The infrastructure software stories of {year}, month by month, as our readers "
            f"followed them.\n\n" + "\n".join(lines) + f"\n\n{len(lines)} stories in all; the "
            f"full reports are in the archive.", src.outlets[2])
    docs.sort(key=lambda d: (d.date or "", d.id))
    return docs, where


def encyclopedia_docs(src: Source) -> list[Doc]:
    docs = []
    for i, pl in enumerate(src.planets):
        n = pl.name
        text = "\n\n".join((
            f"{n} is the {_ORDINAL[i]} planet from the Sun. It is {pl.diameter} across and orbits "
            f"at an average distance of {pl.au} astronomical units, about {pl.mkm}. {n} was "
            f"{pl.discovery}.",
            f"One orbit of the Sun takes {n} {pl.year}, and a day on {n} lasts {pl.day}. "
            f"{n} has {pl.moons}.",
            pl.surface,
            pl.exploration,
        ))
        docs.append(Doc(f"enc-{n.lower()}", "encyclopedia", n, text, f"{WIKI_URL}/{n}"))
    for a in src.articles:
        docs.append(Doc(f"enc-{a.slug}", "encyclopedia", a.title, "\n\n".join(a.paragraphs),
                        f"{WIKI_URL}/{a.title.replace(' ', '_')}"))
    return docs


_ORDINAL = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth")


def faq_docs(src: Source) -> list[Doc]:
    docs = []
    counters: Counter[str] = Counter()
    for e in src.faq:
        counters[e.category] += 1
        doc_id = f"faq-{e.category}-{counters[e.category]:02d}"
        docs.append(Doc(doc_id, "faq", e.question, f"{e.question}\n\n{e.answer}",
                        f"{FAQ_URL}/{e.category}/{_slug(e.question)}"))
    for p in src.products:
        q = f"How much does {p.name} Cloud cost?"
        docs.append(Doc(
            pricing_doc_id(p), "faq", q,
            f"{q}\n\n{p.name} Cloud, the managed {p.kind} on Stackyard, costs ${p.price_usd_month} "
            f"per month on the Starter plan and ${3 * p.price_usd_month} per month on the Business "
            f"plan; Enterprise prices are agreed per contract. Paying annually saves 15%.",
            f"{FAQ_URL}/pricing/{p.slug}"))
    for t in src.sla_tiers:
        q = f"What does the {t.plan} plan's SLA guarantee?"
        docs.append(Doc(
            f"faq-sla-{t.plan.lower()}", "faq", q,
            f"{q}\n\nThe {t.plan} plan guarantees {t.uptime} monthly uptime. If we miss it, you "
            f"receive a service credit of {t.credit}. Support on {t.plan} is available {t.support_hours}.",
            f"{FAQ_URL}/sla/{t.plan.lower()}"))
    months = ", ".join(f"{m[:3]} {u:.2f}%" for m, u in zip(MONTHS, src.uptime_2024, strict=True))
    worst = min(range(12), key=lambda i: src.uptime_2024[i])
    docs.append(Doc(
        "faq-uptime-2024", "faq", "What was your uptime in 2024?",
        f"What was your uptime in 2024?\n\nMeasured across all regions and products, monthly uptime "
        f"in 2024 was: {months}. The lowest month was {MONTHS[worst]}, at "
        f"{src.uptime_2024[worst]:.2f}%.", f"{FAQ_URL}/sla/uptime-2024"))
    return docs


def recipe_docs(src: Source) -> list[Doc]:
    docs = []
    for r in src.recipes:
        timing = (f"Preparation takes {r.prep_min} minutes and cooking {r.cook_min} minutes." if r.cook_min
                  else f"It takes {r.prep_min} minutes to prepare and needs no cooking.")
        body = "\n".join(f"{i}. {s}" for i, s in enumerate(r.steps, 1))
        items = "\n".join(f"- {x}" for x in r.ingredients)
        docs.append(Doc(
            f"recipe-{r.slug}", "recipes", r.name,
            f"{r.name} ({r.cuisine}), serves {r.serves}. {timing}\n\nIngredients:\n{items}\n\n"
            f"Method:\n{body}\n\nTip: {r.tip}", f"{RECIPE_URL}/{r.slug}"))
    return docs


# ---------------------------------------------------------------------------------------------
# Images: small palette PNGs drawn with the bitmap font so the pixels do not depend on FreeType
# ---------------------------------------------------------------------------------------------

PALETTE = (
    (255, 255, 255), (20, 20, 20), (110, 110, 110), (40, 90, 170), (190, 210, 240),
    (230, 130, 30), (50, 150, 80), (200, 50, 50), (225, 225, 225), (240, 200, 40), (120, 170, 220),
)
WHITE, BLACK, GREY, BLUE, LIGHT_BLUE, ORANGE, GREEN, RED, LIGHT_GREY, YELLOW, WATER = range(11)


def _canvas(w: int, h: int) -> tuple[Image.Image, ImageDraw.ImageDraw, ImageFont.ImageFont]:
    img = Image.new("P", (w, h), WHITE)
    img.putpalette([v for rgb in PALETTE for v in rgb])
    loader = getattr(ImageFont, "load_default_imagefont", ImageFont.load_default)
    return img, ImageDraw.Draw(img), loader()


def _centered(draw: ImageDraw.ImageDraw, font: ImageFont.ImageFont, cx: int, y: int, text: str,
              fill: int = BLACK) -> None:
    left, _, right, _ = draw.textbbox((0, 0), text, font=font)
    draw.text((cx - (right - left) // 2, y), text, fill=fill, font=font)


def architecture_image(p: Product) -> Image.Image:
    """Five boxes top to bottom, one per component, joined by arrows."""
    img, draw, font = _canvas(160, 150)
    _centered(draw, font, 80, 2, f"{p.name} architecture")
    top, box_h, gap = 18, 19, 7
    for i, comp in enumerate(p.components):
        y = top + i * (box_h + gap)
        draw.rectangle((30, y, 130, y + box_h), fill=LIGHT_BLUE, outline=BLUE)
        _centered(draw, font, 80, y + 4, comp)
        if i + 1 < len(p.components):
            draw.line((80, y + box_h, 80, y + box_h + gap), fill=BLACK)
            draw.polygon(((76, y + box_h + gap - 3), (84, y + box_h + gap - 3), (80, y + box_h + gap)),
                         fill=BLACK)
    return img


def logo_image(p: Product, color: int) -> Image.Image:
    img, draw, font = _canvas(128, 128)
    draw.ellipse((24, 10, 104, 90), fill=color, outline=BLACK)
    draw.polygon(((64, 24), (88, 74), (40, 74)), fill=WHITE)
    _centered(draw, font, 64, 100, p.name.upper())
    return img


def bar_chart_image(title: str, labels: Sequence[str], values: Sequence[float], unit: str) -> Image.Image:
    img, draw, font = _canvas(160, 120)
    _centered(draw, font, 80, 2, title)
    base, top = 100, 32  # room for the value labels under the title
    vmax = max(values)
    width = 120 // len(values)
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        x0 = 20 + i * width + 8
        h = int((base - top) * v / vmax)
        draw.rectangle((x0, base - h, x0 + width - 16, base), fill=(BLUE, ORANGE, GREEN)[i % 3])
        _centered(draw, font, x0 + (width - 16) // 2, base - h - 12, f"{v:g} {unit}")
        _centered(draw, font, x0 + (width - 16) // 2, base + 4, label)
    draw.line((14, base, 150, base), fill=BLACK)
    return img


def line_chart_image(title: str, values: Sequence[float], lo: float, hi: float) -> Image.Image:
    img, draw, font = _canvas(160, 120)
    _centered(draw, font, 80, 2, title)
    x0, x1, y0, y1 = 30, 152, 100, 20
    draw.line((x0, y0, x1, y0), fill=BLACK)
    draw.line((x0, y0, x0, y1), fill=BLACK)
    draw.text((2, y1 - 4), f"{hi:g}", fill=GREY, font=font)
    draw.text((2, y0 - 8), f"{lo:g}", fill=GREY, font=font)
    pts = [(x0 + 4 + i * (x1 - x0 - 8) // (len(values) - 1), int(y0 - (v - lo) / (hi - lo) * (y0 - y1)))
           for i, v in enumerate(values)]
    draw.line(pts, fill=BLUE, width=2)
    for x, y in pts:
        draw.rectangle((x - 1, y - 1, x + 1, y + 1), fill=RED)
    for i, m in ((0, "Jan"), (6, "Jul"), (11, "Dec")):
        _centered(draw, font, pts[i][0], y0 + 4, m)
    return img


def danube_map_image() -> Image.Image:
    img, draw, font = _canvas(160, 120)
    draw.rectangle((0, 0, 159, 119), fill=LIGHT_GREY)
    draw.rectangle((138, 70, 159, 119), fill=WATER)  # the Black Sea, schematically
    _centered(draw, font, 148, 104, "Sea", fill=WHITE)
    river = [(4, 30), (30, 34), (52, 40), (64, 42), (76, 50), (80, 70), (96, 84), (118, 88), (138, 86)]
    draw.line(river, fill=WATER, width=3)
    for (x, y), name in zip((river[2], river[3], river[5], river[6]), ("VIE", "BRA", "BUD", "BEG"),
                            strict=True):
        draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=RED, outline=BLACK)
        # Vienna and Bratislava are close: label one to the left, the other to the right.
        offset = {"VIE": (-22, -12), "BRA": (2, -14)}.get(name, (-8, 5))
        draw.text((x + offset[0], y + offset[1]), name, fill=BLACK, font=font)
    draw.text((4, 4), "Danube", fill=BLACK, font=font)
    return img


def orbits_image(planets: Sequence[Planet]) -> Image.Image:
    img, draw, font = _canvas(170, 172)
    cx, cy, scale = 85, 95, 48  # scale: pixels per astronomical unit
    draw.ellipse((cx - 5, cy - 5, cx + 5, cy + 5), fill=YELLOW, outline=ORANGE)
    for pl, color in zip(planets[:4], (GREY, ORANGE, BLUE, RED), strict=True):
        r = int(float(pl.au) * scale)
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=color)
        draw.ellipse((cx + r - 2, cy - 2, cx + r + 2, cy + 2), fill=color)
    draw.text((2, 2), "Inner planets", fill=BLACK, font=font)
    return img


@dataclass(frozen=True)
class ImageSpec:
    doc_id: str
    file: str
    caption: str
    image: Image.Image


def image_specs(src: Source) -> list[ImageSpec]:
    """The images and the documents that carry them."""
    specs = []
    for name in ("Quarry", "Lumen", "Tidewater", "Ferrow"):
        p = src.product(name)
        specs.append(ImageSpec(
            product_doc_id(p, "overview"), f"{p.slug}_arch.png",
            f"{p.name} architecture: {' -> '.join(p.components)}", architecture_image(p)))
    for name, color in (("Beacon", ORANGE), ("Kestrel", GREEN)):
        p = src.product(name)
        specs.append(ImageSpec(product_doc_id(p, "overview"), f"{p.slug}_logo.png",
                               f"The {p.name} logo", logo_image(p, color)))
    quarry = src.product("Quarry")
    latest = quarry.releases[-1]
    specs.append(ImageSpec(
        release_doc_id(quarry, latest), "quarry_latency.png",
        "Quarry p99 query latency: 48 ms in 2.0, 21 ms in 3.0",
        bar_chart_image("Quarry p99 latency", ("2.0", "3.0"), (48, 21), "ms")))
    specs.append(ImageSpec(
        "faq-uptime-2024", "stackyard_uptime_2024.png",
        "Stackyard monthly uptime in 2024, lowest in July",
        line_chart_image("Uptime 2024 (%)", src.uptime_2024, 99.6, 100.0)))
    specs.append(ImageSpec("enc-danube", "danube_map.png",
                           "Schematic map of the Danube with Vienna, Bratislava, Budapest and Belgrade",
                           danube_map_image()))
    specs.append(ImageSpec("enc-mars", "inner_planets.png",
                           "Orbits of Mercury, Venus, Earth and Mars drawn to scale around the Sun",
                           orbits_image(src.planets)))
    return specs


# ---------------------------------------------------------------------------------------------
# Routing and QA sets
# ---------------------------------------------------------------------------------------------

@dataclass
class Item:
    """One routing query; ``targets`` are the documents that answer it (gold = their sources),
    ``entity`` must appear in a target and, for follow-ups, must not appear in the query."""

    query: str
    targets: list[str]
    history: list[dict[str, str]] = field(default_factory=list)
    entity: str = ""


def _turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    out = []
    for user, assistant in pairs:
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return out


def routing_items(rng: random.Random, src: Source, where: NewsFacts) -> list[Item]:
    items: list[Item] = []
    P = src.products
    # Single-turn questions: the query names what it is about.
    for i, p in enumerate(P):
        c = p.config[i % len(p.config)]
        items.append(Item(f"Which setting controls {c.description.split(';')[0]} in {p.name}?",
                          [config_doc_id(p, c)], entity=p.name))
    for p in P[:3]:
        items.append(Item(f"What is the maximum {list(p.limits)[1]} in {p.name}?",
                          [product_doc_id(p, "limits")], entity=p.name))
    for p in P[3:5]:
        items.append(Item(f"What does error {p.errors[0].code} mean and how do I fix it?",
                          [error_doc_id(p, p.errors[0])], entity=p.errors[0].code))
    for i, p in enumerate(P):
        m = p.modules[(i + 2) % len(p.modules)]
        items.append(Item(f"Which source file implements {p.name}'s {m.feature}?",
                          [code_doc_id(p, m)], entity=p.name))
    items.append(Item("How do I run the Tidewater unit tests?", ["code-tidewater-tests"], entity="Tidewater"))
    items.append(Item("Where are Marlowe's error codes defined in the source?", ["code-marlowe-errors"],
                      entity="Marlowe"))
    for p in (P[0], P[4], P[6]):
        r = p.releases[1]
        items.append(Item(f"When was {p.name} {r.version} released?", [release_doc_id(p, r)],
                          entity=p.name))
    items.append(Item("Who acquired Calloway Data?", where.acquisition_docs["Calloway Data"],
                      entity="Calloway Data"))
    items.append(Item("What caused the Ferrow Cloud outage in ap-south?", where.outage_docs["Ferrow"],
                      entity="Ferrow"))
    items.append(Item("How much did Northwind Labs raise in its Series D round?",
                      ["news-2024-11-05-northwind-labs-series-d"], entity="Series D"))
    items.append(Item("Which security advisory was published for Kestrel in 2022?",
                      ["news-2022-04-19-kst-sa-2022-01"], entity="KST-SA-2022-01"))
    for q, target, entity in (
        ("How far is Neptune from the Sun?", "enc-neptune", "4.5 billion km"),
        ("Who discovered Uranus?", "enc-uranus", "Herschel"),
        ("How deep is Lake Baikal?", "enc-lake-baikal", "1,642"),
        ("Who built the first working transistor?", "enc-transistor", "Bardeen"),
        ("What was the first message sent over ARPANET?", "enc-arpanet", "LO"),
        ("How long is the river Nile?", "enc-nile", "6,650 km"),
        ("Why is octopus blood blue?", "enc-octopus", "haemocyanin"),
        ("When did Apollo 11 land on the Moon?", "enc-moon", "20 July 1969"),
        ("What are your support hours?", "faq-support-01", "09:00 to 18:00"),
        ("Can I get my money back after cancelling?", "faq-refunds-01", "refund"),
        ("Which payment methods do you accept?", "faq-billing-01", "Visa"),
        ("What uptime does the Business plan guarantee?", "faq-sla-business", "99.9%"),
        ("How do I turn on two-factor authentication?", "faq-accounts-02", "authenticator"),
        ("Is there a free trial?", "faq-plans-01", "14 days"),
        ("How do I make mushroom risotto?", "recipe-mushroom-risotto", "arborio"),
        ("What temperature should the oven be for banana bread?", "recipe-banana-bread", "175 degrees"),
        ("What goes into a Greek salad?", "recipe-greek-salad", "feta"),
        ("Is there cream in a carbonara?", "recipe-carbonara", "no cream"),
        ("How do I get my hummus really smooth?", "recipe-hummus", "iced water"),
        ("How long should the broth for beef pho simmer?", "recipe-pho", "3 hours"),
    ):
        items.append(Item(q, [target], entity=entity))

    # Follow-ups: the referent lives only in the history; the raw query leans elsewhere
    # ("code" also means promo and verification codes in the FAQ; "released" and "discovered"
    # sound like news; "how long does it take" sounds like refunds or support).
    code_q = ("Where can I find the code for it?", "Which file implements that?",
              "Where is that implemented?", "Can you point me to the code for that?")
    for i, p in enumerate(P):
        c = p.config[0]
        m = next(m for m in p.modules if m.feature == c.feature)
        history = _turns((f"How do I configure {p.name}'s {c.feature}?",
                          f"Set `{c.key}` in {p.slug}.yaml; the default is {c.default}."))
        if i % 3 == 2:  # a longer conversation: the product is two turns back
            history += _turns(("Does that need a restart?", "See the configuration page; most settings are read at start-up."))
        items.append(Item(code_q[i % len(code_q)], [code_doc_id(p, m)], history, p.name))
    release_q = ("When was it first released?", "When did the first stable version come out?")
    for i, p in enumerate(P[:6]):
        items.append(Item(release_q[i % 2], [release_doc_id(p, p.releases[0])],
                          _turns((f"What is {p.name}?", f"{p.name} is {_a(p.kind)} made by {p.maker}.")),
                          p.name))
    cost_q = ("How much does it cost?", "What does the managed version cost per month?",
              "Is it expensive?")
    for i, p in enumerate(P[2:]):
        items.append(Item(cost_q[i % 3], [pricing_doc_id(p)],
                          _turns((f"What does {p.name} do?", f"It {p.tagline}.")), p.name))
    for o in src.outages:
        p = src.product(o.product)
        e = next(e for e in p.errors if e.code == o.error)
        items.append(Item("How do I fix that error?", [error_doc_id(p, e)],
                          _turns((f"What happened during the {p.name} Cloud outage?",
                                  f"{o.cause[0].upper() + o.cause[1:]}; clients saw {o.error} errors.")),
                          o.error))
    for name in ("Lumen", "Marlowe"):
        p = src.product(name)
        items.append(Item("Was that company ever acquired?", where.acquisition_docs[p.maker],
                          _turns((f"Who makes {p.name}?", f"{p.maker}.")), p.maker))
    for planet, q in (("Uranus", "When was it discovered?"), ("Neptune", "Who found it?"),
                      ("Mars", "How many moons does it have?")):
        pl = src.planet(planet)
        items.append(Item(q, [f"enc-{planet.lower()}"],
                          _turns((f"Tell me about {planet}.", f"{planet} is {pl.diameter} across.")),
                          planet))
    for slug, name in (("beef-stew", "Beef and ale stew"), ("french-onion-soup", "French onion soup")):
        items.append(Item("How long does it take?", [f"recipe-{slug}"],
                          _turns((f"I want to cook {name.lower()} tonight.",
                                  "Good choice; it needs a few hours but little work.")), name))
    # Generic follow-ups: the same words follow conversations about every source, so only
    # the history can tell where the answer is (KIMAs's case for routing the rewrite).
    generic_q = ("Tell me more about it.", "Can you give me more details on that?",
                 "What else should I know about it?")
    generic = [
        ("Tell me about Jupiter.", "It is the largest planet.", ["enc-jupiter"], "Jupiter"),
        ("Tell me about Saturn.", "It is the planet with the rings.", ["enc-saturn"], "Saturn"),
        ("What was the ARPANET?", "An early packet-switched network.", ["enc-arpanet"], "ARPANET"),
        ("I want to make Shakshuka for brunch.", "A good choice.", ["recipe-shakshuka"], "Shakshuka"),
        ("Do you have a recipe for Paella?", "Yes, a classic one.", ["recipe-paella"], "Paella"),
        ("Let's cook the Focaccia today.", "Sure.", ["recipe-focaccia"], "Focaccia"),
        (f"What are the limits of {P[5].name}?", "There are a few.", [product_doc_id(P[5], "limits")], P[5].name),
        (f"What are the limits of {P[6].name}?", "There are a few.", [product_doc_id(P[6], "limits")], P[6].name),
        ("Was there a Lumen Cloud outage?", "Yes, one.", where.outage_docs["Lumen"], "Lumen"),
        ("Was there a Kestrel Cloud outage?", "Yes, one.", where.outage_docs["Kestrel"], "Kestrel"),
        ("What is your Refund policy?", "Refunds are possible.", ["faq-refunds-01"], "Refund"),
        ("How does Two-factor authentication work here?", "With an app.", ["faq-accounts-02"], "Two-factor"),
    ]
    for i, (user, answer, targets, entity) in enumerate(generic):
        items.append(Item(generic_q[i % len(generic_q)], list(targets), _turns((user, answer)), entity))
    items.append(Item("Who programmed it?", ["enc-eniac"],
                      _turns(("What was ENIAC?", "One of the first general-purpose electronic computers.")),
                      "ENIAC"))
    return items


@dataclass
class QA:
    id: str
    query: str
    answer: str
    supporting: list[str]
    history: list[dict[str, str]] = field(default_factory=list)


def qa_items(src: Source, docs: dict[str, Doc], where: NewsFacts) -> list[QA]:
    out: list[QA] = []

    def add(query: str, answer: str, supporting: list[str], history: list[dict[str, str]] | None = None) -> None:
        out.append(QA(f"qa-{len(out) + 1:03d}", query, answer, supporting, history or []))

    def date_in(doc_id: str, iso: str) -> str:
        # The answer is the date as the document writes it, whichever style it drew.
        return next(fmt_date(iso, s) for s in DATE_STYLES if fmt_date(iso, s) in docs[doc_id].text)

    for i, p in enumerate(src.products):
        c = p.config[(i + 1) % len(p.config)]
        add(f"What is the default value of {c.key} in {p.name}?", c.default, [config_doc_id(p, c)])
    for i, p in enumerate(src.products):
        m = p.modules[i % len(p.modules)]
        add(f"Which file contains the code for {p.name}'s {m.feature}?", m.path, [code_doc_id(p, m)])
    for p in src.products[:4]:
        r = p.releases[-1]
        add(f"When was {p.name} {r.version} released?", date_in(release_doc_id(p, r), r.date),
            [release_doc_id(p, r)])
    for name in ("Lumen", "Marlowe"):
        p = src.product(name)
        acq = next(a for a in src.acquisitions if a.target == p.maker)
        add(f"Which company acquired the maker of {name}?", acq.acquirer,
            [product_doc_id(p, "overview"), where.acquisition_docs[p.maker][0]])
    beacon = src.product("Beacon")
    acq_doc = where.acquisition_docs[beacon.maker][0]
    add("When was the company that makes Beacon acquired?",
        date_in(acq_doc, next(a.date for a in src.acquisitions if a.target == beacon.maker)),
        [product_doc_id(beacon, "glossary"), acq_doc])
    kestrel = next(o for o in src.outages if o.product == "Kestrel")
    add("Which error did clients see during the Kestrel Cloud outage?", kestrel.error,
        where.outage_docs["Kestrel"][:1])
    quarry = next(o for o in src.outages if o.product == "Quarry")
    add("In which Quarry version was the Quarry Cloud outage fixed?", quarry.fixed_in,
        where.outage_docs["Quarry"][:1])
    lumen, lumen_outage = src.product("Lumen"), next(o for o in src.outages if o.product == "Lumen")
    lumen_error = next(e for e in lumen.errors if e.code == lumen_outage.error)
    add("How do you fix the error that clients saw during the Lumen Cloud outage?",
        "raise snapshot.interval_s", [where.outage_docs["Lumen"][0], error_doc_id(lumen, lumen_error)])
    add("Who discovered Uranus?", "William Herschel", ["enc-uranus"])
    add("Who discovered the planet that takes 165 Earth years to orbit the Sun?", "Johann Galle",
        ["enc-neptune"])
    add("What are the names of the moons of Mars?", "Phobos and Deimos", ["enc-mars"])
    add("How long is the grace period after a failed payment?", "14 days", ["faq-billing-06"])
    add("What monthly uptime does the Enterprise plan guarantee?", "99.95%", ["faq-sla-enterprise"])
    add("How much does Lumen Cloud cost per month on the Starter plan?",
        f"${src.product('Lumen').price_usd_month}", [pricing_doc_id(src.product("Lumen"))])
    add("What is the Starter price of the managed edition of the product whose retry code lives in "
        "tidewater/retry/backoff.go?", f"${src.product('Tidewater').price_usd_month} per month",
        [code_doc_id(src.product("Tidewater"), src.product("Tidewater").modules[2]),
         pricing_doc_id(src.product("Tidewater"))])
    add("At what temperature is rosemary focaccia baked?", "220 degrees Celsius", ["recipe-focaccia"])
    add("How long does banana bread bake?", "about 60 minutes", ["recipe-banana-bread"])
    add("Who sent the first message over ARPANET?", "Charley Kline", ["enc-arpanet"])
    add("About how many vacuum tubes did ENIAC use?", "17,500", ["enc-eniac"])
    q = src.product("Quarry")
    add("Which port does it listen on by default?", str(q.port), [product_doc_id(q, "overview")],
        _turns(("Tell me about Quarry.", f"Quarry is {_a(q.kind)} by {q.maker}.")))
    t = src.product("Tidewater")
    add("Which file implements it?", t.modules[2].path, [code_doc_id(t, t.modules[2])],
        _turns(("How do I change how often Tidewater retries a failing job?",
                "Set retry.max_attempts; the delay grows from retry.backoff_s.")))
    k = src.product("Kestrel")
    add("When did its 3.0 release come out?", date_in(release_doc_id(k, k.releases[-1]), k.releases[-1].date),
        [release_doc_id(k, k.releases[-1])], _turns(("What is Kestrel?", f"{_a(k.kind, capital=True)} by {k.maker}.")))
    add("When was the dam on it completed?", "1970", ["enc-nile"],
        _turns(("Which river is the longest in the world?", "The Nile, about 6,650 km long.")))
    add("Which company is it owned by now?", "Harbor & Finch",
        [product_doc_id(src.product("Beacon"), "overview"), where.acquisition_docs["Brightline Systems"][0]],
        _turns(("Which agent should I use to ship logs?", "Beacon, made by Brightline Systems.")))
    return out


@dataclass(frozen=True)
class NoAnswer:
    """A question the corpus does not answer, about things it knows: no document naming
    ``subject`` (every document when it is "") holds a word beginning with one of ``absent``
    (lower case; :func:`check` says so when a template starts to state it)."""

    id: str
    query: str
    subject: str
    absent: tuple[str, ...]


def no_answer_items(src: Source, docs: Sequence[Doc]) -> list[NoAnswer]:
    """Questions the corpus holds no answer to, though their subjects are in it: what a
    pipeline should answer with "no answer" (``eval pipeline`` scores ``"answer": null``)."""
    out: list[NoAnswer] = []

    def add(query: str, subject: str, *absent: str) -> None:
        out.append(NoAnswer(f"na-{len(out) + 1:03d}", query, subject, absent))

    def about(name: str) -> list[Doc]:
        return [d for d in docs if name.lower() in d.text.lower()]

    makers = list(dict.fromkeys(p.maker for p in src.products))
    for m in makers[:3]:
        add(f"Who founded {m}?", m, "found", "establish")
    for m in makers[1:3]:
        add(f"How many employees does {m} have?", m, "employ", "staff", "headcount", "workforce")
    no_ceo = [m for m in makers if not any(re.search(r"\b(?:ceo|chief executive)", d.text.lower()) for d in about(m))]
    for m in no_ceo[:1]:
        add(f"Who is the chief executive of {m}?", m, "ceo", "chief executive")
    for p in src.products[:2]:
        add(f"Who designed the {p.name} logo?", p.name, "logo")
    no_eol = [p for p in src.products if not any("end of life" in d.text.lower() for d in about(p.name))]
    for p in no_eol[:2]:
        add(f"When did {p.name} 1.0 reach end of life?", p.name, "end of life", "end-of-life")
    dough = [r for r in src.recipes if any("dough" in step.lower() for step in r.steps)]
    for r in dough[:1]:
        add(f"How long should the {r.name.lower()} dough be kneaded?", r.name, "knead")
    add("What is the boiling point of water?", "", "boiling point")
    add("How many people live in Canberra?", "", "canberra")
    return out


def stage_items(src: Source, docs: dict[str, Doc], where: NewsFacts) -> list[dict[str, object]]:
    """Pipeline eval items with gold for the timeline and images stages (``eval ablate`` / ``sweep``).

    Each is a QA item (``id``, ``query``, ``answer``, ``supporting``) plus, for a timeline
    question, ``events``: the one dated event it is about with every document that reports it
    (both outlets and the year in review, whose line carries the first report's title), so that
    events from these documents which stay apart are duplicates; and for an image question,
    ``images``: the ids of the images whose caption states what the answer states (none for a
    question whose document carries an image that says nothing about the answer).
    """
    out: list[dict[str, object]] = []

    def add(query: str, answer: str, supporting: list[str], **gold: object) -> None:
        out.append({"id": f"stage-{len(out) + 1:03d}", "query": query, "answer": answer,
                    "supporting": supporting, **gold})

    def reports(ids: list[str], iso: str) -> list[str]:
        review = docs.get(f"news-{iso[:4]}-12-30-year-in-review")
        first = docs[ids[0]]
        return ids + ([review.id] if review and f"{first.title}." in review.text else [])

    for o in src.outages:
        ids = where.outage_docs[o.product]
        if len(ids) > 1:
            add(f"When did the {o.product} Cloud outage happen?", fmt_date(o.date, "dmy"), list(ids),
                events=[{"date": o.date, "sources": reports(ids, o.date)}])
    for acq in src.acquisitions:
        ids = where.acquisition_docs[acq.target]
        add(f"When did {acq.acquirer} acquire {acq.target}?", fmt_date(acq.date, "dmy"), list(ids),
            events=[{"date": acq.date, "sources": reports(ids, acq.date)}])
    for name in ("Quarry", "Lumen", "Tidewater", "Ferrow"):
        p = src.product(name)
        add(f"Which parts is a {name} deployment built from?", _and(list(p.components)),
            [product_doc_id(p, "overview")], images=[f"{p.slug}_arch"])
    quarry = src.product("Quarry")
    add("How much did Quarry 3.0 cut the p99 query latency?", "from 48 ms to 21 ms",
        [release_doc_id(quarry, quarry.releases[-1])], images=["quarry_latency"])
    add("Which month of 2024 had the lowest Stackyard uptime?", "July", ["faq-uptime-2024"],
        images=["stackyard_uptime_2024"])
    add("Which capital cities lie on the Danube?", "Vienna, Bratislava, Budapest and Belgrade", ["enc-danube"],
        images=["danube_map"])
    add("How far from the Sun does Mars orbit on average?", "1.52 astronomical units", ["enc-mars"],
        images=["inner_planets"])
    # The documents of these answers carry an image that states nothing the answer does.
    add("What are the names of the moons of Mars?", "Phobos and Deimos", ["enc-mars"], images=[])
    add("Which language is Kestrel written in?", src.product("Kestrel").language,
        [product_doc_id(src.product("Kestrel"), "overview")], images=[])
    add("Under which licence is Quarry published?", "Apache-2.0", [product_doc_id(quarry, "overview")], images=[])
    return out


# ---------------------------------------------------------------------------------------------
# Assembly, checks, writing
# ---------------------------------------------------------------------------------------------

@dataclass
class DemoSet:
    docs: list[Doc]
    images: dict[str, Image.Image]  # file name -> image
    routing: list[Item]
    qa: list[QA]
    stages: list[dict[str, object]] = field(default_factory=list)
    no_answer: list[NoAnswer] = field(default_factory=list)


def build(src: Source | None = None) -> DemoSet:
    """Render every document, image, routing query and QA item from ``src`` (default: the
    ``source/*.yaml`` files)."""
    src = load_source() if src is None else src
    rng = random.Random(SEED)
    docs: list[Doc] = []
    for p in src.products:
        docs += product_docs(rng, p)
    for p in src.products:
        docs += code_notes(rng, p)
    news, where = news_docs(rng, src)
    docs += news
    docs += encyclopedia_docs(src)
    docs += faq_docs(src)
    docs += recipe_docs(src)
    by_id = {d.id: d for d in docs}
    images: dict[str, Image.Image] = {}
    for spec in image_specs(src):
        by_id[spec.doc_id].images.append(
            {"id": Path(spec.file).stem, "path": f"{IMAGES_DIR}/{spec.file}", "caption": spec.caption})
        images[spec.file] = spec.image
    return DemoSet(docs, images, routing_items(rng, src, where), qa_items(src, by_id, where),
                   stage_items(src, by_id, where), no_answer_items(src, docs))


def check(demo: DemoSet) -> None:
    """Raise ValidationError when a label no longer matches the rendered text."""
    problems = []
    ids = Counter(d.id for d in demo.docs)
    problems += [f"duplicate document id {i!r}" for i, n in ids.items() if n > 1]
    by_id = {d.id: d for d in demo.docs}
    for n, item in enumerate(demo.routing):
        missing = [t for t in item.targets if t not in by_id]
        if missing:
            problems.append(f"routing item {n} ({item.query!r}): unknown targets {missing}")
            continue
        if not any(item.entity.lower() in by_id[t].text.lower() for t in item.targets):
            problems.append(f"routing item {n} ({item.query!r}): {item.entity!r} not in its targets")
        if item.history and item.entity.lower() in item.query.lower():
            problems.append(f"routing item {n}: follow-up query names its referent {item.entity!r}")
    for qa in demo.qa:
        missing = [t for t in qa.supporting if t not in by_id]
        if missing:
            problems.append(f"{qa.id}: unknown supporting ids {missing}")
            continue
        union = " ".join(by_id[t].text for t in qa.supporting).lower()
        if qa.answer.lower() not in union:
            problems.append(f"{qa.id}: answer {qa.answer!r} is not in {qa.supporting}")
    images = {Path(name).stem for name in demo.images}
    for item in demo.stages:
        sid, gold = item["id"], [str(t) for t in item["supporting"]]  # type: ignore[union-attr]
        if any(t not in by_id for t in gold):
            problems.append(f"{sid}: unknown supporting ids {gold}")
            continue
        if str(item["answer"]).lower() not in " ".join(by_id[t].text for t in gold).lower():
            problems.append(f"{sid}: answer {item['answer']!r} is not in {gold}")
        for ev in item.get("events", []):  # type: ignore[attr-defined]
            missing = [t for t in ev["sources"] if t not in by_id]
            problems += [f"{sid}: event sources {missing} unknown"] if missing else []
        carried = {im["id"] for t in gold for im in by_id[t].images}
        stray = [i for i in item.get("images", []) if i not in images or i not in carried]  # type: ignore[attr-defined]
        problems += [f"{sid}: gold images {stray} are not carried by {gold}"] if stray else []
    for na in demo.no_answer:
        held = [(d.id, w) for d in demo.docs if na.subject.lower() in d.text.lower() for w in na.absent
                if re.search(rf"(?<![\w]){re.escape(w)}", d.text.lower())]
        if held:
            problems.append(f"{na.id} ({na.query!r}): {held[0][0]} holds {held[0][1]!r}: the corpus answers it now")
    if problems:
        raise ValidationError("demo data is inconsistent:\n  " + "\n  ".join(problems)
                              + "\nfix the facts in searchsmith/models/demo/source/*.yaml or the templates "
                              "in generate.py")


def _jsonl(records: list[dict[str, object]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; these files are shipped and read by others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def readme(demo: DemoSet) -> str:
    per_source = Counter(d.source for d in demo.docs)
    follow_ups = sum(1 for i in demo.routing if i.history)
    two_turn_qa = sum(1 for q in demo.qa if q.history)
    rows = "\n".join(f"| `{s}` | {n} | {_SOURCE_BLURBS[s]} |" for s, n in per_source.items())
    dated = sum(1 for d in demo.docs if d.date)
    return f"""# The searchsmith demo knowledge base

Everything in this folder was written or generated by the searchsmith authors and is released
under the project's licence (Apache-2.0). The products, companies, people and events are
fictional; the encyclopedia articles state well-known facts in our own words. Nothing here is
copied from another data set.

Regenerate with `python -m searchsmith.models.demo.generate` (writes this folder atomically;
`--out DIR` writes elsewhere). The output depends only on the facts and prose in
`{SOURCE_GLOB}` (read and type-checked by `records.py`) and the templates and seed in
`generate.py`: edit those, never the generated files.

## Files

| file | format | contents |
|---|---|---|
| `{CORPUS_FILE}` | corpus (format: README, "Index a corpus") | {len(demo.docs)} documents in {len(per_source)} sources; {dated} carry an ISO `date`; {sum(1 for d in demo.docs if d.images)} carry images |
| `{IMAGES_DIR}/*.png` | palette PNG | {len(demo.images)} images (diagrams, logos, charts, maps); paths in the corpus are relative to this folder |
| `{ROUTING_FILE}` | routing eval | {len(demo.routing)} queries, {follow_ups} of them follow-ups whose referent is only in the history |
| `{QA_FILE}` | pipeline eval | {len(demo.qa)} questions ({two_turn_qa} two-turn, some multi-hop); each answer occurs in its `supporting` documents |
| `{STAGES_FILE}` | pipeline eval + stage gold | {len(demo.stages)} questions for `eval ablate` / `eval sweep`: {sum(1 for s in demo.stages if "events" in s)} with gold dated `events` (every document reporting the event), {sum(1 for s in demo.stages if "images" in s)} with gold `images` (the image ids that belong next to the answer; {sum(1 for s in demo.stages if s.get("images") == [])} where none does) |
| `{NO_ANSWER_FILE}` | pipeline eval | {len(demo.no_answer)} questions about things the corpus names that it does not answer (`"answer": null`: saying so is right); the generator checks that no document about their subject states what they ask |
| `{SOURCE_GLOB}` | YAML, edited by hand | the facts and prose it is all rendered from: {_and([f'`{n}`' for n in SOURCE_FILES])} |

## Sources

| source | documents | what |
|---|---|---|
{rows}

News dates are written in the text as "12 March 2024", "2024-03-12", "March 12, 2024" or
"March 2024"; four outages and both acquisitions are reported twice by different outlets
(near-duplicates). Follow-up routing queries such as "Where can I find the code for it?" name
nothing: the product, planet or recipe they ask about is only in the history, and their words
are chosen to pull towards another source ("code" also means promo and verification codes in
the FAQ; "released" and "discovered" sound like news).
"""


_SOURCE_BLURBS = {
    "product_docs": "documentation of eight fictional products: overview, install, configuration keys, limits, troubleshooting, upgrade, security",
    "code_notes": "code notes per product: which file implements what, signatures, examples, tests, error codes",
    "news": "dated news: releases, patches, outages, acquisitions, funding, conferences, advisories, end of life",
    "encyclopedia": "general articles: planets, geography, biology, history of computing",
    "faq": "customer FAQ of the Stackyard hosting platform: billing, promo codes, accounts, support, refunds, SLAs, prices",
    "recipes": "home-cooking recipes with ingredients, times and steps",
}


def write_all(out_dir: Path) -> dict[str, int]:
    """Build, check and write the demo set into ``out_dir``.

    Args:
        out_dir: target folder; created if missing. Stale ``images/*.png`` files that the
            generator no longer produces are removed so the folder matches the generator.

    Returns:
        Counts: ``documents``, ``images``, ``routing``, ``follow_ups``, ``qa``, ``stages`` and one
        ``source:<name>`` entry per source.

    Raises:
        ValidationError: ``out_dir`` is a file, or the generated labels are inconsistent.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValidationError(f"demo.generate: out_dir {out_dir} is a file; pass a directory")
    demo = build()
    check(demo)
    (out_dir / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
    for name, img in demo.images.items():
        _write_atomic(out_dir / IMAGES_DIR / name, _png(img))
    for stale in (out_dir / IMAGES_DIR).glob("*.png"):
        if stale.name not in demo.images:
            stale.unlink()
    _write_atomic(out_dir / CORPUS_FILE, _jsonl([d.record() for d in demo.docs]))
    _write_atomic(out_dir / ROUTING_FILE, _jsonl(
        [{"history": i.history, "query": i.query,
          "sources": sorted({d.source for d in demo.docs if d.id in set(i.targets)})}
         for i in demo.routing]))
    _write_atomic(out_dir / QA_FILE, _jsonl(
        [{"id": q.id, "query": q.query, **({"history": q.history} if q.history else {}),
          "answer": q.answer, "supporting": q.supporting} for q in demo.qa]))
    _write_atomic(out_dir / STAGES_FILE, _jsonl(demo.stages))
    _write_atomic(out_dir / NO_ANSWER_FILE, _jsonl(
        [{"id": na.id, "query": na.query, "answer": None, "supporting": []} for na in demo.no_answer]))
    _write_atomic(out_dir / README_FILE, readme(demo).encode("utf-8"))
    counts = {"documents": len(demo.docs), "images": len(demo.images), "routing": len(demo.routing),
              "follow_ups": sum(1 for i in demo.routing if i.history), "qa": len(demo.qa),
              "stages": len(demo.stages), "no_answer": len(demo.no_answer)}
    counts.update({f"source:{s}": n for s, n in Counter(d.source for d in demo.docs).items()})
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m searchsmith.models.demo.generate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent,
                        help="folder to write into (default: the package's demo folder)")
    args = parser.parse_args(argv)
    print(json.dumps(write_all(args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
