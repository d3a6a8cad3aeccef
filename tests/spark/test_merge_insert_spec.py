"""The merge-insert job spec and staged result (no Spark): validation, JSON round trips, digests."""

from __future__ import annotations

import json

import pytest

from airflow_lance.core import FragmentMetadata
from airflow_lance.spark.job import parse_spec
from airflow_lance.spark.merge_insert_spec import MergeInsertJobResult, MergeInsertJobSpec
from airflow_lance.spark.spec import JobSpecError, SourceSpec
from airflow_lance.spark.task_spec import TaskJobSpec


def _spec(**changes: object) -> MergeInsertJobSpec:
    fields: dict[str, object] = {
        "uri": "/data/ds.lance", "read_version": 3, "source": SourceSpec.from_fields(sql="SELECT 1 AS id"),
        "on": "id", "staging_root": "/data/ds.lance", "staging_name": "_airflow_staging/x.json",
        "storage_options": {"aws_secret_access_key": "secret"}, **changes}
    return MergeInsertJobSpec(**fields)  # type: ignore[arg-type]


def test_round_trip_through_the_job_entry_point() -> None:
    spec = _spec(on=["a", "b"], matched_condition="source.ts > target.ts", when_not_matched_by_source_delete=True,
                 by_source_expr="a > 1", num_partitions=4)
    parsed = parse_spec(spec.to_json())
    assert parsed == spec and parsed.on == ("a", "b")


def test_digest_leaves_out_credentials_and_staging_but_not_the_read_version() -> None:
    assert _spec().digest() == _spec(storage_options={}, staging_name="other.json").digest()
    assert _spec().digest() != _spec(read_version=4).digest()
    assert "secret" not in _spec().describe() and "secret" not in repr(_spec())


@pytest.mark.parametrize(("changes", "message"), [
    ({"on": []}, "on must be"),
    ({"on": ["id", "id"]}, "twice"),
    ({"read_version": 0}, "read_version"),
    ({"when_matched_update_all": False, "when_not_matched_insert_all": False}, "not configured to change"),
    ({"when_matched_update_all": False, "matched_condition": "source.a > 1"}, "when_matched_update_all only"),
    ({"by_source_expr": "a > 1"}, "when_not_matched_by_source_delete only"),
    ({"matched_condition": "  "}, "SQL string"),
    ({"num_partitions": -1}, "num_partitions"),
])
def test_bad_specs_are_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        _spec(**changes)


def test_a_spec_of_another_version_is_refused() -> None:
    data = json.loads(_spec().to_json())
    data["spec_version"] = 99
    with pytest.raises(JobSpecError, match="operator and job differ"):
        parse_spec(json.dumps(data))


def test_staged_result_round_trip_and_malformed() -> None:
    fragment = FragmentMetadata.from_json({"id": 0, "files": [], "physical_rows": 0, "deletion_file": None})
    result = MergeInsertJobResult("d", (fragment,), (), (1, 2), (0, 1), 5, 6, 7, 100, 1.5)
    assert MergeInsertJobResult.from_json(result.to_json()) == result
    assert result.counts == {"num_inserted_rows": 5, "num_updated_rows": 6, "num_deleted_rows": 7}
    with pytest.raises(JobSpecError, match="malformed"):
        MergeInsertJobResult.from_json('{"spec_digest": "d"}')


def test_update_and_delete_task_specs_need_their_params() -> None:
    common = {"uri": "/d", "staging_root": "/d", "staging_name": "s.json"}
    spec = TaskJobSpec(kind="update", tasks=((0, 1), (2,)), params={"read_version": 2, "updates": {"a": "a + 1"},
                                                                     "where": None}, **common)
    assert TaskJobSpec.from_json(spec.to_json()) == spec
    with pytest.raises(JobSpecError, match="needs params"):
        TaskJobSpec(kind="delete", tasks=((0,),), params={"read_version": 2}, **common)
    with pytest.raises(JobSpecError, match="lists of fragment ids"):
        TaskJobSpec(kind="delete", tasks=(("x",),), params={"read_version": 2, "predicate": "a > 1"}, **common)
