"""Text environments behind one protocol, registered in the ``gagpo.environments`` group."""

from environments.base import (
    Environment,
    EnvironmentUnavailable,
    Episode,
    Reset,
    Step,
    TableColumn,
    available_environments,
    get_environment,
)

__all__ = ["Environment", "EnvironmentUnavailable", "Episode", "Reset", "Step", "TableColumn", "get_environment",
           "available_environments"]
