"""Built-in experiment definitions: one YAML file per experiment, loaded by name (``gagpo train quickstart``)."""
