#!/usr/bin/env python3
"""The TensorFlow path against the torch path, and Keras training against tf.distribute.

  ronde run -np 2 .venv-tf/bin/python bench/tf_frontend_bench.py allreduce
      allreduce 4 KiB .. 64 MiB (float32): ronde.torch, ronde.tensorflow eager, and
      ronde.tensorflow inside a tf.function, interleaved in one run; median per call.
  .venv-tf/bin/python bench/tf_frontend_bench.py overhead
      per-op cost on one rank (cycle time 0.01 ms): torch, the numpy bridge, TF eager and
      tf.function, and an empty tf.numpy_function for TF's own share.
  .venv-tf/bin/python bench/tf_frontend_bench.py gradients [ROUNDS]
      a tf.function step that reduces 100 gradients of 16 KiB through DistributedGradientTape's
      allreduce_gradients, 2 ranks, on the compiled kernels and on the tf.numpy_function path
      (RONDE_TENSORFLOW_OPS), the two interleaved round by round; median time per step.
  .venv-tf/bin/python bench/tf_frontend_bench.py keras [ROUNDS] [mlp|cnn] [STEPS]
      Keras training throughput (samples/s) on 2 ranks of the MLP or a small CNN: model.fit
      under Keras 2 (tf_keras) with ronde.tensorflow.keras's DistributedOptimizer against
      model.fit under tf.distribute.MultiWorkerMirroredStrategy (2 worker processes, ring
      collectives over gRPC); Keras 3 model.fit with ronde.keras; a tf.function loop with
      DistributedGradientTape against the same loop under MWMS (Keras 3's model.fit cannot
      feed MWMS); the numpy path (MLP only); and one process without communication, bound
      to one core, for each (the scaling efficiency: 2 ranks on 2 cores against 2 x one core).

  .venv-tf/bin/python bench/tf_frontend_bench.py graph [ROUNDS]
      the same MLP (raw variables, SGD) trained on 2 ranks in a TF1 graph (tf.compat.v1
      Session, hvd.DistributedOptimizer over a v1 optimizer) and in a TF2 tf.function
      (DistributedGradientTape), interleaved round by round; median ms per step of each and
      their ratio.

The `overhead` and `allreduce` modes measure whichever path RONDE_TENSORFLOW_OPS selects.
"""

import json
import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def bench_allreduce():
    import numpy as np
    import tensorflow as tf
    import torch

    import ronde.tensorflow as hvd_tf
    import ronde.torch as hvd_torch
    hvd_tf.init()
    hvd_torch.init()
    rows = []
    for size in SIZES:
        n = size // 4
        reps = max(5, min(200, (64 << 20) // size // 4))
        t_torch = torch.ones(n)
        t_tf = tf.ones([n])
        fn = tf.function(lambda x: hvd_tf.allreduce(x, name="bench_fn.%d" % size))
        fn(t_tf)  # trace
        times = {"torch": [], "tf_eager": [], "tf_function": []}
        for _ in range(reps):  # interleaved, so load changes hit all three alike
            began = time.perf_counter()
            hvd_torch.allreduce(t_torch, name="bench_torch.%d" % size)
            times["torch"].append(time.perf_counter() - began)
            began = time.perf_counter()
            hvd_tf.allreduce(t_tf, name="bench_eager.%d" % size).numpy()
            times["tf_eager"].append(time.perf_counter() - began)
            began = time.perf_counter()
            fn(t_tf).numpy()
            times["tf_function"].append(time.perf_counter() - began)
        rows.append((size, {k: median(v) * 1e6 for k, v in times.items()}))
    if hvd_tf.rank() == 0:
        print("| size | ronde.torch (us) | ronde.tensorflow eager (us) | in tf.function (us) |")
        print("|---|---|---|---|")
        for size, t in rows:
            print("| %s | %.0f | %.0f | %.0f |" % (
                "%d KiB" % (size >> 10) if size < (1 << 20) else "%d MiB" % (size >> 20),
                t["torch"], t["tf_eager"], t["tf_function"]))
    hvd_tf.shutdown()


def bench_overhead():
    """Per-op cost on one rank with a 0.01 ms cycle, 4 KiB float32 (median of 5 x 500)."""
    import numpy as np
    import tensorflow as tf
    import torch

    import ronde.tensorflow as hvd_tf
    import ronde.torch as hvd_torch
    from ronde import _core
    from ronde.common import numpy_ops
    hvd_tf.init()
    hvd_torch.init()
    _core.set_cycle_time(0.01)
    x, t, a = tf.ones([1024]), torch.ones(1024), np.ones(1024, np.float32)
    in_function = tf.function(lambda x: hvd_tf.allreduce(x, name="overhead_fn"))
    bare = tf.function(lambda x: tf.numpy_function(lambda v: v, [x], tf.float32))
    in_function(x)
    bare(x)
    calls = [("ronde.torch allreduce", lambda: hvd_torch.allreduce(t, name="o_torch")),
             ("numpy bridge (ronde.common.numpy_ops)",
              lambda: numpy_ops.allreduce(a, "allreduce.o_numpy").wait()),
             ("ronde.tensorflow allreduce, eager", lambda: hvd_tf.allreduce(x, name="o_eager")),
             ("ronde.tensorflow allreduce, in a tf.function", lambda: in_function(x)),
             ("an empty tf.numpy_function in a tf.function", lambda: bare(x))]
    samples = {label: [] for label, _ in calls}
    for _ in range(5):
        for label, call in calls:
            for _ in range(50):
                call()
            began = time.perf_counter()
            for _ in range(500):
                call()
            samples[label].append((time.perf_counter() - began) / 500 * 1e6)
    print("| call | us per call |")
    print("|---|---|")
    for label, _ in calls:
        print("| %s | %.0f |" % (label, median(samples[label])))
    hvd_tf.shutdown()


# --- many small gradients in one step ------------------------------------------------------

GRADIENTS = 100
GRADIENT_FLOATS = 4096  # 16 KiB


def gradients_worker():
    """Prints a JSON line: the median seconds of a step reducing GRADIENTS tensors."""
    import tensorflow as tf

    import ronde.tensorflow as hvd
    from ronde.tensorflow import compiled_ops
    from ronde.tensorflow.gradient_tape import allreduce_gradients
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()
    grads = [tf.fill([GRADIENT_FLOATS], float(i)) for i in range(GRADIENTS)]
    names = ["grad.%d" % i for i in range(GRADIENTS)]
    step = tf.function(lambda gs: allreduce_gradients(gs, names))
    for _ in range(10):
        step(grads)
    times = []
    for _ in range(7):
        began = time.perf_counter()
        for _ in range(20):
            out = step(grads)
        out[-1].numpy()
        times.append((time.perf_counter() - began) / 20)
    seconds = max(hvd.allgather_object(median(times)))
    if hvd.rank() == 0:
        print(json.dumps({"compiled": compiled_ops.library() is not None, "seconds": seconds}))
    hvd.shutdown()


def bench_gradients(rounds):
    py = sys.executable
    here = os.path.abspath(__file__)
    ronde = os.path.join(os.path.dirname(py), "ronde")
    results = {"compiled": [], "python": []}
    for _ in range(rounds):
        for ops in results:
            env = dict(os.environ, RONDE_TENSORFLOW_OPS=ops)
            out = subprocess.run([ronde, "run", "-np", "2", py, here, "gradients_worker"],
                                 env=env, capture_output=True, text=True, timeout=600)
            line = [l for l in out.stdout.splitlines() if '"seconds"' in l]
            if not line:
                raise RuntimeError("no result:\n%s\n%s" % (out.stdout, out.stderr))
            result = json.loads(line[0][line[0].index("{"):])
            assert result["compiled"] == (ops == "compiled"), result
            results[ops].append(result["seconds"])
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    compiled, numpy_path = median(results["compiled"]), median(results["python"])
    ratio = median([p / c for c, p in zip(results["compiled"], results["python"])])
    print("%d gradients of %d KiB in one tf.function step, 2 ranks, %d rounds (load %s)"
          % (GRADIENTS, GRADIENT_FLOATS * 4 >> 10, rounds, load))
    print("| path | ms per step |")
    print("|---|---:|")
    print("| compiled kernels | %.2f |" % (compiled * 1e3))
    print("| tf.numpy_function | %.2f |" % (numpy_path * 1e3))
    print("| numpy / compiled (median of rounds) | %.2fx |" % ratio)


# --- Keras training ---------------------------------------------------------------------------

BATCH = 64
# The keras mode's model and length, set by bench_keras for its workers (the graph mode keeps
# the MLP and 60 steps).
MODEL = os.environ.get("RONDE_BENCH_MODEL", "mlp")
STEPS = int(os.environ.get("RONDE_BENCH_STEPS", "60"))


def _mlp(keras):
    if MODEL == "cnn":
        # A small CNN on 28x28 grey images: two conv + pool stages and a dense head (about
        # 0.1 M parameters; most of a step is the convolutions, not the gradient exchange).
        return keras.Sequential([
            keras.Input((28, 28, 1)),
            keras.layers.Conv2D(16, 3, activation="relu"), keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"), keras.layers.MaxPooling2D(),
            keras.layers.Flatten(), keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10)])
    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"),
                             keras.layers.Dense(512, activation="relu"),
                             keras.layers.Dense(10)])


def _data(np):
    rng = np.random.RandomState(0)
    shape = (BATCH * STEPS, 28, 28, 1) if MODEL == "cnn" else (BATCH * STEPS, 256)
    return (rng.rand(*shape).astype("float32"),
            rng.randint(0, 10, BATCH * STEPS).astype("int64"))


def _fit_throughput(model, x, y, keras, batch, dataset=None):
    """Rows trained per second from the first step's start to the last one's end. model.fit's
    setup and teardown stay out: its return after on_train_end took 0.1 to 2.4 s at random
    (TensorFlow releasing the epoch's iterator and function state, with or without ronde, one
    rank or two), which made the 300-step rates bimodal."""
    marks = {}

    class Clock(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            marks["begin"] = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            marks["end"] = time.perf_counter()

    if dataset is not None:  # tf.distribute takes a tf.data pipeline
        rows = int(dataset.cardinality())
        model.fit(dataset.take(batch * 5).batch(batch), epochs=1, verbose=0)  # warm up
        model.fit(dataset.batch(batch), epochs=1, verbose=0, callbacks=[Clock()])
        return rows / (marks["end"] - marks["begin"])
    model.fit(x[:batch * 5], y[:batch * 5], batch_size=batch, epochs=1, verbose=0)  # warm up
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[Clock()])
    return len(x) / (marks["end"] - marks["begin"])


def worker(kind):
    """One training process; prints a JSON line with samples/s (of this process's data)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy as np
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    if kind == "mwms" or kind == "mwms_fit":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if kind.endswith("_fit"):
        _keras2_fit(kind, tf, np, strategy if kind == "mwms_fit" else None)
        return
    import keras
    x, y = _data(np)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if kind == "ronde":
        import ronde.keras as hvd
        hvd.init()
        model = _mlp(keras)
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss=loss)
        rate = _fit_throughput(model, x, y, keras, BATCH)
        rates = hvd.allgather_object(rate)
        if hvd.rank() == 0:
            print(json.dumps({"kind": kind, "samples_per_s": sum(rates)}))
        hvd.shutdown()
        return
    if kind == "mwms":
        # Keras 3.15's model.fit cannot feed MultiWorkerMirroredStrategy (it fails converting
        # a PerReplica batch), so both sides of this comparison run the same custom loop.
        rate = _custom_loop_throughput(keras, tf, x, y, strategy=strategy)
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
            print(json.dumps({"kind": kind, "samples_per_s": rate}))
        return
    if kind == "ronde_loop":
        import ronde.tensorflow as hvd
        hvd.init()
        rates = hvd.allgather_object(_custom_loop_throughput(keras, tf, x, y, hvd=hvd))
        if hvd.rank() == 0:
            print(json.dumps({"kind": kind, "samples_per_s": sum(rates)}))
        hvd.shutdown()
        return
    if kind == "single_loop":
        print(json.dumps({"kind": kind, "samples_per_s": _custom_loop_throughput(keras, tf, x, y)}))
        return
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
    print(json.dumps({"kind": kind, "samples_per_s": _fit_throughput(model, x, y, keras, BATCH)}))


def _keras2_fit(kind, tf, np, strategy):
    """model.fit under Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1), which feeds
    MultiWorkerMirroredStrategy: ronde.tensorflow.keras's DistributedOptimizer, MWMS, or one
    process. Each worker trains BATCH rows a step for STEPS steps; prints the job's samples/s."""
    import tf_keras as keras
    x, y = _data(np)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if kind == "mwms_fit":
        # The global batch is both workers' rows; MWMS's auto-sharding gives each worker half
        # of each batch of the (here doubled) data, so each trains BATCH rows a step.
        with strategy.scope():
            model = _mlp(keras)
            model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
        data = tf.data.Dataset.from_tensor_slices((np.concatenate([x, x]),
                                                   np.concatenate([y, y])))
        rate = _fit_throughput(model, None, None, keras, 2 * BATCH, dataset=data)
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
            print(json.dumps({"kind": kind, "samples_per_s": rate}))
        return
    if kind == "ronde_fit":
        import ronde.tensorflow.keras as hvd
        hvd.init()
        model = _mlp(keras)
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss=loss)
        rates = hvd.allgather_object(_fit_throughput(model, x, y, keras, BATCH))
        if hvd.rank() == 0:
            print(json.dumps({"kind": kind, "samples_per_s": sum(rates)}))
        hvd.shutdown()
        return
    model = _mlp(keras)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
    print(json.dumps({"kind": kind, "samples_per_s": _fit_throughput(model, x, y, keras, BATCH)}))


def _custom_loop_throughput(keras, tf, x, y, strategy=None, hvd=None):
    """samples/s of this worker's share in a tf.function train step: per worker BATCH rows."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="sum_over_batch_size" if strategy is None else "none")
    workers = 2 if strategy is not None else 1
    if strategy is not None:
        with strategy.scope():
            model = _mlp(keras)
            optimizer = keras.optimizers.SGD(0.01)
        data = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH * workers))

        @tf.function
        def step(batch):
            def replica(bx, by):
                with tf.GradientTape() as tape:
                    per = loss_fn(by, model(bx, training=True))
                    loss = tf.nn.compute_average_loss(per, global_batch_size=BATCH * workers)
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(replica, args=batch)
    else:
        model = _mlp(keras)
        optimizer = keras.optimizers.SGD(0.01)
        data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)

        @tf.function
        def step(batch):
            bx, by = batch
            with tf.GradientTape() as tape:
                loss = loss_fn(by, model(bx, training=True))
            if hvd is not None:
                tape = hvd.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
    iterator = iter(data)
    for _ in range(5):
        step(next(iterator))
    began = time.perf_counter()
    for _ in range(STEPS):
        step(next(iterator))
    return STEPS * BATCH / (time.perf_counter() - began)


def mode_worker(mode):
    """One rank of the `graph` comparison; rank 0 prints the median seconds per step (the
    slower rank's). Same model, data, optimizer and step count in both modes."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy as np
    import tensorflow as tf
    v1 = tf.compat.v1
    if mode == "graph":
        v1.disable_eager_execution()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    import ronde.tensorflow as hvd
    hvd.init()
    x, y = _data(np)
    shapes = [(256, 512), (512,), (512, 512), (512,), (512, 10), (10,)]
    rng = np.random.RandomState(1)
    initial = [rng.randn(*shape).astype("float32") * 0.05 for shape in shapes]
    weights = [tf.Variable(value) for value in initial]

    def loss_of(bx, by):
        h = tf.nn.relu(tf.matmul(bx, weights[0]) + weights[1])
        h = tf.nn.relu(tf.matmul(h, weights[2]) + weights[3])
        logits = tf.matmul(h, weights[4]) + weights[5]
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=by, logits=logits))

    batches = [(x[i * BATCH:(i + 1) * BATCH], y[i * BATCH:(i + 1) * BATCH])
               for i in range(STEPS)]
    times = []
    if mode == "graph":
        bx = v1.placeholder(tf.float32, [None, 256])
        by = v1.placeholder(tf.int64, [None])
        train = hvd.DistributedOptimizer(v1.train.GradientDescentOptimizer(0.01)).minimize(
            loss_of(bx, by))
        with v1.Session() as session:
            session.run(v1.global_variables_initializer())
            for _ in range(5):
                session.run(train, {bx: batches[0][0], by: batches[0][1]})
            for _ in range(5):
                began = time.perf_counter()
                for fx, fy in batches:
                    session.run(train, {bx: fx, by: fy})
                times.append((time.perf_counter() - began) / STEPS)
    else:
        @tf.function
        def step(fx, fy):
            with tf.GradientTape() as tape:
                loss = loss_of(fx, fy)
            grads = hvd.DistributedGradientTape(tape).gradient(loss, weights)
            for w, g in zip(weights, grads):
                w.assign_sub(0.01 * g)

        tensors = [(tf.constant(fx), tf.constant(fy)) for fx, fy in batches]
        for _ in range(5):
            step(*tensors[0])
        for _ in range(5):
            began = time.perf_counter()
            for fx, fy in tensors:
                step(fx, fy)
            weights[0].numpy()
            times.append((time.perf_counter() - began) / STEPS)
    seconds = max(hvd.allgather_object(median(times)))
    if hvd.rank() == 0:
        print(json.dumps({"mode": mode, "seconds": seconds}))
    hvd.shutdown()


def bench_graph(rounds):
    py = sys.executable
    here = os.path.abspath(__file__)
    ronde = os.path.join(os.path.dirname(py), "ronde")
    results = {"graph": [], "function": []}
    env = dict(os.environ, RONDE_TENSORFLOW_OPS="compiled")
    for _ in range(rounds):
        for mode in results:
            out = subprocess.run([ronde, "run", "-np", "2", py, here, "mode_worker", mode],
                                 env=env, capture_output=True, text=True, timeout=600)
            line = [l for l in out.stdout.splitlines() if '"seconds"' in l]
            if not line:
                raise RuntimeError("no result:\n%s\n%s" % (out.stdout, out.stderr))
            results[mode].append(json.loads(line[0][line[0].index("{"):])["seconds"])
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    ratio = median([g / f for g, f in zip(results["graph"], results["function"])])
    print("MLP 256-512-512-10, %d samples per rank per step, 2 ranks, %d rounds (load %s)"
          % (BATCH, rounds, load))
    print("| mode | ms per step |")
    print("|---|---:|")
    print("| TF1 graph, Session, v1 DistributedOptimizer | %.2f |"
          % (median(results["graph"]) * 1e3))
    print("| TF2 tf.function, DistributedGradientTape | %.2f |"
          % (median(results["function"]) * 1e3))
    print("| graph / function (median of rounds) | %.3f |" % ratio)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(commands, envs):
    procs = [subprocess.Popen(c, env=e, stdout=subprocess.PIPE, text=True)
             for c, e in zip(commands, envs)]
    out = [p.communicate(timeout=600)[0] for p in procs]
    for line in "".join(out).splitlines():
        if "{" in line:  # `ronde run` prefixes each line with [rank]<stdout>:
            return json.loads(line[line.index("{"):])["samples_per_s"]
    raise RuntimeError("no result from %s" % commands[0])


def bench_keras(rounds=2, model="mlp", steps=60):
    """Every job in each round, rounds interleaved; medians. MODEL/STEPS reach the workers
    through the environment. The numpy-path jobs run for the MLP only (their comparison with
    the kernels is the MLP's, above in docs/benchmarks.md)."""
    py = sys.executable
    here = os.path.abspath(__file__)
    ronde = os.path.join(os.path.dirname(py), "ronde")
    base = dict(os.environ, KERAS_BACKEND="tensorflow", RONDE_TENSORFLOW_OPS="compiled",
                RONDE_BENCH_MODEL=model, RONDE_BENCH_STEPS=str(steps))
    keras2 = dict(base, TF_USE_LEGACY_KERAS="1")
    numpy_env = dict(base, RONDE_TENSORFLOW_OPS="python")

    def ranks(kind, env):
        return _run([[ronde, "run", "-np", "2", py, here, "worker", kind]], [env])

    def mwms(kind, env):
        ports = [_free_port(), _free_port()]
        cluster = {"worker": ["127.0.0.1:%d" % p for p in ports]}
        envs = [dict(env, TF_CONFIG=json.dumps({"cluster": cluster,
                                                "task": {"type": "worker", "index": i}}))
                for i in range(2)]
        return _run([[py, here, "worker", kind]] * 2, envs)

    def single(kind, env):
        # On one core (the workers use one intra-op thread): 2 ranks on 2 cores against 2 x
        # this is the scaling efficiency of the 2-rank jobs.
        return _run([["taskset", "-c", "0", py, here, "worker", kind]], [env])

    jobs = [("ronde_fit", ranks, keras2), ("mwms_fit", mwms, keras2), ("single_fit", single, keras2),
            ("ronde", ranks, base), ("single", single, base),
            ("ronde_loop", ranks, base), ("mwms", mwms, base), ("single_loop", single, base)]
    if model == "mlp":
        jobs += [("ronde_numpy", lambda k, e: ranks("ronde", e), numpy_env),
                 ("ronde_loop_numpy", lambda k, e: ranks("ronde_loop", e), numpy_env)]
    results = {kind: [] for kind, _, _ in jobs}
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[0]
    for _ in range(rounds):
        for kind, how, env in jobs:
            results[kind].append(how(kind, env))
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[0]
    print("%s, %d steps of %d rows per worker, %d rounds, load %s -> %s"
          % (model, steps, BATCH, rounds, load_before, load_after))
    print("| job | samples/s | scaling efficiency (vs 2 x one rank on one core) |")
    print("|---|---:|---:|")
    groups = (
        ("single_fit", "model.fit, Keras 2 (tf_keras)",
         [("ronde_fit", "ronde.tensorflow.keras DistributedOptimizer, 2 ranks"),
          ("mwms_fit", "MultiWorkerMirroredStrategy, 2 workers")]),
        ("single", "model.fit, Keras 3",
         [("ronde", "ronde.keras DistributedOptimizer, 2 ranks"),
          ("ronde_numpy", "the same on the numpy path")]),
        ("single_loop", "tf.function loop, Keras 3",
         [("ronde_loop", "ronde DistributedGradientTape, 2 ranks"),
          ("ronde_loop_numpy", "the same on the numpy path"),
          ("mwms", "MultiWorkerMirroredStrategy, 2 workers")]))
    for single_kind, what, rows in groups:
        one = median(results[single_kind])
        print("| %s, one rank, no communication | %.0f | |" % (what, one))
        for kind, label in rows:
            if kind in results:
                rate = median(results[kind])
                print("| %s: %s | %.0f | %.0f%% |" % (what, label, rate, 100 * rate / (2 * one)))
    for ours, theirs in (("ronde_fit", "mwms_fit"), ("ronde_loop", "mwms")):
        ratio = median([a / b for a, b in zip(results[ours], results[theirs])])
        print("%s / %s (median of the rounds' ratios): %.2fx" % (ours, theirs, ratio))


if __name__ == "__main__":
    if sys.argv[1:2] == ["allreduce"]:
        bench_allreduce()
    elif sys.argv[1:2] == ["overhead"]:
        bench_overhead()
    elif sys.argv[1:2] == ["worker"]:
        worker(sys.argv[2])
    elif sys.argv[1:2] == ["keras"]:
        bench_keras(int(sys.argv[2]) if len(sys.argv) > 2 else 2,
                    sys.argv[3] if len(sys.argv) > 3 else "mlp",
                    int(sys.argv[4]) if len(sys.argv) > 4 else 60)
    elif sys.argv[1:2] == ["gradients"]:
        bench_gradients(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
    elif sys.argv[1:2] == ["gradients_worker"]:
        gradients_worker()
    elif sys.argv[1:2] == ["graph"]:
        bench_graph(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
    elif sys.argv[1:2] == ["mode_worker"]:
        mode_worker(sys.argv[2])
    else:
        sys.exit(__doc__)
