"""Product quantization as Lance trains and stores it.

Vectors are cut into ``num_sub_vectors`` equal slices; each slice gets its own codebook of
``2**num_bits`` centroids trained by L2 k-means (:mod:`.kmeans`) on a sample of
``sample_rate * 2**num_bits`` rows, and a vector's code is the nearest codeword per slice
(one byte each for 8 bits). For ``l2`` and ``cosine`` Lance quantizes the residual (the vector,
normalized for cosine, minus its IVF centroid); for ``dot`` the vector itself.

The codebook is a ``Tensor`` of shape ``[2**num_bits, dimension]`` whose data is the slices'
codebooks one after the other (``num_sub_vectors`` blocks of ``2**num_bits x sub_dim``).
In ``auxiliary.idx`` each partition's codes are stored transposed: the ``__pq_code`` values of
the partition's ``n`` rows, read as one buffer, are ``codes.T`` (slice-major).
"""

from __future__ import annotations

import numpy as np

from airflow_lance.core.indices import kmeans

NUM_BITS = 8
SAMPLE_RATE = 256


def use_residual(metric: str) -> bool:
    return metric in ("l2", "cosine")


def _split(vectors: np.ndarray, num_sub_vectors: int) -> np.ndarray:
    n, dim = vectors.shape
    return np.ascontiguousarray(vectors.reshape(n, num_sub_vectors, dim // num_sub_vectors).transpose(1, 0, 2))


def train(vectors: np.ndarray, num_sub_vectors: int, rng: np.random.Generator, num_bits: int = NUM_BITS,
          max_iters: int = kmeans.MAX_ITERS) -> np.ndarray:
    """Codebooks ``num_sub_vectors x 2**num_bits x sub_dim`` from ``vectors`` (already residuals)."""
    k = 2 ** num_bits
    sample = SAMPLE_RATE * k
    if len(vectors) > sample:
        vectors = vectors[np.sort(rng.choice(len(vectors), size=sample, replace=False))]
    codebooks, _ = kmeans.train_batched(_split(vectors, num_sub_vectors), k, "l2", rng, max_iters)
    return codebooks


def encode(vectors: np.ndarray, codebooks: np.ndarray) -> np.ndarray:
    """Codes (n x num_sub_vectors, uint8) of ``vectors`` against ``codebooks``."""
    labels, _ = kmeans.assign_batched(_split(vectors, codebooks.shape[0]), codebooks, "l2")
    return np.ascontiguousarray(labels.T, dtype=np.uint8)


def codebook_matrix(codebooks: np.ndarray) -> np.ndarray:
    """The codebook as Lance's tensor data: ``2**num_bits x dimension`` with the slices' blocks in sequence."""
    m, k, sub = codebooks.shape
    return codebooks.reshape(m * k * sub).reshape(k, m * sub)


def transpose_partitions(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Codes of rows sorted by partition (n x m) -> the same shape, each partition's block transposed."""
    m = codes.shape[1]
    flat = np.empty(codes.size, np.uint8)
    start = 0
    for length in lengths.tolist():  # one block per partition
        end = start + length
        flat[start * m:end * m] = codes[start:end].T.reshape(-1)
        start = end
    return flat.reshape(codes.shape)
