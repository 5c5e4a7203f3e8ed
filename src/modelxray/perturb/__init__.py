"""Perturbations of a model or of its inputs, as pure tensor functions: adversarial attacks (FGSM,
PGD), weight noise (Gaussian, quantization-step), token dropout and substitution. The robustness
analyzer combines them with an evaluation harness per task (today: causal language models)."""
