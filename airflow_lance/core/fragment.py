"""Fragment metadata value objects, with pylance-compatible JSON.

``FragmentMetadata`` is what ``write_fragments`` returns and what operations
carry; its JSON form matches pylance's ``FragmentMetadata.to_json`` so staged
fragments can be handed between processes (and engines).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import DecodeError

from airflow_lance.core._proto import table_pb2
from airflow_lance.core.errors import InvalidInputError

_FILE_TYPES = {0: "array", 1: "bitmap"}
_FILE_TYPE_CODES = {name: code for code, name in _FILE_TYPES.items()}


@dataclasses.dataclass(frozen=True)
class DataFile:
    """One data file of a fragment; ``path`` is relative to the dataset's ``data/``."""

    path: str
    fields: tuple[int, ...]
    column_indices: tuple[int, ...]
    file_major_version: int = 2
    file_minor_version: int = 0
    file_size_bytes: int | None = None
    base_id: int | None = None

    @property
    def is_legacy(self) -> bool:
        """A legacy (0.1/0.2) file: no column indices, every field id listed is stored in it."""
        return self.file_major_version == 0 and self.file_minor_version < 3

    def to_pb(self) -> table_pb2.DataFile:
        pb = table_pb2.DataFile(
            path=self.path,
            fields=self.fields,
            column_indices=self.column_indices,
            file_major_version=self.file_major_version,
            file_minor_version=self.file_minor_version,
            file_size_bytes=self.file_size_bytes or 0,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return pb

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFile) -> DataFile:
        return cls(
            path=pb.path,
            fields=tuple(pb.fields),
            column_indices=tuple(pb.column_indices),
            file_major_version=pb.file_major_version,
            file_minor_version=pb.file_minor_version,
            file_size_bytes=pb.file_size_bytes or None,
            base_id=pb.base_id if pb.HasField("base_id") else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "fields": list(self.fields),
            "column_indices": list(self.column_indices),
            "file_major_version": self.file_major_version,
            "file_minor_version": self.file_minor_version,
            "file_size_bytes": self.file_size_bytes,
            "base_id": self.base_id,
            "path": self.path,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DataFile:
        return cls(
            path=str(data["path"]),
            fields=tuple(int(v) for v in data["fields"]),
            column_indices=tuple(int(v) for v in data.get("column_indices", ())),
            file_major_version=int(data.get("file_major_version", 2)),
            file_minor_version=int(data.get("file_minor_version", 0)),
            file_size_bytes=data.get("file_size_bytes"),
            base_id=data.get("base_id"),
        )


@dataclasses.dataclass(frozen=True)
class DeletionFile:
    """A deletion vector of a fragment (Arrow IPC ``array`` or roaring ``bitmap``)."""

    read_version: int
    id: int
    file_type: str
    num_deleted_rows: int
    base_id: int | None = None

    def to_pb(self) -> table_pb2.DeletionFile:
        pb = table_pb2.DeletionFile(
            file_type=_FILE_TYPE_CODES[self.file_type],
            read_version=self.read_version,
            id=self.id,
            num_deleted_rows=self.num_deleted_rows,
        )
        if self.base_id is not None:
            pb.base_id = self.base_id
        return pb

    @classmethod
    def from_pb(cls, pb: table_pb2.DeletionFile) -> DeletionFile:
        return cls(
            read_version=pb.read_version,
            id=pb.id,
            file_type=_FILE_TYPES.get(pb.file_type, str(pb.file_type)),
            num_deleted_rows=pb.num_deleted_rows,
            base_id=pb.base_id if pb.HasField("base_id") else None,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeletionFile:
        return cls(
            read_version=int(data["read_version"]),
            id=int(data["id"]),
            file_type=str(data["file_type"]),
            num_deleted_rows=int(data["num_deleted_rows"]),
            base_id=data.get("base_id"),
        )


@dataclasses.dataclass(frozen=True)
class FragmentMetadata:
    """Metadata of one fragment: its data files, row count and deletion vector.

    ``id`` 0 in an Append means "assign at commit". Fields this class does not
    model (row-id sequences, ...) travel in ``extra`` as the serialized
    protobuf, so nothing is lost between ``from_pb`` and ``to_pb``.
    """

    id: int
    files: tuple[DataFile, ...]
    physical_rows: int
    deletion_file: DeletionFile | None = None
    extra: bytes = b""

    @property
    def num_deletions(self) -> int:
        return self.deletion_file.num_deleted_rows if self.deletion_file else 0

    @property
    def num_rows(self) -> int:
        return self.physical_rows - self.num_deletions

    @property
    def data_files(self) -> tuple[DataFile, ...]:
        return self.files

    def with_id(self, fragment_id: int) -> FragmentMetadata:
        return dataclasses.replace(self, id=fragment_id)

    def to_pb(self) -> table_pb2.DataFragment:
        pb = table_pb2.DataFragment()
        if self.extra:
            pb.ParseFromString(self.extra)
        pb.id = self.id
        del pb.files[:]
        pb.files.extend(f.to_pb() for f in self.files)
        pb.physical_rows = self.physical_rows
        if self.deletion_file is not None:
            pb.deletion_file.CopyFrom(self.deletion_file.to_pb())
        else:
            pb.ClearField("deletion_file")
        return pb

    @classmethod
    def from_pb(cls, pb: table_pb2.DataFragment) -> FragmentMetadata:
        rest = table_pb2.DataFragment()
        rest.CopyFrom(pb)
        for name in ("id", "files", "physical_rows", "deletion_file"):
            rest.ClearField(name)
        return cls(
            id=pb.id,
            files=tuple(DataFile.from_pb(f) for f in pb.files),
            physical_rows=pb.physical_rows,
            deletion_file=DeletionFile.from_pb(pb.deletion_file) if pb.HasField("deletion_file") else None,
            extra=rest.SerializeToString(),
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with pylance's keys (plus ``extra`` when non-empty)."""
        data: dict[str, Any] = {
            "id": self.id,
            "files": [f.to_json() for f in self.files],
            "physical_rows": self.physical_rows,
            "deletion_file": self.deletion_file.to_json() if self.deletion_file else None,
            "row_id_meta": None,
        }
        if self.extra:
            data["extra"] = base64.b64encode(self.extra).decode("ascii")
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> FragmentMetadata:
        """Inverse of :meth:`to_json`; also accepts a JSON string."""
        try:
            obj = json.loads(data) if isinstance(data, str) else data
            extra = base64.b64decode(obj["extra"]) if obj.get("extra") else b""
            if extra:
                table_pb2.DataFragment().ParseFromString(extra)
            return cls(
                id=int(obj.get("id", 0)),
                files=tuple(DataFile.from_json(f) for f in obj["files"]),
                physical_rows=int(obj["physical_rows"]),
                deletion_file=DeletionFile.from_json(obj["deletion_file"]) if obj.get("deletion_file") else None,
                extra=extra,
            )
        except (KeyError, TypeError, ValueError, DecodeError) as exc:
            raise InvalidInputError(f"malformed fragment metadata JSON: {exc!r}") from exc
