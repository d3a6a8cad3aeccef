"""The installed PySpark, pandas and pyarrow work together on the UDF paths a job may use: an
Arrow-optimised Python UDF (``useArrow=True`` and ``spark.sql.execution.pythonUDF.arrow.enabled``),
``mapInArrow`` (the write job's path) and ``mapInPandas``, under real ``spark-submit`` ``local[2]``.

Issue 15 reported Arrow-optimised Python UDFs hanging with pandas 3 and PySpark 4.2; each step
here has a watchdog, so a hang fails the test instead of blocking it.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess

SCRIPT = '''
import os, threading
import pandas, pyarrow, pyspark
from pyspark.sql import SparkSession, functions as F
from pyspark.sql.functions import udf

def watchdog(name, seconds=120):
    done = threading.Event()
    def bark():
        if not done.wait(seconds):
            print(f"HANG {name}", flush=True)
            os._exit(3)
    threading.Thread(target=bark, daemon=True).start()
    return done

print("versions", pandas.__version__, pyarrow.__version__, pyspark.__version__, flush=True)
spark = (SparkSession.builder.config("spark.sql.execution.pythonUDF.arrow.enabled", "true").getOrCreate())
df = spark.range(0, 100_000, 1, 2).select("id", F.concat(F.lit("s"), F.col("id").cast("string")).alias("s"))

@udf("long", useArrow=True)
def plus_one(x):
    return x + 1

@udf("string")  # Arrow-optimised through the configuration
def reverse(s):
    return s[::-1]

def same(batches):
    yield from batches

steps = {
    "arrow_udf_long": lambda: df.select(plus_one("id").alias("y")).agg(F.sum("y")).first()[0],
    "arrow_udf_string": lambda: df.select(reverse("s").alias("r")).agg(F.max("r")).first()[0],
    "map_in_arrow": lambda: df.mapInArrow(same, df.schema).count(),
    "map_in_pandas": lambda: df.mapInPandas(same, df.schema).count(),
}
for name, step in steps.items():
    done = watchdog(name)
    print(name, step(), flush=True)
    done.set()
spark.stop()
'''


def test_arrow_python_udfs_do_not_hang(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "udfs.py"
    script.write_text(SCRIPT)
    command = [shutil.which("spark-submit") or "spark-submit", "--master", "local[2]",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN", str(script)]
    process = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    results = dict(line.split(" ", 1) for line in process.stdout.splitlines() if " " in line)
    assert results["arrow_udf_long"] == str(sum(range(1, 100_001)))
    assert results["arrow_udf_string"] == max(f"s{i}"[::-1] for i in range(100_000))
    assert results["map_in_arrow"] == results["map_in_pandas"] == "100000"
