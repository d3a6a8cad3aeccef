"""Checks shared by the vector-index tests."""

from __future__ import annotations

import lance as pylance
import numpy as np
import pyarrow.compute as pc


def pylance_nearest_agrees(uri: str, q: np.ndarray, k: int = 5) -> None:
    """pylance's nearest-neighbour search on ``vec`` (through whatever index it holds, refined)
    returns the ``k`` ids an exact L2 search over all rows returns."""
    ds = pylance.dataset(uri)
    got = ds.to_table(nearest={"column": "vec", "q": q, "k": k, "nprobes": 64, "refine_factor": 100}, columns=["id"])
    full = ds.to_table(columns=["id", "vec"])
    vecs = pc.list_flatten(full.column("vec")).to_numpy().reshape(full.num_rows, -1)
    exact = full.column("id").to_numpy()[np.argsort(((vecs - q) ** 2).sum(axis=1), kind="stable")[:k]]
    assert set(got.column("id").to_pylist()) == set(exact.tolist())
