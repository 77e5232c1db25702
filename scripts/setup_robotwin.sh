#!/usr/bin/env bash
# Build the separate Python environment that runs RoboTwin 2.0 (its pins clash with the workspace: mplib 0.2.1
# vs ManiSkill's 0.1.1, numpy 1.26, pandas < 2.3), with RoboTwin's runtime from PyPI and a stand-in robot.
#
#   bash scripts/setup_robotwin.sh            # build .venv-robotwin, or reuse it when already built
#   ROBOTWIN_VENV=/tmp/rt bash scripts/setup_robotwin.sh --fresh
#
# What it installs (all from PyPI, nothing of RoboTwin lives in this repository):
#   - CPU torch (RoboTwin imports it), numpy 1.26.4, sapien 3.0.1 (3.0.0b1, RoboTwin's pin, cannot create a
#     Vulkan device on Mesa lavapipe), mplib 0.2.1, toppra, transforms3d, trimesh, ... and
#     `rlinf-robotwin-runtime` (RoboTwin's VectorEnv, tasks and success checks) with --no-deps;
#   - an `open3d` placeholder package instead of open3d (1.1 GB): RoboTwin imports it at module level for
#     point clouds only; every use raises (keep task_config.data_type.pointcloud false);
#   - the asset root <venv>/robotwin-assets with the stand-in robot (scripts/robotwin_standin_assets.py,
#     from the Franka Panda of the `mani-skill` wheel) and stand-in staplers, and <venv>/robotwin-assets-lowpoly,
#     the same drawn with the collision meshes (same states, rewards and success; about 3x cheaper pictures).
# The adapter runs RoboTwin in a child process of this environment's interpreter: set
#   extra.robotwin_python=<venv>/bin/python  extra.assets_path=<venv>/robotwin-assets
# (or ROBOTWIN_PYTHON / ROBOTWIN_ASSETS_ROOT). The last line printed is `ROBOTWIN_VENV=<absolute path>`.
set -euo pipefail
cd "$(dirname "$0")/.."
RVENV="${ROBOTWIN_VENV:-.venv-robotwin}"
PY="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
RUNTIME_SPEC="rlinf-robotwin-runtime==0.1.3"
MANISKILL_SPEC="mani-skill==3.0.1"
PINS=(numpy==1.26.4 sapien==3.0.1 mplib==0.2.1 toppra==0.6.3 transforms3d==0.4.2 trimesh==4.4.3
      gymnasium==0.29.1 "opencv-python-headless<4.12" "scipy<1.15" pyyaml "imageio<3" pillow h5py "pandas<2.3"
      matplotlib huggingface-hub "setuptools<81")  # setuptools: sapien 3.0.1 imports pkg_resources

if [[ "${1:-}" == "--fresh" ]]; then rm -rf "$RVENV"; fi
# The build is reused when this script and the asset writer are unchanged since it was made.
FINGERPRINT="$(cat scripts/setup_robotwin.sh scripts/robotwin_standin_assets.py | sha256sum | cut -c1-16)"
STAMP="$RVENV/.robotwin-ready"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$FINGERPRINT" && -x "$RVENV/bin/python" ]]; then
    echo "[setup_robotwin] $RVENV is up to date"
    echo "ROBOTWIN_VENV=$(cd "$RVENV" && pwd)"
    exit 0
fi

if [[ ! -x "$RVENV/bin/python" ]]; then
    echo "[setup_robotwin] creating virtual environment $RVENV"
    "$PY" -m venv "$RVENV"
fi
PIP=("$RVENV/bin/python" -m pip install --disable-pip-version-check -q)
echo "[setup_robotwin] installing $TORCH_SPEC (CPU build) and RoboTwin's requirements"
"${PIP[@]}" "$TORCH_SPEC" "${PINS[@]}"
echo "[setup_robotwin] installing $RUNTIME_SPEC (--no-deps: its torch/sapien/open3d pins do not fit a CPU)"
"${PIP[@]}" --no-deps "$RUNTIME_SPEC"

SITE="$("$RVENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if ! "$RVENV/bin/python" -c 'import open3d' 2>/dev/null || [[ -f "$SITE/open3d/VLA_PLACEHOLDER" ]]; then
    mkdir -p "$SITE/open3d"
    touch "$SITE/open3d/VLA_PLACEHOLDER"
    cat > "$SITE/open3d/__init__.py" <<'EOF'
"""Placeholder for open3d, written by scripts/setup_robotwin.sh: RoboTwin imports open3d at module level for
point clouds only. Any use raises; keep RoboTwin's task_config.data_type.pointcloud false."""


def __getattr__(name):
    raise ImportError(f"open3d.{name}: open3d is not installed in this RoboTwin environment (point clouds are off)")
EOF
fi

echo "[setup_robotwin] writing the stand-in robot's asset root from $MANISKILL_SPEC"
WHEELS="$RVENV/wheels"
mkdir -p "$WHEELS"
"$RVENV/bin/python" -m pip download --disable-pip-version-check -q --no-deps -d "$WHEELS" "$MANISKILL_SPEC"
for VISUALS in full lowpoly; do
    ROOT="$RVENV/robotwin-assets"; [[ "$VISUALS" == lowpoly ]] && ROOT="$RVENV/robotwin-assets-lowpoly"
    "$RVENV/bin/python" scripts/robotwin_standin_assets.py \
        --mani-skill-wheel "$(ls "$WHEELS"/mani_skill-*.whl | head -1)" --out "$ROOT" --visuals "$VISUALS"
done
rm -rf "$WHEELS"
"$RVENV/bin/python" -c 'import robotwin.envs.vector_env, sapien, mplib; print("[setup_robotwin] import check ok: sapien", sapien.__version__, "mplib", mplib.__version__)'
echo "$FINGERPRINT" > "$STAMP"
echo "ROBOTWIN_VENV=$(cd "$RVENV" && pwd)"
