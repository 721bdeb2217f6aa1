"""The estimators' data path, shared by TorchEstimator and KerasEstimator: the DataFrame split
and written as Parquet into the Store, each rank's shard read back as numpy, and the feature
columns of a pandas batch (transform) as one float32 matrix."""

import numbers


def check_validation(validation, who):
    if isinstance(validation, numbers.Number) and not 0 <= validation < 1:
        raise ValueError("%s: validation as a fraction must be in [0, 1)" % who)


def split(df, validation, seed):
    """(train, val or None): `validation` is a fraction held out at random or the name of a
    boolean column marking validation rows."""
    if validation is None or validation == 0:
        return df, None
    if isinstance(validation, str):
        from pyspark.sql import functions as F
        flag = F.col(validation).cast("boolean")
        return df.filter(~flag), df.filter(flag)
    train, val = df.randomSplit([1 - validation, validation], seed=seed)
    return train, val


def check_columns(df, columns, who):
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError("%s: the DataFrame has no column %s (it has %s)"
                         % (who, ", ".join(missing), ", ".join(df.columns)))


def materialize(df, columns, path, num_proc, store, who):
    """Writes `columns` of `df` (Spark ML vectors as arrays) as >= num_proc Parquet files."""
    from pyspark.ml.functions import vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    check_columns(df, columns, who)
    selected = [vector_to_array(F.col(c)).alias(c) if isinstance(df.schema[c].dataType,
                                                                  VectorUDT)
                else F.col(c) for c in columns]
    df.select(*selected).repartition(num_proc).write.mode("overwrite").parquet(
        store.spark_path(path))


def read_shard(store, data_path, rank, size, columns, who):
    """This rank's files of the data set (files rank, rank + size, ...) as one Arrow table.

    fit() writes at least `size` files, so every rank has a shard; a rank given no file (a
    data set written by someone else) gets an empty table of the right columns.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    files = store.list_parquet_files(data_path)
    mine = files[rank::size]
    if not mine:
        if not files:
            raise ValueError("%s: no Parquet files under %s" % (who, data_path))
        return pq.read_table(files[0], columns=columns, filesystem=store.filesystem()).slice(0, 0)
    tables = [pq.read_table(f, columns=columns, filesystem=store.filesystem()) for f in mine]
    return pa.concat_tables(tables)


def to_numpy(table, feature_cols, label_cols):
    """Features concatenated column by column into float32 (rows, width); labels as int64
    when their column is integral (class indices), else float32."""
    import numpy as np
    import pyarrow as pa
    parts = []
    for name in feature_cols:
        column = table.column(name).combine_chunks()
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or \
                pa.types.is_fixed_size_list(column.type):
            width = len(column[0]) if len(column) else 0
            values = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
            parts.append(values.reshape(len(column), width))
        else:
            values = column.to_numpy(zero_copy_only=False).astype(np.float32)
            parts.append(values.reshape(len(column), 1))
    features = np.concatenate(parts, axis=1) if parts else None
    labels = []
    for name in label_cols:
        column = table.column(name).combine_chunks()
        values = column.to_numpy(zero_copy_only=False)
        labels.append(values.astype(np.int64 if pa.types.is_integer(column.type)
                                    else np.float32))
    return features, labels


def features_from_pandas(batch, feature_cols):
    """float32 (rows, width): numbers, arrays and Spark ML vectors, concatenated in order."""
    import numpy as np
    parts = []
    for name in feature_cols:
        values = batch[name].tolist()
        if values and hasattr(values[0], "toArray"):
            values = [v.toArray() for v in values]
        parts.append(np.asarray(values, dtype=np.float32).reshape(len(batch), -1))
    return np.concatenate(parts, axis=1)
