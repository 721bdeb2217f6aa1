"""Horovod's DistributedGradientTape: tape.gradient() returns gradients averaged over ranks."""

import tensorflow as tf

from ronde.common import numpy_ops as nops
from ronde.common.process_sets import global_process_set
from ronde.tensorflow.compression import Compression


def _scales(op, gradient_predivide_factor):
    if gradient_predivide_factor != 1.0 and op != nops.Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    # Average is split around the sum: 1/f before, f/size after (the runtime applies 1/size).
    return 1.0 / gradient_predivide_factor, gradient_predivide_factor


def allreduce_gradients(grads, names, compression=Compression.none, sparse_as_dense=False,
                        op=nops.Average, gradient_predivide_factor=1.0,
                        process_set=global_process_set):
    """Reduces a list of gradients (None stays None). Every dense gradient is submitted before
    any is waited for: in a tf.function the submitting ops run as the backward pass produces
    each gradient, and the runtime fuses what is ready together. The compiled kernels are
    asynchronous, so there one op per gradient does both; the numpy path splits each into a
    submitting and a waiting op."""
    from ronde.tensorflow.mpi_ops import _allreduce_raw, _allreduce_start, _finish, _ops, allreduce
    op = nops.check_op(op)
    prescale, postscale = _scales(op, gradient_predivide_factor)
    if not process_set.included():
        return list(grads)
    results = list(grads)
    started = []
    for i, (grad, name) in enumerate(zip(grads, names)):
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            if sparse_as_dense:
                grad = tf.convert_to_tensor(grad)
            else:
                results[i] = allreduce(grad, op=op, name=name, process_set=process_set)
                continue
        compressed, ctx = compression.compress(grad)
        if _ops is not None:
            results[i] = compression.decompress(
                _allreduce_raw(compressed, name, op, prescale, postscale, process_set), ctx)
            continue
        handle = _allreduce_start(compressed, name, op, prescale, postscale, process_set)
        started.append((i, handle, compressed, ctx))
    for i, handle, compressed, ctx in started:
        reduced = _finish(handle, compressed.dtype, compressed.shape)
        results[i] = compression.decompress(reduced, ctx)
    return results


def _variable_name(source, index):
    name = getattr(source, "path", None) or getattr(source, "name", None)
    return "grad.%d.%s" % (index, name) if name else "grad.%d" % index


class DistributedGradientTape:
    """Horovod's `hvd.DistributedGradientTape(gradtape, device_dense='', device_sparse='',
    compression=Compression.none, sparse_as_dense=False, op=Average,
    gradient_predivide_factor=1.0, num_groups=0, groups=None, process_set=global_process_set)`.

    Wraps a `tf.GradientTape`; `gradient()` returns the gradients reduced over the ranks of
    `process_set` (a rank outside it gets its own). Other tape methods pass through.
    `num_groups`/`groups` are accepted: ronde's runtime fuses by readiness anyway.
    """

    def __init__(self, gradtape, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, op=nops.Average,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, **unused):
        self._tape = gradtape
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = nops.check_op(op)
        self._predivide = float(gradient_predivide_factor)
        _scales(self._op, self._predivide)
        self._process_set = process_set

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    def __getattr__(self, item):
        return getattr(self._tape, item)

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        names = [_variable_name(s, i) for i, s in enumerate(flat_sources)]
        reduced = allreduce_gradients(flat_grads, names, self._compression,
                                      self._sparse_as_dense, self._op, self._predivide,
                                      self._process_set)
        return tf.nest.pack_sequence_as(grads, reduced)
