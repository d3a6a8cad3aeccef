"""The one exception tree of the Lance format core.

Every error raised on purpose by ``airflow_lance.core`` derives from
:class:`LanceError`. Errors coming from storage backends, protobuf or pyarrow
are translated into these classes (with ``raise ... from``) where they cross
into the core, so callers never need to catch backend-specific exceptions.

Each class also derives from the builtin exceptions pylance raises in the same
situation, so that ``except`` clauses written for pylance keep working: a
missing version or tag is a ``ValueError`` from ``dataset()`` and an ``OSError``
from ``checkout_version``, so :class:`VersionNotFoundError` is both; an append
with another schema is an ``OSError`` in pylance, a bad filter a ``ValueError``.
"""

from __future__ import annotations


class LanceError(Exception):
    """Base class of every error raised by the Lance format core."""


class DatasetNotFoundError(LanceError, FileNotFoundError, ValueError):
    """No Lance dataset (no committed manifest) exists at the URI."""


class DatasetAlreadyExistsError(LanceError, FileExistsError):
    """``mode="create"`` was requested but the dataset already has versions."""


class VersionNotFoundError(LanceError, OSError, ValueError, LookupError):
    """The requested version does not exist (or was cleaned up)."""


class TagNotFoundError(LanceError, OSError, ValueError, LookupError):
    """The requested tag does not exist."""


class TagAlreadyExistsError(LanceError, FileExistsError, ValueError):
    """A tag with that name exists already."""


class SchemaMismatchError(LanceError, OSError, ValueError):
    """Data does not match the dataset's schema (the message names the fields)."""


class InvalidInputError(LanceError, ValueError):
    """An argument is malformed or out of range (bad mode, bad filter, ...)."""


class AmbiguousMergeInsertError(InvalidInputError, OSError):
    """A merge insert whose source has several rows for one target row (pylance: ``OSError``)."""


class MergeInsertMatchedError(InvalidInputError, OSError):
    """``when_matched_fail()``: a source row matched a target row (nothing was written)."""


class SchemaEvolutionError(InvalidInputError, OSError):
    """Bad input to ``add_columns``/``drop_columns``/``alter_columns``/``merge``: an unknown or
    existing column, an expression that does not evaluate, a cast Lance does not allow
    (pylance raises ``OSError``, and ``ValueError`` for ``drop_columns``). Raised before anything
    is written."""


class InvalidTransformError(SchemaEvolutionError, TypeError):
    """``add_columns`` was given something that is no transform (pylance: ``TypeError``)."""


class RowIndexError(LanceError, OSError, IndexError):
    """``take`` of a position past the dataset's rows (pylance raises ``OSError``)."""


class NegativeIndexError(InvalidInputError, OverflowError):
    """A negative position or row id (pylance: ``OverflowError``, they are unsigned)."""


class CorruptFileError(LanceError):
    """A file of the dataset is malformed: bad magic, truncated, inconsistent.

    ``path`` names the offending file.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class DataFileNotFoundError(CorruptFileError, FileNotFoundError, ValueError):
    """A data or deletion file the manifest references is missing (pylance: ``ArrowInvalid``,
    a ``ValueError``). ``path`` names the file."""


class UnsupportedFeatureError(LanceError, NotImplementedError):
    """The dataset uses a feature this implementation does not support.

    Raised for unknown reader/writer feature flags (as the format requires)
    and for data this file version cannot represent.
    """


class StorageError(LanceError, OSError):
    """An object store operation failed (network, permissions, ...).

    The message starts with the dataset URI and names the cause; it never holds a credential.
    """


class StoragePermissionError(StorageError, PermissionError):
    """The store refused the request: wrong or missing credentials, or no permission."""


class CommitConflictError(LanceError):
    """The commit lost against a concurrent, incompatible change.

    Retryable: re-read the dataset and redo the operation. Nothing of this
    commit became visible.
    """


class IncompatibleTransactionError(CommitConflictError):
    """A concurrent transaction makes this operation impossible as planned
    (for example, an Overwrite or Restore landed in between)."""


class CommitStateUnknownError(LanceError):
    """The commit may or may not have landed (e.g. the put timed out).

    Never delete the files of such a commit: a version may reference them.
    """


class InvalidTypeError(InvalidInputError, TypeError):
    """An argument of the wrong Python type (pylance raises ``TypeError``), e.g. a
    non-string metadata value."""


class IndexNotFoundError(LanceError, RuntimeError):
    """No index of that name (pylance 14's ``drop_index`` raises ``RuntimeError``)."""


class IndexExistsError(LanceError, RuntimeError):
    """An index of that name exists and ``replace`` is False (pylance 14: ``RuntimeError``)."""


class IndexParamsError(InvalidInputError, RuntimeError):
    """Vector index parameters pylance 14 refuses when it trains (``RuntimeError``), e.g. PQ
    ``num_bits`` other than 4 or 8, or an odd ``num_sub_vectors`` with ``num_bits`` 4."""


class ColumnNotFoundError(InvalidInputError, KeyError):
    """A column name the schema does not have (pylance's ``create_scalar_index``: ``KeyError``)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
