"""The committed generated protobuf code is exactly what protos/ generates."""

from __future__ import annotations

import pathlib
import runpy

ROOT = pathlib.Path(__file__).resolve().parents[1]
GENERATED = ROOT / "airflow_lance" / "core" / "_proto"


def test_generated_code_is_current(tmp_path):
    generate = runpy.run_path(str(ROOT / "protos" / "generate.py"))["generate"]
    fresh = {p.name: p.read_bytes() for p in generate(tmp_path)}
    committed = {p.name: p.read_bytes() for p in GENERATED.iterdir() if p.is_file() and p.suffix in (".py", ".pyi")}
    stale = sorted(name for name in fresh if committed.get(name) != fresh[name])
    extra = sorted(set(committed) - set(fresh))
    assert not stale and not extra, f"run `make protos`: stale {stale}, not generated {extra}"


def test_lance_package_names_and_field_numbers():
    from airflow_lance.core._proto import file2_pb2, table_pb2, transaction_pb2

    assert table_pb2.Manifest.DESCRIPTOR.full_name == "lance.table.Manifest"
    assert file2_pb2.ColumnMetadata.DESCRIPTOR.full_name == "lance.file.v2.ColumnMetadata"
    fields = table_pb2.Manifest.DESCRIPTOR.fields_by_name
    assert fields["writer_version"].number == 13 and fields["data_format"].number == 15
    assert fields["transaction_section"].number == 23
    ops = transaction_pb2.Transaction.DESCRIPTOR.oneofs_by_name["operation"].fields
    assert {f.name: f.number for f in ops}["rewrite"] == 104
