"""Datasets whose files live in other base paths (manifest field 18, ``base_id`` on data, deletion and
index files): pylance's shallow clones (``shallow_clone``) and multi-base datasets (``initial_bases``,
``target_bases``). Before, we refused to open them ("requires reader features not supported here: base
paths"). pylance 14 is the oracle: we read them as it does, modify them as it does (new files go to the
dataset's root, never to the bases), and never touch the bases' files."""

from __future__ import annotations

import os

import lance as pylance
import pyarrow as pa
import pytest
from lance import DatasetBasePath

import airflow_lance.core as ours
from airflow_lance.core import feature_flags


def _table(start: int, rows: int) -> pa.Table:
    ids = range(start, start + rows)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "category": pa.array([f"c{i % 5}" for i in ids]),
        "text": pa.array([None if i % 13 == 0 else f"row {i} " * (i % 4) for i in ids], pa.large_string()),
        "vec": pa.array([[float(i), float(-i)] for i in ids], pa.list_(pa.float32(), 2)),
    })


def _files(root: str) -> dict[str, tuple[int, int]]:
    """Every file below ``root`` with its size and modification time."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            stat = os.stat(path)
            found[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns)
    return found


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


def _source(tmp_path, version: str) -> str:
    """pylance's dataset of 3 fragments with deletions and two scalar indices."""
    uri = str(tmp_path / "source")
    pylance.write_dataset(_table(0, 300), uri, max_rows_per_file=100, data_storage_version=version)
    ds = pylance.dataset(uri)
    ds.delete("id % 17 = 3")
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("category", "BITMAP")
    return uri


def _indices(uri: str) -> list[tuple]:
    """Our view of the indices: name, columns, fragments covered."""
    ds = ours.dataset(uri)
    names = {field.id: field.name for field in ds.lance_schema.fields}
    return sorted((i["name"], tuple(names.get(f, f) for f in i["fields"]), len(i["fragment_ids"]))
                  for i in ds.list_indices())


def _pylance_indices(uri: str, stats: bool = True) -> list[tuple]:
    """pylance's view (it reads the index files for its statistics): name, columns, fragments covered,
    and the rows indexed with each segment's statistics."""
    ds = pylance.dataset(uri)
    found = []
    for index in ds.describe_indices():
        details = ds.stats.index_stats(index.name)
        found.append((index.name, tuple(index.field_names), details["num_indexed_fragments"])
                     + ((details["num_indexed_rows"], str(details["segments"])) if stats else ()))
    return sorted(found)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_we_read_pylances_shallow_clone(tmp_path, version):
    source = _source(tmp_path, version)
    clone = str(tmp_path / "clone")
    pylance.dataset(source).shallow_clone(clone, pylance.dataset(source).version)
    assert not os.path.exists(os.path.join(clone, "data"))  # every file is the source's
    theirs = pylance.dataset(clone)
    mine = ours.dataset(clone)
    assert mine.to_table().equals(theirs.to_table())
    assert mine.count_rows() == theirs.count_rows() == 300 - 18
    assert mine.to_table(filter="category = 'c2' AND id > 100", columns=["text", "id"]).equals(
        theirs.to_table(filter="category = 'c2' AND id > 100", columns=["text", "id"]))
    assert mine.take([0, 5, 150, 281]).equals(theirs.take([0, 5, 150, 281]))
    assert _indices(clone) == _pylance_indices(clone, stats=False)
    assert _pylance_indices(clone) == _pylance_indices(source)
    assert [f.metadata.files[0].base_id for f in mine.get_fragments()] == [0, 0, 0]
    # an older version of the source, cloned: time travel through the base works the same
    older = str(tmp_path / "older")
    pylance.dataset(source).shallow_clone(older, 1)
    assert ours.dataset(older).to_table().equals(pylance.dataset(older).to_table())


def _modify(ds, lib, rows: pa.Table) -> None:
    """The same day of changes, through pylance's API or ours (same names)."""
    lib.write_dataset(rows, ds.uri, mode="append")
    ds = lib.dataset(ds.uri)
    ds.delete("id % 10 = 1")  # on the source's fragments, which already have deletion files
    ds = lib.dataset(ds.uri)
    ds.update({"text": "'updated'"}, where="id < 20")
    ds = lib.dataset(ds.uri)
    changed = _table(290, 20)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(changed)
    ds = lib.dataset(ds.uri)
    ds.add_columns({"double": "id * 2"})


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_we_modify_a_shallow_clone_as_pylance_does_and_never_touch_the_source(tmp_path, version):
    source = _source(tmp_path, version)
    before = _files(source)
    expected_source = pylance.dataset(source).to_table()
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    for clone in (mine, theirs):
        pylance.dataset(source).shallow_clone(clone, pylance.dataset(source).version)

    _modify(ours.dataset(mine), ours, _table(1000, 50))
    _modify(pylance.dataset(theirs), pylance, _table(1000, 50))
    assert _sorted(ours.dataset(mine).to_table()).equals(_sorted(pylance.dataset(theirs).to_table()))
    assert _sorted(pylance.dataset(mine).to_table()).equals(_sorted(pylance.dataset(theirs).to_table()))

    # compaction rewrites the source's fragments into the clone, the indices remapped there too
    ds = ours.dataset(mine)
    metrics = ds.optimize.compact_files(target_rows_per_fragment=10_000)
    assert metrics.fragments_removed >= 3
    manifest = ds.manifest_file.manifest
    assert manifest.reader_feature_flags & feature_flags.BASE_PATHS
    assert manifest.writer_feature_flags & feature_flags.BASE_PATHS
    assert [(b.id, b.path, b.is_dataset_root) for b in manifest.base_paths] == [(0, source, True)]
    assert all(f.base_id is None for fragment in ds.get_fragments() for f in fragment.metadata.files)
    for index in ds.list_indices():
        assert index["base_id"] is None, index
        assert os.path.isdir(os.path.join(mine, "_indices", index["uuid"]))
    stats = ds.cleanup_old_versions(older_than=pytest.importorskip("datetime").timedelta(0),
                                    delete_unverified=True)
    assert stats.old_versions > 0

    expected = _sorted(pylance.dataset(theirs).to_table())
    for reader in (ours, pylance):
        clone = reader.dataset(mine)
        assert _sorted(clone.to_table()).equals(expected)
        assert _sorted(clone.to_table(filter="id = 5 OR category = 'c3'")).equals(
            _sorted(pylance.dataset(theirs).to_table(filter="id = 5 OR category = 'c3'")))
    assert _indices(mine) == _pylance_indices(mine, stats=False)
    assert [row[3] for row in _pylance_indices(mine)] == [row[3] for row in _pylance_indices(theirs)]  # read by pylance
    assert _files(source) == before  # not a byte of the source changed, nothing removed
    assert pylance.dataset(source).to_table().equals(expected_source)

    # pylance goes on writing to the clone we modified, and we read what it wrote
    pylance.write_dataset(_table(5000, 10).append_column("double", pa.array([0] * 10, pa.int64())), mine,
                          mode="append")
    assert ours.dataset(mine).to_table().equals(pylance.dataset(mine).to_table())


def test_we_repair_the_indices_of_a_clone_pylance_compacted(tmp_path):
    """pylance 14's compaction of a shallow clone writes the remapped indices to the clone but keeps
    their base_id: pylance can no longer open them (every indexed query fails). We find the files where
    they were written, and our next compaction gives the indices back to pylance."""
    source = _source(tmp_path, "2.2")
    clone = str(tmp_path / "clone")
    pylance.dataset(source).shallow_clone(clone, pylance.dataset(source).version)
    pylance.dataset(clone).delete("id % 10 = 1")
    pylance.dataset(clone).optimize.compact_files(target_rows_per_fragment=10_000)
    with pytest.raises((OSError, pa.ArrowInvalid), match="Not found"):
        pylance.dataset(clone).to_table(filter="category = 'c3'")
    expected = [row for row in _table(0, 300).to_pylist() if row["id"] % 17 != 3 and row["id"] % 10 != 1]
    assert ours.dataset(clone).to_table().to_pylist() == expected

    ours.write_dataset(_table(300, 40), clone, mode="append")
    ours.dataset(clone).delete("id % 6 = 0")  # enough deletions for compaction to rewrite the indexed fragment
    assert ours.dataset(clone).optimize.compact_files(target_rows_per_fragment=10_000).fragments_removed
    expected = [row for row in expected + _table(300, 40).to_pylist() if row["id"] % 6]
    assert all(index["base_id"] is None for index in ours.dataset(clone).list_indices())
    plain = pylance.write_dataset(pa.Table.from_pylist(expected, schema=_table(0, 1).schema), str(tmp_path / "plain"))
    for where in ("category = 'c3'", "id = 77", "id > 250 AND category = 'c1'"):
        assert _sorted(pylance.dataset(clone).to_table(filter=where)).equals(_sorted(plain.to_table(filter=where)))
    appended = sum(1 for i in range(300, 340) if i % 6)  # not indexed
    assert [row[3] for row in _pylance_indices(clone)] == [len(expected) - appended] * 2


def test_we_read_and_modify_a_multi_base_dataset_and_never_touch_the_bases(tmp_path):
    root, inner, outer = (str(tmp_path / name) for name in ("root", "b1", "b2"))
    pylance.write_dataset(_table(0, 200), root, max_rows_per_file=80, target_bases=["b1"], initial_bases=[
        DatasetBasePath(inner, name="b1", is_dataset_root=False),
        DatasetBasePath(outer, name="b2", is_dataset_root=True),
    ])
    pylance.write_dataset(_table(200, 100), root, mode="append", target_bases=["b2"])
    pylance.dataset(root).delete("id % 9 = 0")
    assert len(os.listdir(inner)) == 3 and len(os.listdir(os.path.join(outer, "data"))) == 1
    bases = {**_files(inner), **{"b2/" + k: v for k, v in _files(outer).items()}}
    assert ours.dataset(root).to_table().equals(pylance.dataset(root).to_table())

    ours.write_dataset(_table(300, 30), root, mode="append")
    ours.dataset(root).delete("id % 7 = 0")
    ours.dataset(root).optimize.compact_files()
    ours.dataset(root).cleanup_old_versions(older_than=pytest.importorskip("datetime").timedelta(0),
                                            delete_unverified=True)
    expected = [row for row in _table(0, 330).to_pylist() if (row["id"] % 9 or row["id"] >= 300) and row["id"] % 7]
    assert _sorted(pylance.dataset(root).to_table()).to_pylist() == expected
    assert _sorted(ours.dataset(root).to_table()).to_pylist() == expected
    assert {**_files(inner), **{"b2/" + k: v for k, v in _files(outer).items()}} == bases
    assert {b.name: b.path for b in ours.dataset(root).manifest_file.manifest.base_paths} == {"b1": inner, "b2": outer}


def test_cleanup_keeps_the_files_of_a_base_inside_the_dataset_root(tmp_path):
    """A base under the root's own ``data/``: its files look like the root's, yet no manifest of the
    root references them by that path. Cleanup must not take them for garbage."""
    root = str(tmp_path / "root")
    pylance.write_dataset(_table(0, 10), root)
    pylance.dataset(root).add_bases([DatasetBasePath(os.path.join(root, "data"), name="inner")])
    pylance.write_dataset(_table(10, 10), root, mode="append", target_bases=["inner"])
    expected = pylance.dataset(root).to_table()
    stats = ours.dataset(root).cleanup_old_versions(older_than=pytest.importorskip("datetime").timedelta(0),
                                                    delete_unverified=True)
    assert stats.data_files_removed == 0
    assert ours.dataset(root).to_table().equals(expected)
    assert pylance.dataset(root).to_table().equals(expected)


def test_a_file_in_an_unknown_base_is_a_typed_error(tmp_path):
    source = _source(tmp_path, "2.2")
    clone = str(tmp_path / "clone")
    pylance.dataset(source).shallow_clone(clone, pylance.dataset(source).version)
    ds = ours.dataset(clone)
    fragment = ds.get_fragments()[0].metadata
    broken = fragment.files[0].__class__(**{**fragment.files[0].__dict__, "base_id": 7})
    from airflow_lance.core.scan import read_fragment

    with pytest.raises(ours.CorruptFileError, match="base path id 7"):
        read_fragment(ds.store, fragment.__class__(**{**fragment.__dict__, "files": (broken,)}), ds.lance_schema)


def _comparable(uri: str) -> tuple:
    """A clone's manifest and index section without what differs between writers and runs."""
    manifest_file = ours.dataset(uri).manifest_file
    manifest = manifest_file.manifest.__class__()
    manifest.CopyFrom(manifest_file.manifest)
    for name in ("timestamp", "writer_version", "transaction_file", "index_section", "transaction_section"):
        manifest.ClearField(name)
    return manifest, manifest_file.index_section


def _clone_op(uri: str) -> tuple:
    raw = ours.dataset(uri).read_transaction().raw
    return raw.read_version, raw.WhichOneof("operation"), raw.clone


@pytest.mark.parametrize("reference", [2, "indexed"])
def test_our_shallow_clone_is_pylances(tmp_path, reference):
    source = _source(tmp_path, "2.2")
    pylance.dataset(source).tags.create("indexed", pylance.dataset(source).version)
    pylance.write_dataset(_table(300, 10), source, mode="append")  # the clones reference an older version
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    before = _files(source)
    pylance.dataset(source).shallow_clone(theirs, reference)
    clone = ours.dataset(source).shallow_clone(mine, reference)
    assert clone.version == pylance.dataset(theirs).version == pylance.dataset(source, reference).version
    assert _comparable(mine) == _comparable(theirs)
    assert _clone_op(mine) == _clone_op(theirs)
    assert not os.path.exists(os.path.join(mine, "data"))
    expected = pylance.dataset(source, reference).to_table()
    assert pylance.dataset(mine).to_table().equals(expected) and clone.to_table().equals(expected)
    assert _pylance_indices(mine) == _pylance_indices(theirs)
    # a clone of our clone reads through both bases, as pylance's does
    chained, their_chained = str(tmp_path / "chained"), str(tmp_path / "their_chained")
    ours.dataset(mine).shallow_clone(chained, clone.version)
    pylance.dataset(theirs).shallow_clone(their_chained, clone.version)
    assert [(b.id, b.path) for b in ours.dataset(chained).manifest_file.manifest.base_paths] == [(0, source), (1, mine)]
    assert _comparable(chained)[0].fragments == _comparable(their_chained)[0].fragments
    assert pylance.dataset(chained).to_table(filter="category = 'c1'").equals(expected.filter(
        pa.compute.equal(expected.column("category"), "c1")))
    # pylance writes on in our clone; we read what it wrote
    pylance.write_dataset(_table(500, 10), mine, mode="append")
    pylance.dataset(mine).delete("id % 4 = 0")
    assert ours.dataset(mine).to_table().equals(pylance.dataset(mine).to_table())
    assert _files(source) == before  # cloning and writing to the clone left the source as it was


def test_shallow_clone_refuses_bad_input_before_writing_anything(tmp_path):
    source = _source(tmp_path, "2.2")
    target = str(tmp_path / "target")
    ds = ours.dataset(source)
    for reference, error in ((99, ours.VersionNotFoundError), ("no-such-tag", ours.TagNotFoundError),
                             (("dev", 1), ours.UnsupportedFeatureError), (1.5, ours.InvalidInputError)):
        with pytest.raises(error):
            ds.shallow_clone(target, reference)
        assert not os.path.exists(target)
    ds.shallow_clone(target, 1)
    before = _files(target)
    with pytest.raises(ours.DatasetAlreadyExistsError):
        ds.shallow_clone(target, 2)
    assert _files(target) == before
    latest = ds.shallow_clone(str(tmp_path / "latest"), (None, None))
    assert latest.version == ds.version and latest.to_table().equals(ds.to_table())
