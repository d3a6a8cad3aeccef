"""Lance data files: formats 2.0, 2.1, 2.2 (read and write) and legacy 0.1 (read).

``LanceFileWriter(sink, schema, max_page_bytes=..., version="2.0"|"2.1"|"2.2")``
writes what pylance writes with that ``data_storage_version`` (2.0 files carry
footer version 0.3); ``LanceFileReader(source, path=..., file_size=...,
column_index=...)`` reads every version, dispatching on the footer: 2.0 pages
(``decode``), 2.1/2.2 structural layouts (``v21``), legacy files (``legacy``).
See the module docstrings of :mod:`~airflow_lance.core.file.writer`,
:mod:`~airflow_lance.core.file.reader`, :mod:`~airflow_lance.core.file.encode`,
:mod:`~airflow_lance.core.file.decode`, :mod:`~airflow_lance.core.file.v21`
and :mod:`~airflow_lance.core.file.legacy`.
"""

from airflow_lance.core.file.reader import LanceFileReader
from airflow_lance.core.file.writer import LanceFileWriter

__all__ = ["LanceFileReader", "LanceFileWriter"]
