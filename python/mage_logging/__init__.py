"""mage's training curves for the tools researchers already use: the W&B sidecar and readers of
what TensorBoard and W&B keep on disk (used by the tests and `mage`'s checks)."""
