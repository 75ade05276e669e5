"""mage's PyTorch learner worker: trains Hugging Face causal LMs for the TypeScript trainer."""

PROTOCOL_VERSION = 2
__version__ = "0.1.0"
