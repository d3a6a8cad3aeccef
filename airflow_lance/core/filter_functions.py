"""Vectorised kernels for filter functions pyarrow's compute library lacks, as scalar UDFs.

``array_has_any`` / ``array_has_all`` / ``array_has`` (``array_contains``) and 1-based list
indexing ``tags[1]`` (null when out of range), with DataFusion's results as pylance returns
them: a null list gives null (but ``array_has_all(x, [])`` is true and
``array_has_any(x, [])`` false for every row), a null in the needle matches a null
element. Each kernel works on whole arrays (flatten, ``is_in``, ``bincount``); a UDF is
registered once per (function, argument types) in pyarrow's function registry, so filters
using them stay ordinary ``pc.Expression`` objects.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lance.core.arrays import sorted_unique

_LOCK = threading.Lock()


def _as_array(value: Any) -> pa.Array:
    if isinstance(value, pa.ChunkedArray):
        return value.combine_chunks()
    return value


def _needle_values(needle: Any) -> pa.Array | None:
    """The needle list's values (None for a null needle)."""
    if isinstance(needle, pa.Scalar):
        return needle.values if needle.is_valid else None
    needle = _as_array(needle)  # broadcast needle: every row holds the same constant
    return needle[0].values if len(needle) and needle[0].is_valid else None


def _membership(lists: pa.Array, needle: pa.Array, mode: str, compare: pa.DataType | None) -> pa.Array:
    length = len(lists)
    if mode == "all" and len(needle) == 0:
        return pa.array(np.ones(length, dtype=bool))
    if len(needle) == 0:
        return pa.array(np.zeros(length, dtype=bool))
    values = pc.list_flatten(lists)
    parents = np.asarray(pc.list_parent_indices(lists))
    if compare is not None:
        values, needle = values.cast(compare), needle.cast(compare)
    unique_needle = pc.unique(needle)
    position = np.asarray(pc.index_in(values, value_set=unique_needle, skip_nulls=False).fill_null(-1))
    hit = position >= 0
    if mode == "any":
        found = np.bincount(parents[hit], minlength=length) > 0
    else:
        k = len(unique_needle)
        pairs = sorted_unique(parents[hit].astype(np.int64) * k + position[hit])
        found = np.bincount(pairs // k, minlength=length) == k
    return pa.array(found, mask=np.asarray(lists.is_null()) if lists.null_count else None)


def _register(name: str, kernel: Any, in_types: dict[str, pa.DataType], out_type: pa.DataType) -> str:
    with _LOCK:
        try:
            pc.get_function(name)
        except pa.ArrowKeyError:
            pc.register_scalar_function(kernel, name, {"summary": name, "description": name}, in_types, out_type)
    return name


def _name(*parts: Any) -> str:
    return "airflow_lance_" + "_".join(re.sub(r"\W+", "_", str(p)) for p in parts)


def array_membership(
    lists: pc.Expression, list_type: pa.DataType, needle: pa.Scalar, mode: str, compare: pa.DataType | None
) -> pc.Expression:
    """``mode`` "any" or "all": does each list hold any / all of ``needle``'s values?"""

    def kernel(ctx: Any, lists_arg: Any, needle_arg: Any) -> pa.Array:
        lists_arg = _as_array(lists_arg)
        values = _needle_values(needle_arg)
        if values is None:
            return pa.nulls(len(lists_arg), pa.bool_())
        return _membership(lists_arg, values, mode, compare)

    name = _register(_name("array", mode, list_type, needle.type, compare), kernel,
                     {"lists": list_type, "needle": needle.type}, pa.bool_())
    return pc.Expression._call(name, [lists, pc.scalar(needle)])


def _pick(lists: pa.Array, index: np.ndarray) -> pa.Array:
    """Element ``index`` (1-based, per row; negative counts from the end) of each list; null
    when out of range or null."""
    lengths = np.asarray(pc.list_value_length(lists).fill_null(0))
    index = np.where(index < 0, lengths + index + 1, index)
    present = (lengths >= index) & (index >= 1)
    starts = np.asarray(lists.offsets)[:-1] if len(lists) else np.empty(0, dtype=np.int64)
    values = lists.values
    if not len(values):
        return pa.nulls(len(lists), values.type)
    picked = values.take(pa.array(np.where(present, starts + index - 1, 0)))
    return pc.if_else(pa.array(present), picked, pa.scalar(None, values.type))


def list_get(lists: pc.Expression, list_type: pa.DataType, index: int | pc.Expression) -> pc.Expression:
    """``lists[index]`` with SQL's 1-based index (a literal or an int64 expression; negative
    counts from the end, as DataFusion's ``array_element``); null when out of range or null."""
    if isinstance(index, int):

        def kernel(ctx: Any, lists_arg: Any) -> pa.Array:
            return _pick(_as_array(lists_arg), np.full(len(lists_arg), index, dtype=np.int64))

        name = _register(_name("list_get", list_type, index), kernel, {"lists": list_type}, list_type.value_type)
        return pc.Expression._call(name, [lists])

    def dynamic(ctx: Any, lists_arg: Any, index_arg: Any) -> pa.Array:
        lists_arg = _as_array(lists_arg)
        if isinstance(index_arg, pa.Scalar):
            index_arg = pa.array([index_arg.as_py()] * len(lists_arg), pa.int64())
        index_arg = _as_array(index_arg)
        picked = _pick(lists_arg, np.asarray(index_arg.fill_null(0)))
        return picked

    name = _register(_name("list_get_at", list_type), dynamic, {"lists": list_type, "index": pa.int64()},
                     list_type.value_type)
    return pc.Expression._call(name, [lists, index])


# -- floats as text ------------------------------------------------------------------------------

_FLOAT_PARTS = r"^(?P<sign>-?)(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]*))?(?:e(?P<exp>[-+]?[0-9]+))?$"


def format_floats(values: pa.Array) -> pa.Array:
    """float32/float64 values as DataFusion writes them (arrow-rs, ryu): the shortest digits
    that read back, ``2.0``, ``0.1``, ``1e21``, ``1.5e-7``, ``NaN``, ``inf``; positional while
    the decimal exponent is within (-5, 16] (float32: (-6, 13]), scientific beyond.

    pyarrow's own cast supplies the shortest digits; the layout is rebuilt from them with
    whole-array string kernels (one pass per distinct position of the decimal point)."""
    values = _as_array(values)
    high, low = (16, -5) if pa.types.is_float64(values.type) else (13, -6)
    plain = values.cast(pa.string())
    parts = pc.extract_regex(plain, _FLOAT_PARTS)
    ints, fracs = parts.field("int"), parts.field("frac")
    exps = parts.field("exp")
    digits_all = pc.binary_join_element_wise(ints, fracs, "")
    stripped = pc.utf8_ltrim(digits_all, "0")
    lead = np.asarray(pc.subtract(pc.utf8_length(digits_all), pc.utf8_length(stripped)).fill_null(0), np.int64)
    digits = pc.utf8_rtrim(stripped, "0")
    n = np.asarray(pc.utf8_length(digits).fill_null(0), np.int64)
    exps = pc.utf8_ltrim(exps, "+")
    exponent = np.asarray(pc.if_else(pc.equal(exps, ""), "0", exps).cast(pa.int64()).fill_null(0), np.int64)
    kk = np.asarray(pc.utf8_length(ints).fill_null(0), np.int64) - lead + exponent
    zero = n == 0
    scientific = ~zero & ((kk > high) | (kk <= low))
    whole = ~zero & ~scientific & (kk >= n)
    small = ~zero & ~scientific & (kk <= 0)
    fraction = ~zero & ~scientific & ~whole & ~small
    first = pc.utf8_slice_codeunits(digits, 0, 1)
    rest = pc.utf8_slice_codeunits(digits, 1)
    mantissa = pc.if_else(pc.greater(pc.utf8_length(rest), 0), pc.binary_join_element_wise(first, rest, "."), first)
    sci = pc.binary_join_element_wise(mantissa, pa.array(kk - 1).cast(pa.string()), "e")
    zeros = pc.binary_repeat(pa.scalar("0"), pa.array(np.clip(kk - n, 0, None)))
    whole_text = pc.binary_join_element_wise(digits, zeros, ".0", "")
    small_zeros = pc.binary_repeat(pa.scalar("0"), pa.array(np.clip(-kk, 0, None)))
    small_text = pc.binary_join_element_wise("0.", small_zeros, digits, "")
    out = pc.if_else(pa.array(scientific), sci, pc.if_else(pa.array(whole), whole_text,
                                                           pc.if_else(pa.array(small), small_text, "0.0")))
    for k in sorted_unique(kk[fraction]).tolist():
        mask = fraction & (kk == k)
        chosen = digits.filter(pa.array(mask))
        text = pc.binary_join_element_wise(pc.utf8_slice_codeunits(chosen, 0, k),
                                           pc.utf8_slice_codeunits(chosen, k), ".")
        out = pc.replace_with_mask(out, pa.array(mask), text)
    out = pc.if_else(pc.equal(parts.field("sign"), "-"), pc.binary_join_element_wise("-", out, ""), out)
    special = pc.is_null(parts)  # nan and the infinities: no digits to parse
    named = pc.if_else(pc.is_nan(values), "NaN", pc.if_else(pc.greater(values, 0), "inf", "-inf"))
    out = pc.if_else(special, named, out)
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.string()), out)


def float_to_string(value: Any, float_type: pa.DataType) -> Any:
    """``format_floats`` over an array, or as an Expression over an Expression."""

    def kernel(ctx: Any, values: Any) -> pa.Array:
        return format_floats(values)

    name = _register(_name("float_to_string", float_type), kernel, {"values": float_type}, pa.string())
    if isinstance(value, pc.Expression):
        return pc.Expression._call(name, [value])
    if isinstance(value, pa.Scalar):
        return format_floats(pa.array([value.as_py()], float_type))[0]
    return pc.call_function(name, [value])


# -- timestamps as text --------------------------------------------------------------------------

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def format_timestamps(values: pa.Array) -> pa.Array:
    """Timestamps (naive or UTC) and date64 as DataFusion writes them (chrono's RFC 3339 with
    automatic precision): ``2023-01-02T03:04:05``, ``...05.120``, ``...05.000600``, a ``Z`` for UTC;
    fractions of 3, 6 or 9 digits, the fewest that are exact, none when zero."""
    values = _as_array(values)
    if pa.types.is_date64(values.type):
        values = values.cast(pa.timestamp("ms"))
    unit, tz = values.type.unit, values.type.tz
    naive = values.cast(pa.timestamp(unit)) if tz else values
    ticks = np.asarray(naive.view(pa.int64()).fill_null(0), np.int64)
    per = _PER_SECOND[unit]
    nanos = (ticks % per) * (1_000_000_000 // per)
    seconds = pa.array(ticks // per, pa.int64()).cast(pa.timestamp("s"))
    base = pc.replace_substring(seconds.cast(pa.string()), " ", "T", max_replacements=1)
    millis, micros = nanos % 1_000_000 == 0, nanos % 1_000 == 0
    frac3 = pc.utf8_lpad(pa.array(nanos // 1_000_000).cast(pa.string()), 3, "0")
    frac6 = pc.utf8_lpad(pa.array(nanos // 1_000).cast(pa.string()), 6, "0")
    frac9 = pc.utf8_lpad(pa.array(nanos).cast(pa.string()), 9, "0")
    fraction = pc.if_else(pa.array(nanos == 0), "", pc.binary_join_element_wise(
        ".", pc.if_else(pa.array(millis), frac3, pc.if_else(pa.array(micros), frac6, frac9)), ""))
    text = pc.binary_join_element_wise(base, fraction, "Z" if tz else "", "")
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.string()), text)


def timestamp_to_string(value: Any, source_type: pa.DataType) -> Any:
    """``format_timestamps`` over an array, a scalar, or as an Expression."""

    def kernel(ctx: Any, values: Any) -> pa.Array:
        return format_timestamps(values)

    name = _register(_name("timestamp_to_string", source_type), kernel, {"values": source_type}, pa.string())
    if isinstance(value, pc.Expression):
        return pc.Expression._call(name, [value])
    if isinstance(value, pa.Scalar):
        return format_timestamps(pa.array([value.as_py()], source_type))[0]
    return pc.call_function(name, [value])
