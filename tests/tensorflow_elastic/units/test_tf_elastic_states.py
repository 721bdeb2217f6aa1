"""The elastic states of ronde.tensorflow.elastic and ronde.keras.elastic against values
each rank computes for itself: commit/restore (a rollback returns exactly the committed
values), sync (every rank ends with the values of the rank that holds the state, lowest
first), ObjectState with Horovod's (bcast_object, get_rank), reset callbacks, the Keras
callbacks' epoch/batch/commit bookkeeping under model.fit, a TF1 graph-mode
TensorFlowState(variables, session), and how a runtime failure inside a tf.function is told
from a bug. Run under `ronde run -np 2` (or more)."""

import numpy as np
import pytest
import tensorflow as tf

import ronde.tensorflow as hvd
from ronde import _core
from ronde.common import elastic as common_elastic
from ronde.tensorflow import functions


def small_model(seed):
    import keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    rng = np.random.RandomState(seed)
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32)
                       for w in model.get_weights()])
    return model


def values(variables):
    return [np.array(v.numpy(), copy=True) for v in variables]


def assert_same(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        np.testing.assert_array_equal(a, e)


def test_elastic_is_lazy_and_reexports_the_broadcast_helpers():
    import sys
    assert hvd.elastic is sys.modules["ronde.tensorflow.elastic"]
    assert hvd.elastic.broadcast_object is functions.broadcast_object
    assert hvd.elastic.broadcast_object_fn is functions.broadcast_object_fn
    fn = hvd.elastic.broadcast_object_fn(root_rank=0)
    assert fn({"rank": hvd.rank()}) == {"rank": 0}
    from ronde.keras.elastic import TensorFlowKerasState
    assert hvd.elastic.TensorFlowKerasState is TensorFlowKerasState


def test_tensorflow_keras_state_commit_restore_sync():
    import keras
    model = small_model(seed=10 + hvd.rank())  # different on every rank
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=3, batch=1)
    # The optimizer's slots exist at once (a joining worker must broadcast the same list).
    assert len(optimizer.variables) > 1

    # sync: nobody holds state yet, so rank 0's everything.
    state.sync()
    rank0 = small_model(seed=10).get_weights()
    assert_same(model.get_weights(), rank0)
    assert (state.epoch, state.batch) == (3, 1)

    # A step moves weights and momentum; commit; another step; restore rolls back to the
    # commit exactly, attributes included.
    x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    step()
    state.epoch, state.batch = 4, 0
    state.commit()
    committed_model, committed_opt = values(model.variables), values(optimizer.variables)
    step()
    state.epoch, state.batch = 5, 7
    assert not np.array_equal(values(model.variables)[0], committed_model[0])
    state.restore()
    assert_same(values(model.variables), committed_model)
    assert_same(values(optimizer.variables), committed_opt)
    assert (state.epoch, state.batch) == (4, 0)


def test_sync_takes_the_lowest_rank_that_holds_state():
    # A survivor is rank 1, rank 0 is a new worker: everyone takes rank 1's state.
    model = small_model(seed=20 + hvd.rank())
    import keras
    optimizer = keras.optimizers.SGD(0.1)
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, step=100 + hvd.rank())
    state._has_state = hvd.rank() == 1  # what a past sync leaves on a survivor
    state.sync()
    assert_same(model.get_weights(), small_model(seed=21).get_weights())
    assert state.step == 101
    # The synced values are the new commit.
    model.set_weights([w + 1 for w in model.get_weights()])
    state.restore()
    assert_same(model.get_weights(), small_model(seed=21).get_weights())


def test_tensorflow_state_eager_variables():
    v = tf.Variable(np.full((2, 3), hvd.rank(), np.float32))
    s = tf.Variable(np.int64(7 + hvd.rank()))  # a scalar (a step count)
    state = hvd.elastic.TensorFlowState([v, s], epoch=hvd.rank())
    state.sync()
    np.testing.assert_array_equal(v.numpy(), np.zeros((2, 3), np.float32))
    assert int(s.numpy()) == 7 and state.epoch == 0
    v.assign_add(tf.ones((2, 3)))
    state.epoch = 2
    state.commit()
    v.assign_add(tf.ones((2, 3)))
    s.assign(50)
    state.epoch = 9
    state.restore()
    np.testing.assert_array_equal(v.numpy(), np.ones((2, 3), np.float32))
    assert int(s.numpy()) == 7 and state.epoch == 2


def test_object_state_with_horovods_arguments():
    state = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank,
                                    epoch=hvd.rank(), names=["r%d" % hvd.rank()])
    state.sync()
    assert state.epoch == 0 and state.names == ["r0"]
    state.epoch = 5
    state.commit()
    state.epoch = 6
    state.names = []
    state.restore()
    assert state.epoch == 5 and state.names == ["r0"]


def test_reset_callbacks_run_in_order_on_reset():
    state = hvd.elastic.ObjectState(epoch=0)
    calls = []
    state.register_reset_callbacks([lambda: calls.append("a")])
    state.register_reset_callbacks([lambda: calls.append("b"), lambda: calls.append("c")])
    state.on_reset()
    state.on_reset()
    assert calls == ["a", "b", "c", "a", "b", "c"]


def test_runtime_failure_in_a_tf_function_is_a_reset_error():
    # What TensorFlow raises for a failed ronde kernel inside a tf.function: its own class,
    # ronde's code and message in the text.
    raised = tf.errors.AbortedError(None, None,
                                    "{{function_node __inference_step_12}} ronde PeerLost: "
                                    "rank 1 (127.0.0.2) closed its connection [Op:RondeAllreduce]")
    found = common_elastic.reset_error_in(raised, common_elastic.tensorflow_op_error)
    assert isinstance(found, _core.PeerLostError)
    assert isinstance(found, tf.errors.AbortedError)
    assert "closed its connection" in str(found) and "[Op:" not in str(found)

    # A mismatch (a bug in the script) and a plain TensorFlow error are not recovered from.
    mismatch = tf.errors.FailedPreconditionError(None, None, "ronde Mismatch: shapes differ")
    assert common_elastic.reset_error_in(mismatch, common_elastic.tensorflow_op_error) is None
    plain = tf.errors.AbortedError(None, None, "something else")
    assert common_elastic.reset_error_in(plain, common_elastic.tensorflow_op_error) is None

    # raising_reset_errors: the wrapped error is raised as ronde's, chained to the original;
    # anything else passes through unchanged.
    def fails(error):
        raise error

    wrapped = common_elastic.raising_reset_errors(fails, common_elastic.tensorflow_op_error)
    with pytest.raises(_core.PeerLostError) as info:
        wrapped(raised)
    assert info.value.__cause__ is raised
    with pytest.raises(tf.errors.FailedPreconditionError):
        wrapped(mismatch)
    with pytest.raises(KeyError):
        wrapped(KeyError("x"))
    # Carried as a cause (Keras re-raising from its own handler) counts too.
    try:
        try:
            raise raised
        except tf.errors.AbortedError as inner:
            raise RuntimeError("train step failed") from inner
    except RuntimeError as outer:
        assert isinstance(common_elastic.reset_error_in(outer, common_elastic.tensorflow_op_error),
                          _core.PeerLostError)


def test_keras_callbacks_keep_epoch_batch_and_commit_as_horovod():
    import keras
    import ronde.keras as khvd
    model = small_model(seed=30)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")

    commits = []

    class Counted(khvd.elastic.KerasState):
        def save(self):
            commits.append((self.epoch, self.batch))
            super().save()

    state = Counted(model, epoch=0, batch=0)
    callbacks = [khvd.elastic.UpdateEpochStateCallback(state),
                 khvd.elastic.UpdateBatchStateCallback(state),
                 khvd.elastic.CommitStateCallback(state, batches_per_commit=3)]
    commits.clear()
    x = np.zeros((8, 3), np.float32)
    y = np.zeros((8, 2), np.float32)
    # 4 batches a epoch, 2 epochs: a commit after every 3rd batch (counted across epochs, as
    # Horovod does) and at each epoch's end, after the epoch and batch were updated.
    model.fit(x, y, batch_size=2, epochs=2, shuffle=False, callbacks=callbacks, verbose=0)
    assert commits == [(0, 2), (1, 0), (1, 1), (2, 0)]
    assert (state.epoch, state.batch) == (2, 0)
    # Resumed at epoch 2 (Horovod's recipe: epochs = total - state.epoch): epochs continue.
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, callbacks=callbacks, verbose=0)
    assert state.epoch == 3
    with pytest.raises(ValueError):
        khvd.elastic.CommitStateCallback(state, batches_per_commit=0)


def test_tensorflow_state_in_a_tf1_graph_with_a_session():
    graph = tf.Graph()
    with graph.as_default():
        v = tf.compat.v1.get_variable("v", initializer=np.full(3, hvd.rank() + 1.0,
                                                               np.float32))
        step = tf.compat.v1.assign_add(v, tf.ones(3))
        session = tf.compat.v1.Session(graph=graph)
        session.run(tf.compat.v1.global_variables_initializer())
        state = hvd.elastic.TensorFlowState(session=session, batch=hvd.rank())
        assert state.variables == [v]
        ops_before = len(graph.get_operations())
        state.sync()
        np.testing.assert_array_equal(session.run(v), np.full(3, 1.0, np.float32))
        assert state.batch == 0
        session.run(step)
        state.commit()
        session.run(step)
        state.restore()
        np.testing.assert_array_equal(session.run(v), np.full(3, 2.0, np.float32))
        # Nothing was added to the graph after the state was made.
        assert len(graph.get_operations()) == ops_before
        session.close()


def test_tf_keras_state_and_callbacks_on_whatever_tf_keras_is():
    # ronde.tensorflow.keras.elastic on tf.keras: Keras 3, or tf_keras (Keras 2) when the
    # session runs under TF_USE_LEGACY_KERAS=1 (scripts/test_tf.sh runs both).
    import ronde.tensorflow.keras as thvd
    keras = tf.keras
    assert issubclass(thvd.elastic.CommitStateCallback, keras.callbacks.Callback)
    rng = np.random.RandomState(40 + hvd.rank())
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32)
                       for w in model.get_weights()])
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.5), loss="mse")
    state = thvd.elastic.KerasState(model, epoch=0, batch=0)
    state.sync()
    rank0 = np.random.RandomState(40)
    assert_same(model.get_weights(), [rank0.standard_normal(w.shape).astype(np.float32)
                                      for w in model.get_weights()])
    callbacks = [thvd.elastic.UpdateEpochStateCallback(state),
                 thvd.elastic.UpdateBatchStateCallback(state),
                 thvd.elastic.CommitStateCallback(state, batches_per_commit=2)]
    x = np.ones((6, 3), np.float32)
    model.fit(x, np.zeros((6, 2), np.float32), batch_size=2, epochs=2, shuffle=False,
              callbacks=callbacks, verbose=0)
    assert (state.epoch, state.batch) == (2, 0)
    committed = model.get_weights()
    model.set_weights([w * 0 for w in committed])
    state.epoch = 7
    state.restore()
    assert_same(model.get_weights(), committed)
    assert state.epoch == 2
