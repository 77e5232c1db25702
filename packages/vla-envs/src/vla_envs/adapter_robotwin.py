"""The RoboTwin 2.0 adapter record (`env_type="robotwin"`): dual-arm tasks through RoboTwin's own vector env, run
by its own interpreter. Imports nothing of RoboTwin."""

from __future__ import annotations

from vla_envs.registry import EnvAdapter, register_adapter

ROBOTWIN = register_adapter(
    EnvAdapter(
        name="robotwin",
        factory="vla_envs.robotwin:make_robotwin_env",
        task_lister="vla_envs.robotwin:list_robotwin_tasks",
        check_config="vla_envs.robotwin.options:resolve_options",
        offload=True,
        check_setup="vla_envs.robotwin.runtime:check_setup",
    )
)
