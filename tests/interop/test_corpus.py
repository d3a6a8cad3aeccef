"""The compatibility corpus: datasets written by real pylance releases (tests/fixtures/lance_corpus).

For every dataset and every version the writing release still lists, we read exactly the table that release
read (``<name>.expected/v<N>.arrows.gz``, recorded by the release itself; ``<name>.json`` lists the versions,
what was done and what the release could not do), also projected and filtered, and count the rows pylance 14
counts. On a copy of each dataset, our append, delete, compaction and cleanup must leave a dataset that
pylance 14 reads with exactly the rows intended, and our first commit to an old manifest records the
fragment counts Lance derives. Where we refuse a step, REFUSED names the exact error; the refusal must come
before anything is written. Regenerate the corpus with tests/fixtures/lance_corpus/generate.py.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
import shutil
from pathlib import Path

import lance as pylance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import airflow_lance.core as ours
from airflow_lance.core import errors, layout
from airflow_lance.core.deletion import read_deletion_vector
from airflow_lance.core.file import LanceFileReader
from airflow_lance.core.fragment import DeletionFile
from airflow_lance.core.manifest import data_storage_version, latest_version, parse_manifest
from airflow_lance.core.migrate import needs_migration
from airflow_lance.core.storage import open_store

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "lance_corpus"


def _release_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.name.split("."))


def _datasets() -> list[tuple[str, str, dict]]:
    found = []
    for release in sorted((p for p in CORPUS.iterdir() if p.is_dir() and p.name[0].isdigit()), key=_release_key):
        for meta_path in sorted(release.glob("*.json")):
            if meta_path.name.startswith("_"):
                continue
            found.append((release.name, meta_path.stem, json.loads(meta_path.read_text())))
    return found


DATASETS = _datasets()
VERSIONS = [
    pytest.param(release, name, v["version"], id=f"{release}-{name}-v{v['version']}")
    for release, name, meta in DATASETS
    for v in meta["versions"]
]

# What we refuse, as (release, data storage version, dataset, step) -> the exact error (fnmatch patterns; the
# storage version is the one we infer for the dataset: "0.1" for legacy files). A refusal not listed fails
# the test, and so does a listed one that no longer happens; a refused commit step must leave every file
# as it was.
UNSTABLE = errors.UnsupportedFeatureError
# releases whose 2.1 files use the encodings of 2.1's unstable days, replaced before it was made stable
EARLY_2_1 = ("0.1[0-9].*", "0.2[0-9].*", "0.3[0-8].*")
REFUSED: dict[tuple[str, str, str, str], type[errors.LanceError]] = {
    # 2.3 is unstable in pylance 14 ("may not be readable in the future"): neither read nor written
    ("*", "2.3", "*", "read"): UNSTABLE,
    ("*", "2.3", "*", "append"): UNSTABLE,
    ("*", "2.3", "*", "delete"): UNSTABLE,
    ("*", "2.3", "*", "compact"): UNSTABLE,
    # early 2.1 (see EARLY_2_1): pylance 14 cannot read it either
    **{(release, "2.1", "*", step): UNSTABLE for release in EARLY_2_1 for step in ("read", "delete", "compact")},
    # 0.1x also gave list fields column indices: pylance 14 does not even open those
    ("0.1[0-9].*", "2.1", "*", "append"): UNSTABLE,
    ("0.1[0-9].*", "2.1", "*", "cleanup"): UNSTABLE,
    # 0.24-0.30 with stable row ids wrote row ids of other fragments into deletion vectors, and compaction
    # then kept 20 row ids for 22 rows: pylance 14 refuses to compact that too ("too few segments")
    ("0.2[4-9].*", "*", "stable_row_ids", "compact"): errors.CorruptFileError,
    ("0.30.*", "*", "stable_row_ids", "compact"): errors.CorruptFileError,
}

# Datasets pylance 14 itself cannot read (their writing release could): for them our commits are checked
# with our reader only. Each is checked to still fail in pylance 14. Patterns as in REFUSED.
PYLANCE_14_CANNOT_READ = [
    # 0.7 laid the legacy page table out from field id 0; pylance 14 reads the file of a merged-in column
    # from its lowest field id ("PlainDecoder: request([0..10]) out of range")
    ("0.[4-7].*", "evolution"),
    # unstable formats of their day: "unexpected type URL ... expected /lance.encodings21.PageLayout",
    # "... /lance.encodings23.PlanarLayout"
    *((release, "types_2_1") for release in EARLY_2_1),
    ("[4-9].*", "types_2_3"),
    ("1[0-3].*", "types_2_3"),
    # 2.2 before it was stable: "Lance v2.2 miniblock pages require the u32 chunk grammar"
    ("0.39.*", "types_2_2"),
    ("1.*", "types_2_2"),
    # 0.15-0.18 stored a blob column's values inline, as any binary column; pylance 14 expects blob
    # pages there ("Lance reader producer terminated before end of stream"). We read the values.
    ("0.1[5-8].*", "blobs_2_0"),
]

#: Blob v2 files of pylance 4.x-7.x keep a null value's definition level one struct level above its
#: (empty) description; pylance 14 reads those nulls as empty values, where we (and the writing
#: releases, whose take_blobs skips them) read nulls.
PYLANCE_14_READS_NULL_BLOBS_AS_EMPTY = [("[4-7].*", "blobs_v2")]


def _matches(value: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern)


def _storage(uri: str) -> str:
    return data_storage_version(_raw_latest(uri)[1])


def _refusal(release: str, storage: str, name: str, step: str) -> type[errors.LanceError] | None:
    for (rel, version, ds, st), error in REFUSED.items():
        if st == step and _matches(release, rel) and _matches(storage, version) and _matches(name, ds):
            return error
    return None


def _expected(release: str, name: str, version: int) -> pa.Table:
    meta = next(m for r, n, m in DATASETS if (r, n) == (release, name))
    entry = next(v for v in meta["versions"] if v["version"] == version)
    if "file" not in entry:
        # the writing release could not read its own version (0.10.5 after alter_columns: "field c does
        # not exist in the RecordBatch"): pylance 14 is the oracle
        return pylance.dataset(str(CORPUS / release / f"{name}.lance"), version=version).to_table()
    with pa.CompressedInputStream(str(CORPUS / release / f"{name}.expected" / entry["file"]), "gzip") as source:
        return pa.ipc.open_stream(source).read_all()


def _blob_v2_as_bytes(actual: pa.Table, expected: pa.Table) -> pa.Table:
    """Blob v2 columns (read as their logical struct) as their values' bytes, as the corpus records them."""
    for index, field in enumerate(actual.schema):
        if (field.metadata or {}).get(b"ARROW:extension:name") == b"lance.blob.v2" \
                and expected.schema.field(field.name).type == pa.large_binary():
            values = actual.column(index).combine_chunks()
            data = pc.if_else(values.is_valid(), pc.struct_field(values, "data"), pa.scalar(None, pa.large_binary()))
            actual = actual.set_column(index, pa.field(field.name, pa.large_binary()), data)
    return actual


def _assert_same(actual: pa.Table, expected: pa.Table) -> None:
    actual = _blob_v2_as_bytes(actual, expected)
    assert actual.schema.remove_metadata() == expected.schema.remove_metadata(), (
        f"\nactual:   {actual.schema}\nexpected: {expected.schema}")
    assert actual.num_rows == expected.num_rows
    for name in expected.column_names:
        # a dictionary column is compared by value: how the dictionary is laid out (unused or null entries)
        # is the reader's business, pylance releases differ in it
        assert _values(actual[name]).equals(_values(expected[name])), (
            f"column {name}:\nactual:   {actual[name].to_pylist()}\nexpected: {expected[name].to_pylist()}")


def _values(column: pa.ChunkedArray) -> pa.Array:
    array = column.combine_chunks()
    if pa.types.is_dictionary(array.type):
        return array.dictionary_decode()
    return array


def test_every_corpus_dataset_is_whole():
    """Each ``<name>.lance`` of a release has its ``<name>.json`` (else no test would read it) and a
    version; a half-written dataset (a writer step that failed) is not committed."""
    for release in (p for p in CORPUS.iterdir() if p.is_dir() and p.name[0].isdigit()):
        datasets = {p.stem for p in release.glob("*.lance")}
        described = {p.stem for p in release.glob("*.json") if not p.name.startswith("_")}
        assert datasets == described, (release.name, datasets ^ described)
        for name in datasets:
            assert any((release / f"{name}.lance" / "_versions").glob("*.manifest")), (release.name, name)
        assert not (release / "_failures.json").exists(), release.name


@pytest.mark.parametrize(("release", "name", "version"), VERSIONS)
def test_we_read_what_the_writing_release_read(release, name, version):
    uri = str(CORPUS / release / f"{name}.lance")
    refused = _refusal(release, _storage(uri), name, "read")
    if refused is not None:
        with pytest.raises(refused):
            ours.dataset(uri, version=version).to_table()
        return
    _assert_same(ours.dataset(uri, version=version).to_table(), _expected(release, name, version))


@pytest.mark.parametrize(("release", "name", "version"), VERSIONS)
def test_projections_and_filters_read_the_same_rows(release, name, version):
    """Every other column in reverse order (each file read for a subset of its columns), rows filtered
    on the key: the writing release's table, projected and filtered."""
    uri = str(CORPUS / release / f"{name}.lance")
    if _refusal(release, _storage(uri), name, "read") is not None:
        pytest.skip("reading is refused (checked by test_we_read_what_the_writing_release_read)")
    expected = _expected(release, name, version)
    columns = expected.column_names[::-2]
    key = _key(expected)
    ds = ours.dataset(uri, version=version)
    _assert_same(ds.to_table(columns=columns), expected.select(columns))
    if expected.num_rows:
        middle = sorted(expected[key].to_pylist())[expected.num_rows // 2]
        _assert_same(ds.to_table(filter=f"{key} >= {middle}"), expected.filter(pc.field(key) >= middle))


@pytest.mark.parametrize(("release", "name", "version"), VERSIONS)
def test_we_count_rows_as_pylance_14_does(release, name, version):
    """count_rows comes from the manifest's fragment counts: those we derive for old manifests must be
    the ones pylance 14 derives."""
    uri = str(CORPUS / release / f"{name}.lance")
    if _refusal(release, _storage(uri), name, "read") is not None:
        pytest.skip("reading is refused (checked by test_we_read_what_the_writing_release_read)")
    try:
        theirs = pylance.dataset(uri, version=version).count_rows()
    except Exception:  # noqa: BLE001 - pylance 14 does not open it: only datasets listed as such
        assert any(_matches(release, rel) and _matches(name, ds) for rel, ds in PYLANCE_14_CANNOT_READ)
        return
    assert ours.dataset(uri, version=version).count_rows() == theirs


@pytest.mark.parametrize(("release", "name"), [pytest.param(r, n, id=f"{r}-{n}") for r, n, _ in DATASETS])
def test_versions_and_tags_as_the_writing_release_listed(release, name):
    """V1 names (with ``_latest.manifest``), V2 names, migrated histories, cleaned-up ones; tags."""
    meta = next(m for r, n, m in DATASETS if (r, n) == (release, name))
    uri = str(CORPUS / release / f"{name}.lance")
    try:
        ds = ours.dataset(uri)
    except errors.UnsupportedFeatureError:
        assert _refusal(release, _storage(uri), name, "read") is not None
        pytest.skip("opening is refused (checked by test_we_read_what_the_writing_release_read)")
    assert [v["version"] for v in ds.versions()] == [v["version"] for v in meta["versions"]]
    assert ds.version == meta["latest_version"]
    assert {tag: info["version"] for tag, info in ds.tags.list().items()} == meta["tags"]


def _listing(root: str) -> dict[str, int]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            full = os.path.join(dirpath, f)
            out[os.path.relpath(full, root)] = os.path.getsize(full)
    return out


def _key(table: pa.Table) -> str:
    return table.column_names[0]  # every corpus dataset starts with an integer key column


def _new_rows(latest: pa.Table) -> pa.Table:
    """Three rows shaped like the dataset's, with fresh key values 1000.."""
    rows = latest.slice(0, 3)
    key = _key(latest)
    index = rows.column_names.index(key)
    return rows.set_column(index, key, pa.array(range(1000, 1000 + rows.num_rows)).cast(rows.schema.field(key).type))


def _step(release: str, storage: str, name: str, step: str, uri: str, action) -> bool:
    """Run ``action``; True if it ran, False if it was refused as REFUSED expects (nothing written).

    A compaction that finds nothing to rewrite writes nothing and needs no refusal: accepted too.
    """
    refused = _refusal(release, storage, name, step)
    before = _listing(uri)
    if refused is None:
        action()
        return True
    try:
        action()
    except refused:
        pass
    else:
        assert step == "compact", f"{step} was expected to raise {refused.__name__}"
    assert _listing(uri) == before, f"{step} was refused but files changed"
    return False


def _pylance_table(uri: str) -> pa.Table:
    """pylance 14's table, with blob columns (``lance-encoding:blob``) as the bytes its ``take_blobs``
    reads instead of the (position, size) descriptions ``to_table`` gives (the corpus records bytes)."""
    ds = pylance.dataset(uri)
    table = ds.to_table()
    for index, field in enumerate(ds.schema):
        v2 = isinstance(field.type, pa.BaseExtensionType) and field.type.extension_name == "lance.blob.v2"
        if b"lance-encoding:blob" in (field.metadata or {}) or v2:
            values = [None if blob is None else blob.read()
                      for blob in ds.take_blobs(field.name, indices=list(range(table.num_rows)))]
            table = table.set_column(index, pa.field(field.name, pa.large_binary()),
                                     pa.array(values, pa.large_binary()))
    return table


def _assert_pylance_reads(uri: str, expected: pa.Table, pylance_reads: bool, we_read: bool,
                          null_blobs_as_empty: bool = False) -> None:
    key = _key(expected)
    if pylance_reads:
        theirs, wanted = _pylance_table(uri), expected
        if null_blobs_as_empty:  # (PYLANCE_14_READS_NULL_BLOBS_AS_EMPTY) compared with those nulls as empty
            theirs, wanted = (t.set_column(t.schema.get_field_index("blob"), "blob", pc.fill_null(t.column("blob"), b""))
                              for t in (theirs, wanted))
        _assert_same(theirs.sort_by(key), wanted.sort_by(key))
    if we_read:
        _assert_same(ours.dataset(uri).to_table().sort_by(key), expected.sort_by(key))


def _as_blob_v2(table: pa.Table, uri: str) -> pa.Table:
    """``table`` (as the corpus records it) with the bytes of the dataset's blob v2 columns as their
    logical struct, the values to write."""
    try:
        schema = ours.dataset(uri).schema
    except errors.LanceError:  # a dataset we refuse to open: the append is refused as expected
        return table
    for index, field in enumerate(table.schema):
        target = schema.field(field.name)
        if (target.metadata or {}).get(b"ARROW:extension:name") == b"lance.blob.v2":
            data = table.column(index).combine_chunks()
            values = pa.StructArray.from_arrays(
                [data if f.name == "data" else pa.nulls(len(data), f.type) for f in target.type],
                fields=list(target.type), mask=data.is_null())
            table = table.set_column(index, target, values)
    return table


def _pylance_reads(uri: str, release: str, name: str) -> bool:
    if not any(_matches(release, rel) and _matches(name, ds) for rel, ds in PYLANCE_14_CANNOT_READ):
        return True
    with pytest.raises(Exception):  # noqa: B017 - whatever pylance raises; listed because it does
        pylance.dataset(uri).to_table()
    return False


@pytest.mark.parametrize(("release", "name"), [pytest.param(r, n, id=f"{r}-{n}") for r, n, _ in DATASETS])
def test_our_commits_leave_what_pylance_reads(tmp_path, release, name):
    meta = next(m for r, n, m in DATASETS if (r, n) == (release, name))
    uri = str(tmp_path / f"{name}.lance")
    shutil.copytree(CORPUS / release / f"{name}.lance", uri)
    expected = _expected(release, name, meta["latest_version"])
    key = _key(expected)
    storage = _storage(uri)
    theirs = _pylance_reads(uri, release, name)
    vector_search = theirs and _vector_search_works(uri)
    we_read = _refusal(release, storage, name, "read") is None
    lossy = any(_matches(release, rel) and _matches(name, ds) for rel, ds in PYLANCE_14_READS_NULL_BLOBS_AS_EMPTY)

    new = _new_rows(expected)
    written = _as_blob_v2(new, uri)
    if _step(release, storage, name, "append", uri, lambda: ours.write_dataset(written, uri, mode="append")):
        # (a cast of equal schemas fails on null structs of non-nullable fields: "cannot be viewed")
        expected = pa.concat_tables([expected, new if new.schema == expected.schema else new.cast(expected.schema)])
        _assert_pylance_reads(uri, expected, theirs, we_read, lossy)
        if not (theirs or we_read):  # the old files are unreadable to both: pylance reads our fragment
            _assert_same(pylance.dataset(uri).get_fragments()[-1].to_table(), new.cast(expected.schema))

    keys = expected[key].to_pylist()
    victims = sorted({keys[len(keys) // 2], keys[-1]})
    predicate = " OR ".join(f"{key} = {k}" for k in victims)
    if _step(release, storage, name, "delete", uri, lambda: ours.dataset(uri).delete(predicate)):
        expected = expected.filter(pc.invert(pc.is_in(expected[key], pa.array(victims, expected[key].type))))
        _assert_pylance_reads(uri, expected, theirs, we_read, lossy)

    compacted = expected
    if storage == "0.1" and theirs and not _duplicate_field_ids(uri):
        # legacy files hold no validity: a rewrite stores the nulls of missing columns as zeros, as
        # pylance's own compaction of the same dataset does (the oracle here, where pylance compacts it;
        # with duplicate field ids pylance's compaction drops the values it read before, ours keeps them)
        twin = str(tmp_path / "twin.lance")
        shutil.copytree(uri, twin)
        try:
            pylance.dataset(twin).optimize.compact_files()
        except OSError:  # e.g. "a rewrite group that was a split of indexed and non-indexed data"
            pass
        else:
            compacted = pylance.dataset(twin).to_table()
    if _step(release, storage, name, "compact", uri, lambda: ours.dataset(uri).optimize.compact_files()):
        expected = compacted
        _assert_pylance_reads(uri, expected, theirs, we_read, lossy)

    def cleanup():
        ours.dataset(uri).cleanup_old_versions(
            older_than=dt.timedelta(0), delete_unverified=True, error_if_tagged_old_versions=False)

    if _step(release, storage, name, "cleanup", uri, cleanup):
        _assert_pylance_reads(uri, expected, theirs, we_read, lossy)

    if theirs and ours.dataset(uri).manifest_file.index_section is not None:
        _assert_pylance_uses_the_indices(uri, expected, vector_search)


def _duplicate_field_ids(uri: str) -> bool:
    """Whether a fragment stores a field id in two data files (0.10-era add/drop columns)."""
    for fragment in ours.dataset(uri).manifest_file.manifest.fragments:
        ids = [i for f in fragment.files for i in f.fields if i >= 0]
        if len(ids) != len(set(ids)):
            return True
    return False


def _vector_search_works(uri: str) -> bool:
    """Whether pylance 14 searches the dataset's vector index (not those of 0.7 and older: "Please
    upgrade lance to 0.8+")."""
    theirs = pylance.dataset(uri)
    if "vec" not in theirs.schema.names:
        return False
    try:
        theirs.to_table(nearest={"column": "vec", "q": [0.5] * theirs.schema.field("vec").type.list_size, "k": 1})
    except ValueError:
        return False
    return True


def _assert_pylance_uses_the_indices(uri: str, expected: pa.Table, vector_search: bool) -> None:
    """The index metadata we carried through our commits still serves pylance's indexed queries."""
    theirs = pylance.dataset(uri)
    key = _key(expected)
    wanted = expected[key][expected.num_rows // 3].as_py()
    hits = theirs.to_table(filter=f"{key} = {wanted}")
    _assert_same(hits, expected.filter(pc.field(key) == wanted))
    try:
        described = theirs.describe_indices()
    except RuntimeError:  # "Fragment bitmap is required": indices of 0.7 and older, pylance 14's limit
        described = []
    if any(key in i.field_names and "BTree" in i.type_url for i in described):
        plan = theirs.scanner(filter=f"{key} = {wanted}").explain_plan()
        assert "ScalarIndexQuery" in plan, plan
    if vector_search:
        query = expected["vec"][0].values.to_numpy()
        nearest = theirs.to_table(nearest={"column": "vec", "q": query, "k": 5})
        assert nearest.num_rows == 5
        assert set(nearest[key].to_pylist()) <= set(expected[key].to_pylist())


def _raw_latest(uri: str):
    """The latest manifest as stored, before any derivation of ours."""
    store = open_store(uri)
    version, scheme = latest_version(store)
    path = layout.manifest_path(version, scheme)
    return store, parse_manifest(store.read(path), path, scheme).manifest


UNTRUSTED_STATS = [
    pytest.param(r, n, id=f"{r}-{n}")
    for r, n, m in DATASETS
    if _refusal(r, m["data_storage_version"] or "0.1", n, "delete") is None
    and needs_migration(_raw_latest(str(CORPUS / r / f"{n}.lance"))[1])
]


@pytest.mark.parametrize(("release", "name"), UNTRUSTED_STATS)
def test_our_commit_records_the_fragment_counts_lance_derives(tmp_path, release, name):
    """Manifests without trustworthy physical_rows/num_deleted_rows (0.7-era, the 0.8.0 migration):
    the next commit of ours records the counts in the files, as Lance's migrate_fragments does."""
    uri = str(tmp_path / f"{name}.lance")
    shutil.copytree(CORPUS / release / f"{name}.lance", uri)
    expected = pylance.dataset(uri).to_table() if _pylance_reads(uri, release, name) else None
    key = _key(ours.dataset(uri).schema.empty_table())
    first = ours.dataset(uri).to_table()[key][0].as_py()

    ours.dataset(uri).delete(f"{key} = {first}")

    store, manifest = _raw_latest(uri)
    assert manifest.HasField("writer_version")
    assert not needs_migration(manifest)
    for fragment in manifest.fragments:
        path = layout.data_file_path(fragment.files[0].path)
        with store.open_input(path) as source:
            assert fragment.physical_rows == LanceFileReader(source, path=path).num_rows
        if fragment.HasField("deletion_file"):
            deleted = read_deletion_vector(store, fragment.id, DeletionFile.from_pb(fragment.deletion_file))
            assert fragment.deletion_file.num_deleted_rows == deleted.size
    if expected is not None:
        remaining = expected.filter(pc.field(key) != first)
        assert pylance.dataset(uri).count_rows() == remaining.num_rows
        _assert_same(pylance.dataset(uri).to_table().sort_by(key), remaining.sort_by(key))
