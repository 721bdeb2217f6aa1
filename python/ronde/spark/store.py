"""Where the estimators keep a run's data and model: a Store (Horovod's horovod.spark.common
.store). Store.create(prefix) picks the kind by the path's scheme; LocalStore serves local
and file:// paths (on a cluster: a directory every executor mounts, e.g. NFS). A store for
HDFS or S3 subclasses Store with the same methods over that filesystem (pyarrow.fs has both).
"""

import os
import shutil
import uuid


class Store:
    """A run's layout under a prefix: <prefix>/runs/<run_id>/{train,val}_data, model."""

    @staticmethod
    def create(prefix_path):
        scheme = prefix_path.split("://", 1)[0] if "://" in prefix_path else "file"
        if scheme == "file":
            return LocalStore(prefix_path)
        raise ValueError("Store.create(%r): no store for the %s:// scheme in ronde yet; local "
                         "and file:// paths are supported (subclass ronde.spark.store.Store "
                         "for others)" % (prefix_path, scheme))

    # The paths as Spark and pyarrow address them.
    def run_path(self, run_id):
        raise NotImplementedError

    def train_data_path(self, run_id):
        return self.run_path(run_id) + "/train_data"

    def val_data_path(self, run_id):
        return self.run_path(run_id) + "/val_data"

    def model_path(self, run_id):
        return self.run_path(run_id) + "/model.pt"

    def keras_model_path(self, run_id):
        """KerasEstimator's model: a .keras file keras.models.load_model reads."""
        return self.run_path(run_id) + "/model.keras"

    def keras_metadata_path(self, run_id):
        """KerasEstimator's columns, backend and history (JSON) beside the model."""
        return self.run_path(run_id) + "/keras_model.json"

    def spark_path(self, path):
        """The URL under which Spark's DataFrameWriter writes `path`."""
        raise NotImplementedError

    # Filesystem operations the estimators need.
    def filesystem(self):
        """A pyarrow.fs.FileSystem and the path prefix to use with it for this store."""
        raise NotImplementedError

    def exists(self, path):
        raise NotImplementedError

    def read_bytes(self, path):
        raise NotImplementedError

    def write_bytes(self, path, data):
        raise NotImplementedError

    def remove(self, path):
        raise NotImplementedError

    def list_parquet_files(self, path):
        raise NotImplementedError

    @staticmethod
    def new_run_id():
        return "run-" + uuid.uuid4().hex[:12]


class LocalStore(Store):
    """A store on a local (or every-node-mounted) directory; checks at once that it is writable."""

    def __init__(self, prefix_path):
        path = prefix_path[len("file://"):] if prefix_path.startswith("file://") else prefix_path
        self.prefix_path = os.path.abspath(path)
        try:
            os.makedirs(self.prefix_path, exist_ok=True)
            probe = os.path.join(self.prefix_path, ".ronde-write-check-" + uuid.uuid4().hex)
            with open(probe, "wb") as f:
                f.write(b"ok")
            os.remove(probe)
        except OSError as error:
            raise ValueError("LocalStore: the store path %s is not writable: %s"
                             % (self.prefix_path, error)) from error

    def run_path(self, run_id):
        return os.path.join(self.prefix_path, "runs", run_id)

    def spark_path(self, path):
        """The URL Spark writes to (file://, so executors do not resolve it against HDFS)."""
        return "file://" + path

    def filesystem(self):
        import pyarrow.fs
        return pyarrow.fs.LocalFileSystem()

    def exists(self, path):
        return os.path.exists(path)

    def read_bytes(self, path):
        with open(path, "rb") as f:
            return f.read()

    def write_bytes(self, path, data):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = path + ".tmp-" + uuid.uuid4().hex
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)  # readers never see half a model

    def remove(self, path):
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)

    def list_parquet_files(self, path):
        if not os.path.isdir(path):
            return []
        return sorted(os.path.join(path, name) for name in os.listdir(path)
                      if name.endswith(".parquet"))
