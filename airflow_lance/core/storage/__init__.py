"""Object store access for the Lance core: a small interface and its backends.

The rest of the core only talks to :class:`ObjectStore`; backends translate
their own errors into :mod:`airflow_lance.core.errors` here.
"""

from airflow_lance.core.storage.base import FileInfo, ObjectStore
from airflow_lance.core.storage.factory import open_store

__all__ = ["FileInfo", "ObjectStore", "open_store"]
