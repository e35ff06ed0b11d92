"""What the command line shows: our step lines and progress bars, not third-party noise.

By default a command prints one line per step and a progress bar (tqdm, on a terminal)
for work that takes more than a few seconds. Weight-loading bars, advisory warnings and
ONNX Runtime's optimizer prints ("failed in shape inference") are hidden; ``--verbose``
or ``SEARCHSMITH_LOG=debug`` shows them again.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

VERBOSE_ENV = "SEARCHSMITH_VERBOSE"
LOG_ENV = "SEARCHSMITH_LOG"
PROGRESS_ENV = "SEARCHSMITH_PROGRESS"
# SEARCHSMITH_LOG (any case) -> logging level. The documented four, plus logging's own other
# names for levels (warn, critical), which worked before the value was checked.
LOG_LEVELS = {"debug": "DEBUG", "info": "INFO", "warning": "WARNING", "error": "ERROR",
              "warn": "WARNING", "critical": "CRITICAL"}
# Switches that are on at "1": "0" or empty is off, anything else is a typo worth an error
# ("true" was silently off).
SWITCH_VALUES = ("0", "1")
# Loggers of libraries that chat at INFO/WARNING about things a user cannot act on.
THIRD_PARTY_LOGGERS = ("transformers", "huggingface_hub", "onnxruntime", "onnxscript", "torch.onnx",
                       "torch._dynamo", "torch.export", "faiss", "sentence_transformers", "httpx")


def verbose() -> bool:
    """True when the user asked for everything: ``--verbose`` or ``SEARCHSMITH_LOG=debug``."""
    return (os.environ.get(VERBOSE_ENV, "").strip() == "1"
            or os.environ.get(LOG_ENV, "").strip().lower() == "debug")


def environment_problems() -> list[str]:
    """What is wrong with the console's variables, ``SEARCHSMITH_LOG``, ``SEARCHSMITH_VERBOSE``
    and ``SEARCHSMITH_PROGRESS`` (an empty value means unset), one message each naming the
    variable, its value and the values it takes. The CLI refuses to start on any."""
    problems = []
    level = os.environ.get(LOG_ENV, "")
    if level.strip() and level.strip().lower() not in LOG_LEVELS:
        problems.append(f"{LOG_ENV}={level!r} is not a log level; use debug, info, warning (the default) or "
                        "error, or unset it")
    for name, what in ((VERBOSE_ENV, "1 (show third-party output too, as --verbose does) or 0"),
                       (PROGRESS_ENV, "1 (draw progress bars even off a terminal) or 0 (never)")):
        value = os.environ.get(name, "")
        if value.strip() and value.strip() not in SWITCH_VALUES:
            problems.append(f"{name}={value!r} is not a switch; use {what}, or unset it")
    return problems


_warned_log_level = False


def log_level() -> str:
    """The logging level ``SEARCHSMITH_LOG`` names, WARNING when it is unset or empty.

    An unknown name cannot stop a process here (a worker or a library caller; the CLI refused
    it at start-up), so it warns once on stderr and gives WARNING.
    """
    global _warned_log_level

    raw = os.environ.get(LOG_ENV, "").strip()
    if not raw:
        return "WARNING"
    level = LOG_LEVELS.get(raw.lower())
    if level is None:
        if not _warned_log_level:
            _warned_log_level = True
            print(f"searchsmith: warning: {LOG_ENV}={raw!r} is not a log level (debug, info, warning or error); "
                  "logging at warning", file=sys.stderr)
        return "WARNING"
    return level


def quiet_third_party(be_verbose: bool | None = None) -> None:
    """Silence third-party progress bars and warnings unless verbose.

    Call it before transformers is imported: its progress-bar switch is read at import
    time (``HF_HUB_DISABLE_PROGRESS_BARS``). Already imported, it is switched off directly.
    A user's own setting of those variables wins (``setdefault``).
    """
    if be_verbose is None:
        be_verbose = verbose()
    if be_verbose:
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    # Deprecation notices and libraries' advice are for their callers' authors, not for a
    # user of the command; searchsmith's own warnings are log records, which stay.
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning,
                            module=r"(torch|transformers|onnx|onnxruntime|onnxscript|sentence_transformers|"
                                   r"accelerate|peft|huggingface_hub)(\.|$)")


class OwnRecordsOnly(logging.Filter):
    """A handler filter that passes searchsmith's records and other loggers' errors only.

    ONNX Runtime's transformer optimizer logs under bare module names
    (``fusion_skiplayernorm``), so a list of third-party logger names cannot catch them all.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.startswith("searchsmith") or record.levelno >= logging.ERROR


def install_log_filter(be_verbose: bool | None = None) -> None:
    """Put :class:`OwnRecordsOnly` on the root logger's handlers unless verbose (the CLI
    calls it after ``logging.basicConfig``)."""
    if be_verbose is None:
        be_verbose = verbose()
    if be_verbose:
        return
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, OwnRecordsOnly) for f in handler.filters):
            handler.addFilter(OwnRecordsOnly())


def configure_process_logging() -> None:
    """What every searchsmith process sets up before its work: third-party output held back
    (unless verbose), log records at ``SEARCHSMITH_LOG``'s level (WARNING by default, or when
    it names no level: :func:`log_level`), and
    the filter on the root handlers. The CLI calls it; so does each worker process it starts
    (a spawned process inherits the environment, not the logging set-up)."""
    quiet_third_party()
    logging.basicConfig(level="DEBUG" if verbose() else log_level(),
                        format="%(levelname)s %(name)s: %(message)s")
    install_log_filter()


@contextlib.contextmanager
def quiet_block(enabled: bool | None = None) -> Iterator[None]:
    """Around third-party heavy lifting (``torch.onnx.export``, ONNX Runtime's optimizer):
    hold back stdout as :func:`quiet_stdout` does, ignore Python warnings, and re-silence
    loggers that libraries configured at import (torch sets its own). Nothing when verbose.
    """
    import warnings

    if enabled is None:
        enabled = not verbose()
    if not enabled:
        yield
        return
    # torch logs through a handler of its own on the "torch" logger (not the root's), so the
    # filter goes on every handler there is, for the block only
    handlers = {id(h): h for lg in [logging.getLogger(), *logging.root.manager.loggerDict.values()]
                for h in getattr(lg, "handlers", ())}
    own = OwnRecordsOnly()
    for h in handlers.values():
        h.addFilter(own)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with quiet_stdout(True):
                yield
    finally:
        for h in handlers.values():
            h.removeFilter(own)


@contextlib.contextmanager
def quiet_stdout(enabled: bool | None = None) -> Iterator[None]:
    """Hold back what third-party code prints to stdout (ONNX Runtime's optimizer prints
    "failed in shape inference" with ``print``) unless verbose.

    Nothing is lost: if the block raises, what it printed is written to stderr first.
    Only stdout is captured, so progress bars (stderr) keep drawing.
    """
    if enabled is None:
        enabled = not verbose()
    if not enabled:
        yield
        return
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield
    except BaseException:
        sys.stderr.write(buf.getvalue())
        raise


def progress(total: int | None = None, desc: str = "", unit: str = "it", *, enabled: bool = True, **kwargs: Any):
    """A tqdm bar on stderr, drawn only on a terminal (``SEARCHSMITH_PROGRESS=1`` forces it,
    ``=0`` hides it), so logs and tests get the step lines alone. ``enabled=False`` hides it
    whatever the setting (e.g. on every process but the main one)."""
    from tqdm.auto import tqdm

    forced = os.environ.get(PROGRESS_ENV, "").strip()
    disable = {"1": False, "0": True}.get(forced)  # None: tqdm hides itself off a terminal
    if not enabled:
        disable = True
    return tqdm(total=total, desc=desc, unit=unit, disable=disable, leave=False, dynamic_ncols=True, **kwargs)


def run_module_main(main: Callable[[], int], prog: str) -> int:
    """Run a ``python -m searchsmith...`` helper's ``main``: a project error is one line on
    stderr and exit status 1, as the ``searchsmith`` command prints it, not a traceback."""
    from searchsmith.models.errors import SearchsmithError

    try:
        return int(main() or 0)
    except SearchsmithError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
