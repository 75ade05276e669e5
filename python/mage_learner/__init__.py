"""mage's PyTorch learner worker: trains Hugging Face causal LMs for the TypeScript trainer."""
