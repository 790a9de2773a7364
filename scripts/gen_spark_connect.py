"""Generate the Spark Connect message classes lakemq's own Connect client uses
(:mod:`lakemq.jobs.connect_client`), at set-up time (scripts/bootstrap.sh runs it; the output,
lakemq/jobs/_connect_pb/, is gitignored).

The official definitions ship as .proto files inside Spark's ``spark-connect`` jar, which the
pyspark wheel installs under ``pyspark/jars/``. This script reads them from that jar (found
without importing pyspark), has ``grpc_tools.protoc`` compile them into one
FileDescriptorSet, moves the files into the package lakemq/jobs/_connect_pb/ and their
package ``spark.connect`` to ``lakemq.jobs.spark_connect`` (every type reference with it),
then generates message classes and type stubs from that set. The move keeps the generated
imports inside lakemq and lets one process load both these classes and pyspark's own (which
register ``spark.connect.*`` in protobuf's default pool) without a duplicate symbol. The wire
carries field numbers, not message names; the one name it does carry, the service's
``spark.connect.SparkConnectService`` in each method's path, is the client's constant.

Usage: python scripts/gen_spark_connect.py [--force]
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path("lakemq") / "jobs" / "_connect_pb"
OUT = ROOT / PACKAGE_DIR
SOURCE_PACKAGE, PACKAGE = "spark.connect", "lakemq.jobs.spark_connect"
# The service's definitions and everything they import; example_plugins.proto is Spark's test plugin.
SKIP = frozenset({"example_plugins.proto"})


def connect_jar() -> Path:
    """pyspark's spark-connect jar (the .proto files are in it), found without importing pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gen_spark_connect: pyspark is not installed")
    jars = sorted(Path(next(iter(spec.submodule_search_locations)), "jars").glob("spark-connect_*.jar"))
    if not jars:
        sys.exit("gen_spark_connect: no spark-connect jar in pyspark's jars/")
    return jars[-1]


def _rename_types(message: descriptor_pb2.DescriptorProto) -> None:
    for field in (*message.field, *message.extension):
        if field.type_name.startswith(f".{SOURCE_PACKAGE}."):
            field.type_name = f".{PACKAGE}." + field.type_name.removeprefix(f".{SOURCE_PACKAGE}.")
    for nested in message.nested_type:
        _rename_types(nested)


def descriptor_set(jar: Path, work: Path) -> descriptor_pb2.FileDescriptorSet:
    """The jar's definitions compiled by protoc, moved into lakemq/jobs/_connect_pb/ and the
    package ``lakemq.jobs.spark_connect``."""
    import grpc_tools
    from grpc_tools import protoc

    with zipfile.ZipFile(jar) as zf:
        names = sorted(n for n in zf.namelist()
                       if n.startswith("spark/connect/") and n.endswith(".proto") and Path(n).name not in SKIP)
        zf.extractall(work, names)
    if not names:
        sys.exit(f"gen_spark_connect: no spark/connect/*.proto in {jar.name}")
    compiled = work / "spark-connect.fds"
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    if protoc.main(["grpc_tools.protoc", f"-I{work}", f"-I{well_known}", "--include_imports",
                    f"--descriptor_set_out={compiled}", *names]) != 0:
        sys.exit("gen_spark_connect: protoc failed (its message is above)")
    fds = descriptor_pb2.FileDescriptorSet.FromString(compiled.read_bytes())
    moved = {n: f"{PACKAGE_DIR.as_posix()}/{Path(n).name}" for n in names}
    for proto in fds.file:
        if proto.name not in moved:
            continue  # google/protobuf's well-known types stay as they are
        if proto.package != SOURCE_PACKAGE:
            sys.exit(f"gen_spark_connect: {proto.name} is package {proto.package!r}, not {SOURCE_PACKAGE}")
        proto.name, proto.package = moved[proto.name], PACKAGE
        deps = [moved.get(d, d) for d in proto.dependency]
        del proto.dependency[:]
        proto.dependency.extend(deps)
        for message in proto.message_type:
            _rename_types(message)
        for service in proto.service:
            for method in service.method:
                for attr in ("input_type", "output_type"):
                    name = getattr(method, attr)
                    if name.startswith(f".{SOURCE_PACKAGE}."):
                        setattr(method, attr, f".{PACKAGE}." + name.removeprefix(f".{SOURCE_PACKAGE}."))
    return fds


def main() -> None:
    force = "--force" in sys.argv[1:]
    jar = connect_jar()
    with tempfile.TemporaryDirectory() as tmp:
        fds = descriptor_set(jar, Path(tmp))
        data = fds.SerializeToString()
        # What the output depends on: the definitions, the generator's version and this script.
        stamp_text = hashlib.sha256(data + version("grpcio-tools").encode() + Path(__file__).read_bytes()).hexdigest()
        stamp = OUT / ".generated"
        if not force and stamp.exists() and stamp.read_text() == stamp_text:
            return
        OUT.mkdir(parents=True, exist_ok=True)
        set_path = Path(tmp) / "lakemq-spark-connect.fds"
        set_path.write_bytes(data)
        from grpc_tools import protoc

        ours = [p.name for p in fds.file if p.package == PACKAGE]
        if protoc.main(["grpc_tools.protoc", f"--descriptor_set_in={set_path}", f"--python_out={ROOT}",
                        f"--pyi_out={ROOT}", *ours]) != 0:
            sys.exit("gen_spark_connect: protoc failed (its message is above)")
    (OUT / "__init__.py").write_text(f'"""Generated by scripts/gen_spark_connect.py from {jar.name}."""\n')
    stamp.write_text(stamp_text)
    print(f"gen_spark_connect: generated {PACKAGE} into {PACKAGE_DIR} from {jar.name}")


if __name__ == "__main__":
    main()
