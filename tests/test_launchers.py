"""The cluster launchers read the node and GPU counts from the config: the Slurm batch script's dry run prints the
`ray start` commands of a head and its workers for a node list and the trainer joining with
`cluster.ray_address=auto`; the KubeRay RayJob manifest holds only fields KubeRay defines (its schema facts are
vendored in tests/kuberay/rayjob_schema.json, source named there), and the shipped example is what the generator
prints for it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "scripts" / "slurm" / "ray_train.sbatch"
EXAMPLE = ROOT / "scripts" / "kuberay" / "rayjob_maniskill_ppo_openvla_2x8.yaml"
SCHEMA = Path(__file__).parent / "kuberay" / "rayjob_schema.json"
TWO_NODES = ["cluster.num_nodes=2", "cluster.component_placement={env: 0-7, rollout: 8-15, actor: 0-15}"]


def _sbatch(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "RUNS_DIR": "/shared/runs"}
    return subprocess.run(
        ["bash", str(SBATCH), *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def test_slurm_dry_run_prints_head_workers_and_trainer_for_the_node_list() -> None:
    three = ["cluster.num_nodes=3", "cluster.component_placement={env: 0-7, rollout: 8-15, actor: 0-23}"]
    done = _sbatch("--dry-run", "--nodelist", "gpu-a,gpu-b,gpu-c", "maniskill_ppo_openvla", *three)
    assert done.returncode == 0, done.stderr
    lines = [shlex.split(line) for line in done.stdout.strip().splitlines()]
    on = [line[: line.index("-w") + 2] for line in lines]
    assert all(prefix[:4] == ["srun", "--nodes=1", "--ntasks=1", "--overlap"] for prefix in on)
    hosts = [prefix[-1] for prefix in on]
    commands = [line[line.index("-w") + 2 :] for line in lines]
    assert hosts == ["gpu-a", "gpu-b", "gpu-c", "gpu-a", "gpu-a", "gpu-a", "gpu-b", "gpu-c"]
    assert commands[0] == ["ray", "start", "--head", "--block", "--node-ip-address=gpu-a", "--port=6379",
                           "--num-gpus=8", "--labels=vla-infra/node-rank=0"]  # fmt: skip
    for rank in (1, 2):  # every worker joins the head with its node rank as its label and the config's GPUs
        assert commands[rank] == ["ray", "start", "--block", "--address=gpu-a:6379", "--num-gpus=8",
                                  f"--labels=vla-infra/node-rank={rank}"]  # fmt: skip
    assert commands[3] == ["ray", "status", "--address=gpu-a:6379"]
    assert commands[4] == [
        "env", "RAY_ADDRESS=gpu-a:6379", sys.executable, "-m", "train_embodied.cli", "maniskill_ppo_openvla",
        "cluster.num_nodes=3", "cluster.component_placement={env: 0-7, rollout: 8-15, actor: 0-23}",
        "runner.logger.log_path=/shared/runs", "cluster.backend=ray", "cluster.ray_address=auto",
    ]  # fmt: skip
    assert commands[5:] == [["ray", "stop", "--force"]] * 3


def test_slurm_refuses_an_allocation_of_another_size_and_a_bad_config() -> None:
    done = _sbatch("--dry-run", "--nodelist", "gpu-a", "maniskill_ppo_openvla", *TWO_NODES)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "ray_train.sbatch: the allocation has 1 node(s) but cluster.num_nodes=2: submit with --nodes=2"
    )
    done = _sbatch("--dry-run", "--nodelist", "gpu-a", "maniskill_ppo_openvla", "cluster.num_nodes=0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "launch: config error: cluster.num_nodes=0 is invalid: must be >= 1"
    ], done.stderr


def _manifest(capsys: pytest.CaptureFixture, *args: str) -> dict:
    from train_embodied.launch import main

    assert main(["kuberay", *args]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def _errors(manifest: dict) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]


def test_kuberay_manifest_has_only_kuberay_fields_and_the_config_counts(capsys) -> None:
    args = ["maniskill_ppo_openvla", *TWO_NODES, "--image", "vla-rl:latest", "--runs-claim", "vla-runs"]
    manifest = _manifest(capsys, *args)
    assert _errors(manifest) == []
    cluster = manifest["spec"]["rayClusterSpec"]
    head, (workers,) = cluster["headGroupSpec"], cluster["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"] == 1  # num_nodes - 1
    for group in (head, workers):
        assert group["rayStartParams"] == {"num-gpus": "8"}
        (container,) = group["template"]["spec"]["containers"]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 8}
        assert container["image"] == "vla-rl:latest"
    entry = shlex.split(manifest["spec"]["entrypoint"])
    assert entry[:2] == ["vla-train", "maniskill_ppo_openvla"] and entry[2:4] == TWO_NODES
    assert entry[-2:] == ["cluster.backend=ray", "cluster.ray_address=auto"]
    # the shipped example is the generator's output for it
    assert yaml.safe_load(EXAMPLE.read_text()) == manifest
    # four nodes: three workers
    four = _manifest(capsys, "maniskill_ppo_openvla", "cluster.num_nodes=4")
    assert four["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 3 and _errors(four) == []


def test_the_vendored_schema_refuses_what_kuberay_refuses() -> None:
    manifest = yaml.safe_load(EXAMPLE.read_text())
    cluster = manifest["spec"]["rayClusterSpec"]
    cluster["workerGroupSpec"] = cluster.pop("workerGroupSpecs")  # a misspelled field
    cluster["headGroupSpec"]["rayStartParams"]["num-gpus"] = 8  # map[string]string
    del cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["name"]
    cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "8 GB"
    errors = "\n".join(_errors(manifest))
    assert "'workerGroupSpec' was unexpected" in errors
    assert "rayStartParams.num-gpus: 8 is not of type 'string'" in errors
    assert "'name' is a required property" in errors
    assert "limits.memory" in errors
