"""From a composed Hydra config to validated component objects: the schema (dataclass defaults
registered with Hydra), instantiation with one-line errors, and the run's components."""
