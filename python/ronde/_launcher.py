"""The `ronde` command of a pip-installed ronde: hands over to the launcher binary in the wheel.

`ronde run ...` and `ronde check-build` are implemented in C++ (src/launcher); this shim only
finds that binary inside the installed package and replaces itself with it, so signals,
exit codes and output are the launcher's own.
"""

import os
import sys


def _binary():
    # Beside the compiled extension, found without loading it: in an editable install the
    # Python files stay in the checkout while the built files live in site-packages.
    import importlib.util
    spec = importlib.util.find_spec("ronde._core")
    here = os.path.dirname(spec.origin if spec and spec.origin else os.path.abspath(__file__))
    return os.path.join(here, "bin", "ronde")


def _environment():
    """The launcher's environment: the interpreter's own scripts folder first on PATH.

    `.venv/bin/ronde run -np 2 python3 train.py` then starts the venv's python3 as the
    workers, as it would after `source .venv/bin/activate`.
    """
    env = dict(os.environ)
    scripts = os.path.dirname(sys.executable)
    path = env.get("PATH", "").split(os.pathsep) if env.get("PATH") else []
    if sys.prefix != sys.base_prefix and scripts not in path:
        env["PATH"] = os.pathsep.join([scripts] + path)
    return env


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    binary = _binary()
    if not os.access(binary, os.X_OK):
        sys.stderr.write(f"ronde: the launcher binary {binary} is missing; reinstall ronde\n")
        return 2
    if args[:1] == ["check-build"] and not any(a.startswith("--python") for a in args):
        # Report the frameworks of the interpreter this command was installed for.
        args += ["--python", sys.executable]
    os.execve(binary, [binary] + args, _environment())
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
