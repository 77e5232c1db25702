"""One batched environment interface for robot-manipulation simulators (MetaWorld, ManiSkill3, LIBERO, RoboTwin).

Each adapter is one registered `EnvAdapter` record (`vla_envs/adapter_<name>.py`; `register_adapter` adds
others). Importing this package never imports a simulator: adapters load when `make_env` / `list_tasks` need them.
It does set `MUJOCO_GL` (EGL, else OSMesa) if unset, so that MuJoCo imported later renders headless.
"""

from vla_envs.base import (
    EPISODE_METRIC_KEYS,
    BatchedEnv,
    StepResult,
    check_actions,
    concat_obs,
    empty_episode_metrics,
    merge_obs_rows,
    select_obs_rows,
    stack_obs,
)
from vla_envs.checks import check_env_config, check_env_offload, check_env_setup
from vla_envs.config import EnvConfig, VideoConfig
from vla_envs.demos import demo_env_types, demo_settings, generate_demos, load_demos
from vla_envs.evaluation import TaskGrouping, evaluation_table, format_evaluation_tables, task_grouping
from vla_envs.factory import make_env
from vla_envs.gl import configure_mujoco_gl
from vla_envs.registry import (
    EnvAdapter,
    ScriptedDemos,
    adapters,
    get_adapter,
    list_env_types,
    list_tasks,
    register_adapter,
    unregister_adapter,
)
from vla_envs.reset_ids import reset_state_ids, split_reset_state_ids
from vla_envs.setup_errors import (
    DisplayUnavailable,
    SimulatorAssetsMissing,
    SimulatorNotInstalled,
    SimulatorSetupError,
)
from vla_envs.workers import SimulatorUnavailable

__version__ = "0.1.0"

configure_mujoco_gl()

__all__ = [
    "EPISODE_METRIC_KEYS",
    "BatchedEnv",
    "DisplayUnavailable",
    "EnvAdapter",
    "EnvConfig",
    "ScriptedDemos",
    "SimulatorAssetsMissing",
    "SimulatorNotInstalled",
    "SimulatorSetupError",
    "SimulatorUnavailable",
    "StepResult",
    "TaskGrouping",
    "VideoConfig",
    "__version__",
    "adapters",
    "check_actions",
    "check_env_config",
    "check_env_offload",
    "check_env_setup",
    "concat_obs",
    "configure_mujoco_gl",
    "demo_env_types",
    "demo_settings",
    "empty_episode_metrics",
    "evaluation_table",
    "format_evaluation_tables",
    "generate_demos",
    "get_adapter",
    "list_env_types",
    "list_tasks",
    "load_demos",
    "make_env",
    "merge_obs_rows",
    "register_adapter",
    "reset_state_ids",
    "select_obs_rows",
    "split_reset_state_ids",
    "stack_obs",
    "task_grouping",
    "unregister_adapter",
]
