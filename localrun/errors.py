"""Every error a caller of localrun can catch, in one tree.

    LocalrunError                 base; `exit_code` for the CLI, `status` for HTTP
    ├── UsageError                bad flag, option or setting            exit 2, HTTP 400
    ├── InvalidRequest            a request the API refuses              exit 1, HTTP 400
    │   └── ContextOverflow       prompt longer than the context         HTTP 400
    ├── AuthError                 missing or wrong API key               HTTP 401
    ├── BodyTimeout               the client stopped sending its body    HTTP 408
    ├── InvalidName               not a valid model reference            HTTP 400
    ├── ModelNotFound             not in the store / catalogue           HTTP 404
    ├── StoreError                the store cannot do it                 HTTP 500
    │   └── DownloadError         network, HTTP status, timeouts         HTTP 502
    │       ├── ChecksumMismatch  bytes do not match the expected sha256
    │       ├── NotGGUF           the body is not a GGUF file
    │       ├── DiskFull          not enough free space
    │       └── SourceRefused     a pull over HTTP from a private address  HTTP 403
    ├── Overloaded                the model's queue is full              HTTP 503 + Retry-After
    ├── ModelLoadError            llama.cpp could not load the model     HTTP 500
    │   └── LoadCrashed           the runner died of a signal while loading
    ├── RunnerCrashed             the runner process died mid-request    HTTP 500
    ├── Cancelled                 the caller went away; work stopped     HTTP 499
    ├── BackendUnavailable        no replica of an upstream backend answers HTTP 502
    └── DaemonUnavailable         the CLI cannot reach / start the daemon exit 1

A leaf module: no imports from the rest of localrun. Messages are one readable line; the CLI prints
`error: <message>` and exits with `exit_code`; the server maps `status` into each dialect's shape.
"""

from __future__ import annotations


class LocalrunError(Exception):
    exit_code = 1
    status = 500

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else self.__class__.__name__


class UsageError(LocalrunError):
    exit_code = 2
    status = 400


class InvalidRequest(LocalrunError):
    status = 400

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param  # the request field at fault ("messages[1].role"), when known


class ContextOverflow(InvalidRequest):
    pass


class AuthError(LocalrunError):
    status = 401


class BodyTimeout(LocalrunError):
    status = 408


class InvalidName(LocalrunError):
    exit_code = 2
    status = 400


class ModelNotFound(LocalrunError):
    status = 404


class StoreError(LocalrunError):
    status = 500


class DownloadError(StoreError):
    status = 502


class ChecksumMismatch(DownloadError):
    pass


class NotGGUF(DownloadError):
    pass


class DiskFull(DownloadError):
    status = 507


class SourceRefused(DownloadError):
    status = 403


class Overloaded(LocalrunError):
    status = 503

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ModelLoadError(LocalrunError):
    status = 500


class LoadCrashed(ModelLoadError):
    """The runner was killed by a signal before it was ready: often a build for another CPU."""


class RunnerCrashed(LocalrunError):
    status = 500


class Cancelled(LocalrunError):
    status = 499  # nginx's "client closed request": nobody is left to read it


class BackendUnavailable(LocalrunError):
    """An upstream backend (backends.toml) failed the request: every replica down, or one failed mid-answer."""

    status = 502


class DaemonUnavailable(LocalrunError):
    status = 503


def error_class(name: str) -> type[LocalrunError]:
    """The error class called `name` (errors cross the runner pipe by name), else the base class."""
    found = globals().get(name)
    return found if isinstance(found, type) and issubclass(found, LocalrunError) else LocalrunError


__all__ = [
    "error_class",
    "LocalrunError", "UsageError", "InvalidRequest", "ContextOverflow", "AuthError", "InvalidName",
    "ModelNotFound", "StoreError", "DownloadError", "ChecksumMismatch", "NotGGUF", "DiskFull", "SourceRefused",
    "Overloaded", "ModelLoadError", "LoadCrashed", "RunnerCrashed", "Cancelled", "BackendUnavailable",
    "DaemonUnavailable",
]
