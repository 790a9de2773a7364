"""Builds lakemq's compiled store parts (docs/NATIVE.md): the per-record loops, one module per
job (_records: encoding CommitLog records; _scan: parsing them for dispatch; _cq_runs:
ConsumeQueue entries; _index: IndexFile entries), the append lock, the layout constants they
share (_layout.pxd) and the SYNC_FLUSH commit thread (_group_commit); the rest of the
project's metadata is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

MODULES = ("_layout", "_append_lock", "_records", "_scan", "_cq_runs", "_index", "_group_commit")

setup(
    ext_modules=cythonize(
        [Extension(f"lakemq.store.{name}", [f"lakemq/store/{name}.pyx"], extra_compile_args=["-O2"])
         for name in MODULES],
        compiler_directives={"language_level": "3"},
    ),
)
