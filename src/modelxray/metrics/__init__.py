"""Pure metric functions: tensors and numbers in, numbers out. No I/O, no tracking, no plotting."""
