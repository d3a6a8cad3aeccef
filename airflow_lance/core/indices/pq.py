"""Product quantization as Lance trains and stores it.

Vectors are cut into ``num_sub_vectors`` equal slices; each slice gets its own codebook of
``2**num_bits`` centroids trained by L2 k-means (:mod:`.kmeans`) on a sample of
``sample_rate * 2**num_bits`` rows, and a vector's code is the nearest codeword per slice
(one byte each for 8 bits; for 4 bits two codes per byte, see :func:`pack`). For ``l2`` and
``cosine`` Lance quantizes the residual (the vector, normalized for cosine, minus its IVF
centroid); for ``dot`` the vector itself.

The codebook is a ``Tensor`` of shape ``[2**num_bits, dimension]`` whose data is the slices'
codebooks one after the other (``num_sub_vectors`` blocks of ``2**num_bits x sub_dim``).
In ``auxiliary.idx`` each partition's codes are stored transposed: the ``__pq_code`` values of
the partition's ``n`` rows, read as one buffer, are ``codes.T`` (slice-major).

With ``num_bits`` 4 (pylance 14, Lance's ``ProductQuantizer::transform_impl::<4>``): 16
codewords per slice (the codebook ``Tensor`` is ``[16, dimension]``, same block order); a row's
codes are packed two per byte, byte ``j`` = ``code[2j] | code[2j+1] << 4`` (``__pq_code`` is
``fixed_size_list<uint8>[num_sub_vectors / 2]``, ``num_sub_vectors`` must be even), and the
packed bytes are transposed per partition as above (``bytes.T``, ``num_sub_vectors / 2`` rows of
``n`` bytes). Decoded from pylance 14's files: this is what it writes and reads.
"""

from __future__ import annotations

import json

import numpy as np

from airflow_lance.core.errors import CorruptFileError
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


def code_width(num_sub_vectors: int, num_bits: int) -> int:
    """Bytes per row in ``__pq_code``: ``num_sub_vectors`` (8 bits) or half of it (4 bits)."""
    return num_sub_vectors * num_bits // 8


def pack(codes: np.ndarray, num_bits: int) -> np.ndarray:
    """Codes (n x m) -> the bytes Lance stores per row (n x :func:`code_width`)."""
    if num_bits == 8:
        return codes
    codes = np.asarray(codes, np.uint8)
    return np.ascontiguousarray(codes[:, 0::2] | (codes[:, 1::2] << 4), dtype=np.uint8)


def unpack(data: np.ndarray, num_bits: int) -> np.ndarray:
    """Inverse of :func:`pack`: stored bytes per row -> codes (n x m)."""
    if num_bits == 8:
        return data
    out = np.empty((data.shape[0], data.shape[1] * 2), np.uint8)
    out[:, 0::2] = data & 0x0F
    out[:, 1::2] = data >> 4
    return out


def storage_num_bits(aux_metadata: dict[str, str]) -> int:
    """``nbits`` of a PQ ``auxiliary.idx`` (its ``storage_metadata``; 8 where the metadata or the key
    is absent). Metadata that does not parse, or another width, is a corrupt file: codes read or
    written at a guessed width would be wrong."""
    if "storage_metadata" not in aux_metadata:
        return NUM_BITS
    try:
        nbits = json.loads(json.loads(aux_metadata["storage_metadata"])[0]).get("nbits", NUM_BITS)
    except (IndexError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptFileError("auxiliary.idx", f"PQ storage_metadata does not parse: {exc}") from None
    if nbits not in (4, 8):
        raise CorruptFileError("auxiliary.idx", f"PQ storage_metadata has nbits {nbits!r} (4 or 8)")
    return int(nbits)


def codebook_matrix(codebooks: np.ndarray) -> np.ndarray:
    """The codebook as Lance's tensor data: ``2**num_bits x dimension`` with the slices' blocks in sequence."""
    m, k, sub = codebooks.shape
    return codebooks.reshape(m * k * sub).reshape(k, m * sub)


def transpose_partitions(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Bytes of rows sorted by partition (n x w) -> the same shape, each partition's block transposed."""
    m = codes.shape[1]
    flat = np.empty(codes.size, np.uint8)
    start = 0
    for length in lengths.tolist():  # one block per partition
        end = start + length
        flat[start * m:end * m] = codes[start:end].T.reshape(-1)
        start = end
    return flat.reshape(codes.shape)
