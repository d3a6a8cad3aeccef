"""k-means on numpy, as Lance trains IVF centroids and PQ codebooks.

Lloyd iterations from k-means++ seeds (up to 256 clusters on small samples; else ``k`` random rows
of the data, Lance's init), at most ``max_iters`` (50), stopping when the loss changes by less
than ``tolerance`` (1e-4) of itself. ``metric`` is ``"l2"`` (squared distance) or ``"dot"``
(distance ``1 - x.c``, the centroid the members' mean; ``spherical``: normalized, pylance 14's
IVF centroids for ``dot``). Empty clusters are re-seeded with the rows farthest from
their centroid. Distances are computed in row blocks by matrix products (no per-row loops);
:func:`train_batched` trains several independent problems of the same shape at once (PQ's
sub-vectors).

For ``l2`` the assignment step skips the rows that cannot change cluster (Hamerly's bounds, the
same assignments as plain Lloyd): each row keeps an upper bound on the distance to its centroid
(made exact each iteration, one distance per row) and a lower bound on the distance to every
other centroid (the second-nearest distance of its last full search, less the largest centroid
move since); only rows whose upper bound reaches their lower bound are compared with every
centroid. Late iterations move few centroids far, so most rows skip the ``k``-wide search.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

MAX_ITERS = 50
TOLERANCE = 1e-4
#: Distance-matrix cells per block and dimension (at most ``MAX_BLOCK_CELLS``): narrow products (PQ
#: sub-vectors) are several times faster in small blocks that stay in cache, wide ones in large blocks.
BLOCK_CELLS_PER_DIM = 1 << 14
MAX_BLOCK_CELLS = 1 << 22
#: Relative slack on Hamerly's bounds: float32 distances are not exact, a row this close to its
#: bound is searched in full.
BOUND_SLACK = 1e-4
#: Centroids are seeded by k-means++ up to this many clusters (PQ codebooks, small IVFs), else by random rows.
PLUS_PLUS_MAX_K = 256
#: ... and while problems x rows x clusters stays below this (its cost); larger samples seed randomly.
PLUS_PLUS_MAX_CELLS = 1 << 25


#: Products at most this wide (PQ sub-vectors) run with one BLAS thread: OpenBLAS's threads cost more
#: than such a product (several times the whole training on a busy two-core machine).
NARROW_DIM = 32


@contextlib.contextmanager
def _blas_for(d: int) -> Iterator[None]:
    if d > NARROW_DIM:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def assign(data: np.ndarray, centroids: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid of each row of ``data`` (n x d) and its distance."""
    labels, dists = assign_batched(data[None], centroids[None], metric)
    return labels[0], dists[0]


def assign_batched(data: np.ndarray, centroids: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`assign` over ``g`` problems: ``data`` g x n x d, ``centroids`` g x k x d (blocked
    products, see :func:`_nearest`)."""
    with _blas_for(data.shape[2]):
        return _assign_batched(data, centroids, metric)


def _assign_batched(data: np.ndarray, centroids: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    g, n, _ = data.shape
    labels = np.empty((g, n), np.int64)
    dists = np.empty((g, n), np.float64)
    for i in range(g):  # one per sub-problem (PQ sub-vector)
        labels[i], dists[i], _ = _nearest(data[i], centroids[i], metric)
    return labels, dists


def _block_rows(d: int, k: int) -> int:
    return max(16, min(MAX_BLOCK_CELLS, BLOCK_CELLS_PER_DIM * d) // max(1, k))


def _nearest(x: np.ndarray, centroids: np.ndarray, metric: str, second: bool = False
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Nearest centroid of each row of ``x`` (n x d), its distance (l2: squared; dot: ``1 - x.c``)
    and with ``second`` (l2) the squared distance of the second nearest (``inf`` with one
    centroid). Per block of rows one matrix product, ``x @ -2c.T`` plus ``|c|^2`` (l2; narrow:
    ``[x, 1] @ [-2c.T; |c|^2]``) or ``x @ -c.T`` (dot), whose row-wise argmin is the nearest centroid."""
    n, d = x.shape
    k = len(centroids)
    l2 = metric == "l2"
    # narrow l2 products (PQ sub-vectors) fold the centroids' norms in, [x, 1] @ [-2c.T; |c|^2]:
    # faster than a second pass adding them; wide ones add them (the extra copy costs more)
    fold = l2 and d <= NARROW_DIM
    weights = np.empty((d + fold, k), centroids.dtype)
    weights[:d] = -2 * centroids.T if l2 else -centroids.T
    norms_c = np.einsum("kd,kd->k", centroids, centroids) if l2 else None
    if fold:
        weights[d] = norms_c
    labels = np.empty(n, np.int64)
    best = np.empty(n, np.float64)
    runner_up = np.full(n, np.inf) if second else None
    step = _block_rows(d, k)
    augmented = np.empty((min(step, n), d + 1), x.dtype) if fold else None
    if augmented is not None:
        augmented[:, d] = 1
    for start in range(0, n, step):  # blocks of rows
        rows = x[start:start + step]
        m = len(rows)
        if augmented is not None:
            augmented[:m, :d] = rows
            prod = augmented[:m] @ weights
        else:
            prod = rows @ weights
            if norms_c is not None:
                prod += norms_c
        lab = prod.argmin(axis=1)
        at = np.arange(m)
        labels[start:start + m] = lab
        if metric != "l2":
            best[start:start + m] = prod[at, lab].astype(np.float64) + 1
            continue
        norms = np.einsum("nd,nd->n", rows, rows, dtype=np.float64)
        best[start:start + m] = np.maximum(prod[at, lab] + norms, 0)
        if runner_up is not None and k > 1:
            prod[at, lab] = np.inf
            runner_up[start:start + m] = np.maximum(prod.min(axis=1) + norms, 0)
    return labels, best, runner_up


def _nearest_two(x: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """l2 :func:`_nearest` with the second nearest's squared distance."""
    labels, best, runner_up = _nearest(x, centroids, "l2", second=True)
    assert runner_up is not None
    return labels, best, runner_up


def _exact(x: np.ndarray, centroids: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Squared l2 distance of each row of ``x`` to its own centroid (n x d work)."""
    diff = x - centroids[labels]
    return np.einsum("nd,nd->n", diff, diff, dtype=np.float64)


class _Bounds:
    """Hamerly's bounds of ``g`` l2 problems (see the module docstring): labels, squared distances
    to the assigned centroids (exact after :meth:`assign`) and lower bounds (not squared) on the
    distance to any other centroid."""

    def __init__(self, data: np.ndarray, centroids: np.ndarray) -> None:
        g, n, _ = data.shape
        self.data = data
        self.labels = np.empty((g, n), np.int64)
        self.dists = np.empty((g, n), np.float64)
        self.lower = np.empty((g, n), np.float64)
        for i in range(g):
            self.labels[i], self.dists[i], second = _nearest_two(data[i], centroids[i])
            self.lower[i] = np.sqrt(second)
        #: rows searched in full by the last :meth:`assign`, for tests and tuning
        self.searched = g * n

    def assign(self, old: np.ndarray, new: np.ndarray) -> None:
        """Re-assign after the centroids moved from ``old`` to ``new``."""
        self.searched = 0
        for i in range(len(new)):
            moved = np.sqrt(np.einsum("kd,kd->k", new[i] - old[i], new[i] - old[i], dtype=np.float64))
            x, labels = self.data[i], self.labels[i]
            # every centroid but a row's own moved at most the largest move of the others
            farthest = int(moved.argmax())
            top = moved[farthest]
            runner_up = np.partition(moved, -2)[-2] if len(moved) > 1 else 0.0
            self.lower[i] -= np.where(labels == farthest, runner_up, top)
            exact = _exact(x, new[i], labels)
            upper = np.sqrt(exact)
            self.dists[i] = exact
            rows = np.flatnonzero(upper >= self.lower[i] - BOUND_SLACK * (upper + 1e-30))
            if not len(rows):
                continue
            self.searched += len(rows)
            labels_r, best, second = _nearest_two(x[rows], new[i])
            labels[rows] = labels_r
            self.dists[i, rows] = best
            self.lower[i, rows] = np.sqrt(second)


def _means(data: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster means (g x k x d) of ``data`` (g x n x d) under ``labels`` (g x n), and the
    cluster sizes (g x k); zero for empty clusters. One weighted bincount per dimension."""
    g, n, d = data.shape
    flat = (labels + (np.arange(g, dtype=np.int64) * k)[:, None]).reshape(-1)
    sizes = np.bincount(flat, minlength=g * k)
    rows = data.reshape(g * n, d)
    sums = np.empty((g * k, d), np.float64)
    for j in range(d):  # per dimension, not per row
        sums[:, j] = np.bincount(flat, weights=rows[:, j], minlength=g * k)
    means = sums / np.maximum(sizes, 1)[:, None]
    return means.reshape(g, k, d), sizes.reshape(g, k)


def _plus_plus(data: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeds of ``g`` problems (``data`` g x n x d): each next seed drawn with probability
    proportional to its squared l2 distance to the nearest seed so far (inverse-CDF sampling for
    all problems at once). One vectorised pass over the rows per seed."""
    g, n, _ = data.shape
    rows = np.arange(g)
    chosen = np.empty((g, k), np.int64)
    chosen[:, 0] = rng.integers(0, n, g)
    nearest = ((data - data[rows, chosen[:, 0]][:, None]) ** 2).sum(axis=2, dtype=np.float64)
    for j in range(1, k):  # per seed, not per row
        cumulative = np.cumsum(nearest, axis=1)
        target = rng.random(g) * cumulative[:, -1]
        chosen[:, j] = np.minimum((cumulative < target[:, None]).sum(axis=1), n - 1)
        seed = data[rows, chosen[:, j]][:, None]
        nearest = np.minimum(nearest, ((data - seed) ** 2).sum(axis=2, dtype=np.float64))
    return data[rows[:, None], chosen]


def train_batched(data: np.ndarray, k: int, metric: str, rng: np.random.Generator,
                  max_iters: int = MAX_ITERS, tolerance: float = TOLERANCE, spherical: bool = False
                  ) -> tuple[np.ndarray, float]:
    """Train ``g`` independent k-means (``data`` g x n x d, n >= k) -> centroids g x k x d, loss.
    ``spherical`` (with ``dot``): the centroids are unit vectors, each its members' mean normalized."""
    with _blas_for(data.shape[2]):
        return _train_batched(data, k, metric, rng, max_iters, tolerance, spherical)


def _unit(centroids: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("gkd,gkd->gk", centroids, centroids, dtype=np.float64))[..., None]
    return (centroids / np.where(norms == 0, 1, norms)).astype(centroids.dtype, copy=False)


def _train_batched(data: np.ndarray, k: int, metric: str, rng: np.random.Generator, max_iters: int,
                   tolerance: float, spherical: bool = False) -> tuple[np.ndarray, float]:
    g, n, d = data.shape
    if k <= PLUS_PLUS_MAX_K and g * n * k <= PLUS_PLUS_MAX_CELLS:
        centroids = _plus_plus(data, k, rng)
    else:
        centroids = np.stack([data[i, rng.choice(n, size=k, replace=False)] for i in range(g)])
    if spherical:
        centroids = _unit(centroids)
    previous = np.inf
    loss = np.inf
    bounds: _Bounds | None = None
    for _ in range(max_iters):
        if metric != "l2":
            labels, dists = _assign_batched(data, centroids, metric)
        else:
            if bounds is None:
                bounds = _Bounds(data, centroids)
            else:
                bounds.assign(old, centroids)
            labels, dists = bounds.labels, bounds.dists
        loss = float(dists.sum())
        means, sizes = _means(data, labels, k)
        reseeded = bool((sizes == 0).any())
        for i in np.flatnonzero((sizes == 0).any(axis=1)):  # sub-problems with empty clusters
            empty = np.flatnonzero(sizes[i] == 0)
            far = np.argsort(-dists[i], kind="stable")[: len(empty)]
            means[i, empty[: len(far)]] = data[i, far]
        old, centroids = centroids, means.astype(data.dtype, copy=False)
        if spherical:
            centroids = _unit(centroids)
        # (not right after re-seeding an empty cluster: that centroid is a lone row until its members
        # are assigned to it and averaged, which a final stop would leave undone)
        if not reseeded and abs(previous - loss) < tolerance * abs(loss):  # dot losses can be negative
            break
        previous = loss
    return centroids, loss


def train(data: np.ndarray, k: int, metric: str, rng: np.random.Generator, max_iters: int = MAX_ITERS,
          tolerance: float = TOLERANCE, spherical: bool = False) -> tuple[np.ndarray, float]:
    """k-means on ``data`` (n x d, n >= k) -> centroids (k x d) and the final loss."""
    centroids, loss = train_batched(data[None], k, metric, rng, max_iters, tolerance, spherical)
    return centroids[0], loss
