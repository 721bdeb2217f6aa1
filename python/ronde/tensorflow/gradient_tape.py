"""Horovod's DistributedGradientTape and PartialDistributedGradientTape: a `tf.GradientTape`
whose gradient() returns gradients reduced over the ranks."""

import tensorflow as tf

from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.tensorflow import gradient_reduction
from ronde.tensorflow.compression import Compression
from ronde.tensorflow.gradient_reduction import allreduce_gradients  # noqa: F401 (ronde.keras)


class _DistributedTape:
    """Mixed in before the wrapped tape's own class (see DistributedGradientTape)."""

    def _ronde_configure(self, device_dense, device_sparse, compression, sparse_as_dense, op,
                         gradient_predivide_factor, groups, process_set, scale_local_gradients):
        self._ronde_options = dict(
            compression=compression, sparse_as_dense=sparse_as_dense, op=op,
            gradient_predivide_factor=gradient_predivide_factor, groups=groups,
            process_set=process_set, device_dense=device_dense, device_sparse=device_sparse,
            scale_local_gradients=scale_local_gradients)
        self._local_sources = []
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients

    def register_local_source(self, source):
        """Horovod's `register_local_source`: this source's gradient is not reduced; it stays
        this rank's own (divided by the set's size when scale_local_gradients)."""
        if all(source is not s for s in self._local_sources):
            self._local_sources.append(source)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        """The tape's gradients of `target` with respect to `sources` (any nest of them),
        reduced over the process set. `use_generic_names` names the requests by position only
        (`grad_<i>`), so that ranks whose variables are named differently still agree."""
        grads = super().gradient(target, sources, output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        names = (["grad_%d" % i for i in range(len(flat_sources))] if use_generic_names
                 else None)
        reduced = gradient_reduction.reduce_gradients(
            flat_grads, flat_sources, local_variables=self._local_sources, names=names,
            **self._ronde_options)
        return tf.nest.pack_sequence_as(grads, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """Horovod's split: ([(source, gradient)] of the local sources, [...] of the others),
        the gradients as gradient() returns them."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for source, grad in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            is_local = any(source is s for s in self._local_sources)
            (local if is_local else shared).append((source, grad))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False,
                            op=nops.Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set,
                            scale_local_gradients=True):
    """Horovod's `hvd.DistributedGradientTape`: a new tape of the given tape's class (so a
    `tf.GradientTape`) that shares its recording and whose gradient() returns the gradients
    reduced over the ranks of `process_set` (a rank outside it gets its own). Use it around
    the forward pass (`with hvd.DistributedGradientTape(tf.GradientTape()) as tape:`) or wrap
    a tape that has recorded. Options as Horovod's: `op`, `gradient_predivide_factor` (Average
    only), `compression`, `sparse_as_dense`, `groups` (an int or lists of variables; the older
    `num_groups` too), `device_dense`/`device_sparse` (where compression and scaling run;
    ronde's collectives run on the host), `scale_local_gradients`."""
    op = nops.check_op(op)
    groups = gradient_reduction.check_options(op, gradient_predivide_factor, num_groups, groups)
    cls = gradtape.__class__
    distributed = type(cls.__name__, (_DistributedTape, cls),
                       {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
    tape = distributed.__new__(distributed)
    tape.__dict__.update(gradtape.__dict__)  # shares the recording, as Horovod's does
    tape._ronde_configure(device_dense, device_sparse, compression, sparse_as_dense, op,
                          float(gradient_predivide_factor), groups, process_set,
                          scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=nops.Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """Horovod's `hvd.PartialDistributedGradientTape`: DistributedGradientTape whose
    `local_layers` (Keras layers, one or a list) keep their own gradients."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
