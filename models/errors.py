"""The one exception module of searchsmith.

Every error a user can cause is one of these, raised at the boundary with a message that
says where, what was expected, what was received and the fix.
"""

from __future__ import annotations


class SearchsmithError(Exception):
    """Root of every searchsmith error (catch this to catch them all)."""


class ConfigError(SearchsmithError, ValueError):
    """A config file, recipe, override or setting is invalid."""


class ValidationError(SearchsmithError, ValueError):
    """User input (a query, a corpus line, a request field) is invalid."""


class EmptyInputError(ValidationError):
    """A required input is empty (HTTP 400)."""


class PayloadTooLargeError(ValidationError):
    """A body, a list or a text is over its limit (HTTP 413)."""


class UnsupportedMediaTypeError(ValidationError):
    """A request body in an encoding the server does not read: JSON in UTF-16 or UTF-32, or a
    Content-Type charset other than UTF-8 (HTTP 415)."""


class UnauthorizedError(SearchsmithError):
    """Missing or wrong API key (HTTP 401)."""


class NotReadyError(SearchsmithError, RuntimeError):
    """A model is not loaded yet, or the server or a batcher is shutting down (HTTP 503)."""


class NotServedError(SearchsmithError):
    """The server is up but does not serve what the request needs: no such model is
    configured (HTTP 404). Retrying does not help; configuring it does."""


class BundleError(SearchsmithError):
    """A model bundle or an index on disk is missing, corrupt or mismatched."""


class OverloadedError(SearchsmithError):
    """A bounded queue is full; the caller should retry later (HTTP 429)."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RequestTimeoutError(SearchsmithError):
    """The client did not send its whole request in time (HTTP 408)."""


class RunnerError(SearchsmithError):
    """Executing a model failed (HTTP 500)."""


class ClientGone(SearchsmithError):
    """The client of a request went away: its work stops here, with no fallback computed and no
    answer sent (there is nobody to send it to)."""
