"""The kernel backend named by ``$SEARCHSMITH_KERNEL_BACKEND``, read without importing torch.

``dispatch.py`` reads it on every call; the ``searchsmith`` command checks it once at
start-up (``check_backend_name``), so a typo is one error line before any model loads, not
a traceback from the first kernel call. Like the rest of the package, this module imports
nothing else from the project.
"""

from __future__ import annotations

import os

BACKENDS = ("auto", "torch", "triton")
ENV_BACKEND = "SEARCHSMITH_KERNEL_BACKEND"


def env_backend() -> str:
    """``$SEARCHSMITH_KERNEL_BACKEND`` as set, ``"auto"`` when unset or empty (unchecked)."""
    return os.environ.get(ENV_BACKEND) or "auto"


def backend_problem(choice: str, source: str = f"${ENV_BACKEND}") -> str | None:
    """What is wrong with ``choice`` as a backend name (``source`` names where it came from),
    or None when it is one of :data:`BACKENDS`."""
    if choice in BACKENDS:
        return None
    return f"{source}: unknown kernel backend {choice!r}; use one of {', '.join(BACKENDS)}"
