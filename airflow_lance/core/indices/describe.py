"""``list_indices()`` and ``describe_indices()`` with pylance 14's result shapes.

``list_indices()``: one dict per ``IndexMetadata`` (``name``, ``type``, ``uuid``, ``fields`` as
names, ``version`` = the dataset version it was built on, ``fragment_ids``, ``base_id``).
``describe_indices()``: one :class:`IndexDescription` per index name, its entries as
:class:`IndexSegmentDescription` segments.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING, Any

import pyroaring
from google.protobuf import json_format

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.indices.metadata import (
    fragment_bitmap,
    index_type_name,
    index_uuid,
    user_indices,
    vector_details,
)

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset


@dataclasses.dataclass
class IndexSegmentDescription:
    """One ``IndexMetadata`` of an index (pylance's ``lance.indices.IndexSegmentDescription``)."""

    uuid: str
    fragment_ids: pyroaring.BitMap
    dataset_version_at_last_update: int
    index_version: int
    created_at: dt.datetime | None
    size_bytes: int | None
    base_id: int | None
    covering_fields: list[int]


@dataclasses.dataclass
class IndexDescription:
    """An index by name (pylance's ``lance.indices.IndexDescription``)."""

    name: str
    type_url: str
    index_type: str
    num_rows_indexed: int
    fields: list[int]
    field_names: list[str]
    segments: list[IndexSegmentDescription]
    details: dict[str, Any]
    total_size_bytes: int | None


def _field_names(dataset: LanceDataset, field_ids: list[int]) -> list[str]:
    return [_name(dataset.lance_schema, fid) for fid in field_ids]


def _name(schema: Any, field_id: int) -> str:
    by_id = {f.id: f for f in schema.fields}
    parts = []
    field = by_id.get(field_id)
    while field is not None:
        parts.append(field.name)
        field = by_id.get(field.parent_id)
    return ".".join(reversed(parts))


def list_indices(dataset: LanceDataset) -> list[dict[str, Any]]:
    """pylance 14's ``list_indices()``: one dict per index entry (delta indices are separate)."""
    return [
        {
            "name": index.name,
            "type": index_type_name(index),
            "uuid": index_uuid(index),
            "fields": _field_names(dataset, list(index.fields)),
            "version": index.dataset_version,
            "fragment_ids": fragment_bitmap(index),
            "base_id": index.base_id if index.HasField("base_id") else None,
        }
        for index in user_indices(dataset.manifest_file)
    ]


def _vector_details(details: Any) -> dict[str, Any]:
    """pylance 14's ``details`` of a vector index: metric, PQ compression, runtime hints."""
    out: dict[str, Any] = {"metric_type": {0: "L2", 1: "COSINE", 2: "DOT", 3: "HAMMING"}.get(details.metric_type)}
    if details.WhichOneof("compression") == "pq":
        out["compression"] = {"type": "pq", "num_bits": details.pq.num_bits,
                              "num_sub_vectors": details.pq.num_sub_vectors}
    out["runtime_hints"] = dict(details.runtime_hints)
    return out


def _details(index: table_pb2.IndexMetadata) -> dict[str, Any]:
    vector = vector_details(index)
    if vector is not None:
        return _vector_details(vector)
    any_msg = index.index_details
    if not any_msg.value:
        return {}
    message_name = any_msg.type_url.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    message_class = getattr(table_pb2, message_name, None)
    if message_class is None:
        return {}
    message = message_class()
    message.ParseFromString(any_msg.value)
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _size(index: table_pb2.IndexMetadata) -> int | None:
    return sum(f.size_bytes for f in index.files) if index.files else None


def describe_indices(dataset: LanceDataset) -> list[IndexDescription]:
    """pylance 14's ``describe_indices()``: indices grouped by name, in first-seen order.

    ``num_rows_indexed`` counts the live rows of the covered fragments that still exist.
    """
    groups: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in user_indices(dataset.manifest_file):
        groups.setdefault(index.name, []).append(index)
    rows = {f.id: f.physical_rows - f.num_deletions for f in dataset._fragments}
    out = []
    for name, entries in groups.items():
        first = entries[0]
        covered = pyroaring.BitMap()
        segments = []
        for index in entries:
            bitmap = fragment_bitmap(index)
            covered |= bitmap
            segments.append(IndexSegmentDescription(
                uuid=index_uuid(index),
                fragment_ids=bitmap,
                dataset_version_at_last_update=index.dataset_version,
                index_version=index.index_version,
                created_at=(dt.datetime.fromtimestamp(index.created_at / 1000, dt.timezone.utc)
                            if index.HasField("created_at") else None),
                size_bytes=_size(index),
                base_id=index.base_id if index.HasField("base_id") else None,
                covering_fields=list(getattr(index, "covering_fields", [])),
            ))
        sizes = [s.size_bytes for s in segments]
        out.append(IndexDescription(
            name=name,
            type_url=first.index_details.type_url,
            index_type=index_type_name(first),
            num_rows_indexed=sum(rows.get(fid, 0) for fid in covered),
            fields=list(first.fields),
            field_names=_field_names(dataset, list(first.fields)),
            segments=segments,
            details=_details(first),
            total_size_bytes=None if None in sizes else sum(s for s in sizes if s is not None),
        ))
    return out
