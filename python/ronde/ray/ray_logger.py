"""Messages from a rank's training function to the driver's callbacks while the job runs
(Horovod's horovod.ray.ray_logger): `ray_logger.log({"epoch": 3, "loss": 0.2})` inside a
function that RayExecutor.run/execute (or ElasticRayExecutor.run) runs with callbacks=[...];
the driver calls every callback with every message, in the order each rank sent them.

The queue lives in the actor's process for the length of one run: the executor sets it on
every actor before the run and clears it after, so this module holds the one piece of state
that a Ray actor's process must hold for the function it runs.
"""

import warnings

_queue = None
_warned = False


def configure(queue):
    """Sets (or, with None, clears) where log() sends messages; called by the executor."""
    global _queue
    _queue = queue


def log(info_dict):
    """Sends `info_dict` (anything picklable) to the driver's callbacks."""
    global _warned
    if _queue is not None:
        _queue.put(info_dict)
    elif not _warned:
        warnings.warn("ronde.ray.ray_logger.log called outside a run with callbacks: "
                      "the message goes nowhere")
        _warned = True
