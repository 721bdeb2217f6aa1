"""ronde.run: Horovod's `horovod.run` — a function run as a ronde job, results in rank order.

The function and its arguments are pickled (cloudpickle where it is installed, as Horovod
does; else the standard pickle, which takes module-level functions only) into a folder the
job's ranks read, with the caller's sys.path, which the ranks add after their own so that a
function pickled by reference is found where the caller found it; `ronde run` starts `python -m ronde._run_task FOLDER` on every rank with the
flags that Horovod's arguments name; each rank writes what its call returned, or the exception
it raised with its traceback, beside it. The caller gets the list of returned values indexed by
rank, or one RuntimeError naming every rank that failed and why.
"""

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings

from ronde import _launcher


def _dumps(value):
    try:
        import cloudpickle
    except ImportError:
        cloudpickle = None
    try:
        return (cloudpickle or pickle).dumps(value)
    except Exception as error:  # a reducer may raise anything
        hint = "" if cloudpickle else " (install cloudpickle to send lambdas and local functions)"
        raise ValueError("ronde.run: the function and its arguments must be picklable%s; "
                         "pickling failed: %s: %s" % (hint, type(error).__name__, error)) from error


def _launch_arguments(num_proc, min_num_proc, max_num_proc, slots, reset_limit, cooldown_range,
                      hosts, hostfile, host_discovery_script, start_timeout, ssh_port,
                      ssh_identity_file, output_filename, verbose, use_gloo, use_mpi, mpi_args,
                      network_interfaces):
    """The `ronde run` flags for Horovod's arguments; what ronde cannot honour is refused."""
    if hosts is not None and hostfile is not None:
        raise ValueError("Argument hosts and hostfile only allow one provided.")
    if use_gloo and use_mpi:
        raise ValueError("Argument use_gloo and use_mpi only allow one set True.")
    if mpi_args and not use_mpi:
        raise ValueError("ronde.run: mpi_args is only used with use_mpi=True")
    if num_proc is None or int(num_proc) < 1:
        raise ValueError("ronde.run: num_proc must be a positive number of processes, not %r"
                         % (num_proc,))
    flags = ["-np", str(int(num_proc))]
    if hosts is not None:
        flags += ["-H", hosts]
    if hostfile is not None:
        flags += ["--hostfile", hostfile]
    elastic = host_discovery_script is not None
    if not elastic and any(v is not None for v in (min_num_proc, max_num_proc, slots, reset_limit,
                                                     cooldown_range)):
        raise ValueError("ronde.run: min_num_proc, max_num_proc, slots, reset_limit and "
                         "cooldown_range are for elastic jobs: give host_discovery_script too")
    if elastic:
        flags += ["--host-discovery-script", host_discovery_script]
        if min_num_proc is not None:
            flags += ["--min-np", str(int(min_num_proc))]
        if max_num_proc is not None:
            flags += ["--max-np", str(int(max_num_proc))]
        if slots is not None:
            flags += ["--slots-per-host", str(int(slots))]
        if reset_limit is not None:
            flags += ["--reset-limit", str(int(reset_limit))]
        if cooldown_range is not None:
            low, high = cooldown_range
            flags += ["--blacklist-cooldown-range", str(float(low)), str(float(high))]
    if start_timeout is not None:
        flags += ["--start-timeout", str(float(start_timeout))]
    if ssh_port is not None:
        flags += ["--ssh-port", str(int(ssh_port))]
    if ssh_identity_file is not None:
        flags += ["--ssh-identity-file", ssh_identity_file]
    if output_filename is not None:
        flags += ["--output-filename", output_filename]
    if verbose:
        flags += ["--verbose"]
    if use_mpi:
        # `ronde run --mpi`: mpirun starts the ranks (refused there for an elastic job).
        flags += ["--mpi"] + (["--mpi-args=" + mpi_args] if mpi_args else [])
    if network_interfaces:
        nics = list(network_interfaces)
        if len(nics) > 1:
            raise ValueError("ronde.run: ronde uses one network interface for the store and the "
                             "data sockets; got %s: name one" % nics)
        flags += ["--network-interface", nics[0]]
    return flags


def _read_outcomes(folder):
    """{worker index: (rank, 'ok', value) or (rank, 'error', description)} of ranks that wrote."""
    outcomes = {}
    for name in os.listdir(folder):
        if not name.startswith("outcome.") or not name.endswith(".pkl"):
            continue
        with open(os.path.join(folder, name), "rb") as f:
            outcomes[name] = pickle.load(f)
    return outcomes


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        host_discovery_script=None, start_timeout=None, ssh_port=None, ssh_identity_file=None,
        disable_cache=None, output_filename=None, verbose=None, use_gloo=None, use_mpi=None,
        mpi_args=None, network_interface=None, network_interfaces=None, executable=None, np=None,
        min_np=None, max_np=None):
    """Runs func(*args, **kwargs) on every rank of a ronde job; returns the values by rank.

    Horovod's `horovod.run`, with its arguments. An elastic job (host_discovery_script given)
    returns the values of the ranks of its last world, the first min_num_proc of them, as
    Horovod does. disable_cache: ronde keeps no cache of its host checks, so they run every
    time either way. A rank that raises makes the call raise RuntimeError with that rank's
    exception and traceback.
    """
    if network_interface:
        network_interfaces = network_interface.split(",")
        warnings.warn("network_interface is deprecated, use network_interfaces instead",
                      DeprecationWarning)
    if np is not None:
        num_proc = np
        warnings.warn("np is deprecated, use num_proc instead", DeprecationWarning)
    if min_np is not None:
        min_num_proc = min_np
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning)
    if max_np is not None:
        max_num_proc = max_np
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning)
    del disable_cache  # nothing is cached: see the docstring
    flags = _launch_arguments(num_proc, min_num_proc, max_num_proc, slots, reset_limit,
                              cooldown_range, hosts, hostfile, host_discovery_script,
                              start_timeout, ssh_port, ssh_identity_file, output_filename,
                              verbose, use_gloo, use_mpi, mpi_args, network_interfaces)
    payload = pickle.dumps((list(sys.path), _dumps((func, tuple(args), dict(kwargs or {})))))
    folder = tempfile.mkdtemp(prefix="ronde-run-")
    try:
        with open(os.path.join(folder, "func.pkl"), "wb") as f:
            f.write(payload)
        env = _launcher._environment()
        if use_gloo:
            env["RONDE_CPU_OPERATIONS"] = "native"
        command = [_launcher._binary(), "run"] + flags + [
            executable or sys.executable, "-m", "ronde._run_task", folder]
        sys.stdout.flush()
        sys.stderr.flush()
        exit_code = subprocess.call(command, env=env)
        outcomes = sorted(_read_outcomes(folder).values(), key=lambda o: o[0])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    failures = [o for o in outcomes if o[1] == "error"]
    if failures:
        raise RuntimeError("ronde.run: %d rank(s) raised:\n%s" % (
            len(failures), "\n".join("rank %d: %s" % (o[0], o[2]) for o in failures)))
    if exit_code != 0:
        raise RuntimeError("ronde.run: the job failed (ronde run exited with code %d; its output "
                           "above says which rank and why)" % exit_code)
    values = [o[2] for o in outcomes]
    if host_discovery_script is None:
        if len(values) != int(num_proc):
            raise RuntimeError("ronde.run: %d of %d ranks returned a value"
                               % (len(values), int(num_proc)))
        return values
    return values[:min_num_proc] if min_num_proc is not None else values
