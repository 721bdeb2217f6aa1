"""Process sets: collectives over a subset of the ranks (Horovod's ProcessSet API).

One registry for every frontend of the process (ronde.common.process_sets): the ids are the
core's, and a job has one runtime whichever frameworks submit to it.
"""

from ronde.common.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                       forget_registrations as _forget_registrations,
                                       global_process_set, remove_process_set)
