"""Model sources: each config in ``conf/model/`` names one of these classes (import them from their modules)."""
