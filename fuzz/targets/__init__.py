"""The fuzz targets by name: each module's ``one_input(data)`` feeds ``data`` to one decoder
and lets only the errors in its ``ALLOWED`` out (``run_one`` swallows those); anything else,
a hang or a huge allocation is a bug."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Final

__all__ = ["TARGETS", "load", "run_one"]

TARGETS: Final = ("frames", "headers", "bodies", "json", "records", "batch", "sql92", "tags", "properties",
                  "acl", "ha", "scan", "grpc")


def load(name: str) -> ModuleType:
    if name not in TARGETS:
        raise SystemExit(f"unknown fuzz target {name!r}; one of: {', '.join(TARGETS)}")
    return importlib.import_module(f"fuzz.targets.{name}")


def run_one(target: ModuleType, data: bytes) -> None:
    try:
        target.one_input(data)
    except target.ALLOWED:
        pass
