"""What the ``searchsmith`` command checks before any work: its environment and its arguments.

A mistyped ``SEARCHSMITH_*`` variable used to surface as a traceback, some only after a model
had loaded (``SEARCHSMITH_KERNEL_BACKEND`` at the first kernel call); a path argument holding
bytes that are not UTF-8 (Python keeps them as lone surrogates) failed after the work was
done, when it was written into JSON, a plot title or a model file. Both are refused here,
once, for every command (``serving/main.py`` calls these before it runs the command); a
command's ``--help`` is printed whatever the environment (:func:`may_ask_for_help`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from searchsmith.kernels.backend import ENV_BACKEND, backend_problem, env_backend
from searchsmith.models.console import environment_problems as console_problems

INT8_ISA_ENV = "SEARCHSMITH_CPU_INT8"  # models/int8_cpu.py (imported only when it is set: numpy)
# Test-only switches of ``searchsmith profile`` (toy sizes); on at "1".
PROFILE_SWITCHES = ("SEARCHSMITH_PROFILE_TINY", "SEARCHSMITH_PROFILE_KERNELS_TINY")
# Every SEARCHSMITH_* variable the project reads; tests/models/test_startup.py finds them
# in the source and fails when one is not listed (and so not checked) here.
CHECKED_ENV = ("SEARCHSMITH_LOG", "SEARCHSMITH_VERBOSE", "SEARCHSMITH_PROGRESS", ENV_BACKEND, INT8_ISA_ENV,
               *PROFILE_SWITCHES)
# Arguments checked by their command with a message of its own (a question's lone surrogate,
# an override's), not as paths.
OWN_CHECKS = frozenset({"query", "overrides"})


def environment_problem() -> str | None:
    """Every bad ``SEARCHSMITH_*`` value in one message (``; ``-separated), or None.

    An empty value means unset. Each message names the variable, its value and what it takes.
    """
    problems = console_problems()
    backend = backend_problem(env_backend())
    if backend is not None:
        problems.append(backend)
    if os.environ.get(INT8_ISA_ENV, "").strip():
        from searchsmith.models.errors import ConfigError
        from searchsmith.models.int8_cpu import int8_isa

        try:
            int8_isa()
        except ConfigError as exc:
            problems.append(str(exc))
    for name in PROFILE_SWITCHES:
        value = os.environ.get(name, "")
        if value.strip() and value.strip() not in ("0", "1"):
            problems.append(f"{name}={value!r} is not a switch; use 1 (toy sizes, for tests) or 0, or unset it")
    return "; ".join(problems) or None


def may_ask_for_help(args: Sequence[str]) -> bool:
    """Whether a command's arguments may ask for its help: ``-h``, ``--help`` or an
    abbreviation argparse takes for it (``--he``), before a ``--``. The CLI lets its parser
    decide then, whatever the environment (a bad ``SEARCHSMITH_*`` value must not hide the
    help that says how to run the command), and refuses the value only where the command runs.
    """
    for arg in args:
        if arg == "--":
            return False
        if arg.startswith("-h") or (len(arg) >= 3 and "--help".startswith(arg)):
            return True
    return False


def _arguments(parser: argparse.ArgumentParser):
    """Every argument of ``parser`` and of its subcommands' parsers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _arguments(sub)
        else:
            yield action


def _shown(text: str) -> str:
    """``text`` as the shell would show it: undecodable bytes as ``\\xff`` (ascii() if it
    holds a surrogate that did not come from a byte)."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        return ascii(text)[1:-1]


def argument_problem(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The first argument (option or positional, e.g. ``--out``, ``--index``, ``corpus``)
    whose value is not valid UTF-8, as a message naming it, the byte, and a plain name to
    use instead; None when every one is text. The question and the overrides are left to
    their commands, which say the same in their own words."""
    for action in _arguments(parser):
        if action.dest in OWN_CHECKS or action.dest == argparse.SUPPRESS:
            continue
        value = getattr(args, action.dest, None)
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, str):
                continue
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = v[exc.start]
                byte = (f"the byte \\x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF
                        else f"the lone surrogate {ascii(bad)[1:-1]}")
                name = max(action.option_strings, key=len) if action.option_strings else (action.metavar or action.dest)
                plain = "".join("_" if 0xD800 <= ord(c) <= 0xDFFF else c for c in v)
                example = f"{name} {plain}" if action.option_strings else plain
                return (f"{name}: '{_shown(v)}' is not valid UTF-8 ({byte} at character {exc.start}); searchsmith "
                        "takes paths in UTF-8 only (it writes them into JSON, plots and model files): use a plain "
                        f"name, e.g. {example}, renaming the file or folder if it has such a name")
    return None
