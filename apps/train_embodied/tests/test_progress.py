"""`runner.progress_bar`: a carriage-return bar on a terminal, plain lines every few seconds in a piped or
redirected log (`auto`, the default), always a bar (`true`), none (`false`); other values refused in one line."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY

# 8 steps of 0.1 s under one bar, then a postfix and the end: with interval_s=0.25 a log gets the opening line,
# about every third step, and the closing line.
_BAR_SCRIPT = """
import sys, time
from train_embodied.progress import progress_bar
mode = {"true": True, "false": False}.get(sys.argv[1], sys.argv[1])
bar = progress_bar(mode, total=8, desc="rollout", unit="step", leave=False, interval_s=0.25)
for i in range(8):
    time.sleep(0.1)
    bar.update(1)
    bar.set_postfix(kl="0.010")
bar.close()
print("DONE", file=sys.stderr)
"""


def _run_piped(mode: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", _BAR_SCRIPT, mode], capture_output=True, timeout=120, check=True
    )
    return out.stderr.decode()  # bytes: text mode would turn carriage returns into newlines


def _run_on_terminal(mode: str) -> str:
    """The script's stderr when it is a terminal (a pseudo-terminal), as the terminal received it."""
    main, child = pty.openpty()
    fcntl.ioctl(
        child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0)
    )  # 100 columns, as a terminal has
    proc = subprocess.Popen(
        [sys.executable, "-c", _BAR_SCRIPT, mode], stderr=child, stdout=subprocess.DEVNULL
    )
    os.close(child)
    chunks = []
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode(errors="replace")


def test_auto_in_a_pipe_prints_plain_lines_every_interval() -> None:
    text = _run_piped("auto")
    assert "\r" not in text and "\x1b" not in text
    lines = [line for line in text.splitlines() if line.startswith("rollout:")]
    assert lines[0].startswith("rollout: 0/8 step"), lines
    assert lines[-1].startswith("rollout: 8/8 step") and "kl=0.010" in lines[-1], lines
    # at most one line every interval_s while it advances (0.8 s of steps, 0.25 s apart) plus the first and last
    assert 3 <= len(lines) <= 6, lines
    counts = [int(re.match(r"rollout: (\d+)/8", line).group(1)) for line in lines]
    assert counts == sorted(counts)
    assert text.rstrip().endswith("DONE")


def test_auto_on_a_terminal_draws_a_carriage_return_bar() -> None:
    text = _run_on_terminal("auto")
    assert "\r" in text and "8/8" in text
    assert not re.search(r"rollout: \d+/8 step \[", text)  # not the log's line format


@pytest.mark.parametrize("mode", ["true", "false"])
def test_true_and_false_keep_their_meaning_in_a_pipe(mode: str) -> None:
    text = _run_piped(mode)
    if mode == "true":  # a bar with carriage returns, as asked, wherever the output goes
        assert "\r" in text and "8/8" in text
    else:
        assert text.strip() == "DONE"


def test_progress_bar_config_values(tmp_path: Path) -> None:
    from train_embodied.config import load_train_config

    assert load_train_config("metaworld_ppo_tiny_cpu", []).runner.progress_bar == "auto"
    for value, expected in (("true", True), ("false", False), ("auto", "auto")):
        tc = load_train_config("metaworld_ppo_tiny_cpu", [f"runner.progress_bar={value}"])
        assert tc.runner.progress_bar == expected
    out = subprocess.run(
        [Path(sys.executable).with_name("vla-train"), "metaworld_ppo_tiny_cpu", "runner.progress_bar=yes",
         f"runner.logger.log_path={tmp_path}", "--validate"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "vla-train: config error: runner.progress_bar='yes' is not one of: true, false, auto"
    ]


def test_vla_sft_in_a_pipe_logs_demo_and_training_progress_as_lines(tmp_path: Path) -> None:
    """The real command with its output piped: the demos' bar (vla-envs, given the app's bar) and the supervised
    steps' bar each write plain lines."""
    pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")
    script = textwrap.dedent(
        """
        import sys
        from train_embodied.cli import sft_main
        sys.exit(sft_main(sys.argv[1:]))
        """
    )
    args = [
        "metaworld_ppo_tiny_cpu", *PPO_TINY, "runner.progress_bar=auto", "sft.num_demos=2", "sft.steps=6",
        "sft.batch_size=8", f"sft.output_dir={tmp_path / 'sft'}",
    ]  # fmt: skip
    args.remove("runner.progress_bar=false")
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, timeout=600)
    stderr = out.stderr.decode()
    assert out.returncode == 0, stderr[-3000:]
    assert "\r" not in stderr
    assert re.search(r"^demos: 2/2 ep \[", stderr, re.MULTILINE), stderr[-3000:]
    assert re.search(r"^sft: 6/6 step \[.*loss=", stderr, re.MULTILINE), stderr[-3000:]
