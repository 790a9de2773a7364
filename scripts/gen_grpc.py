"""Generate lakemq's RocketMQ 5 gRPC code (package ``apache.rocketmq.v2``) from the official
definitions, at set-up time (scripts/bootstrap.sh runs it; the output is gitignored).

Apache publishes the definitions as .proto files in its rocketmq-apis repository, but on the
registries the project reaches they ship only compiled: the ``rocketmq-proto`` jar holds Java
classes, and the official Python client's wheel (``rocketmq-python-client``) holds the
generated ``rocketmq/grpc_protocol/*_pb2.py``, each embedding its file's serialized
FileDescriptorProto. This script downloads that wheel once (``pip download --no-deps`` into
build/grpc/, kept: later runs are offline), reads the embedded descriptors out of the modules'
source text without importing them (the wheel's ``rocketmq`` package is never installed here),
writes them as one FileDescriptorSet with protobuf's own well-known types, and runs
``grpc_tools.protoc --descriptor_set_in`` to generate message classes, type stubs and the
service stubs into lakemq/grpc/_pb/. The files are renamed into that package so the
generated imports resolve there; the messages, fields and the service (its full name
``apache.rocketmq.v2.MessagingService``, which is all the wire carries) are unchanged.

Usage: python scripts/gen_grpc.py [--force]
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

from google.protobuf import descriptor_pb2, duration_pb2, timestamp_pb2

CLIENT = "rocketmq-python-client"
VERSION = "5.1.2"
# The wheel's modules holding the definitions, in dependency order.
MODULES = ("definition", "service", "admin")
ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "grpc"
PACKAGE_DIR = Path("lakemq") / "grpc" / "_pb"
OUT = ROOT / PACKAGE_DIR


def wheel_path() -> Path:
    """The official client's wheel, downloaded once into build/grpc/."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"rocketmq_python_client-{VERSION}-*.whl"))
    if found:
        return found[0]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                    "-d", str(CACHE), f"{CLIENT}=={VERSION}"], check=True)
    found = sorted(CACHE.glob(f"rocketmq_python_client-{VERSION}-*.whl"))
    if not found:
        sys.exit(f"gen_grpc: pip download left no {CLIENT} {VERSION} wheel in {CACHE}")
    return found[0]


def embedded_descriptor(source: str, module: str) -> bytes:
    """The bytes literal a generated module passes to AddSerializedFile, found by parsing."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "AddSerializedFile" and len(node.args) == 1
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, bytes)):
            return node.args[0].value
    sys.exit(f"gen_grpc: no serialized descriptor in {module}_pb2.py of the {CLIENT} wheel")


def descriptor_set(wheel: Path) -> descriptor_pb2.FileDescriptorSet:
    """The official files, renamed into lakemq/grpc/_pb/, after the well-known types they use."""
    files: list[descriptor_pb2.FileDescriptorProto] = []
    for well_known in (duration_pb2, timestamp_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        well_known.DESCRIPTOR.CopyToProto(proto)
        files.append(proto)
    renamed = {f"{m}.proto": f"{PACKAGE_DIR.as_posix()}/{m}.proto" for m in MODULES}
    with zipfile.ZipFile(wheel) as zf:
        for module in MODULES:
            source = zf.read(f"rocketmq/grpc_protocol/{module}_pb2.py").decode("utf-8")
            proto = descriptor_pb2.FileDescriptorProto.FromString(embedded_descriptor(source, module))
            if proto.package != "apache.rocketmq.v2":
                sys.exit(f"gen_grpc: {module}.proto is package {proto.package!r}, not apache.rocketmq.v2")
            proto.name = renamed[proto.name]
            deps = [renamed.get(d, d) for d in proto.dependency]
            del proto.dependency[:]
            proto.dependency.extend(deps)
            files.append(proto)
    return descriptor_pb2.FileDescriptorSet(file=files)


def main() -> None:
    force = "--force" in sys.argv[1:]
    wheel = wheel_path()
    fds = descriptor_set(wheel).SerializeToString()
    # What the output depends on: the definitions, the generator's version and this script.
    stamp_text = hashlib.sha256(fds + version("grpcio-tools").encode() + Path(__file__).read_bytes()).hexdigest()
    stamp = OUT / ".generated"
    if not force and stamp.exists() and stamp.read_text() == stamp_text:
        return
    OUT.mkdir(parents=True, exist_ok=True)
    set_path = CACHE / "rocketmq-v2.fds"
    set_path.write_bytes(fds)
    from grpc_tools import protoc

    args = ["grpc_tools.protoc", f"--descriptor_set_in={set_path}", f"--python_out={ROOT}",
            f"--pyi_out={ROOT}", f"--grpc_python_out={ROOT}"]
    args += [f"{PACKAGE_DIR.as_posix()}/{m}.proto" for m in MODULES]
    if protoc.main(args) != 0:
        sys.exit("gen_grpc: protoc failed (its message is above)")
    (OUT / "__init__.py").write_text(f'"""Generated by scripts/gen_grpc.py from {CLIENT} {VERSION}."""\n')
    stamp.write_text(stamp_text)
    print(f"gen_grpc: generated apache.rocketmq.v2 into {PACKAGE_DIR} from {wheel.name}")


if __name__ == "__main__":
    main()
