"""Perturbations of a model or of its inputs, as pure tensor functions: adversarial attacks (FGSM,
PGD), weight noise (Gaussian, quantization-step), token dropout and substitution, and image
corruptions (Gaussian noise, blur, occlusion). The robustness analyzer combines them with an
evaluation harness per family of model kinds (causal language models, classifiers, windows
kinds, speech recognisers, labelled-image kinds, generative vision-language models)."""
