"""Where the lake lives: a local directory or an object store, behind one small seam.

``LakeLocation`` is a value (URI + storage options) that pickles into Spark tasks; each
process opens its own fsspec filesystem from it. Storage options use the object_store
spelling deltalake reads (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` ...), translated here
for s3fs, so one set of options serves both.

Object stores fail transiently (throttling, 5xx, dropped connections); every call here is
retried with exponential backoff. Writes of small metadata are atomic: a local file is
written beside its target and renamed over it, an object is written in one PUT.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import fsspec

from lakemq.common.durable import fsync_dir, write_file_durably
from lakemq.errors import ConfigError, LakeError

__all__ = ["NO_LAKE", "LakeLocation", "RetryPolicy", "is_transient", "parse_storage_options", "with_retries"]

# What every lake command says when it is given no lake (the CLI, the DAGs, the jobs).
NO_LAKE = "no lake is set: give --lake LAKE (lake_uri in a DAG) or set lakeUri=LAKE in broker.conf"

log = logging.getLogger(__name__)

T = TypeVar("T")

_TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
    "InternalError", "ServiceUnavailable", "503", "500", "502", "504",
})


def is_transient(exc: BaseException) -> bool:
    """Errors worth another try: timeouts, dropped connections, throttling and 5xx replies."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        status = str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        return code in _TRANSIENT_CODES or status in _TRANSIENT_CODES
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        return is_transient(cause)
    return type(exc).__name__ in ("ClientConnectionError", "ServerDisconnectedError", "ClientOSError")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    initial_backoff_s: float = 0.2
    multiplier: float = 2.0
    max_backoff_s: float = 5.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** attempt)
        return base * (1 + random.uniform(-self.jitter, self.jitter))


def with_retries(fn: Callable[[], T], what: str, policy: RetryPolicy = RetryPolicy()) -> T:
    """Run ``fn``; retry transient failures per ``policy``; other errors pass straight out."""
    for attempt in range(policy.attempts):
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc) or attempt == policy.attempts - 1:
                raise
            pause = policy.delay(attempt)
            log.warning("%s failed (%s), retry %d in %.2fs", what, exc, attempt + 1, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")


def _s3fs_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    client: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    upper = {k.upper(): v for k, v in options.items()}
    if "AWS_ACCESS_KEY_ID" in upper:
        kwargs["key"] = upper["AWS_ACCESS_KEY_ID"]
    if "AWS_SECRET_ACCESS_KEY" in upper:
        kwargs["secret"] = upper["AWS_SECRET_ACCESS_KEY"]
    if "AWS_SESSION_TOKEN" in upper:
        kwargs["token"] = upper["AWS_SESSION_TOKEN"]
    endpoint = upper.get("AWS_ENDPOINT_URL") or upper.get("AWS_ENDPOINT")
    if endpoint:
        client["endpoint_url"] = endpoint
    if "AWS_REGION" in upper:
        client["region_name"] = upper["AWS_REGION"]
    if client:
        kwargs["client_kwargs"] = client
    return kwargs


@dataclass(frozen=True)
class LakeLocation:
    """The lake root. ``uri`` is a local path (or file://...) or ``s3://bucket/prefix``."""

    uri: str
    storage_options: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def of(cls, uri: str, storage_options: Mapping[str, str] | None = None) -> LakeLocation:
        """The lake at ``uri``. No lake is an error, never the working directory (an empty
        path would put the lake there), and so is a local path that is a file."""
        if not uri.strip():
            raise ConfigError(NO_LAKE)
        if "://" not in uri or uri.startswith("file://"):
            uri = os.path.abspath(os.path.expanduser(uri.removeprefix("file://")))
            if os.path.exists(uri) and not os.path.isdir(uri):
                raise LakeError(f"the lake {uri} is a file, not a directory (a lake is a directory or "
                                "s3://bucket/prefix)")
        return cls(uri.rstrip("/"), tuple(sorted((storage_options or {}).items())))

    @property
    def is_local(self) -> bool:
        return "://" not in self.uri

    @property
    def options(self) -> dict[str, str]:
        return dict(self.storage_options)

    @cached_property
    def fs(self) -> fsspec.AbstractFileSystem:
        if self.is_local:
            return fsspec.filesystem("file")
        protocol = self.uri.split("://", 1)[0]
        if protocol in ("s3", "s3a"):
            return fsspec.filesystem("s3", **_s3fs_kwargs(self.options))
        return fsspec.filesystem(protocol, **self.options)

    def join(self, *parts: str) -> str:
        return "/".join([self.uri, *(p.strip("/") for p in parts if p)])

    def table_uri(self, table: str) -> str:
        """The URI deltalake opens for ``table``."""
        return self.join(table)

    def delta_options(self) -> dict[str, str] | None:
        """Storage options for deltalake, or None for a local lake."""
        return None if self.is_local else self.options

    # -- IO, each call retried on transient errors ------------------------------------------

    def exists(self, path: str) -> bool:
        return with_retries(lambda: bool(self.fs.exists(path)), f"exists {path}")

    def read_bytes(self, path: str) -> bytes:
        return with_retries(lambda: bytes(self.fs.cat_file(path)), f"read {path}")

    def read_range(self, path: str, start: int, end: int) -> bytes:
        return with_retries(lambda: bytes(self.fs.cat_file(path, start=start, end=end)), f"read {path}")

    def size(self, path: str) -> int:
        return with_retries(lambda: int(self.fs.size(path)), f"size {path}")

    def list_files(self, prefix: str) -> list[str]:
        """Every file under ``prefix`` (recursively), as URIs of this lake; [] if none."""
        def find() -> list[str]:
            try:
                found = self.fs.find(prefix)
            except FileNotFoundError:
                return []
            return [f if self.is_local else f"{self.uri.split('://', 1)[0]}://{f}" for f in found]
        return with_retries(find, f"list {prefix}")

    def write_bytes(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` in one step: readers see the old or the new bytes."""
        if self.is_local:
            write_file_durably(path, data)
            return
        with_retries(lambda: self.fs.pipe_file(path, data), f"put {path}")

    def make_durable(self, paths: Iterable[str]) -> None:
        """On a local lake, fsync each file of ``paths`` and every directory from it up to the
        lake root (Spark's tasks and deltalake write without syncing; a power cut would take
        files the Delta log or the manifest count on). An object store holds what it
        acknowledged: nothing to do there."""
        if not self.is_local:
            return
        root = os.path.abspath(self.uri)
        directories: set[str] = set()
        for path in paths:
            path = os.path.abspath(path.removeprefix("file://"))
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            parent = os.path.dirname(path)
            while parent.startswith(root) and parent not in directories:
                directories.add(parent)
                parent = os.path.dirname(parent)
        for directory in sorted(directories, key=len, reverse=True):  # the deepest first
            fsync_dir(directory)
        if directories:
            fsync_dir(os.path.dirname(root))  # the lake root's own entry

    def remove(self, path: str) -> None:
        def rm() -> None:
            try:
                self.fs.rm_file(path)
            except FileNotFoundError:
                pass
        with_retries(rm, f"remove {path}")

    def open_write(self, path: str) -> Any:
        """A binary writer for a new data file (Parquet parts; never read before commit)."""
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return self.fs.open(path, "wb")

    def check_reachable(self) -> None:
        try:
            if self.is_local:
                os.makedirs(self.uri, exist_ok=True)
            else:
                with_retries(lambda: self.fs.ls(self.uri.split("://", 1)[1].split("/", 1)[0]), f"list {self.uri}")
        except OSError as exc:
            raise LakeError(f"lake {self.uri} is not reachable: {exc}") from exc


def parse_storage_options(pairs: tuple[str, ...]) -> dict[str, str]:
    """The lake commands' ``-o KEY=VALUE`` options (object_store spelling) as a dict. Here, not
    in the CLI, so that ``lakemq sql`` on the lake service imports no tiering command."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"storage option {pair!r} is not KEY=VALUE")
        out[key] = value
    return out
