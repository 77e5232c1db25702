#!/usr/bin/env bash
# Every single-GPU check in one go, on one CUDA machine: the GPU tests, the GPU benchmarks, and a short
# end-to-end run of the trainer with env, rollout and actor placed on GPU 0. Logs go to $OUT (default
# runs/gpu), one file per step; the numbers in benchmarks/RESULTS.md ("GPU" sections) come from these logs.
#
#   bash benchmarks/gpu_suite.sh                 # everything (about 8 minutes on one H100: 7 before the openpi step, which took 67 s)
#   STEPS="tests kernel" bash benchmarks/gpu_suite.sh
#   E2E_EPOCHS=30 E2E_CONFIG=metaworld_grpo_tiny_cpu STEPS=e2e bash benchmarks/gpu_suite.sh   # a whole CPU config
#
# The packages are used from their source folders (PYTHONPATH), so the machine only needs torch, triton,
# transformers, peft, safetensors, tensorboard, tqdm and, for the end-to-end step, gymnasium, hydra-core,
# metaworld and mujoco (EGL rendering). Not covered here: tests that need two GPUs or Ray
# (test_sharding_gpu.py, test_ray_gpu.py) and the ManiSkill3 GPU simulator (maniskill_gpu_throughput.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-runs/gpu}"
STEPS="${STEPS:-tests kernel variants openvla openpi e2e}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/packages/vla-algos/src:$PWD/packages/vla-envs/src:$PWD/packages/vla-models/src:$PWD/packages/vla-infra/src:$PWD/apps/train_embodied/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 MUJOCO_GL="${MUJOCO_GL:-egl}" PYOPENGL_PLATFORM="${PYOPENGL_PLATFORM:-egl}"
status=0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"
"$PY" -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, \
'transformers', transformers.__version__)" | tee -a "$OUT/device.txt"

step() {  # step NAME TIMEOUT_S CMD...: run one step with a time limit, its output to $OUT/NAME.log
    local name=$1 limit=$2; shift 2
    [[ " $STEPS " == *" $name "* ]] || return 0
    echo "=== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "=== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/$name.log"
    [[ $rc == 0 ]] || status=1
}

step tests 150 "$PY" -m pytest -p no:cacheprovider -v -rs \
    packages/vla-models/tests/test_kernel_gpu.py packages/vla-models/tests/test_policy_gpu.py \
    packages/vla-algos/tests/test_gae_gpu.py packages/vla-infra/tests/test_offload_gpu.py \
    apps/train_embodied/tests/test_update_gpu.py
step kernel 120 "$PY" benchmarks/logprob_kernel.py
step variants 120 "$PY" benchmarks/logprob_hidden_variants.py --profile
step openvla 180 "$PY" benchmarks/openvla_gpu.py --batch-sizes 8 32
step openpi 300 "$PY" benchmarks/openpi_gpu.py --batch-sizes 8 32 --repeats 3

e2e() {  # warm start, then E2E_EPOCHS (3) iterations and the evaluations with env, rollout and actor on GPU 0
    set -o pipefail
    local runs="$OUT/e2e_runs" policy
    policy=$("$PY" -c 'import sys; from train_embodied.cli import sft_main; sys.exit(sft_main())' \
        "${E2E_CONFIG:-metaworld_ppo_tiny_cpu}" runner.logger.log_path="$runs" | tail -n 1) || return 1
    [[ -n "$policy" ]] || return 1
    "$PY" -c 'import sys; from train_embodied.cli import train_main; sys.exit(train_main())' \
        "${E2E_CONFIG:-metaworld_ppo_tiny_cpu}" runner.logger.log_path="$runs" actor.model.model_path="$policy" \
        cluster.num_gpus_per_node=1 'cluster.component_placement={env: 0, rollout: 0, actor: 0}' \
        runner.max_epochs=${E2E_EPOCHS:-3} runner.val_check_interval=10 runner.save_interval=-1 runner.progress_bar=false \
        env.eval.video_cfg.save_video=false || return 1
    find "$runs" -name summary.json -exec cp {} "$OUT/e2e_summary.json" \;
    find "$runs" -path '*tensorboard*' -name 'events.out.tfevents*' -exec cp {} "$OUT/" \;
}
if [[ " $STEPS " == *" e2e "* ]]; then step e2e $((150 + 10 * ${E2E_EPOCHS:-3})) bash -c "$(declare -f e2e); PY=$PY OUT=$OUT e2e"; fi
exit $status
