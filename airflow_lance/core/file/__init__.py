"""Lance data file format 2.0: streaming writer and random-access reader.

``LanceFileWriter(sink, schema, max_page_bytes=...)`` writes what pylance writes
with ``data_storage_version="2.0"`` (footer version 0.3);
``LanceFileReader(source, path=..., file_size=..., column_index=...)`` reads
those files, including pylance's own (auto-dictionary strings, compressed
buffers, multi-page columns). See the module docstrings of
:mod:`~airflow_lance.core.file.writer`, :mod:`~airflow_lance.core.file.reader`,
:mod:`~airflow_lance.core.file.encode` and :mod:`~airflow_lance.core.file.decode`.
"""

from airflow_lance.core.file.reader import LanceFileReader
from airflow_lance.core.file.writer import LanceFileWriter

__all__ = ["LanceFileReader", "LanceFileWriter"]
