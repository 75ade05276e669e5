"""mage's environment adapters: OpenSpiel and TextArena served over the environment protocol."""
