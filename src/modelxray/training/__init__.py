"""The one training loop, its tasks and callbacks, the Hugging Face Trainer callback and the training report."""
