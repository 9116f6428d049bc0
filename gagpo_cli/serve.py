"""``gagpo serve ENV``: check the request, build the environment's options, start the OpenEnv server
(``integrations.openenv.server``)."""

from __future__ import annotations

from gagpo_cli.errors import UsageError, user_input
from gagpo_cli.evaluate import parse_env_options
from gagpo_cli.train.acting.modes import get_action_mode


def serve_command(env: str, host: str, port: int, option_pairs: list[str], action_mode: str,
                  max_sessions: int) -> None:
    """Serve ``env`` on ``host:port`` until Ctrl-C; bad input is one ``UsageError`` line."""
    if not 0 < port < 65536:
        raise UsageError(f"--port must be in 1..65535, got {port}")
    if max_sessions < 1:
        raise UsageError(f"--max-sessions must be at least 1, got {max_sessions}")
    try:
        from integrations.openenv.server import serve
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    options = parse_env_options(option_pairs)
    with user_input():  # unknown environment or option: one line with the valid ones
        options = get_action_mode(action_mode).env_options(env, options)
        serve(env, options, host=host, port=port, max_sessions=max_sessions)
