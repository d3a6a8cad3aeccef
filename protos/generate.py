"""Regenerate the Python protobuf modules under ``airflow_lance/core/_proto``.

The ``.proto`` sources in this directory import each other through the
virtual path ``airflow_lance/core/_proto/<name>.proto``, so the generated
modules use absolute package imports and register unique file names in the
protobuf descriptor pool.

Usage: ``python protos/generate.py [OUTPUT_ROOT]`` (default: the project root).
The staleness test runs it into a temporary directory and compares.
"""

from __future__ import annotations

import pathlib
import sys

PROTO_DIR = pathlib.Path(__file__).resolve().parent
PROJECT_ROOT = PROTO_DIR.parent
VIRTUAL_PREFIX = "airflow_lance/core/_proto"
SOURCES = ("file.proto", "file2.proto", "encodings_v2_0.proto", "encodings_v2_1.proto", "rowids.proto", "table.proto", "transaction.proto",
           "index.proto")


def generate(output_root: pathlib.Path) -> list[pathlib.Path]:
    """Run protoc (from grpcio-tools) and return the generated files."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    out_dir = output_root / VIRTUAL_PREFIX
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{VIRTUAL_PREFIX}={PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={output_root}",
        f"--pyi_out={output_root}",
        *[f"{VIRTUAL_PREFIX}/{name}" for name in SOURCES],
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    init = out_dir / "__init__.py"
    init.write_text('"""Generated protobuf modules; regenerate with `make protos`, never edit."""\n')
    return sorted(out_dir.glob("*_pb2.py*")) + [init]


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else PROJECT_ROOT
    for path in generate(root):
        print(path)
