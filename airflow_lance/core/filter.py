"""The filter language of ``LanceDataset.to_table(filter=...)`` and ``delete(predicate)``.

A filter is either a SQL WHERE-clause (the dialect pylance accepts) or a pyarrow
compute :class:`~pyarrow.compute.Expression`. SQL is parsed with sqlglot and
translated node by node into a pyarrow Expression; evaluating it stays pyarrow's
(vectorised) job.

Semantics follow pylance / DataFusion:

* SQL three-valued logic: comparisons with NULL are NULL, AND/OR are Kleene,
  ``NOT NULL`` is NULL, and a row is selected only where the filter is true.
* Unquoted top-level column names match case-insensitively when no column has
  the exact name; backtick-quoted names and struct fields match exactly.
  Double quotes delimit *strings*, as in pylance (``name = "ab"``).
* A literal compared with a column is cast to the column's type when that is
  lossless (``u8 = 200``, ``amount = 10.5``, ``tsz > timestamp '...'``) and
  always for float columns (``f32 = 1.1`` compares as float32).
* ``/`` on integers truncates and ``%`` takes the sign of the dividend.
"""

from __future__ import annotations

import datetime as dt
import decimal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from airflow_lance.core.arrays import arrow_dataset, empty_table
from airflow_lance.core.errors import InvalidInputError

__all__ = ["referenced_columns", "to_expression", "value_expression"]

Predicate = str | pc.Expression

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
_TIME_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}
_DEFAULT_TIME_UNIT = "us"
_INT64_MAX = 2**63 - 1
_MAX_INTEGER_DIGITS = 20  # of any 64-bit integer
_DECIMAL128_MAX_PRECISION = 38


class _LanceFilterDialect(Dialect):
    """pylance's SQL: backticks quote identifiers, '...' and "..." are strings."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS: ClassVar[list[str]] = ["`"]
        QUOTES: ClassVar[list[str]] = ["'", '"']
        HEX_STRINGS: ClassVar[list[tuple[str, str]]] = [("x'", "'"), ("X'", "'")]


# --------------------------------------------------------------------------- API


def to_expression(predicate: Predicate, schema: pa.Schema) -> pc.Expression:
    """Translate a filter into a boolean pyarrow Expression over ``schema``.

    Args:
        predicate: a SQL WHERE-clause (``"x > 1 AND name LIKE 'a%'"``) or a
            pyarrow Expression.
        schema: the schema of the data the filter will be applied to.

    Returns:
        A pyarrow Expression evaluating to boolean; a row is selected where it
        is true (false and null reject the row).

    Raises:
        InvalidInputError: the SQL is malformed (with sqlglot's line/column),
            names an unknown column or struct field, combines incompatible
            types, uses an unsupported construct or function, or does not
            evaluate to a boolean; an Expression does not bind to ``schema``.
    """
    if isinstance(predicate, str):
        return _Translator(schema).translate_filter(predicate)
    if isinstance(predicate, pc.Expression):
        _check_expression(predicate, schema)
        return predicate
    raise InvalidInputError(
        f"a filter must be a SQL string or a pyarrow.compute.Expression, not {type(predicate).__name__}"
    )


def referenced_columns(predicate: Predicate, schema: pa.Schema) -> list[str]:
    """The top-level columns of ``schema`` that ``predicate`` reads.

    For SQL the names come from the translated AST, in order of first use
    (``s.a = 1`` needs ``s``). For an Expression (with fields referenced by
    name) they are found by binding it to sub-schemas, in schema order. The
    predicate is validated as by :func:`to_expression`.

    Raises:
        InvalidInputError: as :func:`to_expression`.
    """
    if isinstance(predicate, str):
        translator = _Translator(schema)
        translator.translate_filter(predicate)
        return translator.columns
    return _bound_columns(to_expression(predicate, schema), schema)


def value_expression(sql: str, schema: pa.Schema) -> tuple[pc.Expression, list[str]]:
    """Translate a SQL value expression (pylance's ``to_table(columns={name: sql})``).

    Returns the pyarrow Expression and the top-level columns it reads, in order of use.

    Raises:
        InvalidInputError: as :func:`to_expression`, for any value type.
    """
    expression, columns, _ = translate_value(sql, schema)
    return expression, columns


def translate_value(sql: str, schema: pa.Schema) -> tuple[pc.Expression, list[str], bool]:
    """:func:`value_expression` plus whether the result may be null, as DataFusion infers it
    (pylance's nullability of a new column)."""
    if not isinstance(sql, str):
        raise InvalidInputError(f"a projection must be a SQL expression string, not {type(sql).__name__}")
    translator = _Translator(schema)
    translator.integer_literals_to_column = True
    try:
        operand = translator._translate(_parse(sql))
    except RecursionError as error:
        raise InvalidInputError(f"expression is nested too deeply: {sql[:80]!r}...") from error
    expression = operand.expr
    fields = [schema.field(name) for name in translator.columns]
    try:
        arrow_dataset().dataset(empty_table(pa.schema(fields))).to_table(columns={"value": expression})
    except _ARROW_ERRORS as error:
        raise InvalidInputError(f"cannot evaluate expression {sql!r}: {str(error).splitlines()[0]}") from None
    return expression, translator.columns, operand.nullable


# ------------------------------------------------------- pyarrow Expression input


def _bind_error(expression: pc.Expression, fields: Sequence[pa.Field]) -> str | None:
    """Why ``expression`` is no boolean filter over ``fields``; None if it is one."""
    try:
        empty_table(pa.schema(fields)).filter(expression)
    except _ARROW_ERRORS as error:
        return str(error).splitlines()[0]  # pyarrow goes on to print the schema
    return None


def _check_expression(expression: pc.Expression, schema: pa.Schema) -> None:
    reason = _bind_error(expression, list(schema))
    if reason is not None:
        raise InvalidInputError(
            f"filter expression {expression} is not a boolean condition over the schema: "
            f"{reason} (available columns: {', '.join(schema.names)})"
        )


def _bound_columns(expression: pc.Expression, schema: pa.Schema) -> list[str]:
    """The top-level fields ``expression`` needs, by group testing on sub-schemas."""

    def binds(fields: list[pa.Field]) -> bool:
        return _bind_error(expression, fields) is None

    def needed(candidates: list[pa.Field], kept: list[pa.Field]) -> list[pa.Field]:
        if not candidates or binds(kept):
            return []
        if len(candidates) == 1:
            return candidates
        half = len(candidates) // 2
        first = needed(candidates[:half], kept + candidates[half:])
        return first + needed(candidates[half:], kept + first)

    text = str(expression)  # field references print their names: a cheap first cut
    named = [field for field in schema if field.name in text]
    return [field.name for field in needed(named if binds(named) else list(schema), [])]


# ------------------------------------------------------------------ SQL operands


@dataclass(frozen=True)
class _Operand:
    """A translated SQL node: its Expression, its result type and the node.

    ``scalar`` holds the value when the node is a constant literal, so that it
    can still be cast to the type of what it is compared with.
    """

    expr: pc.Expression
    type: pa.DataType
    node: exp.Expression
    scalar: pa.Scalar | None = None
    #: DataFusion's nullability of the result (what pylance gives a new column): False only
    #: when no row can be null (non-null columns and literals through null-preserving operators).
    nullable: bool = True

    @property
    def sql(self) -> str:
        """The node as SQL text, for messages (generating it is not cheap)."""
        return _sql(self.node)


def _constant(value: pa.Scalar, node: exp.Expression) -> _Operand:
    return _Operand(pc.scalar(value), value.type, node, value, nullable=not value.is_valid)


def _apply(function: Callable[..., Any], operands: Sequence[_Operand], node: exp.Expression,
           nullable: bool | None = None) -> _Operand:
    """Apply a pyarrow compute function, first to one-null arrays of the operand
    types: that checks the types (and compiles regular expressions) up front. The result is
    nullable when an operand is (or as ``nullable`` says: DataFusion's functions always are)."""
    try:
        probe = function(*(pa.nulls(1, operand.type) for operand in operands))
    except _ARROW_ERRORS as error:
        types = ", ".join(f"{operand.sql} is {operand.type}" for operand in operands)
        raise InvalidInputError(f"cannot evaluate {_sql(node)} ({types}): {error}") from error
    if nullable is None:
        nullable = any(operand.nullable for operand in operands)
    return _Operand(function(*(operand.expr for operand in operands)), probe.type, node, nullable=nullable)


def _family(data_type: pa.DataType) -> str:
    """The group of types a literal may be converted within."""
    if pa.types.is_integer(data_type) or pa.types.is_floating(data_type):
        return "numeric"
    if pa.types.is_decimal(data_type):
        return "numeric"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "string"
    if pa.types.is_date(data_type) or pa.types.is_timestamp(data_type):
        return "temporal"
    return str(data_type)


def _as_decimal(value: pa.Scalar) -> pa.Scalar | None:
    """A number literal as the narrowest decimal (``repr`` of a float round-trips)."""
    try:
        return pa.scalar(decimal.Decimal(str(value.as_py())))
    except (*_ARROW_ERRORS, ValueError, OverflowError):
        return None


def _lossless_cast(value: pa.Scalar, target: pa.DataType) -> pa.Scalar | None:
    """``value`` as ``target`` if that round-trips exactly, else None."""
    try:
        cast = value.cast(target)
        exact = cast.cast(value.type).equals(value)
    except (*_ARROW_ERRORS, OverflowError):
        return None
    return cast if exact else None


def _converted_literal(value: pa.Scalar, target: pa.DataType) -> pa.Scalar | None:
    """A literal as ``target`` where SQL converts it implicitly, else None."""
    if not value.is_valid:
        return pa.scalar(None, target)
    families = (_family(value.type), _family(target))
    if families == ("string", "temporal"):
        return _parse_temporal(value.as_py(), target)
    if families[0] != families[1]:
        return None
    if pa.types.is_timestamp(value.type) and pa.types.is_timestamp(target) and value.type.tz != target.tz:
        # now() is UTC: a column without time zone compares as UTC (DataFusion's coercion)
        relabeled = value.cast(pa.timestamp(value.type.unit, target.tz))
        return _lossless_cast(relabeled, target) or relabeled
    if pa.types.is_floating(target):
        return pa.scalar(float(value.as_py()), target)
    if pa.types.is_decimal(target) and not pa.types.is_decimal(value.type):
        exact = _as_decimal(value)
        return None if exact is None else _lossless_cast(exact, target)
    return _lossless_cast(value, target)


def _coerce(operand: _Operand, other: _Operand) -> _Operand:
    """Convert a literal ``operand`` to the type of the ``other`` side.

    NULL takes the type, a string becomes a date or timestamp, a number is
    rounded to a float type or cast losslessly to an integer or decimal type.
    An integer out of range of an integer column is an error (as in pylance);
    other literals are left for pyarrow's implicit casts (``x > 1.5``).
    """
    value, target = operand.scalar, other.type
    if value is None or other.scalar is not None or value.type == target:
        return operand
    converted = _converted_literal(value, target)
    if converted is not None:
        return _constant(converted, operand.node)
    if pa.types.is_integer(value.type) and pa.types.is_integer(target):
        raise InvalidInputError(f"{operand.sql} is out of the range of {other.sql} ({target})")
    return operand


def _coerce_pair(left: _Operand, right: _Operand) -> tuple[_Operand, _Operand]:
    """Convert a literal on one side to the type of the other side."""
    return _coerce(left, right), _coerce(right, left)


def _compare(function: Callable[..., Any], left: _Operand, right: _Operand, node: exp.Expression) -> _Operand:
    """Compare after literal conversion; with floats, NaN sorts above all numbers."""
    operands = _coerce_pair(left, right)
    result = _apply(function, operands, node)  # type errors name the comparison itself
    if not any(pa.types.is_floating(operand.type) for operand in operands):
        return result
    return _apply(_NAN_ORDERED.get(function, function), operands, node)


def _typed_null(operand: _Operand, target: pa.DataType) -> _Operand:
    """A NULL literal as a null of ``target``; anything else unchanged."""
    if operand.scalar is None or operand.scalar.is_valid:
        return operand
    return _constant(pa.scalar(None, target), operand.node)


def _arithmetic_literal(operand: _Operand, other: _Operand, integer_to_column: bool = False) -> _Operand:
    """NULL takes the other side's type; an integer beside a decimal becomes one
    (pyarrow would cast it to the decimal's own precision and overflow). With
    ``integer_to_column`` (projections), a number beside a numeric column takes the
    column's type (or is an error), as Lance's projection planner does (``u64 + 1`` is u64)."""
    value = operand.scalar
    if value is None or not value.is_valid:
        return _typed_null(operand, other.type)
    if pa.types.is_decimal(other.type) and pa.types.is_integer(value.type):
        return _constant(pa.scalar(decimal.Decimal(value.as_py())), operand.node)
    if integer_to_column and other.scalar is None and _is_numeric(other.type) and _is_numeric(value.type):
        lossy = pa.types.is_integer(other.type) and not pa.types.is_integer(value.type)
        converted = None if lossy else _converted_literal(value, other.type)
        if converted is None:
            raise InvalidInputError(f"{operand.sql} cannot be converted to the type of {other.sql} ({other.type})")
        return _constant(converted, operand.node)
    return operand


def _require_boolean(operand: _Operand) -> _Operand:
    if not pa.types.is_boolean(operand.type):
        raise InvalidInputError(f"{operand.sql} is {operand.type}, not a boolean condition")
    return operand


def _cast_options(target: pa.DataType) -> pc.CastOptions:
    """SQL CAST: truncates fractions (like DataFusion); overflow is an error."""
    return pc.CastOptions(target, allow_float_truncate=True, allow_decimal_truncate=True, allow_time_truncate=True)


def _parse_timestamp(string: pa.Scalar, target: pa.TimestampType) -> pa.Scalar:
    naive = pa.timestamp(target.unit)
    try:
        parsed = string.cast(naive)
    except pa.ArrowInvalid:  # with a zone offset: convert to UTC
        parsed = string.cast(pa.timestamp(target.unit, "UTC")).cast(naive)
    return parsed.cast(target)


def _parse_temporal(text: str, target: pa.DataType) -> pa.Scalar:
    """Parse an ISO-8601 string as ``target`` (a date or timestamp type).

    A zone offset (``+02:00``, ``Z``) is converted to UTC; a naive timestamp
    compared with a zoned column is taken as UTC.
    """
    string = pa.scalar(text)
    try:
        if pa.types.is_date(target):
            return string.cast(target)
        return _parse_timestamp(string, target)
    except _ARROW_ERRORS as error:
        raise InvalidInputError(
            f"cannot read {text!r} as {target} (an ISO-8601 date or time within its precision)"
        ) from error


def _datafusion_time_text(data_type: pa.DataType) -> bool:
    """Timestamps (naive or UTC) and date64: written as text the way DataFusion writes them."""
    if pa.types.is_timestamp(data_type):
        return data_type.tz in (None, "UTC", "+00:00", "Z")
    return pa.types.is_date64(data_type)


def _cast_function(source: pa.DataType, target: pa.DataType) -> Callable[[Any], Any]:
    """SQL CAST from ``source`` to ``target`` as a function of arrays or Expressions.

    pyarrow casts an integer type only to decimals with room for all its values,
    so integers go through such a decimal first.
    """
    options = _cast_options(target)
    if (pa.types.is_float32(source) or pa.types.is_float64(source)) and (
            pa.types.is_string(target) or pa.types.is_large_string(target)):
        from airflow_lance.core.filter_functions import float_to_string  # DataFusion's "2.0", "1e21", "NaN"

        return lambda value: float_to_string(value, source).cast(target)
    if _datafusion_time_text(source) and (pa.types.is_string(target) or pa.types.is_large_string(target)):
        from airflow_lance.core.filter_functions import timestamp_to_string  # "2023-01-02T03:04:05.120"

        return lambda value: timestamp_to_string(value, source).cast(target)
    if pa.types.is_integer(source) and pa.types.is_decimal(target):
        wide = _decimal(_MAX_INTEGER_DIGITS + target.scale, target.scale)
        return lambda value: value.cast(wide).cast(options=options)
    return lambda value: value.cast(options=options)


def _cast_literal(value: pa.Scalar, target: pa.DataType, node: exp.Expression) -> pa.Scalar:
    if _family(value.type) == "string" and _family(target) == "temporal":
        return _parse_temporal(value.as_py(), target)
    try:
        return _cast_function(value.type, target)(value)
    except _ARROW_ERRORS as error:
        raise InvalidInputError(f"cannot evaluate {_sql(node)}: {error}") from error


def _number(text: str) -> pa.Scalar:
    """A numeric literal: int64 (uint64 beyond int64) if integral, else float64."""
    if not text.isdigit():
        return pa.scalar(float(text))
    value = int(text)
    if value > _INT64_MAX:
        try:
            return pa.scalar(value, pa.uint64())
        except OverflowError as error:
            raise InvalidInputError(f"integer literal {text} is out of range") from error
    return pa.scalar(value)


def _is_numeric(data_type: pa.DataType) -> bool:
    return _family(data_type) == "numeric"


def _join_texts(*texts: Any, null_handling: str) -> Any:
    return pc.binary_join_element_wise(*texts, "", null_handling=null_handling, null_replacement="")


def _integer_remainder(dividend: Any, divisor: Any) -> Any:
    """SQL ``%`` on integers: ``/`` truncates, so the sign is the dividend's."""
    return pc.subtract(dividend, pc.multiply(pc.divide(dividend, divisor), divisor))


def _float_remainder(dividend: Any, divisor: Any) -> Any:
    """SQL ``%`` on floats (C ``fmod``): ``x - trunc(x / y) * y``."""
    quotient = pc.trunc(pc.divide(dividend, divisor))
    return pc.subtract(dividend, pc.multiply(quotient, divisor))


def _nan_equal(left: Any, right: Any) -> Any:
    """``=`` in DataFusion's total order of floats: NaN equals NaN."""
    both_nan = pc.and_kleene(pc.is_nan(left), pc.is_nan(right))
    return pc.or_kleene(pc.equal(left, right), both_nan)


def _nan_not_equal(left: Any, right: Any) -> Any:
    return pc.invert(_nan_equal(left, right))


def _nan_greater(left: Any, right: Any) -> Any:
    """``>`` in DataFusion's total order of floats: NaN is above every number."""
    nan_above = pc.and_kleene(pc.is_nan(left), pc.invert(pc.is_nan(right)))
    return pc.or_kleene(pc.greater(left, right), nan_above)


def _nan_greater_equal(left: Any, right: Any) -> Any:
    nan_above = pc.and_kleene(pc.is_nan(left), pc.is_valid(right))
    return pc.or_kleene(pc.greater_equal(left, right), nan_above)


def _nan_less(left: Any, right: Any) -> Any:
    return _nan_greater(right, left)


def _nan_less_equal(left: Any, right: Any) -> Any:
    return _nan_greater_equal(right, left)


def _not_distinct(left: Any, right: Any, equal: Callable[..., Any] = pc.equal) -> Any:
    """``left IS NOT DISTINCT FROM right``: equality where NULL equals NULL."""
    both_null = pc.and_kleene(pc.is_null(left), pc.is_null(right))
    return pc.coalesce(equal(left, right), both_null)


def _distinct(left: Any, right: Any, equal: Callable[..., Any] = pc.equal) -> Any:
    return pc.invert(_not_distinct(left, right, equal))


def _is_true(value: Any) -> Any:
    return pc.coalesce(value, False)


def _is_false(value: Any) -> Any:
    return pc.coalesce(pc.invert(value), False)


def _in_value_set(value: Any, value_set: pa.Array, has_null: bool) -> Any:
    """SQL ``value IN (...)`` over literals: NULL when ``value`` is NULL, or
    when it is not found and the list holds a NULL."""
    found = pc.is_in(value, value_set=value_set, skip_nulls=True)
    result = pc.if_else(pc.is_valid(value), found, pa.scalar(None, pa.bool_()))
    return pc.or_kleene(result, pa.scalar(None, pa.bool_())) if has_null else result


def _balanced(function: Callable[..., Any], operands: list[_Operand], node: exp.Expression) -> _Operand:
    """Combine operands pairwise with an associative ``function``, log-deep."""
    while len(operands) > 1:
        pairs = [operands[index : index + 2] for index in range(0, len(operands), 2)]
        operands = [_apply(function, pair, node) if len(pair) == 2 else pair[0] for pair in pairs]
    return operands[0]


def _in_literals(value: _Operand, items: list[_Operand], node: exp.Expression) -> _Operand:
    """``value IN (...)`` over literals of the value's type: one hash lookup per row."""
    scalars = [item.scalar for item in items if item.scalar is not None]  # all literals
    value_set = pa.array([scalar for scalar in scalars if scalar.is_valid], value.type)
    has_null = not all(scalar.is_valid for scalar in scalars)
    function = partial(_in_value_set, value_set=value_set, has_null=has_null)
    return _apply(function, [value], node)


def _backslash_escaped(pattern: str, escape: str) -> str:
    """Rewrite a LIKE pattern using ``escape`` to pyarrow's backslash escaping."""
    if escape == "\\":
        return pattern
    rewritten, chars = [], iter(pattern)
    for char in chars:
        if char == escape:
            rewritten.append("\\" + next(chars, ""))
        else:
            rewritten.append("\\\\" if char == "\\" else char)
    return "".join(rewritten)


def _string_literal(node: exp.Expression, what: str) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        return node.this
    raise InvalidInputError(f"{what} must be a string literal, not {_sql(node)}")


def _sql(node: exp.Expression) -> str:
    return node.sql(dialect=_LanceFilterDialect)


def _unsupported(node: exp.Expression) -> InvalidInputError:
    if isinstance(node, exp.Anonymous):
        what = f"function {node.name}()"
    elif isinstance(node, exp.AggFunc):
        what = f"aggregate function {node.sql_name()}()"
    elif isinstance(node, exp.Func):
        what = f"function {node.sql_name()}()"
    elif isinstance(node, (exp.Subquery, exp.Query)):
        what = "subquery"
    else:
        what = node.key.upper()
    return InvalidInputError(f"unsupported SQL construct in filter: {what} in {_sql(node)}")


def _syntax_error(sql: str, error: ParseError | TokenError) -> InvalidInputError:
    details = getattr(error, "errors", None)
    if not details:
        return InvalidInputError(f"malformed filter {sql!r}: {error}")
    first = details[0]
    return InvalidInputError(
        f"malformed filter {sql!r}: {first['description']} at line {first['line']}, "
        f"column {first['col']} (near {first['highlight']!r})"
    )


def _parse(sql: str) -> exp.Expression:
    if not sql.strip():
        raise InvalidInputError("the filter is empty")
    try:
        return sqlglot.parse_one(sql, read=_LanceFilterDialect, into=exp.Condition)
    except (ParseError, TokenError) as error:
        raise _syntax_error(sql, error) from error


_T = exp.DataType.Type
_SIMPLE_TYPES: dict[exp.DataType.Type, pa.DataType] = {
    _T.BOOLEAN: pa.bool_(),
    _T.TINYINT: pa.int8(),
    _T.SMALLINT: pa.int16(),
    _T.INT: pa.int32(),
    _T.BIGINT: pa.int64(),
    _T.UTINYINT: pa.uint8(),
    _T.USMALLINT: pa.uint16(),
    _T.UINT: pa.uint32(),
    _T.UBIGINT: pa.uint64(),
    _T.FLOAT: pa.float32(),
    _T.DOUBLE: pa.float64(),
    _T.TEXT: pa.string(),
    _T.VARCHAR: pa.string(),
    _T.BINARY: pa.binary(),
    _T.VARBINARY: pa.binary(),
    _T.DATE: pa.date32(),
}


def _type_parameters(node: exp.DataType) -> list[int]:
    values = [param.this for param in node.expressions]
    if not all(isinstance(value, exp.Literal) and value.is_int for value in values):
        raise InvalidInputError(f"unsupported type parameters in {_sql(node)}")
    return [value.to_py() for value in values]


def _timestamp_type(params: list[int], sql: str) -> pa.DataType:
    if not params:
        return pa.timestamp(_DEFAULT_TIME_UNIT)
    if len(params) != 1 or params[0] not in _TIME_UNITS:
        raise InvalidInputError(f"{sql}: timestamp precision must be 0, 3, 6 or 9")
    return pa.timestamp(_TIME_UNITS[params[0]])


def _decimal(precision: int, scale: int) -> pa.DataType:
    if precision > _DECIMAL128_MAX_PRECISION:
        return pa.decimal256(precision, scale)
    return pa.decimal128(precision, scale)


def _decimal_type(params: list[int], sql: str) -> pa.DataType:
    if len(params) != 2:
        raise InvalidInputError(f"{sql} needs a precision and a scale, as in DECIMAL(10, 2)")
    return _decimal(*params)


def _arrow_type(node: exp.DataType) -> pa.DataType:
    """The pyarrow type of a SQL type name of CAST."""
    sql, params = _sql(node), _type_parameters(node)
    if node.this in (_T.TIMESTAMP, _T.DATETIME):
        return _timestamp_type(params, sql)
    if node.this == _T.DECIMAL:
        return _decimal_type(params, sql)
    if node.this in _SIMPLE_TYPES and not params:
        return _SIMPLE_TYPES[node.this]
    raise InvalidInputError(f"unsupported type in CAST: {sql}")


def _identifiers(node: exp.Expression) -> list[exp.Identifier]:
    parts = node.parts if isinstance(node, (exp.Column, exp.Dot)) else [node]
    if not all(isinstance(part, exp.Identifier) for part in parts):
        raise _unsupported(node)
    return parts


def _struct_field_type(path: list[str], data_type: pa.DataType, name: str) -> pa.DataType:
    """The type of field ``name`` of the struct at ``path`` (exact, case-sensitive)."""
    index = data_type.get_field_index(name) if pa.types.is_struct(data_type) else -1
    if index < 0:
        raise InvalidInputError(f"{'.'.join(path)} ({data_type}) has no field {name!r}")
    return data_type.field(index).type


_COMPARISONS: dict[type[exp.Expression], Callable[..., Any]] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
    exp.NullSafeEQ: _not_distinct,
    exp.NullSafeNEQ: _distinct,
}
_NAN_ORDERED: dict[Callable[..., Any], Callable[..., Any]] = {
    pc.equal: _nan_equal,
    pc.not_equal: _nan_not_equal,
    pc.greater: _nan_greater,
    pc.greater_equal: _nan_greater_equal,
    pc.less: _nan_less,
    pc.less_equal: _nan_less_equal,
    _not_distinct: partial(_not_distinct, equal=_nan_equal),
    _distinct: partial(_distinct, equal=_nan_equal),
}
_ARITHMETIC: dict[type[exp.Expression], Callable[..., Any]] = {
    exp.Add: pc.add,
    exp.Sub: pc.subtract,
    exp.Mul: pc.multiply,
    exp.Div: pc.divide,
}
_LOGICAL: dict[type[exp.Expression], Callable[..., Any]] = {
    exp.And: pc.and_kleene,
    exp.Or: pc.or_kleene,
}
_UNARY_FUNCTIONS: dict[type[exp.Expression], Callable[..., Any]] = {
    exp.Lower: pc.utf8_lower,
    exp.Upper: pc.utf8_upper,
    exp.Length: pc.utf8_length,
    exp.Abs: pc.abs,
}
_PATTERN_FUNCTIONS: dict[type[exp.Expression], Callable[..., Any]] = {
    exp.StartsWith: pc.starts_with,
    exp.EndsWith: pc.ends_with,
    exp.Contains: pc.match_substring,
}


# -------------------------------------------------------------------- translator


class _Translator:
    """Translates one parsed SQL filter, one method per kind of sqlglot node."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self.columns: list[str] = []  # top-level columns read, in order of use
        self.integer_literals_to_column = False  # projections: Lance casts integer literals

    def translate_filter(self, sql: str) -> pc.Expression:
        try:
            expression = _require_boolean(self._translate(_parse(sql))).expr
        except RecursionError as error:
            raise InvalidInputError(f"filter is nested too deeply: {sql[:80]!r}...") from error
        reason = _bind_error(expression, [self._schema.field(name) for name in self.columns])
        if reason is not None:  # a last check that pyarrow accepts what we built
            raise InvalidInputError(f"cannot evaluate filter {sql!r}: {reason}")
        return expression

    def _translate(self, node: exp.Expression) -> _Operand:
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise _unsupported(node)
        return handler(self, node)

    def _boolean(self, node: exp.Expression) -> _Operand:
        return _require_boolean(_typed_null(self._translate(node), pa.bool_()))

    # -- leaves

    def _column(self, node: exp.Column | exp.Dot) -> _Operand:
        identifiers = _identifiers(node)
        names = [self._top_level_name(identifiers[0])]
        data_type = self._schema.field(names[0]).type
        nullable = self._schema.field(names[0]).nullable
        for identifier in identifiers[1:]:
            nullable = nullable or data_type.field(identifier.name).nullable if pa.types.is_struct(data_type) else True
            data_type = _struct_field_type(names, data_type, identifier.name)
            names.append(identifier.name)
        if names[0] not in self.columns:
            self.columns.append(names[0])
        field = pc.field(*names)
        if pa.types.is_dictionary(data_type):  # string functions want plain values
            field, data_type = field.cast(data_type.value_type), data_type.value_type
        return _Operand(field, data_type, node, nullable=nullable)

    def _top_level_name(self, identifier: exp.Identifier) -> str:
        name = identifier.name
        if self._schema.get_field_index(name) >= 0:
            return name
        if not identifier.quoted:
            matches = [n for n in self._schema.names if n.lower() == name.lower()]
            if len(matches) == 1:
                return matches[0]
        raise InvalidInputError(
            f"unknown column {name!r} in filter; available columns: {', '.join(self._schema.names)}"
        )

    def _literal(self, node: exp.Literal) -> _Operand:
        value = pa.scalar(node.this) if node.is_string else _number(node.this)
        return _constant(value, node)

    def _bool_literal(self, node: exp.Boolean) -> _Operand:
        return _constant(pa.scalar(node.this), node)

    def _null(self, node: exp.Null) -> _Operand:
        return _constant(pa.scalar(None), node)

    # -- operators

    def _paren(self, node: exp.Paren) -> _Operand:
        return self._translate(node.this)

    def _negate(self, node: exp.Neg) -> _Operand:
        operand = self._translate(node.this)
        value = operand.scalar
        if value is not None and value.is_valid and _is_numeric(value.type):
            keep_type = not pa.types.is_integer(value.type)  # -2**63 is int64
            try:
                negated = pa.scalar(-value.as_py(), value.type if keep_type else None)
            except OverflowError as error:
                raise InvalidInputError(f"integer literal {_sql(node)} is out of range") from error
            return _constant(negated, node)
        return _apply(pc.negate_checked, [operand], node)

    def _arithmetic_operands(self, node: exp.Binary) -> list[_Operand]:
        left, right = self._translate(node.this), self._translate(node.expression)
        cast = self.integer_literals_to_column
        return [_arithmetic_literal(left, right, cast), _arithmetic_literal(right, left, cast)]

    def _arithmetic(self, node: exp.Binary) -> _Operand:
        operands = self._arithmetic_operands(node)
        return _apply(_ARITHMETIC[type(node)], operands, node)

    def _modulo(self, node: exp.Mod) -> _Operand:
        operands = self._arithmetic_operands(node)
        integral = all(pa.types.is_integer(operand.type) for operand in operands)
        function = _integer_remainder if integral else _float_remainder
        return _apply(function, operands, node)

    def _comparison(self, node: exp.Binary) -> _Operand:
        left, right = self._translate(node.this), self._translate(node.expression)
        return _compare(_COMPARISONS[type(node)], left, right, node)

    def _logical(self, node: exp.Connector) -> _Operand:
        """``a AND b AND ...`` as one balanced tree (long generated chains stay shallow)."""
        operands = [self._boolean(operand) for operand in node.flatten()]
        return _balanced(_LOGICAL[type(node)], operands, node)

    def _not(self, node: exp.Not) -> _Operand:
        return _apply(pc.invert, [self._boolean(node.this)], node)

    def _is(self, node: exp.Is) -> _Operand:
        test = node.expression
        if isinstance(test, exp.Null):
            return _apply(pc.is_null, [self._translate(node.this)], node, nullable=False)
        if isinstance(test, exp.Boolean):
            function = _is_true if test.this else _is_false
            return _apply(function, [self._boolean(node.this)], node, nullable=False)
        raise _unsupported(node)

    def _between(self, node: exp.Between) -> _Operand:
        if node.args.get("symmetric"):
            raise _unsupported(node)
        value = self._translate(node.this)
        low = _compare(pc.greater_equal, value, self._translate(node.args["low"]), node)
        high = _compare(pc.less_equal, value, self._translate(node.args["high"]), node)
        return _apply(pc.and_kleene, [low, high], node)

    def _in(self, node: exp.In) -> _Operand:
        for key in ("query", "unnest", "field"):
            if node.args.get(key) is not None:
                raise _unsupported(node.args[key])
        if not node.expressions:
            raise InvalidInputError(f"empty IN list in {_sql(node)}")
        value = self._translate(node.this)
        items = [_coerce(self._translate(item), value) for item in node.expressions]
        if value.scalar is None and all(item.scalar is not None and item.type == value.type for item in items):
            return _in_literals(value, items, node)
        equalities = [_compare(pc.equal, value, item, node) for item in items]
        return _balanced(pc.or_kleene, equalities, node)

    # -- casts and functions

    def _cast(self, node: exp.Cast) -> _Operand:
        target = _arrow_type(node.to)
        operand = self._translate(node.this)
        if operand.scalar is not None:
            return _constant(_cast_literal(operand.scalar, target, node), node)
        return _apply(_cast_function(operand.type, target), [operand], node)

    def _like(self, node: exp.Like | exp.ILike, escape: str = "\\") -> _Operand:
        pattern = _string_literal(node.expression, "a LIKE pattern")
        function = partial(
            pc.match_like,
            pattern=_backslash_escaped(pattern, escape),
            ignore_case=isinstance(node, exp.ILike),
        )
        result = _apply(function, [self._translate(node.this)], node)
        if node.args.get("negate"):
            return _apply(pc.invert, [result], node)
        return result

    def _escape(self, node: exp.Escape) -> _Operand:
        escape = _string_literal(node.expression, "an ESCAPE character")
        if not isinstance(node.this, (exp.Like, exp.ILike)) or len(escape) != 1:
            raise InvalidInputError(f"ESCAPE needs LIKE and one character: {_sql(node)}")
        return self._like(node.this, escape)

    def _unary_function(self, node: exp.Func) -> _Operand:
        function = _UNARY_FUNCTIONS[type(node)]
        return _apply(function, [self._translate(node.this)], node, nullable=True)

    def _pattern_function(self, node: exp.Func) -> _Operand:
        pattern = _string_literal(node.expression, f"the pattern of {node.sql_name()}")
        function = partial(_PATTERN_FUNCTIONS[type(node)], pattern=pattern)
        nullable = None if isinstance(node, exp.StartsWith) else True  # pylance: starts_with is a LIKE
        return _apply(function, [self._translate(node.this)], node, nullable=nullable)

    def _regexp(self, arguments: list[exp.Expression], node: exp.Expression) -> _Operand:
        if len(arguments) not in (2, 3):
            raise InvalidInputError(f"{_sql(node)}: expected (string, pattern[, flags])")
        pattern = _string_literal(arguments[1], "a regular expression")
        flags = _string_literal(arguments[2], "regex flags") if len(arguments) == 3 else ""
        if flags not in ("", "i"):
            raise InvalidInputError(f"{_sql(node)}: unsupported regex flags {flags!r} (only 'i')")
        function = partial(pc.match_substring_regex, pattern=pattern, ignore_case=bool(flags))
        return _apply(function, [self._translate(arguments[0])], node)

    def _regexp_like(self, node: exp.RegexpLike) -> _Operand:
        arguments = [node.this, node.expression, node.args.get("flag")]
        return self._regexp([arg for arg in arguments if arg is not None], node)

    def _anonymous(self, node: exp.Anonymous) -> _Operand:
        name = node.name.lower()
        if name == "now" and not node.expressions:
            return self._current_timestamp(node)
        if name in ("array_has_any", "array_has_all", "list_has_any", "list_has_all") and len(node.expressions) == 2:
            return self._array_membership(node.expressions[0], node.expressions[1], name[-3:], node)
        if name == "cardinality" and len(node.expressions) == 1:
            return self._array_size(exp.ArraySize(this=node.expressions[0]))
        if name != "regexp_match":  # pylance: coerced to a boolean
            raise _unsupported(node)
        return replace(self._regexp(list(node.expressions), node), nullable=True)

    def _text(self, node: exp.Expression) -> _Operand:
        """An operand of concat / ``||`` as text (DataFusion casts numbers and booleans)."""
        operand = self._translate(node)
        if pa.types.is_string(operand.type):
            return operand
        if pa.types.is_null(operand.type):
            return _constant(pa.scalar(None, pa.string()), node)
        t = operand.type
        if not (_family(t) in ("string", "numeric") or pa.types.is_boolean(t) or pa.types.is_date(t)
                or _datafusion_time_text(t)):
            # DataFusion writes lists as "[1, 2]" and zoned timestamps with offsets: not reproduced here
            raise InvalidInputError(
                f"concat / || of {_sql(node)} ({t}) is not supported: only strings, numbers, booleans, dates "
                "and timestamps without a time zone or in UTC")
        if operand.scalar is not None:
            return _constant(_cast_literal(operand.scalar, pa.string(), node), node)
        return _apply(_cast_function(operand.type, pa.string()), [operand], node)

    def _concat(self, node: exp.Concat) -> _Operand:
        """``concat(a, b, ...)``: nulls count as empty strings (DataFusion's)."""
        if not node.expressions:
            raise InvalidInputError(f"{_sql(node)}: concat needs at least one argument")
        operands = [self._text(arg) for arg in node.expressions]
        function = partial(_join_texts, null_handling="replace")
        return _apply(function, operands, node, nullable=True)

    def _dpipe(self, node: exp.DPipe) -> _Operand:
        """``a || b``: null when either side is null. As in pylance, one side must be a
        string, and a literal next to a non-literal must have its type (no literal is cast)."""
        left, right = self._translate(node.this), self._translate(node.expression)
        texts = [pa.types.is_string(op.type) or pa.types.is_large_string(op.type) for op in (left, right)]
        literals = [op.scalar is not None or pa.types.is_null(op.type) for op in (left, right)]
        fits = [text or (pa.types.is_null(op.type) and any(texts)) for op, text in zip((left, right), texts)]
        if not any(texts) or (literals[0] != literals[1] and not all(fits)):
            raise InvalidInputError(
                f"cannot evaluate {_sql(node)} ({left.type} || {right.type}): || needs strings "
                "(a literal must have the type of the other side; use concat() to mix types)")
        operands = [op if text else self._text(op.node) for op, text in zip((left, right), texts)]
        return _apply(partial(_join_texts, null_handling="emit_null"), operands, node)

    # -- dates, binary literals, lists, brackets

    def _current_date(self, node: exp.Expression) -> _Operand:
        return _constant(pa.scalar(dt.datetime.now(dt.timezone.utc).date(), pa.date32()), node)

    def _current_timestamp(self, node: exp.Expression) -> _Operand:
        now = pa.scalar(time.time_ns(), pa.int64()).cast(pa.timestamp("ns", "UTC"))
        return _constant(now, node)

    def _hex_string(self, node: exp.HexString) -> _Operand:
        try:
            return _constant(pa.scalar(bytes.fromhex(node.this), pa.binary()), node)
        except ValueError as error:
            raise InvalidInputError(f"malformed hex binary literal {_sql(node)}: {error}") from error

    def _list_operand(self, node: exp.Expression, what: str) -> _Operand:
        operand = self._translate(node)
        if not (pa.types.is_list(operand.type) or pa.types.is_large_list(operand.type)
                or pa.types.is_fixed_size_list(operand.type)):
            raise InvalidInputError(f"{what} needs a list column, but {operand.sql} is {operand.type}")
        if pa.types.is_fixed_size_list(operand.type):
            list_type = pa.list_(operand.type.value_field)
            operand = _Operand(operand.expr.cast(list_type), list_type, operand.node)
        return operand

    def _needle(self, items: list[exp.Expression], value_type: pa.DataType, node: exp.Expression) -> tuple[
        pa.Scalar, pa.DataType | None
    ]:
        """The literal values to look for, as a list scalar of ``value_type`` (or a type both
        sides convert to: ``compare``)."""
        scalars = []
        for item in items:
            operand = self._translate(item)
            if operand.scalar is None:
                raise InvalidInputError(f"{_sql(node)}: the values to look for must be literals, not {operand.sql}")
            scalars.append(operand.scalar)
        if not scalars:
            return pa.scalar([], pa.list_(value_type)), None
        try:
            values = pa.array([v.as_py() for v in scalars])
        except _ARROW_ERRORS as error:
            raise InvalidInputError(f"{_sql(node)}: the values to look for mix types: {error}") from error
        if values.null_count == len(values):
            values = values.cast(value_type)
        try:
            cast = values.cast(value_type)
            if cast.cast(values.type).equals(values):
                return pa.scalar(cast.to_pylist(), pa.list_(value_type)), None
        except (*_ARROW_ERRORS, OverflowError):
            pass
        if _is_numeric(values.type) and _is_numeric(value_type):
            return pa.scalar(values.to_pylist(), pa.list_(values.type)), pa.float64()
        raise InvalidInputError(
            f"{_sql(node)}: cannot look for {values.type} values in a list of {value_type}"
        )

    def _array_membership(self, lists: exp.Expression, needle: exp.Expression, mode: str,
                          node: exp.Expression) -> _Operand:
        from airflow_lance.core.filter_functions import array_membership

        operand = self._list_operand(lists, _sql(node))
        if not isinstance(needle, exp.Array):
            raise InvalidInputError(f"{_sql(node)}: the second argument must be a list literal [...]")
        value, compare = self._needle(list(needle.expressions), operand.type.value_type, node)
        return _Operand(array_membership(operand.expr, operand.type, value, mode, compare), pa.bool_(), node)

    def _array_contains(self, node: exp.ArrayContains) -> _Operand:
        if isinstance(node.expression, exp.Null):
            self._list_operand(node.this, _sql(node))  # checks (and reads) the list column
            return _constant(pa.scalar(None, pa.bool_()), node)
        return self._array_membership(node.this, exp.Array(expressions=[node.expression]), "any", node)

    def _array_contains_all(self, node: exp.ArrayContainsAll) -> _Operand:
        return self._array_membership(node.this, node.expression, "all", node)

    def _array_size(self, node: exp.ArraySize) -> _Operand:
        operand = self._list_operand(node.this, _sql(node))
        return _apply(lambda lists: pc.list_value_length(lists).cast(pa.uint64()), [operand], node, nullable=True)

    def _bracket(self, node: exp.Bracket) -> _Operand:
        if len(node.expressions) != 1:
            raise _unsupported(node)
        key = node.expressions[0]
        if not isinstance(key, exp.Literal):  # list[expression]: an integer per row
            from airflow_lance.core.filter_functions import list_get

            operand = self._list_operand(node.this, _sql(node))
            index = self._translate(key)
            if not pa.types.is_integer(index.type):
                raise InvalidInputError(f"{_sql(node)}: a list index must be an integer, not {index.type}")
            expression = list_get(operand.expr, operand.type, index.expr.cast(pa.int64()))
            return _Operand(expression, operand.type.value_type, node)
        base = self._translate(node.this)
        if pa.types.is_struct(base.type) and key.is_string:
            if base.type.get_field_index(key.this) < 0:
                raise InvalidInputError(f"struct {base.sql} has no field {key.this!r}")
            child_nullable = base.type.field(key.this).nullable
            return _apply(partial(pc.struct_field, indices=[key.this]), [base], node,
                          nullable=True if child_nullable else None)
        if key.is_int:
            from airflow_lance.core.filter_functions import list_get

            operand = self._list_operand(node.this, _sql(node))
            return _Operand(list_get(operand.expr, operand.type, int(key.this)), operand.type.value_type, node)
        raise InvalidInputError(f"{_sql(node)}: [{_sql(key)}] needs a struct and a field name, or a list and an index")


_Handler = Callable[[_Translator, Any], _Operand]
_HANDLERS: dict[type[exp.Expression], _Handler] = {
    exp.Column: _Translator._column,
    exp.Dot: _Translator._column,
    exp.Literal: _Translator._literal,
    exp.Boolean: _Translator._bool_literal,
    exp.Null: _Translator._null,
    exp.Paren: _Translator._paren,
    exp.Neg: _Translator._negate,
    exp.Not: _Translator._not,
    exp.Is: _Translator._is,
    exp.Between: _Translator._between,
    exp.In: _Translator._in,
    exp.Cast: _Translator._cast,
    exp.Concat: _Translator._concat,
    exp.DPipe: _Translator._dpipe,
    exp.Like: _Translator._like,
    exp.ILike: _Translator._like,
    exp.Escape: _Translator._escape,
    exp.RegexpLike: _Translator._regexp_like,
    exp.Anonymous: _Translator._anonymous,
    exp.CurrentDate: _Translator._current_date,
    exp.CurrentTimestamp: _Translator._current_timestamp,
    exp.HexString: _Translator._hex_string,
    exp.ArrayContains: _Translator._array_contains,
    exp.ArrayContainsAll: _Translator._array_contains_all,
    exp.ArraySize: _Translator._array_size,
    exp.Bracket: _Translator._bracket,
    exp.Mod: _Translator._modulo,
    **dict.fromkeys(_COMPARISONS, _Translator._comparison),
    **dict.fromkeys(_ARITHMETIC, _Translator._arithmetic),
    **dict.fromkeys(_LOGICAL, _Translator._logical),
    **dict.fromkeys(_UNARY_FUNCTIONS, _Translator._unary_function),
    **dict.fromkeys(_PATTERN_FUNCTIONS, _Translator._pattern_function),
}
