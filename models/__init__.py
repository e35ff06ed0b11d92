"""searchsmith.models: errors, config loading, model resolution, bundles and runtimes."""

from __future__ import annotations

__version__ = "0.1.0"
