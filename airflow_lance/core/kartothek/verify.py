"""Verify an import: compare a Kartothek table and the Lance dataset made from it.

Both sides are reduced to, per partition value (the tuple of partition columns
the Lance dataset has; one group when they were dropped), the row count and an
order-independent checksum of every column (:mod:`.checksum`). The Kartothek
side is read with pyarrow: payload files with ``pyarrow.parquet`` and the
partition values decoded from the paths by pyarrow's Hive partitioning
(``segment_encoding="uri"``), independently of the importer's own decoding.
The Lance side is read with this project's reader. Any difference in the set
of columns, the set of partition values, a count or a checksum is reported.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lance.core.dataset import dataset as open_lance
from airflow_lance.core.kartothek.checksum import row_hashes
from airflow_lance.core.kartothek.errors import KartothekFileError, KartothekVerificationError
from airflow_lance.core.kartothek.partitions import partition_column, partition_scalar
from airflow_lance.core.kartothek.schema import payload_type_admitted
from airflow_lance.core.kartothek.validate import KartothekTable, PartitionSource, open_kartothek_table
from airflow_lance.core.storage import ObjectStore

_MASK = (1 << 64) - 1
_LOW = np.uint64(0xFFFFFFFF)


@dataclasses.dataclass(frozen=True)
class VerificationReport:
    """What verification compared and the differences it found (none: ``ok``)."""

    dataset_uuid: str
    table: str
    target_uri: str
    version: int
    group_columns: tuple[str, ...]
    columns: tuple[str, ...]
    groups: int
    source_rows: int
    lance_rows: int
    differences: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        result = dataclasses.asdict(self)
        result["ok"] = self.ok
        return result


class _Totals:
    """Row count and per-column checksums of each group."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self.rows: dict[tuple[Any, ...], int] = {}
        self.sums: dict[tuple[Any, ...], list[int]] = {}

    def add(self, group: tuple[Any, ...], rows: int, sums: Sequence[int]) -> None:
        self.rows[group] = self.rows.get(group, 0) + rows
        current = self.sums.setdefault(group, [0] * len(self.columns))
        for index, value in enumerate(sums):
            current[index] = (current[index] + value) & _MASK

    def add_batch(self, batch: pa.RecordBatch, group_columns: Sequence[str]) -> None:
        """Add a batch whose rows may belong to several groups."""
        hashes = [row_hashes(batch.column(name)) for name in self.columns]
        if not group_columns:
            self.add((), batch.num_rows, [int(h.sum(dtype=np.uint64)) for h in hashes])
            return
        # Sum 32-bit halves per group with Arrow's group-by (no overflow below 2**32 rows), then recombine.
        data = {f"k{i}": batch.column(name) for i, name in enumerate(group_columns)}
        for index, h in enumerate(hashes):
            data[f"lo{index}"] = pa.array(h & _LOW)
            data[f"hi{index}"] = pa.array(h >> np.uint64(32))
        table = pa.table(data)
        aggregations: list[tuple[Any, str]] = [
            (f"{half}{i}", "sum") for i in range(len(hashes)) for half in ("lo", "hi")
        ]
        aggregations.append(([], "count_all"))
        grouped = table.group_by([f"k{i}" for i in range(len(group_columns))], use_threads=False).aggregate(
            aggregations
        )
        keys = [grouped.column(f"k{i}").to_pylist() for i in range(len(group_columns))]
        counts = grouped.column("count_all").to_pylist()
        lows = [grouped.column(f"lo{i}_sum").to_pylist() for i in range(len(hashes))]
        highs = [grouped.column(f"hi{i}_sum").to_pylist() for i in range(len(hashes))]
        sums = [[((highs[i][row] or 0) << 32) + (lows[i][row] or 0) for i in range(len(hashes))]
                for row in range(grouped.num_rows)]
        for row in range(grouped.num_rows):
            self.add(tuple(column[row] for column in keys), counts[row], sums[row])


def _source_values(table: KartothekTable, part: PartitionSource, fields: Sequence[pa.Field]) -> dict[str, pa.Scalar]:
    """Partition values decoded by pyarrow's Hive partitioning (binary values: by percent-decoding)."""
    if not fields:
        return {}
    import pyarrow.dataset as pads  # slow to import: only when verifying

    # Kartothek leaves a '/' inside a value unencoded: give pyarrow the value's directories
    # as one segment (percent-encoded '/'), or it would cut the value at the first one.
    *directories, file_name = part.key.split("/")[2:]
    segments: list[str] = []
    for component in directories:
        if "=" not in component and segments:
            segments[-1] += "%2F" + component
        else:
            segments.append(component)
    relative = "/" + "/".join([*segments, file_name])
    textual = [f for f in fields if not (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type))]
    decoded: dict[str, pa.Scalar] = {}
    if textual:
        partitioning = pads.HivePartitioning(pa.schema(textual), segment_encoding="uri")
        keys = pads.get_partition_keys(partitioning.parse(relative))
        decoded.update({f.name: pa.scalar(keys[f.name], f.type) for f in textual if f.name in keys})
    encoded = dict(
        component.split("=", 1) for component in segments if component.count("=") == 1
    )
    for field in fields:
        if field.name not in decoded and field.name in encoded:
            decoded[field.name] = partition_scalar(encoded[field.name], field.type)
    return decoded


def _source_batches(
    store: ObjectStore, table: KartothekTable, part: PartitionSource, schema: pa.Schema,
    values: Mapping[str, pa.Scalar],
) -> Iterator[pa.RecordBatch]:
    payload = [f for f in schema if f.name not in values and f.name not in table.partition_keys]
    try:
        with store.open_input(part.key) as source:
            parquet = pq.ParquetFile(source)
            present = set(parquet.schema_arrow.names)
            for batch in parquet.iter_batches(columns=[f.name for f in payload if f.name in present]):
                arrays = []
                for field in schema:
                    if field.name in values:
                        arrays.append(partition_column(values[field.name], field.type, batch.num_rows))
                    elif field.name in batch.schema.names and payload_type_admitted(
                        batch.schema.field(field.name).type, field.type
                    ):
                        arrays.append(batch.column(field.name).cast(field.type))
                    else:
                        arrays.append(pa.nulls(batch.num_rows, field.type))
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    except (pa.ArrowException, OSError) as exc:
        raise KartothekFileError(part.key, f"cannot read the payload file: {exc}") from exc


def _describe(group: tuple[Any, ...], columns: Sequence[str]) -> str:
    if not columns:
        return "all rows"
    return "partition " + ", ".join(f"{name}={value!r}" for name, value in zip(columns, group))


def verify_kartothek_import(
    store_uri: str | os.PathLike[str],
    dataset_uuid: str,
    target_uri: str | os.PathLike[str],
    table: str = "table",
    *,
    version: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    target_storage_options: Mapping[str, str] | None = None,
    raise_on_difference: bool = True,
) -> VerificationReport:
    """Compare Kartothek ``table`` of ``dataset_uuid`` with the Lance dataset at ``target_uri``.

    Compares the column sets, then per partition value the row count and a
    checksum of each column. Raises :class:`KartothekVerificationError` on any
    difference (unless ``raise_on_difference`` is False); returns the report.
    """
    source = open_kartothek_table(store_uri, dataset_uuid, table, storage_options=storage_options,
                                  check_payload=False)
    target = open_lance(target_uri, version, storage_options=(
        target_storage_options if target_storage_options is not None else storage_options))
    lance_schema = target.schema
    differences: list[str] = []
    missing = [name for name in source.schema.names if name not in lance_schema.names
               and name not in source.partition_keys]
    extra = [name for name in lance_schema.names if name not in source.schema.names]
    if missing:
        differences.append(f"columns {missing} of the Kartothek table are not in the Lance dataset")
    if extra:
        differences.append(f"columns {extra} of the Lance dataset are not in the Kartothek table")
    compared = [f for f in lance_schema if f.name in source.schema.names]
    compared_schema = pa.schema(compared)
    group_columns = [name for name in source.partition_keys if name in compared_schema.names]
    fields = [compared_schema.field(name) for name in group_columns]
    columns = compared_schema.names
    theirs = _Totals(columns)
    store = source.open_store()
    for part in source.partitions:
        values = _source_values(source, part, fields)
        group = tuple(values[name].as_py() for name in group_columns)
        theirs.rows.setdefault(group, 0)
        theirs.sums.setdefault(group, [0] * len(columns))
        for batch in _source_batches(store, source, part, compared_schema, values):
            theirs.add(group, batch.num_rows, [int(row_hashes(batch.column(n)).sum(dtype=np.uint64))
                                               for n in columns])
    ours = _Totals(columns)
    for batch in target.to_batches(columns=columns):
        if batch.num_rows:
            ours.add_batch(batch, group_columns)
    for group in theirs.rows.keys() | ours.rows.keys():
        where = _describe(group, group_columns)
        if theirs.rows.get(group, 0) == 0 and group not in ours.rows:
            continue  # an empty Kartothek partition has no rows to find
        if group not in ours.rows:
            differences.append(f"{where}: {theirs.rows[group]} rows in Kartothek, none in Lance")
            continue
        if group not in theirs.rows:
            differences.append(f"{where}: {ours.rows[group]} rows in Lance, none in Kartothek")
            continue
        if theirs.rows[group] != ours.rows[group]:
            differences.append(f"{where}: {theirs.rows[group]} rows in Kartothek, {ours.rows[group]} in Lance")
        for name, mine, other in zip(columns, ours.sums[group], theirs.sums[group]):
            if mine != other:
                differences.append(f"{where}: column {name!r} differs (checksum {other:016x} in Kartothek, "
                                   f"{mine:016x} in Lance)")
    report = VerificationReport(
        dataset_uuid=dataset_uuid,
        table=table,
        target_uri=os.fspath(target_uri),
        version=target.version,
        group_columns=tuple(group_columns),
        columns=tuple(columns),
        groups=len(theirs.rows),
        source_rows=sum(theirs.rows.values()),
        lance_rows=sum(ours.rows.values()),
        differences=tuple(sorted(differences)),
    )
    if differences and raise_on_difference:
        raise KartothekVerificationError(
            f"Lance dataset {report.target_uri} (version {report.version}) differs from Kartothek dataset "
            f"{dataset_uuid!r} table {table!r}",
            report.differences,
        )
    return report
