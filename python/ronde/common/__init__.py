"""Framework-neutral pieces shared by ronde's frontends (ronde.torch, later TF/Keras)."""
