"""Writer processes for the concurrency and crash tests (run as ``python workers.py ...``)."""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pyarrow as pa


def batch(first_id: int, rows: int) -> pa.Table:
    ids = np.arange(first_id, first_id + rows, dtype=np.int64)
    return pa.table({"id": ids, "payload": pa.array(np.char.add("row-", ids.astype(str)))})


def append_loop(
    engine: str, uri: str, first_id: int, count: int, rows: int, storage_options: dict[str, str] | None = None
) -> None:
    """Append ``count`` batches of ``rows`` rows with consecutive ids, one commit each."""
    if engine == "ours":
        import airflow_lance.core as lance
    else:
        import lance  # type: ignore[no-redef]
    extra = {"storage_options": storage_options} if storage_options else {}
    print("ready", flush=True)
    for i in range(count):
        lance.write_dataset(batch(first_id + i * rows, rows), uri, mode="append", **extra)
        print(f"committed {i}", flush=True)


if __name__ == "__main__":
    # engine uri first_id count rows [file holding the storage options as JSON: never on the command line]
    engine, uri, first, count, rows, *options = sys.argv[1:]
    append_loop(engine, uri, int(first), int(count), int(rows),
                json.loads(pathlib.Path(options[0]).read_text()) if options else None)
