"""ronde: distributed deep-learning training. ``import ronde.torch as hvd`` for PyTorch."""

__version__ = "0.1.0"


def settings_documentation():
    """Every RONDE_* setting as (name, help, default); HOROVOD_* names are read too."""
    from ronde import _core
    return _core.settings_documentation()


def __getattr__(name):
    # ronde.run is Horovod's horovod.run (ronde.runner), imported when first used.
    if name == "run":
        from ronde.runner import run
        return run
    raise AttributeError("module 'ronde' has no attribute %r" % name)
