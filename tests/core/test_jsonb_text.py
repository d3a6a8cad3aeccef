"""The column decoder of JSONB (``jsonb_text.decode_column``) against the one-value decoder.

``jsonb.decode_value`` (whose texts equal what pylance 14 reads back: ``tests/interop/test_json_columns.py``)
is the oracle: random documents of every kind (nested containers, empty ones, lone scalars,
integers of every width and sign, doubles in every notation, strings needing escapes, non-ASCII
keys), nulls, slices and both binary types give the same texts, with numpy and with compiled loops;
malformed values are a ``CorruptFileError`` naming the cause, never another exception.
"""

from __future__ import annotations

import json
import random
import struct

import pyarrow as pa
import pytest

from airflow_lance.core import CorruptFileError
from airflow_lance.core.jsonb import decode_value, encode_value
from airflow_lance.core.jsonb_text import decode_column

KEYS = ["a", "b", "ключ", 'k"q', "x\ny", "", "zz", "中文", "\u0001"]
DOUBLES = [1e-7, 1e21, 0.1, -2.5e-5, 1e15, 123.456, 1e16, 5e-324, -0.0, 3.0, 1.7976931348623157e308, -1e-300]


def _value(rng: random.Random, depth: int = 0):
    pick = rng.random()
    if depth < 4 and pick < 0.2:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 4 and pick < 0.4:
        return {rng.choice(KEYS) + str(i): _value(rng, depth + 1) for i in range(rng.randint(0, 4))}
    kind = rng.randint(0, 10)
    return [
        None, rng.random() < 0.5, rng.randint(-2**63, 2**64 - 1), rng.randint(-300, 300), rng.choice(DOUBLES),
        rng.uniform(-1e6, 1e6), "".join(rng.choice('ab "\\\t\u0001\u001fé中😀/\u2028') for _ in range(rng.randint(0, 8))),
        2 ** rng.randint(0, 70) * rng.choice([1, -1]), rng.randint(-2**31, 2**31), "plain" * rng.randint(0, 3),
        rng.randint(0, 255),
    ][kind]


def _column(count: int, seed: int) -> tuple[pa.Array, list[str | None]]:
    rng = random.Random(seed)
    texts = [None if rng.random() < 0.1 else json.dumps(_value(rng)) for _ in range(count)]
    values = pa.array([None if t is None else encode_value(t) for t in texts], pa.large_binary())
    return values, [None if v is None else decode_value(v) for v in values.to_pylist()]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columns_decode_as_one_value_at_a_time(loops, seed):
    values, expected = _column(3000, seed)
    got = decode_column(values)
    assert got.type == pa.large_string() and got.to_pylist() == expected
    assert got.null_count == values.null_count
    for start, length in [(5, 100), (1000, 0), (0, 1), (2990, 10), (17, 2983)]:
        part = values.slice(start, length)
        assert decode_column(part).to_pylist() == expected[start: start + length]
        assert decode_column(part.cast(pa.binary())).to_pylist() == expected[start: start + length]


def test_every_number_kind(loops):
    texts = ["0", "-1", "255", "-128", "-129", "65535", "-32769", "4294967295", "-2147483649",
             str(2**63 - 1), str(-2**63), str(2**64 - 1), str(2**64), "1e-7", "1.5e300", "-0.0", "1E40",
             "[1, -1, 1.5, 123456789012345678901234567890, true, false, null, {}, []]", '"x"', "{}", "[]", "[[[]]]"]
    values = pa.array([encode_value(t) for t in texts], pa.large_binary())
    assert decode_column(values).to_pylist() == [decode_value(v) for v in values.to_pylist()]


def test_decimals_decode_one_by_one():
    # a decimal number (tag 0x70: an i64 and a scale byte), which Databend writes and JSON text cannot
    # come from here
    scalar = struct.pack(">II", 0x20000001, 0x20000000 | 10) + b"\x70" + struct.pack(">q", 12345) + b"\x02"
    values = pa.array([scalar, encode_value("[1]")], pa.large_binary())
    assert decode_column(values).to_pylist() == [decode_value(scalar), "[1]"] == ["123.45", "[1]"]


def _scalar(kind: int, body: bytes) -> bytes:
    return struct.pack(">II", 0x20000001, (kind << 28) | len(body)) + body


@pytest.mark.parametrize("value, cause", [
    (b"\x80\x00", "shorter than its header"),
    (struct.pack(">I", 0x10000001), "container header"),
    (struct.pack(">I", 0x80000002) + struct.pack(">I", 0x10000000), "entries past the end"),
    (struct.pack(">II", 0x80000001, 0x10000005) + b"ab", "element past the end"),
    (_scalar(6, b""), "extension value"),
    (_scalar(2, b"\x60" + struct.pack(">d", float("nan"))), "JSON text cannot"),
    (_scalar(2, b"\x20"), "JSON text cannot"),
    (_scalar(2, b"\x40\x01\x02\x03"), "integer of 3 bytes"),
    (_scalar(2, b"\x99"), "number tag"),
    (_scalar(2, b""), "without its tag"),
    (_scalar(1, b"\xff\xfe"), "UTF-?8"),
])
def test_malformed_values_are_corrupt(loops, value, cause):
    values = pa.array([encode_value('{"ok": 1}'), value], pa.large_binary())
    with pytest.raises(CorruptFileError, match=cause):
        decode_column(values, "f.lance")
    with pytest.raises(CorruptFileError):  # the one-value decoder refuses it too
        decode_value(value)
