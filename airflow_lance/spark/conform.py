"""Spark's Arrow batches conformed to the types the dataset stores.

Spark hands Python its own Arrow representation of a type: ``large_string`` or
``string``, a list's child named ``element``, ``Etc/UTC`` for UTC, a plain list for
what the dataset stores as a fixed-size list (Spark has no fixed-size arrays), and a wider
signed integer or ``decimal(20,0)`` for an unsigned integer (Spark has no unsigned types).
:func:`harmonize` converts such columns to the dataset's types and leaves real
differences for the core to refuse. :func:`with_fixed_size_lists` is the schema a new
dataset gets when array columns are to be stored as fixed-size lists (vectors), and
:func:`with_casts` when columns are cast (``cast``, or ``fixed_size_lists`` with an element
type): those columns are converted whatever their source type, vectorised by Arrow.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
import pyarrow as pa

from airflow_lance.core import SchemaMismatchError
from airflow_lance.spark.spec import parse_type


def _same_kind(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether ``source`` differs from ``target`` only in representation (large/small offsets,
    list child names, time zone spelling, a list holding a fixed-size list's values)."""
    if source == target:
        return True
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    binaries = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    if isinstance(target, pa.BaseExtensionType) and target.extension_name == "arrow.json":
        return any(test(source) for test in strings)  # Spark holds JSON as its text (validated when written)
    for family in (strings, binaries):
        if any(test(source) for test in family) and any(test(target) for test in family):
            return True
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        return source.unit == target.unit and (source.tz is None) == (target.tz is None)
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if any(test(source) for test in lists) and any(test(target) for test in lists):
        return _same_kind(source.value_type, target.value_type)
    if pa.types.is_struct(source) and pa.types.is_struct(target):  # unsigned fields as Spark holds them too
        names = {target.field(i).name: target.field(i).type for i in range(target.num_fields)}
        return all(
            source.field(i).name in names and (_same_kind(source.field(i).type, names[source.field(i).name])
                                               or _unsigned_from_spark(source.field(i).type,
                                                                       names[source.field(i).name]))
            for i in range(source.num_fields)
        )
    return False


def _unsigned_from_spark(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether ``target`` is an unsigned integer and ``source`` how Spark holds one: Spark has no
    unsigned types (it reads Parquet's ``uint8``/``uint16``/``uint32`` as the next wider signed
    integer and ``uint64`` as ``decimal(20,0)``), so any integer or decimal of scale 0 may hold the
    values; a value that does not fit fails the cast (checked per value by Arrow)."""
    return pa.types.is_unsigned_integer(target) and (
        pa.types.is_integer(source) or (pa.types.is_decimal(source) and source.scale == 0))


def _as_fixed_size_list(column: pa.Array, wanted: pa.FixedSizeListType, name: str) -> pa.Array:
    """A list column whose rows all hold ``wanted.list_size`` items, as a fixed-size list: the
    values are not copied when no row is null (Arrow's cast handles null rows)."""
    if column.null_count or not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        return column.cast(wanted)
    size = wanted.list_size
    width = 8 if pa.types.is_large_list(column.type) else 4
    # (the offsets' own buffer: ``column.offsets.to_numpy()`` is orders of magnitude slower)
    offsets = np.frombuffer(column.buffers()[1], dtype=f"<i{width}", count=len(column) + 1,
                            offset=column.offset * width)
    lengths = np.diff(offsets)
    wrong = np.flatnonzero(lengths != size)
    if len(wrong):
        raise SchemaMismatchError(
            f"column {name!r}: a row holds {int(lengths[wrong[0]])} items, not the {size} of its fixed-size lists")
    values = column.values.slice(int(offsets[0]), len(column) * size)
    if values.type != wanted.value_type:
        values = values.cast(wanted.value_type)
    return pa.FixedSizeListArray.from_arrays(values, type=wanted)


def _field(schema: pa.Schema, name: str, what: str) -> tuple[int, pa.Field]:
    """Index and field of column ``name``; SchemaMismatchError naming the columns if it is missing."""
    index = schema.get_field_index(name)
    if index < 0:
        raise SchemaMismatchError(f"{what} column {name!r} is not in the data (columns: {', '.join(schema.names)})")
    return index, schema.field(index)


def with_fixed_size_lists(schema: pa.Schema, sizes: Mapping[str, int]) -> pa.Schema:
    """``schema`` with the list columns named in ``sizes`` as fixed-size lists of that many items."""
    for name, size in sizes.items():
        index, field = _field(schema, name, "fixed-size list")
        if not (pa.types.is_list(field.type) or pa.types.is_large_list(field.type)
                or pa.types.is_fixed_size_list(field.type)):
            raise SchemaMismatchError(f"column {name!r} is {field.type}, not an array: it cannot be a fixed-size list")
        wanted = pa.list_(field.type.value_field, size)
        schema = schema.set(index, field.with_type(wanted))
    return schema


def _cast_type(source: pa.Field, wanted: pa.DataType) -> pa.DataType:
    """``wanted``, with the list child names and nullability of a ``source`` list kept
    (Spark's ``element``), so that a cast list has the name a plain conversion gives it."""
    if pa.types.is_fixed_size_list(wanted) and (pa.types.is_list(source.type) or pa.types.is_large_list(source.type)
                                                or pa.types.is_fixed_size_list(source.type)):
        value_field = source.type.value_field
        return pa.list_(value_field.with_type(_cast_type(value_field, wanted.value_type)), wanted.list_size)
    if (pa.types.is_list(wanted) or pa.types.is_large_list(wanted)) and pa.types.is_list(source.type):
        value_field = source.type.value_field.with_type(_cast_type(source.type.value_field, wanted.value_type))
        return pa.large_list(value_field) if pa.types.is_large_list(wanted) else pa.list_(value_field)
    return wanted


def with_casts(schema: pa.Schema, casts: Mapping[str, str]) -> pa.Schema:
    """``schema`` with the columns named in ``casts`` ({column: type name}) of those types."""
    for name, text in casts.items():
        index, field = _field(schema, name, "cast")
        schema = schema.set(index, field.with_type(_cast_type(field, parse_type(text))))
    return schema


def harmonize(batch: pa.RecordBatch, target: pa.Schema, cast: Collection[str] = ()) -> pa.RecordBatch:
    """Cast the columns of ``batch`` whose type differs from the dataset's only in representation
    (Spark's Arrow types vs. the dataset's, including Spark's wider signed integers and
    ``decimal(20,0)`` for the dataset's unsigned integers), and the columns named in ``cast`` to the
    target's type whatever they are; anything else is left for the core to reject. A value that
    cannot be cast exactly (e.g. a negative number or one too large for the unsigned type) raises
    :class:`SchemaMismatchError` naming its column."""
    columns, fields, changed = [], [], False
    for field, column in zip(batch.schema, batch.columns, strict=True):
        index = target.get_field_index(field.name)
        wanted = target.field(index).type if index >= 0 else field.type
        if wanted != field.type and (field.name in cast or _same_kind(field.type, wanted)
                                     or _unsigned_from_spark(field.type, wanted)):
            try:
                column = _as_fixed_size_list(column, wanted, field.name) if pa.types.is_fixed_size_list(wanted) \
                    else column.cast(wanted)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(
                    f"column {field.name!r}: cannot store {field.type} as {wanted}: {exc}"
                ) from exc
            field, changed = field.with_type(wanted), True
        columns.append(column)
        fields.append(field)
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, batch.schema.metadata)) if changed else batch
