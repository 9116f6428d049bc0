"""OpenEnv client adapter: any OpenEnv server as a gagpo environment (``adapter.py``)."""

from environments.openenv.adapter import OpenEnvEnvironment

__all__ = ["OpenEnvEnvironment"]
