"""The RoboTwin 2.0 adapter record (`env_type="robotwin"`): dual-arm tasks through RoboTwin's own vector env, run
by its own interpreter, with demos of RoboTwin's own task experts (`play_once`). Imports nothing of RoboTwin."""

from __future__ import annotations

from vla_envs.registry import EnvAdapter, ScriptedDemos, register_adapter

ROBOTWIN = register_adapter(
    EnvAdapter(
        name="robotwin",
        factory="vla_envs.robotwin:make_robotwin_env",
        task_lister="vla_envs.robotwin:list_robotwin_tasks",
        check_config="vla_envs.robotwin.options:resolve_options",
        demos=ScriptedDemos(
            generate="vla_envs.robotwin.demos:generate_robotwin_demos",
            settings="vla_envs.robotwin.demos:robotwin_demo_settings",
        ),
        offload=True,
        check_setup="vla_envs.robotwin.runtime:check_setup",
    )
)
