"""Builds lakemq's compiled store parts (lakemq/store/_native.pyx: the per-record loops;
_group_commit.pyx: the SYNC_FLUSH commit thread; see docs/NATIVE.md); the rest
of the project's metadata is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("lakemq.store._native", ["lakemq/store/_native.pyx"], extra_compile_args=["-O2"]),
         Extension("lakemq.store._group_commit", ["lakemq/store/_group_commit.pyx"], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": "3"},
    ),
)
