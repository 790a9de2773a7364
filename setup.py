"""Builds lakemq's compiled store loops (lakemq/store/_native.pyx, see docs/NATIVE.md); the rest
of the project's metadata is in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("lakemq.store._native", ["lakemq/store/_native.pyx"], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": "3"},
    ),
)
