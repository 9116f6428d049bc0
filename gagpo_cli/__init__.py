"""gagpo: experiment toolkit for RL of LLM agents in multi-turn text environments."""

__version__ = "0.1.0"
