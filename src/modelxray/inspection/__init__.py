"""Pieces of the inspect analyzer that are not measurements: what the architecture is, which
input to run it on, how weights group into layer types, and the recommendations drawn from it all."""
