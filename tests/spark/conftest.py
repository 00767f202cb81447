"""A real local SparkSession (local[2], UI off) and a real `leaseq serve` child process, both
session-scoped: Spark's Python workers are separate processes, so the server must be reachable
over loopback (an in-process test server would do too, but a child process keeps the test
process free of gRPC server threads while Spark forks its workers)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

from tests.support.process import ServerProcess, free_port  # noqa: E402


@pytest.fixture(scope="session")
def spark():
    # Executors must run this interpreter (with leaseq installed), and Spark starts before any
    # gRPC channel of this process (see leaseq.spark_ext's docstring on start-up order).
    saved = {
        k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
    }
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Functions defined in test modules are pickled by reference: workers must import `tests`.
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    from pyspark.sql import SparkSession

    # local[2,2]: two threads (local[2]) and two attempts per task. Local mode ignores
    # spark.task.maxFailures and gives a task one attempt; the retry tests need a second.

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("leaseq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")
        .config("spark.driver.memory", "1g")
        # A loaded machine (CI beside other work) starts a Python worker in more than the
        # default 15 s its connection back to the JVM may take.
        .config("spark.python.authenticate.socketTimeout", "120s")
        # tests/spark/test_connect.py serves Spark Connect from this session on this port.
        .config("spark.connect.grpc.binding.port", str(free_port()))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def server(spark, tmp_path_factory):
    # Started after Spark: see above. The memory store keeps the 200,000-row test quick; the
    # server is the real `leaseq serve` process all the same.
    directory = tmp_path_factory.mktemp("leaseq-spark")
    process = ServerProcess("memory://", free_port(), directory / "server.log")
    process.start()
    yield process
    if process.process and process.process.poll() is None:
        process.terminate()


@pytest.fixture
def client(server):
    from leaseq.client import QueueClient

    with QueueClient(server.target) as c:
        yield c


@pytest.fixture
def queue(client, request):
    name = "spark-" + request.node.name.replace("[", "-").replace("]", "")[:60]
    client.create_queue(name, visibility_timeout=60)
    return name
