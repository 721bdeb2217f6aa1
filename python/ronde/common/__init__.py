"""Framework-neutral pieces shared by ronde's Python frontends (no torch, no TensorFlow)."""
