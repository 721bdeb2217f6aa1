"""Horovod's small TensorFlow helpers that scripts import from `horovod.tensorflow`."""

import warnings

import tensorflow as tf

from ronde.common import numpy_ops as nops


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule for the deprecated `average` argument: `op` wins and both together are a
    ValueError; average=True is Average, False is Sum; neither is Average."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of "
                             "them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in "
                      "v1.0", DeprecationWarning)
        return nops.Average if average else nops.Sum
    return nops.Average


def check_num_rank_power_of_2(num_rank):
    """Whether `num_rank` is a power of two (Adasum's requirement)."""
    return num_rank != 0 and (num_rank & (num_rank - 1)) == 0


def split_list(items, n):
    """`items` in `n` chunks of nearly equal size, in order (the first ones one longer)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def vars_to_refs(variables):
    """Variables (nested lists allowed) as hashable references: tuples of `var.ref()`."""
    if isinstance(variables, list):
        return tuple(vars_to_refs(v) for v in variables)
    return variables.ref()


def refs_to_vars(refs):
    """The inverse of vars_to_refs."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()


def gpu_available(ext_base_name="tensorflow", verbose=False):
    """Whether TensorFlow sees a GPU (Horovod asks its extension in a subprocess; ronde asks
    the running TensorFlow)."""
    del ext_base_name
    available = bool(tf.config.list_physical_devices("GPU"))
    if verbose:
        print("ronde: TensorFlow %s a GPU" % ("sees" if available else "does not see"))
    return available


def check_extension(ext_name, ext_env_var, pkg_path, *args):
    """Horovod's import-time check that an extension was built. ronde's TensorFlow support
    always imports (the numpy bridge needs nothing compiled); where RONDE_TENSORFLOW_OPS=compiled
    asks for the compiled kernels and they cannot load, this raises ImportError saying why."""
    del ext_name, ext_env_var, pkg_path, args
    from ronde.tensorflow import compiled_ops
    compiled_ops.library()
