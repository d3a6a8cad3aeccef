"""Our code only: write inputs without pandas, the auto-cleanup config on commit (bad values
are logged and the commit stands, as Lance's hook), humantime durations, manifest migration."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys

import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.core.auto_cleanup import parse_duration


def test_core_writes_without_pandas(tmp_path):
    script = (
        "import sys\n"
        "class NoPandas:\n"  # any import of pandas fails, as on a machine without it
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pandas': raise ImportError('no pandas here')\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "import airflow_lance.core as c\n"
        f"c.write_dataset({{'a': [1, 2]}}, {str(tmp_path / 'd')!r})\n"
        f"c.write_dataset([{{'a': 3}}], {str(tmp_path / 'd')!r}, mode='append')\n"
        f"print(c.dataset({str(tmp_path / 'd')!r}).to_table()['a'].to_pylist())\n"
        "assert 'pandas' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[1, 2, 3]"


@pytest.mark.parametrize("text, seconds", [("1h 30m", 5400), ("2weeks", 1209600), ("1d1h", 90000),
                                           ("500ms", 0.5), ("3 min", 180), ("1M", 2_630_016), ("2y", 63_115_200)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "14", "3 fortnights", "h", "1h 2"])
def test_parse_duration_refuses(text):
    with pytest.raises(lance.InvalidInputError):
        parse_duration(text)


@pytest.mark.parametrize("config", [{"lance.auto_cleanup.interval": "x"},
                                    {"lance.auto_cleanup.interval": "1", "lance.auto_cleanup.older_than": "soon"}])
def test_bad_auto_cleanup_config_is_logged_and_the_commit_stands(uri, caplog, config):
    ds = lance.write_dataset(pa.table({"a": [1]}), uri)
    ds.update_config(config)
    with caplog.at_level(logging.ERROR, logger="airflow_lance.core.auto_cleanup"):
        lance.write_dataset(pa.table({"a": [2]}), uri, mode="append")
    assert "automatic cleanup" in caplog.text
    assert [v["version"] for v in lance.dataset(uri).versions()] == [1, 2, 3]


def test_retain_versions_config(uri):
    ds = lance.write_dataset(pa.table({"a": [1]}), uri)
    ds.update_config({"lance.auto_cleanup.interval": "2", "lance.auto_cleanup.retain_versions": "2"})
    for _ in range(4):
        lance.write_dataset(pa.table({"a": [1]}), uri, mode="append")
    assert lance.dataset(uri).count_rows() == 5
    assert [v["version"] for v in lance.dataset(uri).versions()][0] > 1


def test_migrate_without_v1_manifests_is_a_no_op(uri):
    ds = lance.write_dataset(pa.table({"a": [1]}), uri)
    before = sorted(os.listdir(os.path.join(uri, "_versions")))
    ds.migrate_manifest_paths_v2()
    assert sorted(os.listdir(os.path.join(uri, "_versions"))) == before
