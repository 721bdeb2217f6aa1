"""One Spark 'cluster' for the module: local-cluster[2,1,1024] starts a master, two worker
JVMs with one core each and separate Python workers, as a real cluster has."""

import os
import sys

import pytest

# Ranks of one host share its two cores: no BLAS thread pools fighting over them.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .appName("ronde-engines-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "768m")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.executorEnv.OMP_NUM_THREADS", "1")
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
               # Barrier mode checks for slots before starting; keep that check's retry short
               # so the too-few-slots test reaches ronde's start timeout, not Spark's.
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "20")
               .getOrCreate())
    # Both executors up before any test counts slots.
    sc = session.sparkContext
    import time
    deadline = time.monotonic() + 120
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    yield session
    session.stop()
