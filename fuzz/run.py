"""Run one fuzz target under atheris (libFuzzer): ``python -m fuzz.run TARGET SECONDS [--native
DIR] [libFuzzer flags]``. scripts/fuzz.sh is the usual way in.

``--native DIR``: load lakemq's compiled modules from DIR (built there with coverage
instrumentation by scripts/fuzz.sh) instead of the tree's, so libFuzzer sees their branches too.
Their coverage callbacks resolve against the libFuzzer inside atheris, so the target is imported
on the first input, once atheris has loaded it. lakemq's Python modules are instrumented as they
are imported (not sqlglot, the SQL92 parser: instrumenting it takes over a minute here). New
inputs go to build/fuzz/corpus/TARGET; crashes, hangs and huge allocations to
build/fuzz/artifacts/TARGET.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
# A hang is an input that takes this long (the first input imports the instrumented target,
# which takes seconds on a busy machine); a huge allocation one that pushes RSS past this.
TIMEOUT_S = 60
RSS_LIMIT_MB = 2048
MAX_LEN = 4096


class _NativeFinder(importlib.abc.MetaPathFinder):
    """Finds lakemq's extension modules in the instrumented build directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None,
                  ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("lakemq."):
            return None
        package, _, name = fullname.rpartition(".")
        folder = self.directory.joinpath(*package.split("."))
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            candidate = folder / f"{name}{suffix}"
            if candidate.exists():
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="fuzz.run", description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("seconds", type=int)
    parser.add_argument("--native", type=Path, help="directory of instrumented compiled modules")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "fuzz",
                        help="where the grown corpus (corpus/TARGET) and crashes (artifacts/TARGET) go")
    args, libfuzzer_flags = parser.parse_known_args(argv)

    import atheris

    from fuzz import targets

    loaded: list[ModuleType] = []
    corpus = args.work / "corpus" / args.target
    artifacts = args.work / "artifacts" / args.target
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    seeds = ROOT / "fuzz" / "corpus" / args.target
    atheris.Setup(
        [sys.argv[0], f"-max_total_time={args.seconds}", f"-timeout={TIMEOUT_S}",
         f"-rss_limit_mb={RSS_LIMIT_MB}", f"-max_len={MAX_LEN}", "-print_final_stats=1",
         f"-artifact_prefix={artifacts}/", *libfuzzer_flags, str(corpus), str(seeds)],
        lambda data: targets.run_one(loaded[0] if loaded else load(), data))
    if args.native is not None:
        sys.meta_path.insert(0, _NativeFinder(args.native.resolve()))

    def load() -> ModuleType:
        # Imported on the first input: the instrumented modules' coverage callbacks are
        # libFuzzer's, which atheris loads (privately) only when Fuzz starts; opened again here
        # with RTLD_GLOBAL (the same copy: RTLD_NOLOAD), its symbols resolve their references.
        if args.native is not None:
            core = sys.modules["atheris.core_with_libfuzzer"].__file__
            ctypes.CDLL(core, mode=os.RTLD_NOW | os.RTLD_GLOBAL | os.RTLD_NOLOAD)
        with atheris.instrument_imports(include=["lakemq", "fuzz.targets"]):
            loaded.append(targets.load(args.target))
        if args.native is not None:
            _check_native_loaded(args.native.resolve())
        return loaded[0]

    atheris.Fuzz()


def _check_native_loaded(directory: Path) -> None:
    """Every compiled lakemq module the target imported came from ``directory``."""
    stray = [name for name, module in sys.modules.items()
             if name.startswith("lakemq.") and (getattr(module, "__file__", "") or "").endswith(".so")
             and not Path(module.__file__ or "").is_relative_to(directory)]
    if stray:
        raise SystemExit(f"compiled modules not from {directory}: {', '.join(stray)}")


if __name__ == "__main__":
    main(sys.argv[1:])
