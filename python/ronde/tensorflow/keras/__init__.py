"""Horovod's `horovod.tensorflow.keras` on ronde: ``import ronde.tensorflow.keras as hvd``.

In TensorFlow 2.16+ tf.keras is Keras 3, so this is ronde.keras (on the tensorflow backend)
with ronde.tensorflow's collectives beside it."""

from ronde.keras import *  # noqa: F401,F403
from ronde.keras import (DistributedOptimizer, broadcast_global_variables,  # noqa: F401
                         callbacks, load_model)
from ronde.tensorflow import (allgather, allreduce, alltoall, barrier, broadcast,  # noqa: F401
                              broadcast_variables, grouped_allreduce, join, reducescatter)
