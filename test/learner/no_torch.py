"""Fails like the worker does on an interpreter without PyTorch (for the client's tests)."""
raise ModuleNotFoundError("No module named 'torch'")
