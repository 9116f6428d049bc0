"""Text environments behind one protocol, registered in the ``gagpo.environments`` group."""

from environments.base import Environment, Episode, Reset, Step, get_environment, available_environments

__all__ = ["Environment", "Episode", "Reset", "Step", "get_environment", "available_environments"]
