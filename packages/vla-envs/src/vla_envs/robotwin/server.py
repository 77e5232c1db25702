"""The child process that hosts RoboTwin's `VectorEnv` for the adapter (run as a script by `runtime.py`).

Standalone on purpose (standard library + numpy only): it runs under the interpreter of the environment where
RoboTwin is installed, which is usually a separate virtual environment (RoboTwin pins mplib 0.2.1 and numpy
1.26), and need not have vla-envs installed. It talks to its parent over an inherited socket (a
`multiprocessing.connection.Connection`) and answers one request at a time:

  ("init", spec)                     import RoboTwin, check the embodiments, build VectorEnv -> None
  ("reset", env_idx, env_seeds)      reset rows, describe their actual scene in the instruction -> get_obs()
  ("get_obs",)                       VectorEnv.get_obs()
  ("step", actions [n, horizon, 14]) VectorEnv.step -> (obs, rewards, terminated, truncated, infos)
  ("step_rows", actions [k, horizon, 14], rows)  the same for the k listed rows only (the others are not
                                     simulated; RoboTwin's sub-envs are independent) -> lists of length k
  ("expert", rows)                   run RoboTwin's own expert (the task's `play_once`) on the listed rows' current
                                     scenes, recording the commanded joint targets (the 14-D state) after every
                                     physics step -> [{"path" [T+1, 14], "success", "plan_success", "error"}];
                                     the rows' scenes are then used up (reset them before stepping)
  ("attr", dotted_name)              a picklable attribute of the VectorEnv (diagnostics and tests)
  ("run", file, function, kwargs)    function(vector_env, **kwargs) of a python file, run here (diagnostics and
                                     tests that arrange a scene, e.g. place blocks so that the task succeeds)
  ("close",)                         VectorEnv.close(), then exit

Replies: ("ok", value) or ("error", kind, message) with kind "unavailable" (RoboTwin or its assets cannot be
used here), "config" (a setting RoboTwin cannot run with), "hung" (a sub-env's step passed its bound: a thread of
this process is stuck, so the process has to be replaced) or "runtime" (an error while running).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from concurrent.futures import TimeoutError as futures_timeout  # a builtin TimeoutError only from 3.11
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

# Tasks whose `get_info()` runs RoboTwin's expert on the live scene (it moves the robot): for them the
# instruction cannot be rebuilt after a reset, and RoboTwin's own instruction (from the constructor's scene)
# is kept.
PLANNING_INFO_TASKS = ("blocks_ranking_size", "place_bread_basket", "stack_blocks_three")
ARM_JOINTS = 6  # RoboTwin's 14-D layout: 6 joints + 1 gripper per arm
STEP_TIMEOUT_S = 120  # as RoboTwin's VectorEnv.step waits for each sub-env; the runtime sends its own
# (`step_timeout_s`: the env's `call_timeout_s`), so that a loaded machine gets the configurable bound


class RequestError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _log(msg: str) -> None:
    print(f"[robotwin-server] {msg}", file=sys.stderr, flush=True)


def _import_vector_env(spec: dict[str, Any]) -> Any:
    if spec.get("checkout"):
        sys.path.insert(0, spec["checkout"])
    try:
        module = importlib.import_module("robotwin.envs.vector_env")
    except ImportError as exc:
        raise RequestError(
            "unavailable",
            f"importing robotwin.envs.vector_env under {sys.executable} failed: {type(exc).__name__}: {exc}",
        ) from exc
    except Exception as exc:  # RoboTwin reads files at import time (e.g. a missing asset list)
        raise RequestError(
            "unavailable",
            f"importing robotwin.envs.vector_env under {sys.executable} raised {type(exc).__name__}: {exc} "
            "(assets or requirements incomplete?)",
        ) from exc
    return module


def _embodiment_table(module: Any, spec: dict[str, Any]) -> dict[str, Any]:
    import yaml

    if spec.get("checkout"):
        path = Path(spec["checkout"]) / "task_config/_embodiment_config.yml"
        return yaml.safe_load(path.read_text()) or {}
    config = importlib.import_module("robotwin.config")
    return config.load_task_config("_embodiment_config") or {}


def _check_embodiments(module: Any, spec: dict[str, Any]) -> None:
    """Each configured embodiment is listed by RoboTwin, has its config.yml under the assets and 6 arm joints."""
    import yaml

    table = _embodiment_table(module, spec)
    emb = spec["task_config"]["embodiment"]
    names = emb[:1] if len(emb) == 1 else emb[:2]
    unknown = [n for n in names if n not in table]
    if unknown:
        raise RequestError(
            "config",
            f"extra['task_config']['embodiment']={emb!r} names unknown embodiment(s) {unknown}; RoboTwin lists "
            f"{sorted(table)}",
        )
    for name in names:
        config_path = Path(spec["assets_root"]) / str(table[name]["file_path"]) / "config.yml"
        if not config_path.is_file():
            raise RequestError(
                "unavailable",
                f"RoboTwin assets are missing: no {config_path} for embodiment {name!r} (download RoboTwin's "
                "assets: `robotwin-download-assets`, HuggingFace dataset TianxingChen/RoboTwin2.0)",
            )
        joints = (yaml.safe_load(config_path.read_text()) or {}).get("arm_joints_name") or [[]]
        dof = {len(j) for j in joints}
        if dof != {ARM_JOINTS}:
            raise RequestError(
                "config",
                f"embodiment {name!r} has {sorted(dof)} arm joints per arm; the adapter's 14-D actions and "
                f"states need {ARM_JOINTS} joints + 1 gripper per arm (e.g. piper, aloha-agilex, ARX-X5)",
            )


def _report_setup_errors(module: Any) -> None:
    """RoboTwin's VectorEnv retries the next seed on any error while setting a task up, silently and forever;
    log each distinct error to stderr so that a construction that never ends can say why."""
    original = getattr(module, "class_decorator", None)
    if original is None:  # not RoboTwin's VectorEnv module (a test double)
        return
    seen: set[str] = set()

    def wrap(task: Any, name: str) -> None:
        method = getattr(task, name)

        def logged(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except Exception as exc:
                key = f"{name}: {type(exc).__name__}: {exc}"
                if key not in seen:
                    seen.add(key)
                    _log(f"RoboTwin setup error (seed {kwargs.get('seed')}): {key}")
                raise

        setattr(task, name, logged)

    def class_decorator(task_name: str) -> Any:
        task = original(task_name)
        for name in ("setup_demo", "get_info"):
            wrap(task, name)
        return task

    module.class_decorator = class_decorator


def _use_camera_shader(shader: str) -> None:
    """Make RoboTwin's `set_camera_shader_dir("rt")` use `shader` (ray tracing takes minutes per frame on a
    CPU renderer)."""
    import sapien

    original = sapien.render.set_camera_shader_dir
    sapien.render.set_camera_shader_dir = lambda _name: original(shader)


def commanded_state(task: Any) -> list[float]:
    """RoboTwin's 14-D state of a task: each arm's joint drive targets and its commanded gripper opening."""
    robot = task.robot
    return [*robot.get_left_arm_jointState(), *robot.get_right_arm_jointState()]


def plan_distinct_targets(plan_batch: Any) -> Any:
    """A planner's `plan_batch(qpos, targets, ...)` that plans each distinct target pose once and gives repeated
    targets the same result. RoboTwin's grasp search plans 10 candidate poses turned about the grasp axis by the
    embodiment's `rotate_lim`; with rotate_lim [0, 0] the 10 are one pose, planned 10 times (about 2 s each)."""
    import numpy as np

    def planned(curr_joint_pos: Any, target_gripper_pose_list: list, *args: Any, **kwargs: Any) -> Any:
        keys = [tuple(np.round([*pose.p, *pose.q], 9)) for pose in target_gripper_pose_list]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}
        distinct = sorted(first.values())
        if len(distinct) == len(keys):
            return plan_batch(curr_joint_pos, target_gripper_pose_list, *args, **kwargs)
        result = plan_batch(curr_joint_pos, [target_gripper_pose_list[i] for i in distinct], *args, **kwargs)
        index = [distinct.index(first[key]) for key in keys]
        per_target = ("status", "position", "velocity")
        return {k: [v[j] for j in index] if k in per_target else v for k, v in result.items()}

    return planned


def run_expert(task: Any) -> dict[str, Any]:
    """RoboTwin's expert (`play_once`) on the task's current scene, with the commanded 14-D state recorded after
    every physics step (`path`, float32 [T + 1, 14], the start included) and repeated candidate poses planned once
    (`plan_distinct_targets`). `success`: RoboTwin's plan succeeded and its `check_success` holds at the end; an
    exception ends the run (`error`) with the path so far."""
    import numpy as np

    scene, robot = task.scene, task.robot
    path = [commanded_state(task)]

    def recording_step() -> None:
        type(scene).step(scene)
        path.append(commanded_state(task))

    scene.step = recording_step
    arms = (getattr(robot, "left_planner", None), getattr(robot, "right_planner", None))
    planners = list({id(p): p for p in arms if p is not None}.values())
    for planner in planners:
        planner.plan_batch = plan_distinct_targets(planner.plan_batch)
    error = None
    try:
        task.play_once()
        success = bool(task.plan_success and task.check_success())
    except Exception as exc:
        error, success = f"{type(exc).__name__}: {exc}", False
    finally:
        del scene.step  # back to the class's step
        for planner in planners:
            del planner.plan_batch
    return {
        "path": np.asarray(path, dtype=np.float32),
        "success": success,
        "plan_success": bool(getattr(task, "plan_success", False)),
        "error": error,
    }


def step_with_dense_reward(sub: Any, actions: Any) -> dict[str, Any]:
    """One sub-env step (`SubEnv.step`) with RoboTwin's dense task reward after it, computed as RoboTwin's own dense
    stepping (`gen_dense_reward_once`) does: the end-effector and joint traces of the step, one `update` of the
    task's reward tree, its normalised level (1.0 once the task succeeded) in `info["dense_reward"]`."""
    task = sub.task
    robot = task.robot
    traces = {
        "episode_left_eef_poses": robot.get_left_ee_pose, "episode_right_eef_poses": robot.get_right_ee_pose,
        "episode_left_joint_states": robot.get_left_arm_jointState,
        "episode_right_joint_states": robot.get_right_arm_jointState,
        "episode_left_gripper_state": robot.is_left_gripper_open,
        "episode_right_gripper_state": robot.is_right_gripper_open,
    }  # fmt: skip
    for name, read in traces.items():
        setattr(task, name, [read()])
    out = sub.step(actions)
    for name, read in traces.items():
        getattr(task, name).append(read())
    if getattr(task, "reward", None) is None:
        raise RequestError(
            "config", f"RoboTwin's task {sub.task_name!r} defines no dense reward (reward_mode dense)"
        )
    task.reward.update()
    success = bool(out["info"].get("success", False))
    out["info"] = {**out["info"], "dense_reward": 1.0 if success else float(task.reward.compute_reward())}
    return out


class Host:
    def __init__(self) -> None:
        self.venv: Any = None
        self.spec: dict[str, Any] = {}

    def init(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        for key, value in spec["environ"].items():
            os.environ[key] = value
        module = _import_vector_env(spec)
        _check_embodiments(module, spec)
        if spec.get("camera_shader"):
            _use_camera_shader(spec["camera_shader"])
        _report_setup_errors(module)
        self.venv = module.VectorEnv(
            task_config=spec["task_config"],
            n_envs=spec["n_envs"],
            env_seeds=spec["env_seeds"],
            instruction_type=spec["instruction_type"],
        )

    def reset(self, env_idx: list[int], env_seeds: list[int]) -> list[dict[str, Any]]:
        self.venv.reset(env_idx=env_idx, env_seeds=env_seeds)
        if self.spec["task_config"]["task_name"] not in PLANNING_INFO_TASKS:
            for i in env_idx:
                self._describe_actual_scene(self.venv.envs[i])
        return self.venv.get_obs()

    @staticmethod
    def _describe_actual_scene(sub: Any) -> None:
        """RoboTwin builds a reset's instruction from the scene of the constructor's seed; rebuild it from the
        scene that was just set up (a test double without these members is left as it is)."""
        if not all(hasattr(sub, a) for a in ("task", "episode_info_list", "create_instruction")):
            return
        sub.episode_info_list = [sub.task.get_info()]
        instruction = sub.create_instruction()
        sub.instruction = instruction
        sub.args["instruction"] = instruction
        sub.task.set_instruction(instruction)

    def get_obs(self) -> list[dict[str, Any]]:
        return self.venv.get_obs()

    def step(self, actions: Any) -> tuple:
        return tuple(self.venv.step(actions))

    def step_rows(self, actions: Any, rows: list[int]) -> tuple:
        """`VectorEnv.step` for `rows` only: each of their sub-envs steps as VectorEnv.step steps it (on its thread
        pool when it has one); with the dense reward, each info also holds `dense_reward` (`step_with_dense_reward`)."""
        pool = getattr(self.venv, "env_thread_pool", None)
        dense = self.spec.get("dense_reward", False)
        calls = [
            (
                (lambda a, sub=self.venv.envs[r]: step_with_dense_reward(sub, a))
                if dense
                else self.venv.envs[r].step,
                actions[k],
            )
            for k, r in enumerate(rows)
        ]
        if pool is None:
            results = [step(a) for step, a in calls]
        else:
            timeout = self.spec.get("step_timeout_s", STEP_TIMEOUT_S)
            futures = [pool.submit(step, a) for step, a in calls]
            try:
                results = [f.result(timeout=timeout) for f in futures]
            except futures_timeout:
                raise TimeoutError(
                    f"a sub-env's step took more than {timeout:g} s (raise the env's extra.call_timeout_s on a "
                    "slow or loaded machine)"
                ) from None
        return tuple(
            [res[key] for res in results] for key in ("obs", "reward", "terminated", "truncated", "info")
        )

    def expert(self, rows: list[int]) -> list[dict[str, Any]]:
        return [run_expert(self.venv.envs[r].task) for r in rows]

    def attr(self, dotted: str) -> Any:
        value = self.venv
        for part in dotted.split("."):
            value = value[int(part)] if part.isdigit() else getattr(value, part)
        return value

    def run(self, file: str, function: str, kwargs: dict[str, Any]) -> Any:
        import importlib.util

        spec = importlib.util.spec_from_file_location(Path(file).stem, file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return getattr(module, function)(self.venv, **kwargs)

    def close(self) -> None:
        if self.venv is not None:
            self.venv.close()


def serve(conn: Connection) -> None:
    host = Host()
    while True:
        try:
            request = conn.recv()
        except EOFError:
            host.close()
            return
        cmd, args = request[0], request[1:]
        try:
            value = getattr(host, cmd)(*args)
            conn.send(("ok", value))
        except RequestError as exc:
            conn.send(("error", exc.kind, str(exc)))
        # a stuck sub-env thread cannot be stopped: the parent replaces this process
        except TimeoutError as exc:
            _log(traceback.format_exc())
            conn.send(("error", "hung", f"{type(exc).__name__}: {exc}"))
        except Exception as exc:
            _log(traceback.format_exc())
            conn.send(("error", "runtime", f"{type(exc).__name__}: {exc}"))
        if cmd == "close":
            return


def main() -> None:
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [
        p for p in sys.path if p and str(Path(p).resolve()) != here
    ]  # no vla_envs module shadowing
    fd = int(sys.argv[sys.argv.index("--fd") + 1])
    serve(Connection(fd))


if __name__ == "__main__":
    main()
