"""Config composition and validation of the trainer app: every shipped config composes and validates, and
bad input fails fast with one clear line naming the key (before any simulator or model is built)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from train_embodied.cli import eval_main, sft_main, train_main
from train_embodied.config import ConfigError, list_configs, load_train_config

REFERENCE_CONFIGS = [
    "maniskill_ppo_openvla",
    "maniskill_grpo_openvla",
    "maniskill_ppo_openvlaoft",
    "maniskill_grpo_openvlaoft",
    "libero_10_ppo_openvlaoft",
    "libero_10_grpo_openvlaoft",
    "metaworld_50_grpo_openvlaoft",
    "metaworld_ppo_tiny_cpu",
    "metaworld_grpo_tiny_cpu",
    "metaworld_50_ppo_openpi",
    "metaworld_50_ppo_openpi_pi05",
    "metaworld_45_ppo_openpi",
    "robotwin_adjust_bottle_ppo_OpenPI",
    "robotwin_adjust_bottle_ppo_OpenPI_pi05",
    "metaworld_50_ppo_openpi_eval",
    "metaworld_50_ppo_openpi_pi05_eval",
    "metaworld_45_ppo_openpi_eval",
    "robotwin_adjust_bottle_ppo_OpenPI_eval",
    "robotwin_adjust_bottle_ppo_OpenPI_pi05_eval",
    "metaworld_ppo_pi0_tiny_cpu",
]


def test_reference_configs_are_shipped() -> None:
    assert set(REFERENCE_CONFIGS) <= set(list_configs())


@pytest.mark.parametrize("name", REFERENCE_CONFIGS)
def test_every_config_composes_and_validates(name: str, tmp_path) -> None:
    tc = load_train_config(name, [f"runner.logger.log_path={tmp_path}"], check_paths=False)
    assert tc.runner.logger.experiment_name == name
    assert tc.log_dir.startswith(str(tmp_path / name))
    assert tc.algorithm.adv_type == ("grpo" if "grpo" in name else "gae")
    flow = "openpi" in name.lower() or "pi0" in name
    assert tc.actor.model.model_type == (
        "openpi" if flow else "openvla" if name.endswith("_openvla") else "openvla_oft"
    )
    assert tc.runner.only_eval == name.endswith("_eval")
    if tc.algorithm.adv_type == "grpo":
        assert tc.env_train.group_size == tc.algorithm.group_size and not tc.env_train.auto_reset
    # video folders resolve under the run's log dir
    assert tc.env_eval.video.video_base_dir.startswith(tc.log_dir)


def test_overrides_reach_the_typed_config(tmp_path) -> None:
    tc = load_train_config(
        "metaworld_ppo_tiny_cpu",
        [
            "algorithm=grpo",
            "algorithm.group_size=4",
            "env.train.group_size=4",
            "env.train.auto_reset=false",
            "actor.model.add_value_head=false",
            "rollout.temperature=1.5",
            "cluster.component_placement={env: 0, rollout: 0, actor: 0}",
            f"runner.logger.log_dir={tmp_path}/fixed",
        ],
        check_paths=False,
    )
    assert tc.algorithm.adv_type == "grpo" and tc.algorithm.loss_type == "actor"
    assert tc.env_train.group_size == 4 and tc.rollout.temperature == 1.5
    assert tc.cluster.component_placement == {"env": 0, "rollout": 0, "actor": 0}
    assert tc.log_dir == f"{tmp_path}/fixed"


def _cli_errors(main, argv, capsys) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("algorithm.adv_type=gea", "algorithm.adv_type='gea' is not one of: gae, grpo"),
        ("algorithm.loss_type=critic", "algorithm.loss_type='critic' is not one of: actor_critic, actor"),
        ("algorithm.gamma=1.5", "algorithm.gamma=1.5 is invalid: must be in [0.0, 1.0]"),
        ("env.train.num_envs=0", "env.train.num_envs=0 is invalid: must be >= 1"),
        (
            "env.train.task=drawer-clse-v3",
            "env.train.task='drawer-clse-v3' is not a metaworld task; did you mean: drawer-close-v3",
        ),
        (
            "actor.micro_batch_size=100",
            "actor.global_batch_size=256 is invalid: must be a multiple of actor.micro_batch_size=100",
        ),
        (
            "runner.logger.logger_backends=[tensorbord]",
            "runner.logger.logger_backends[]='tensorbord' is not one of",
        ),
        ("cluster.backend=slurm", "cluster.backend='slurm' is not one of: local, ray"),
        ("rollout.temperature=0", "rollout.temperature=0.0 is invalid: must be > 0"),
        (
            "actor.model.add_value_head=false",
            "actor.model.add_value_head=False is invalid with algorithm.loss_type='actor_critic'",
        ),
        ("runner.max_epochs=ten", "runner.max_epochs='ten' is invalid: expected int"),
        ("algorithm.kl_beta=-0.1", "algorithm.kl_beta=-0.1 is invalid: must be >= 0.0"),
        (
            "algorithm.kl_penalty=full",
            "algorithm.kl_penalty='full' is not one of: k1, k2, k3, abs, kl, mse, low_var_kl",
        ),
        (
            "algorithm.filter_rewards=true",
            "algorithm.filter_rewards=True is invalid with algorithm.adv_type='gae'",
        ),
        (
            "algorithm.per_task_advantages=scale",
            "algorithm.per_task_advantages='scale' is not one of: none, center, whiten",
        ),
        ("algorithm.gama=0.9", "unknown config key 'algorithm.gama'"),
        ("+algorithm.gama=0.9", "unknown key 'algorithm.gama' (did you mean 'algorithm.gamma'?)"),
        ("env@env.train=metaworld_drawer", "unknown option 'env/metaworld_drawer' for config group 'env'"),
        ("cluster.component_placement={env: 0-3, rollout: 0, actor: 0}", "cluster.component_placement="),
        (
            "runner.resume_dir=/nonexistent/run",
            "runner.resume_dir='/nonexistent/run' is invalid: no such folder",
        ),
    ],
)
def test_bad_values_give_one_clear_line(override: str, expected: str, capsys) -> None:
    lines = _cli_errors(train_main, ["metaworld_ppo_tiny_cpu", override], capsys)
    assert any(expected in line for line in lines), lines
    assert all(line.startswith("vla-train: config error: ") for line in lines)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "actor.model.openpi.noise_method=flow_magic",
            "actor.model.openpi.noise_method='flow_magic' is not one of: flow_sde, flow_noise, flow_cps, flow_ode",
        ),
        ("+actor.model.openpi.noise_levl=0.3", "actor.model.openpi.noise_levl is not a pi0 / pi0.5 key"),
        (
            "+actor.model.openpi.noise_params=[0.7,0.3,0]",
            "actor.model.openpi.noise_params=[0.7, 0.3, 0] is invalid",
        ),
        ("+actor.model.OpenPI.action_chunk=8", "actor.model.OpenPI.action_chunk=8 contradicts"),
        ("actor.model.use_film=true", "actor.model.use_film=True is invalid with model_type='openpi'"),
    ],
)
def test_bad_pi0_keys_give_one_clear_line(override: str, expected: str, capsys) -> None:
    lines = _cli_errors(train_main, ["metaworld_ppo_pi0_tiny_cpu", override], capsys)
    assert any(expected in line for line in lines), lines


def test_ppo_filter_rewards_needs_task_groups_and_one_episode_per_env(capsys) -> None:
    """PPO's `filter_rewards` scores each task by its rows' first episodes: it needs the rows grouped by task and
    auto_reset off, and says which key to change; with both it validates (the MT10 layout)."""
    lines = _cli_errors(
        train_main,
        ["metaworld_ppo_tiny_cpu", "algorithm.filter_rewards=true", "algorithm.per_task_advantages=center"],
        capsys,
    )
    assert lines == [
        "vla-train: config error: env.train.auto_reset=True is invalid with algorithm.filter_rewards=true and "
        "algorithm.adv_type='gae': a task's score is the mean of its env rows' first-episode scores, one episode per "
        "env: set `env.train.auto_reset=false`"
    ], lines
    tc = load_train_config(
        "metaworld_mt10_ppo_tiny_cpu",
        ["algorithm.filter_rewards=true", "algorithm.rewards_lower_bound=0.1"],
        check_paths=False,
    )
    assert tc.algorithm.filter_rewards and tc.algorithm.per_task_advantages == "center"


@pytest.mark.parametrize(
    ("backend", "where"), [("local", "the local backend"), ("ray", "a private Ray instance")]
)
def test_gpus_this_machine_lacks_fail_fast(backend: str, where: str, capsys) -> None:
    """More GPUs than this machine has fail at validation, not inside torch after the workers start."""
    import torch

    here = torch.cuda.device_count()
    asked = here + 1
    lines = _cli_errors(
        train_main,
        [
            "metaworld_ppo_tiny_cpu",
            f"cluster.num_gpus_per_node={asked}",
            "cluster.component_placement={env: 0, rollout: 0, actor: 0}",
            f"cluster.backend={backend}",
        ],
        capsys,
    )
    assert len(lines) == 1, lines
    assert (
        f"cluster.num_gpus_per_node={asked} is invalid on this machine: it has {here} CUDA GPU(s) and {where}"
        in lines[0]
    )
    # without the checks against this machine the config is valid (written on a CPU box for a GPU machine)
    tc = load_train_config(
        "metaworld_ppo_tiny_cpu",
        [f"cluster.num_gpus_per_node={asked}", "cluster.component_placement={env: 0, rollout: 0, actor: 0}"],
        check_paths=False,
    )
    assert tc.cluster.num_gpus_per_node == asked


def test_several_errors_are_reported_together(capsys) -> None:
    lines = _cli_errors(
        train_main, ["metaworld_ppo_tiny_cpu", "algorithm.adv_type=gea", "env.train.num_envs=0"], capsys
    )
    assert len(lines) == 2


def test_env_group_size_is_algorithm_group_size(capsys) -> None:
    """`env.train.group_size` (the reference's spelling) and `algorithm.group_size` are one setting: the train envs'
    same-start groups are the estimator's; a different value either way is refused naming both."""
    lines = _cli_errors(sft_main, ["metaworld_grpo_tiny_cpu", "env.train.group_size=2"], capsys)
    assert lines == [
        "vla-sft: config error: env.train.group_size=2 conflicts with algorithm.group_size=4: they are one setting "
        "(algorithm.group_size is this project's name for it: the envs of a group share a start state); give one "
        "of them"
    ], lines
    lines = _cli_errors(
        sft_main, ["metaworld_grpo_tiny_cpu", "env.train.group_size=2", "algorithm.group_size=8"], capsys
    )
    assert lines == [
        "vla-sft: config error: env.train.group_size=2 conflicts with algorithm.group_size=8: they are one setting "
        "(algorithm.group_size is this project's name for it); give one of them"
    ], lines
    for overrides in (["algorithm.group_size=2"], ["algorithm.group_size=2", "env.train.group_size=2"]):
        tc = load_train_config("metaworld_grpo_tiny_cpu", overrides, check_paths=False)
        assert tc.algorithm.group_size == tc.env_train.group_size == 2
    tc = load_train_config("metaworld_ppo_tiny_cpu", ["algorithm.group_size=2"], check_paths=False)
    assert tc.env_train.group_size == 2  # PPO's same-start groups (env.train.use_fixed_reset_state_ids)
    lines = _cli_errors(sft_main, ["metaworld_grpo_tiny_cpu", "algorithm.group_size=3"], capsys)
    assert lines == [
        "vla-sft: config error: algorithm.group_size=3 is invalid: must divide env.train.num_envs=16 (the train envs "
        "are split into groups of that many rows sharing a start state)"
    ], lines


def test_grpo_score_needs_a_positive_gamma(capsys) -> None:
    lines = _cli_errors(sft_main, ["metaworld_grpo_tiny_cpu", "algorithm.gamma=0"], capsys)
    assert any("algorithm.gamma=0.0 is invalid with algorithm.adv_type='grpo'" in line for line in lines), (
        lines
    )


def test_unknown_config_name_lists_the_configs(capsys) -> None:
    lines = _cli_errors(eval_main, ["metaworld_ppo_tiny"], capsys)
    assert len(lines) == 1
    assert "unknown config 'metaworld_ppo_tiny': did you mean: metaworld_ppo_tiny_cpu" in lines[0]
    assert "maniskill_ppo_openvla" in lines[0]


def test_missing_config_file_and_user_yaml(tmp_path, capsys) -> None:
    lines = _cli_errors(train_main, [str(tmp_path / "nope.yaml")], capsys)
    assert lines == [f"vla-train: config error: config file '{tmp_path / 'nope.yaml'}' does not exist"]
    # a user YAML outside the app can build on the app's groups
    user = tmp_path / "mine.yaml"
    user.write_text(
        "defaults:\n  - metaworld_ppo_tiny_cpu\n  - _self_\nrunner:\n  logger:\n    experiment_name: mine\n"
    )
    tc = load_train_config(str(user), check_paths=False)
    assert tc.runner.logger.experiment_name == "mine" and tc.env_train.task == "drawer-close-v3"


def test_cfg_and_validate_flags(capsys, tmp_path) -> None:
    assert train_main(["metaworld_grpo_tiny_cpu", "--validate", f"runner.logger.log_path={tmp_path}"]) == 0
    assert "is valid" in capsys.readouterr().out
    assert train_main(["metaworld_grpo_tiny_cpu", "--cfg"]) == 0
    assert "adv_type: grpo" in capsys.readouterr().out


def test_config_error_is_fast_and_builds_nothing() -> None:
    """In a fresh interpreter, a bad value is reported before any simulator, model, transformers or Ray module is
    imported: what makes the error fast is what it does not load (its time depends on the machine's load, so the
    seconds are printed, not bounded)."""
    heavy = (
        "mujoco",
        "metaworld",
        "mani_skill",
        "sapien",
        "transformers",
        "ray",
        "vla_models.openvla_oft.modeling_openvla_oft",
    )
    code = (
        "import sys, time; t = time.time()\n"
        "from train_embodied.cli import train_main\n"
        "try:\n    train_main(['metaworld_ppo_tiny_cpu', 'algorithm.adv_type=gea'])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "import json; print(json.dumps({'code': code, 'seconds': time.time() - t, "
        f"'loaded': [m for m in {heavy!r} if m in sys.modules]}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"config error reported after {report['seconds']:.1f} s")
    assert report["code"] == 2
    assert "algorithm.adv_type='gea' is not one of: gae, grpo" in out.stderr
    assert report["loaded"] == [], report


def test_config_error_class_carries_all_lines() -> None:
    with pytest.raises(ConfigError) as exc:
        load_train_config("metaworld_ppo_tiny_cpu", ["algorithm.update_epoch=0", "actor.optim.lr=-1"])
    assert len(exc.value.errors) == 2


def test_run_embodiment_script_passes_config_and_overrides(tmp_path) -> None:
    """scripts/run_embodiment.sh CONFIG [overrides] (the reference launcher) reaches vla-train."""
    import os
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "LOG_DIR": str(tmp_path / "logs"),
        "VLA_TRAIN": str(Path(sys.executable).parent / "vla-train"),
    }
    ok = subprocess.run(
        ["bash", str(repo / "scripts" / "run_embodiment.sh"), "metaworld_grpo_tiny_cpu", "--validate"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "config 'metaworld_grpo_tiny_cpu' is valid" in ok.stdout
    assert (tmp_path / "logs" / "run_embodiment.log").exists()
    bad = subprocess.run(
        ["bash", str(repo / "scripts" / "run_embodiment.sh"), "maniskill_ppo_openvla", "algorithm.gamma=2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "algorithm.gamma=2.0 is invalid: must be in [0.0, 1.0]" in bad.stdout + bad.stderr
