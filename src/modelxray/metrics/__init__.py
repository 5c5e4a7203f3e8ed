"""Pure metric functions: tensors and numbers in, numbers out, and the evaluation windows
(``windows``) that say which tokens are scored. No I/O, no tracking, no plotting."""
