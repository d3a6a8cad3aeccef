"""Lance data files: formats 2.0, 2.1, 2.2 and legacy 0.1 (read and write).

``LanceFileWriter(sink, schema, max_page_bytes=..., version="2.0"|"2.1"|"2.2")``
writes what pylance writes with that ``data_storage_version`` (2.0 files carry
footer version 0.3), ``legacy_writer.LegacyFileWriter(sink, schema)`` legacy
files; ``LanceFileReader(source, path=..., file_size=..., column_index=...)``
reads every version, dispatching on the footer: 2.0 pages
(``decode``), 2.1/2.2 structural layouts (``v21``), legacy files (``legacy``).
See the module docstrings of :mod:`~airflow_lance.core.file.writer`,
:mod:`~airflow_lance.core.file.reader`, :mod:`~airflow_lance.core.file.encode`,
:mod:`~airflow_lance.core.file.decode`, :mod:`~airflow_lance.core.file.v21`
:mod:`~airflow_lance.core.file.legacy` and :mod:`~airflow_lance.core.file.legacy_writer`.
"""

from airflow_lance.core.file.reader import LanceFileReader
from airflow_lance.core.file.writer import LanceFileWriter

__all__ = ["LanceFileReader", "LanceFileWriter"]
