"""Builds lakemq's compiled parts (docs/NATIVE.md). The store's per-record loops, one module per
job (_records: encoding CommitLog records; _scan: parsing them for dispatch; _cq_runs:
ConsumeQueue entries; _index: IndexFile entries; _reads: a pull's read), the append lock, the layout constants
they share (_layout.pxd) and the SYNC_FLUSH commit thread (_group_commit); the remoting frame codec's
common path (lakemq/remoting/_codec: frames, layout in _frame.pxd; _header_read and _header_write:
the JSON header, RemotingCommand's slots in _command.pxd); pulled records decoded into
messages (lakemq/common/_pulled, the record layout in _record_layout.pxd, which the store's
_layout.pxd shares); the broker's plain send (lakemq/broker/_send_path). The rest of the
project's metadata is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

MODULES = {
    "store": ("_layout", "_append_lock", "_records", "_scan", "_cq_runs", "_index", "_group_commit", "_reads"),
    "remoting": ("_header_read", "_header_write", "_codec"),
    "common": ("_pulled",),
    "broker": ("_send_path",),
}

setup(
    ext_modules=cythonize(
        [Extension(f"lakemq.{package}.{name}", [f"lakemq/{package}/{name}.pyx"], extra_compile_args=["-O2"])
         for package, names in MODULES.items() for name in names],
        compiler_directives={"language_level": "3"},
    ),
)
