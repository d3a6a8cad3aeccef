"""SelectionReader: a row range covering a whole fragment reads as the fragment (pylance's oracle)."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

import airflow_lance.core as core
from airflow_lance.core.fragment_read import SelectionReader


@pytest.mark.parametrize("filter", [None, "v > 40"])
def test_whole_range_equals_pylance_fragment_and_partial_ranges(tmp_path, filter) -> None:
    uri = str(tmp_path / "ds.lance")
    n = 300
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "v": pa.array(np.arange(n, dtype=np.int64) % 97),
        "s": pa.array([f"s{i}" for i in range(n)]),
        "e": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 4, dtype=np.float32)), 4),
    })
    lance.write_dataset(table, uri, max_rows_per_file=200)
    lance.dataset(uri).delete("id % 7 = 3")
    pyds = lance.dataset(uri)
    ds = core.dataset(uri)
    reader = SelectionReader(ds, ["id", "s", "e"], filter, with_row_address=True)
    for fragment, pyfragment in zip(ds._fragments, pyds.get_fragments(), strict=True):
        expected = pyfragment.to_table(columns=["id", "s", "e"], filter=filter, with_row_address=True)
        rows = fragment.physical_rows
        for row_range in [(0, rows), (0, rows + 10)]:
            assert reader.read(fragment, row_range=row_range).equals(expected)
        split = rows // 3
        parts = [reader.read(fragment, row_range=(0, split)), reader.read(fragment, row_range=(split, rows))]
        assert pa.concat_tables(parts).combine_chunks().equals(expected.combine_chunks())
