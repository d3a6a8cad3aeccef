"""k-means on numpy, as Lance trains IVF centroids and PQ codebooks.

Lloyd iterations from ``k`` random rows of the data (Lance's random init), at most
``max_iters`` (50), stopping when the loss changes by less than ``tolerance`` (1e-4) of
itself. ``metric`` is ``"l2"`` (squared distance) or ``"dot"`` (distance ``1 - x.c``, the
centroid still the members' mean). Empty clusters are re-seeded with the rows farthest from
their centroid. Distances are computed in row blocks by matrix products (no per-row loops);
:func:`train_batched` trains several independent problems of the same shape at once (PQ's
sub-vectors).
"""

from __future__ import annotations

import numpy as np

MAX_ITERS = 50
TOLERANCE = 1e-4
#: Distance-matrix cells per block (x 4 bytes).
BLOCK_CELLS = 1 << 23


def _block(n: int, k: int, groups: int = 1) -> int:
    return max(1, BLOCK_CELLS // max(1, k * groups))


def assign(data: np.ndarray, centroids: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centroid of each row of ``data`` (n x d) and its distance."""
    labels, dists = assign_batched(data[None], centroids[None], metric)
    return labels[0], dists[0]


def assign_batched(data: np.ndarray, centroids: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`assign` over ``g`` problems: ``data`` g x n x d, ``centroids`` g x k x d."""
    g, n, _ = data.shape
    k = centroids.shape[1]
    labels = np.empty((g, n), np.int64)
    dists = np.empty((g, n), np.float64)
    c_t = np.ascontiguousarray(np.swapaxes(centroids, 1, 2))
    c_norm = np.einsum("gkd,gkd->gk", centroids, centroids)[:, None, :] if metric == "l2" else None
    step = _block(n, k, g)
    for start in range(0, n, step):  # blocks of rows
        x = data[:, start:start + step]
        prod = np.matmul(x, c_t)
        if metric == "l2":
            d = c_norm - 2 * prod
            lab = d.argmin(axis=2)
            best = np.take_along_axis(d, lab[..., None], axis=2)[..., 0]
            best = best + np.einsum("gnd,gnd->gn", x, x)
            best = np.maximum(best, 0)
        else:
            lab = prod.argmax(axis=2)
            best = 1 - np.take_along_axis(prod, lab[..., None], axis=2)[..., 0]
        labels[:, start:start + step] = lab
        dists[:, start:start + step] = best
    return labels, dists


def _means(data: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster mean of ``data`` rows (n x d) and cluster sizes; zero for empty clusters."""
    order = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels, minlength=k)
    sums = np.zeros((k, data.shape[1]), np.float64)
    present = np.flatnonzero(sizes)
    if len(present):
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])[present]
        sums[present] = np.add.reduceat(data[order].astype(np.float64, copy=False), starts, axis=0)
    means = sums / np.maximum(sizes, 1)[:, None]
    return means, sizes


def train_batched(data: np.ndarray, k: int, metric: str, rng: np.random.Generator,
                  max_iters: int = MAX_ITERS, tolerance: float = TOLERANCE) -> tuple[np.ndarray, float]:
    """Train ``g`` independent k-means (``data`` g x n x d, n >= k) -> centroids g x k x d, loss."""
    g, n, d = data.shape
    centroids = np.stack([data[i, rng.choice(n, size=k, replace=False)] for i in range(g)])
    previous = np.inf
    loss = np.inf
    for _ in range(max_iters):
        labels, dists = assign_batched(data, centroids, metric)
        loss = float(dists.sum())
        new = np.empty_like(centroids)
        for i in range(g):  # one per sub-problem (PQ sub-vector), not per row
            means, sizes = _means(data[i], labels[i], k)
            empty = np.flatnonzero(sizes == 0)
            if len(empty):
                far = np.argsort(-dists[i], kind="stable")[: len(empty)]
                means[empty[: len(far)]] = data[i, far]
            new[i] = means.astype(data.dtype, copy=False)
        centroids = new
        if abs(previous - loss) < tolerance * loss:
            break
        previous = loss
    return centroids, loss


def train(data: np.ndarray, k: int, metric: str, rng: np.random.Generator, max_iters: int = MAX_ITERS,
          tolerance: float = TOLERANCE) -> tuple[np.ndarray, float]:
    """k-means on ``data`` (n x d, n >= k) -> centroids (k x d) and the final loss."""
    centroids, loss = train_batched(data[None], k, metric, rng, max_iters, tolerance)
    return centroids[0], loss
