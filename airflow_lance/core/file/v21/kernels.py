"""Optional compiled loops for the byte work numpy cannot vectorise well in the 2.1+ decoder.

FSST expansion (a variable-length symbol per code), FastLanes unpacking of
32/64-bit words (16 or 32-value lanes interleaved per 1024-value block) and
copies of many short byte ranges are the floor of the numpy decoder
(dictionary-encoded strings are not: Arrow's ``take`` of them is 2-2.7x
faster than a compiled loop was, with pyarrow 26): pyarrow's
``take`` of symbol pairs costs about 12 ns per pair, and every numpy
operation on a lane slice loops over only 16-32 values. With the ``fast``
extra (``pip install 'airflow-lance[fast]'``, numba) they run as compiled
loops (``_numba_kernels``) that release the GIL (as does the walk of JSONB documents into JSON
text, :mod:`airflow_lance.core.jsonb_text`); without it, or with
``AIRFLOW_LANCE_KERNELS=numpy``, the numpy code runs and gives the same bytes.

Inputs below :data:`MIN_VALUES` always take the numpy path, so small reads
never pay for importing numba and loading its cached machine code (about
0.8 s of CPU per process); copies of long byte ranges never load them (see
``util.take_ranges``), so neither does a process that only writes. The first use on a machine compiles the loops (about
10 s, once: numba caches the machine code next to this module, or in the
user's cache directory); code imported from a zip (what a Spark job ships to
its executors) cannot keep that cache and uses numpy unless the mode is
``numba``.
"""

from __future__ import annotations

import logging
import os
import threading
from types import ModuleType

from airflow_lance.core.errors import InvalidInputError

#: Environment variable choosing the decoder's loops: ``auto`` (compiled when numba is installed),
#: ``numba`` (compiled, an error if numba is missing) or ``numpy``.
ENV = "AIRFLOW_LANCE_KERNELS"
MODES = ("auto", "numba", "numpy")
#: Fewer values (codes, packed values) than this are decoded with numpy.
MIN_VALUES = 1 << 16

_LOCK = threading.Lock()
#: [] not tried yet, else [(kernels module or None, why not)]
_LOADED: list[tuple[ModuleType | None, str]] = []
_LOG = logging.getLogger(__name__)
#: Imported from a zip (the code a Spark job ships): numba could cache no machine code for a path
#: that changes with every job, and compiling costs about 10 s per process, so ``auto`` means numpy.
_SHIPPED_IN_ZIP = not os.path.isfile(__file__)


def mode() -> str:
    """The configured mode (``AIRFLOW_LANCE_KERNELS``, default ``auto``)."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise InvalidInputError(f"{ENV}={value!r} is not one of {', '.join(MODES)}")
    return value


def _load() -> tuple[ModuleType | None, str]:
    with _LOCK:
        if not _LOADED:
            try:
                from airflow_lance.core.file.v21 import _numba_kernels
            except ImportError as exc:  # the fast extra is not installed (or numba refuses this numpy)
                _LOADED.append((None, f"numba is not installed ({exc}); pip install 'airflow-lance[fast]'"))
            except Exception as exc:  # noqa: BLE001 - numba present but unusable, e.g. no writable cache directory
                _LOG.warning("Lance decoding runs without its compiled loops (numpy gives the same bytes): %s", exc)
                _LOADED.append((None, f"numba could not set up the compiled loops: {exc}"))
            else:
                _LOG.debug("Lance decoding uses compiled loops (numba %s)", _numba_kernels.numba.__version__)
                _LOADED.append((_numba_kernels, ""))
        return _LOADED[0]


def compiled(values: int, *, load: bool = True) -> ModuleType | None:
    """The compiled kernels for an input of ``values`` values, or ``None`` for the numpy path.
    ``load=False``: only if they are loaded already (work the numpy path does nearly as fast)."""
    if values < MIN_VALUES or not (load or _LOADED):
        return None
    chosen = mode()
    if chosen == "numpy" or (chosen == "auto" and _SHIPPED_IN_ZIP):
        return None
    kernels, why_not = _load()
    if kernels is None and chosen == "numba":
        raise InvalidInputError(f"{ENV}=numba but {why_not}")
    return kernels
