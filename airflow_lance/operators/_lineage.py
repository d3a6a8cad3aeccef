"""OpenLineage for the operators: input and output datasets, through the OpenLineage provider's
operator hooks (``get_openlineage_facets_on_complete`` / ``..._on_failure``).

An operator mixes in :class:`LanceLineageMixin` and, once it knows what it read and wrote,
calls :meth:`~LanceLineageMixin.record_lineage` with :class:`LineageDataset` values
(:func:`lance_dataset`, :func:`spark_source_datasets`, :func:`file_dataset`). The
OpenLineage provider's listener calls the hooks after the task ran (in the same process), and
they turn the recorded datasets into an ``OperatorLineage``. Adding lineage to an operator::

    class MyOperator(LanceLineageMixin, BaseOperator):
        def execute(self, context):
            ...
            self.record_lineage(inputs=[lance_dataset(uri, read_version)],
                                outputs=[lance_dataset(uri, version, read_version)])

Nothing here imports OpenLineage until the hooks run, so the operators work the same without
the provider (``pip install "airflow-lance[openlineage]"`` adds it).

Names follow OpenLineage's naming spec for file systems and object stores (the client's
``openlineage.client.naming.dataset`` classes): ``file`` + absolute path for local paths,
``s3://<bucket>`` + key, ``gs://<bucket>`` + key, ``abfss://<container>@<account>.dfs.core.windows.net``
+ path, ``hdfs://<host>:<port>`` + path, else ``<scheme>://<authority>`` + path. Lance datasets carry
the standard ``version`` facet (``datasetVersion``: the Lance version) and a ``lance`` facet
(``version``, ``readVersion``: the version the operation started from), and a ``schema`` facet
when the operator passes the Arrow schema.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_lance.spark.spec import SourceSpec

#: The custom facet's key and the URL of its schema.
LANCE_FACET = "lance"
LANCE_FACET_SCHEMA_URL = "https://github.com/airflow-lance/airflow-lance/blob/main/docs/LanceDatasetFacet.json"
_PRODUCER = "https://github.com/airflow-lance/airflow-lance"
_BUCKETED = {"s3": "s3", "s3a": "s3", "s3n": "s3", "s3+ddb": "s3", "gs": "gs", "gcs": "gs"}
_AZURE = frozenset({"az", "abfs", "abfss", "adl"})
_AZURE_ACCOUNT_OPTIONS = ("azure_storage_account_name", "account_name")


@dataclasses.dataclass(frozen=True)
class LineageDataset:
    """A dataset as OpenLineage names it, with the facts its facets carry (plain data)."""

    namespace: str
    name: str
    #: Lance version (``version`` and ``lance`` facets); None for other datasets.
    version: int | None = None
    #: the version a Lance operation started from
    read_version: int | None = None
    #: (column, type) pairs for the ``schema`` facet
    fields: tuple[tuple[str, str], ...] = ()


def dataset_name(uri: str, storage_options: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of a file-system or object-store location."""
    text = str(uri).strip()
    if text.lower().startswith("lance+"):
        text = text[len("lance+"):]
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if not scheme or len(scheme) == 1:  # a local (possibly Windows) path
        return "file", posixpath.normpath(text) if text.startswith("/") else text
    path = parts.path
    if scheme == "file":
        return ("file", path) if not parts.netloc or parts.netloc == "localhost" else (f"file://{parts.netloc}", path)
    if scheme in _BUCKETED:
        return f"{_BUCKETED[scheme]}://{parts.netloc}", path.lstrip("/")
    if scheme in _AZURE or scheme in ("wasb", "wasbs"):
        container, _, host = parts.netloc.partition("@")
        if not host:
            account = next((str(storage_options[k]) for k in _AZURE_ACCOUNT_OPTIONS
                            if storage_options and storage_options.get(k)), None)
            if account is None:
                return f"{scheme}://{container}", path.lstrip("/")
            host = f"{account}.dfs.core.windows.net"
        out_scheme = "wasbs" if scheme in ("wasb", "wasbs") else "abfss"
        return f"{out_scheme}://{container}@{host}", path.lstrip("/")
    return f"{scheme}://{parts.netloc}", path or "/"


def lance_dataset(uri: str, version: int | None = None, read_version: int | None = None, *,
                  schema: pa.Schema | None = None,
                  storage_options: Mapping[str, Any] | None = None) -> LineageDataset:
    """A Lance dataset at ``version`` (read from ``read_version``)."""
    namespace, name = dataset_name(uri, storage_options)
    fields = tuple((f.name, str(f.type)) for f in schema) if schema is not None else ()
    return LineageDataset(namespace, name, version, read_version, fields)


def file_dataset(uri: str, storage_options: Mapping[str, Any] | None = None) -> LineageDataset:
    """Files at ``uri`` (a Spark source path, a Kartothek table, ...)."""
    return LineageDataset(*dataset_name(uri, storage_options))


def spark_source_datasets(source: SourceSpec | None) -> list[LineageDataset]:
    """The datasets a Spark source names: its paths, or the Lance dataset at the pinned version
    (SQL queries and callables name none here; OpenLineage's Spark integration reports what they
    read, under this task as parent)."""
    if source is None:
        return []
    if source.lance is not None:
        version = source.lance.version if isinstance(source.lance.version, int) else None
        return [lance_dataset(source.lance.uri, version, storage_options=source.lance.storage_options)]
    return [file_dataset(path) for path in source.paths]


class LanceLineageMixin:
    """OpenLineage's operator hooks from the datasets ``execute`` recorded."""

    _lineage_inputs: tuple[LineageDataset, ...] = ()
    _lineage_outputs: tuple[LineageDataset, ...] = ()

    def record_lineage(self, *, inputs: Iterable[LineageDataset] = (),
                       outputs: Iterable[LineageDataset] = ()) -> None:
        """Add datasets read and written (the hooks report what is recorded when the task ends)."""
        self._lineage_inputs = (*self._lineage_inputs, *inputs)
        self._lineage_outputs = (*self._lineage_outputs, *outputs)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Inputs and outputs of the finished task (the OpenLineage provider calls it)."""
        return to_operator_lineage(self._lineage_inputs, self._lineage_outputs)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """What a failed task recorded before it failed (usually nothing: no version was committed)."""
        return to_operator_lineage(self._lineage_inputs, self._lineage_outputs)


def _lance_facet_class() -> type:
    """The ``lance`` dataset facet class (built on first use: it needs the OpenLineage client)."""
    global _LANCE_FACET_CLASS
    if _LANCE_FACET_CLASS is None:
        import attr
        from airflow.providers.common.compat.openlineage.facet import DatasetFacet

        @attr.define
        class LanceDatasetFacet(DatasetFacet):  # type: ignore[misc]
            """The Lance version of the dataset and the version the operation read."""

            version: int | None = attr.field(default=None)
            readVersion: int | None = attr.field(default=None)  # noqa: N815 (OpenLineage's camel case)

            @staticmethod
            def _get_schema() -> str:
                return LANCE_FACET_SCHEMA_URL

        _LANCE_FACET_CLASS = LanceDatasetFacet
    return _LANCE_FACET_CLASS


_LANCE_FACET_CLASS: type | None = None


def _facets(dataset: LineageDataset) -> dict[str, Any]:
    from airflow.providers.common.compat.openlineage.facet import SchemaDatasetFacet, SchemaDatasetFacetFields

    facets: dict[str, Any] = {}
    if dataset.version is not None:
        from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet

        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(dataset.version))
        facets[LANCE_FACET] = _lance_facet_class()(version=dataset.version, readVersion=dataset.read_version,
                                                   producer=_PRODUCER)
    if dataset.fields:
        facets["schema"] = SchemaDatasetFacet(
            fields=[SchemaDatasetFacetFields(name=name, type=type_) for name, type_ in dataset.fields])
    return facets


def to_operator_lineage(inputs: Sequence[LineageDataset], outputs: Sequence[LineageDataset]) -> Any:
    """The provider's ``OperatorLineage`` of these datasets (needs the OpenLineage provider)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    def convert(datasets: Sequence[LineageDataset]) -> list[Any]:
        return [Dataset(namespace=d.namespace, name=d.name, facets=_facets(d)) for d in datasets]

    return OperatorLineage(inputs=convert(inputs), outputs=convert(outputs))


def with_parent_job_information(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` plus the ``spark.openlineage.parent*`` properties naming the running task as the
    Spark job's parent, as the Spark provider's ``SparkSubmitOperator`` adds them: when
    ``[openlineage] spark_inject_parent_job_info`` is true, OpenLineage is enabled, and ``conf``
    sets none of them.
    OpenLineage's Spark integration (its jar and listener on the Spark side) reports the Spark
    job's own reads and writes under that parent. Transport information (which may hold an API
    key) is not injected: it would reach the spark-submit command line.
    """
    from airflow.providers.common.compat.sdk import conf as airflow_conf

    if not airflow_conf.getboolean("openlineage", "spark_inject_parent_job_info", fallback=False):
        return dict(conf)
    try:
        from airflow.providers.openlineage.conf import is_disabled
    except ImportError:  # the provider is not installed: no events to link the Spark job to
        return dict(conf)
    if is_disabled():
        return dict(conf)
    from airflow.providers.common.compat.openlineage.utils.spark import (
        inject_parent_job_information_into_spark_properties,
    )
    from airflow.providers.common.compat.sdk import get_current_context

    return dict(inject_parent_job_information_into_spark_properties(dict(conf), get_current_context()))
