"""Table config, table metadata, schema metadata and field metadata: pylance's
``update_config``/``update_metadata``/``update_schema_metadata``/``update_field_metadata``/
``delete_config_keys``, each one ``UpdateConfig`` commit with pylance's wire form
(``UpdateMap`` of the changed keys, ``None`` deleting one, ``replace`` for a full replacement);
plus ``get_transactions`` and ``stats.dataset_stats()``.

Arguments are checked before anything is committed: keys and values must be strings
(InvalidTypeError, a TypeError as pylance's), field paths must name a field
(SchemaMismatchError, an OSError as pylance's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_lance.core.errors import InvalidTypeError, SchemaMismatchError, VersionNotFoundError
from airflow_lance.core.schema import LanceSchema
from airflow_lance.core.transaction import LanceOperation, Transaction

if TYPE_CHECKING:
    from airflow_lance.core.dataset import LanceDataset


def update_map(values: Mapping[str, str | None], replace: bool, what: str) -> LanceOperation.UpdateMap:
    """Checked ``UpdateMap`` of ``values`` (str -> str, or None to delete)."""
    if not isinstance(values, Mapping):
        raise InvalidTypeError(f"{what} must be a dict of str to str or None, not {type(values).__name__}")
    for key, value in values.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, str)):
            raise InvalidTypeError(f"{what}: keys must be str and values str or None, got {key!r}: {value!r}")
    return LanceOperation.UpdateMap(dict(values), bool(replace))


def field_id(schema: LanceSchema, path: str) -> int:
    """Id of the field at dotted ``path`` (``"a"``, ``"struct.child"``)."""
    if not isinstance(path, str):
        raise InvalidTypeError(f"field paths must be str, not {path!r}")
    parent, found = -1, None
    for part in path.split("."):
        found = next((f for f in schema.fields if f.parent_id == parent and f.name == part), None)
        if found is None:
            names = [f.name for f in schema.top_level()]
            raise SchemaMismatchError(f"Field {path!r} not found. Available fields: {names}")
        parent = found.id
    assert found is not None
    return found.id


def field_metadata_updates(
    schema: LanceSchema, updates: Mapping[str, Mapping[str, str | None]], replace: bool
) -> dict[int, LanceOperation.UpdateMap]:
    if not isinstance(updates, Mapping):
        raise InvalidTypeError(f"field_updates must be a dict of field path to dict, not {type(updates).__name__}")
    return {field_id(schema, path): update_map(values, replace, f"metadata of {path!r}")
            for path, values in updates.items()}


def delete_keys(keys: Iterable[str]) -> LanceOperation.UpdateMap:
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise InvalidTypeError(f"keys must be a list of str, not {keys!r}")
    keys = list(keys)
    return update_map(dict.fromkeys(keys), False, "config keys")


def get_transactions(dataset: LanceDataset, recent_transactions: int = 10) -> list[Transaction | None]:
    """The transactions of this handle's version and the ones before it, newest first, as
    Lance's: at least one, at most ``recent_transactions``; it stops at version 1 or at a
    version removed by cleanup; a version without a transaction file gives None."""
    if isinstance(recent_transactions, bool) or not isinstance(recent_transactions, int) or recent_transactions < 0:
        raise InvalidTypeError(f"recent_transactions must be a non-negative int, not {recent_transactions!r}")
    result = [dataset.read_transaction()]
    version = dataset.version - 1
    while len(result) < recent_transactions and version >= 1:
        try:
            result.append(dataset.read_transaction(version))
        except VersionNotFoundError:
            break
        version -= 1
    return result


class DatasetStats(TypedDict):
    num_deleted_rows: int
    num_fragments: int
    num_small_files: int


class LanceStats:
    """``ds.stats`` (pylance's name): statistics from the manifest alone."""

    def __init__(self, dataset: LanceDataset) -> None:
        self._dataset = dataset

    def dataset_stats(self, max_rows_per_group: int = 1024) -> DatasetStats:
        """Deleted rows, fragments, and fragments with fewer than ``max_rows_per_group`` rows."""
        fragments = self._dataset.get_fragments()
        return {
            "num_deleted_rows": sum(f.num_deletions for f in fragments),
            "num_fragments": len(fragments),
            "num_small_files": sum(1 for f in fragments if f.physical_rows < max_rows_per_group),
        }

    def __repr__(self) -> str:
        return f"LanceStats({self._dataset!r})"


def decoded(metadata: Mapping[str, Any]) -> dict[str, str]:
    """A protobuf string or bytes map as pylance returns it (str -> str)."""
    return {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else v for k, v in metadata.items()}
