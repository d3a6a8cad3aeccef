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


def _block(k: int, groups: int = 1) -> int:
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
    step = _block(k, g)
    for start in range(0, n, step):  # blocks of rows
        x = data[:, start:start + step]
        prod = np.matmul(x, c_t)
        if metric == "l2":
            prod *= -2
            prod += c_norm
            lab = prod.argmin(axis=2)
            best = np.take_along_axis(prod, lab[..., None], axis=2)[..., 0]
            best = best + np.einsum("gnd,gnd->gn", x, x)
            best = np.maximum(best, 0)
        else:
            lab = prod.argmax(axis=2)
            best = 1 - np.take_along_axis(prod, lab[..., None], axis=2)[..., 0]
        labels[:, start:start + step] = lab
        dists[:, start:start + step] = best
    return labels, dists


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
        means, sizes = _means(data, labels, k)
        for i in np.flatnonzero((sizes == 0).any(axis=1)):  # sub-problems with empty clusters
            empty = np.flatnonzero(sizes[i] == 0)
            far = np.argsort(-dists[i], kind="stable")[: len(empty)]
            means[i, empty[: len(far)]] = data[i, far]
        centroids = means.astype(data.dtype, copy=False)
        if abs(previous - loss) < tolerance * loss:
            break
        previous = loss
    return centroids, loss


def train(data: np.ndarray, k: int, metric: str, rng: np.random.Generator, max_iters: int = MAX_ITERS,
          tolerance: float = TOLERANCE) -> tuple[np.ndarray, float]:
    """k-means on ``data`` (n x d, n >= k) -> centroids (k x d) and the final loss."""
    centroids, loss = train_batched(data[None], k, metric, rng, max_iters, tolerance)
    return centroids[0], loss
