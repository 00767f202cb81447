"""The local SparkSession the Spark benchmark scripts share: local[2], UI off, this interpreter
on the executors, and the repository importable there (functions defined in the scripts and
tests are pickled by reference).

Start it before any gRPC channel of the process (leaseq.spark_ext's start-up order)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

REPOSITORY = str(Path(__file__).resolve().parents[1])


def local_spark(app_name: str, **conf: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (REPOSITORY, os.environ.get("PYTHONPATH")) if p
    )
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
        .config("spark.driver.memory", "2g")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
