"""Horovod's BroadcastGlobalVariablesHook for TF1's `tf.compat.v1.train.MonitoredTrainingSession`
(and any session run with hooks)."""

import tensorflow as tf

from ronde.tensorflow.functions import broadcast_global_variables


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """Horovod's `hvd.BroadcastGlobalVariablesHook(root_rank, device='')`: once the session
    exists (after variables are initialized or restored from a checkpoint), every global
    variable takes root_rank's value, so that all ranks start alike. `device` places the
    broadcast ops (ronde's collectives run on the host)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        # A new graph (a session made again) needs its own op.
        if self.bcast_op is None or self.bcast_op.graph is not tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
