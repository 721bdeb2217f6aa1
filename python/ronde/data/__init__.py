"""ronde.data: Horovod's data-loader bases (horovod.data), for loaders that the Spark and Ray
estimators and users' own training loops build on."""

from ronde.data.data_loader_base import AsyncDataLoaderMixin, BaseDataLoader  # noqa: F401
