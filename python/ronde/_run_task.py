"""One rank of ronde.run: `python -m ronde._run_task FOLDER` calls the pickled function and
writes what it returned, or what it raised, into FOLDER (read by ronde.runner.run)."""

import os
import pickle
import sys
import traceback
import uuid


def _rank():
    """This rank in the job's (last) world: the runtime's while it runs, else the launcher's."""
    try:
        from ronde import _core
        if _core.is_initialized():
            return _core.rank()
    except Exception:  # not initialised, or a failed runtime: fall back to the launcher's
        pass
    for name in ("RONDE_RANK", "HOROVOD_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return -1


def _load(folder):
    with open(os.path.join(folder, "func.pkl"), "rb") as f:
        driver_path, payload = pickle.load(f)
    # A function pickled by reference names its module: where the driver could import it (its
    # script's folder, a test folder), this rank can too, on the same host or a shared one. The
    # driver's entries go last, so this rank's own environment wins.
    sys.path.extend(p for p in driver_path if p not in sys.path)
    return pickle.loads(payload)


def main(folder):
    try:
        func, args, kwargs = _load(folder)
        outcome = (None, "ok", func(*args, **kwargs))
    except BaseException as error:  # reported to the caller, then this rank fails
        description = "%s: %s\n%s" % (type(error).__name__, error, traceback.format_exc())
        outcome = (None, "error", description)
    outcome = (_rank(),) + outcome[1:]
    try:
        data = pickle.dumps(outcome)
    except Exception as error:
        outcome = (outcome[0], "error", "the value returned cannot be pickled: %s: %s"
                   % (type(error).__name__, error))
        data = pickle.dumps(outcome)
    # Written whole, then renamed: the caller never reads half an outcome.
    path = os.path.join(folder, "outcome.%s.pkl" % uuid.uuid4().hex)
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)
    if outcome[1] == "error":
        sys.stderr.write("ronde.run: rank %s raised %s" % (outcome[0], outcome[2]))
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
