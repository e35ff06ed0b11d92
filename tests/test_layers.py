"""Dependencies between the four packages run one way: kernels at the bottom, models above, serving and training on top.

The rules, checked by parsing every ``.py`` file under ``kernels/``, ``models/``, ``serving/``
and ``training/`` with ``ast`` (nothing is imported, so the check is fast and cannot be
fooled by import-time side effects):

* ``kernels`` imports nothing of ``searchsmith`` outside ``searchsmith.kernels``, and no
  ``*_kernel.py`` imports ``dispatch`` (the dispatcher loads the kernels, so that would be a
  loop; the shared checks live in ``kernels/checks.py``).
* ``models`` imports neither ``searchsmith.serving`` nor ``searchsmith.training``, anywhere in
  a file, function bodies included. Imports spelled as strings count too:
  ``importlib.import_module("searchsmith.serving.x")`` and ``"searchsmith.serving.x:func"``
  targets, because a loader that resolves them is an import a reader cannot see.
* ``serving`` does not import ``searchsmith.training`` when a module is imported (imports
  inside functions, and type-only imports under ``if TYPE_CHECKING:``, are allowed), so the
  server starts without loading training code.

Files that break a rule today are listed in ``ALLOWED`` with exactly the modules they import
against it. The test fails when a new violation appears and also when a listed one is gone,
so the list can only shrink: delete an entry once its file is fixed.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("kernels", "models", "serving", "training")
ROOT_PACKAGE = "searchsmith"

# file (relative to the repository) -> modules it imports against the rules today.
ALLOWED: dict[str, frozenset[str]] = {}

# A "module:attribute" target as used by string-dispatching loaders.
_TARGET = re.compile(r"(searchsmith(?:\.\w+)+):\w+(?:\.\w+)*")
_IMPORT_CALLS = frozenset({"import_module", "__import__"})


@dataclass(frozen=True)
class ImportRef:
    """One module a file refers to: by an import statement, an import call or a target string."""

    module: str
    line: int
    kind: str  # "import" (statement), "call" (import_module/__import__), "string" (module:attr)
    in_function: bool  # runs only when the enclosing function is called
    type_only: bool  # under ``if TYPE_CHECKING:``, never executed


def module_name(path: Path) -> str:
    """Dotted module name of a repository file: ``serving/pipeline/cli.py`` -> ``searchsmith.serving.pipeline.cli``."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([ROOT_PACKAGE, *parts])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _string_prefix(node: ast.expr) -> str | None:
    """The literal text of a str constant, or the literal head of an f-string; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            # Keep only whole dotted components: f"searchsmith.serving.{x}" -> searchsmith.serving
            return head.value.rpartition(".")[0] if "." in head.value else head.value
    return None


class _Collector(ast.NodeVisitor):
    """Walks one module and records every ``ImportRef``, knowing whether it runs at import time."""

    def __init__(self, package: str) -> None:
        self.package = package  # the package relative imports resolve against
        self.refs: list[ImportRef] = []
        self._function_depth = 0
        self._type_only_depth = 0

    def _add(self, module: str, node: ast.AST, kind: str) -> None:
        self.refs.append(ImportRef(module, getattr(node, "lineno", 0), kind,
                                   self._function_depth > 0, self._type_only_depth > 0))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # Decorators and default values run when the def runs, i.e. at import time.
        if not isinstance(node, ast.Lambda):
            for deco in node.decorator_list:
                self.visit(deco)
            if node.returns is not None:
                self.visit(node.returns)
        self.visit(node.args)
        self._function_depth += 1
        for child in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(child)
        self._function_depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type_only_depth += 1
            for child in node.body:
                self.visit(child)
            self._type_only_depth -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node, "import")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base_parts = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if base == ROOT_PACKAGE or base in {f"{ROOT_PACKAGE}.{layer}" for layer in LAYERS}:
            # ``from searchsmith import serving`` / ``from . import dispatch``: the names may be
            # subpackages, so each is recorded as a module of its own.
            for alias in node.names:
                self._add(f"{base}.{alias.name}", node, "import")
        else:
            self._add(base, node, "import")

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in _IMPORT_CALLS and node.args:
            text = _string_prefix(node.args[0])
            if text and text.startswith(ROOT_PACKAGE):
                self._add(text, node, "call")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            match = _TARGET.fullmatch(node.value.strip())
            if match:
                self._add(match.group(1), node, "string")


def collect(source: str, module: str, is_package: bool = False, filename: str = "<string>") -> list[ImportRef]:
    """Every ``ImportRef`` of ``source``, the text of module ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    collector = _Collector(package)
    collector.visit(ast.parse(source, filename))
    return collector.refs


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(rel: str, refs: list[ImportRef]) -> Iterator[tuple[ImportRef, str]]:
    """(reference, rule) for each reference in file ``rel`` (e.g. ``models/export.py``) that breaks a rule."""
    layer = rel.split("/", 1)[0]
    for ref in refs:
        if layer == "kernels":
            if _under(ref.module, ROOT_PACKAGE) and not _under(ref.module, f"{ROOT_PACKAGE}.kernels"):
                yield ref, "kernels import only searchsmith.kernels"
            elif rel.endswith("_kernel.py") and _under(ref.module, f"{ROOT_PACKAGE}.kernels.dispatch"):
                yield ref, "a *_kernel.py must not import dispatch (it imports the kernels)"
        elif layer == "models":
            if _under(ref.module, f"{ROOT_PACKAGE}.serving") or _under(ref.module, f"{ROOT_PACKAGE}.training"):
                yield ref, "models imports neither serving nor training"
        elif layer == "serving":
            at_import_time = ref.kind != "string" and not ref.in_function and not ref.type_only
            if at_import_time and _under(ref.module, f"{ROOT_PACKAGE}.training"):
                yield ref, "serving imports training only inside functions"


def _source_files() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (REPO / layer).rglob("*.py"))


Scan = tuple[list[str], dict[str, dict[str, list[str]]]]


def scan() -> Scan:
    """(files parsed, file -> module -> ["line N: rule", ...]) over the whole repository."""
    found: dict[str, dict[str, list[str]]] = {}
    parsed: list[str] = []
    for path in _source_files():
        rel = path.relative_to(REPO).as_posix()
        parsed.append(rel)
        refs = collect(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py", rel)
        for ref, rule in violations(rel, refs):
            found.setdefault(rel, {}).setdefault(ref.module, []).append(f"line {ref.line}: {rule} ({ref.kind})")
    return parsed, found


@pytest.fixture(scope="module")
def scanned() -> Scan:
    return scan()


def test_no_new_layer_violations(scanned: Scan) -> None:
    _, found = scanned
    new = [
        f"{rel}: imports {module} ({'; '.join(where)})"
        for rel, modules in sorted(found.items())
        for module, where in sorted(modules.items())
        if module not in ALLOWED.get(rel, frozenset())
    ]
    assert not new, "imports against the layer rules (see this file's docstring):\n" + "\n".join(new)


def test_allow_list_only_shrinks(scanned: Scan) -> None:
    _, found = scanned
    gone = [
        f"{rel}: {module}"
        for rel, modules in sorted(ALLOWED.items())
        for module in sorted(modules)
        if module not in found.get(rel, {})
    ]
    assert not gone, "fixed, now delete these from ALLOWED in tests/test_layers.py:\n" + "\n".join(gone)


def test_scan_sees_every_file_and_the_known_violations(scanned: Scan) -> None:
    parsed, found = scanned
    assert len(parsed) > 50
    # Every layer, nested packages and the kernels included.
    for rel in ("kernels/__init__.py", "kernels/dispatch.py", "kernels/similarity_topk_kernel.py",
                "serving/main.py", "serving/pipeline/__init__.py", "serving/profiling/cli.py",
                "training/__init__.py"):
        assert rel in parsed, rel
    if ALLOWED:
        assert set(found) & set(ALLOWED), "the checker found none of the allow-listed violations"


def test_scan_is_fast() -> None:
    # CPU time, not wall time: the check must stay cheap, whatever else shares the machine. The
    # scan reads every module, so the bound leaves room for the code base to grow (it took 2.07 s
    # of CPU on the 2-core CI machine once the evaluation report landed).
    start = time.process_time()
    scan()
    assert time.process_time() - start < 5.0


# --------------------------------------------------------------------------- the checker itself


def _rules(rel: str, source: str) -> set[str]:
    path = REPO / rel
    refs = collect(source, module_name(path), path.name == "__init__.py", rel)
    return {ref.module for ref, _ in violations(rel, refs)}


def test_checker_resolves_relative_imports_and_subpackage_names() -> None:
    assert _rules("kernels/x_kernel.py", "from .dispatch import check\n") == {"searchsmith.kernels.dispatch"}
    assert _rules("kernels/x_kernel.py", "from . import dispatch\n") == {"searchsmith.kernels.dispatch"}
    assert _rules("kernels/x_kernel.py", "from .checks import check\nfrom .reference import ref\n") == set()
    assert _rules("kernels/dispatch.py", "from . import reference\nfrom .x_kernel import launch\n") == set()
    assert _rules("kernels/x.py", "from ..models import errors\n") == {"searchsmith.models.errors"}
    assert _rules("kernels/x.py", "import searchsmith.models\n") == {"searchsmith.models"}
    assert _rules("models/a/b.py", "from ...serving import demo\n") == {"searchsmith.serving.demo"}
    assert _rules("models/x.py", "from searchsmith import training\n") == {"searchsmith.training"}
    assert _rules("models/x.py", "from searchsmith.models import errors\nimport searchsmith.kernels\n") == set()


def test_checker_sees_imports_inside_functions_and_strings() -> None:
    lazy = "def f():\n    from searchsmith.serving.demo import corpus_path\n    return corpus_path\n"
    assert _rules("models/x.py", lazy) == {"searchsmith.serving.demo"}
    call = "import importlib\ndef f():\n    return importlib.import_module('searchsmith.training.cli')\n"
    assert _rules("models/x.py", call) == {"searchsmith.training.cli"}
    fstring = "def f(x):\n    return __import__(f'searchsmith.serving.{x}')\n"
    assert _rules("models/x.py", fstring) == {"searchsmith.serving"}
    table = "TABLE = {'a': ('searchsmith.serving.cli:configure', 'help')}\n"
    assert _rules("models/x.py", table) == {"searchsmith.serving.cli"}
    prose = "LABEL = 'searchsmith.serving.demo (corpus.jsonl, qa.jsonl)'\n"
    assert _rules("models/x.py", prose) == set()


def test_checker_allows_serving_lazy_and_type_only_training_imports() -> None:
    assert _rules("serving/x.py", "from searchsmith.training import evaluate\n") == {"searchsmith.training.evaluate"}
    assert _rules("serving/x.py", "try:\n    import searchsmith.training.cli\nexcept ImportError:\n    pass\n") == {
        "searchsmith.training.cli"
    }
    assert _rules("serving/x.py", "class A:\n    from searchsmith.training import cli\n") == {"searchsmith.training.cli"}
    assert _rules("serving/x.py", "def f():\n    from searchsmith.training import cli\n") == set()
    assert _rules("serving/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from searchsmith.training.config import Recipe\n") == set()
    assert _rules("serving/x.py", "TARGET = 'searchsmith.training.cli:configure'\n") == set()
    assert _rules("training/x.py", "from searchsmith.serving.embedder import Embedder\n") == set()
