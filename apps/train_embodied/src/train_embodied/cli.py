"""Command lines: `vla-train CONFIG [overrides]`, `vla-eval CONFIG [overrides]`, `vla-sft CONFIG [overrides]`.

CONFIG is a config name under the app's configs folder (`vla-train --list`) or a path to a YAML file;
overrides use Hydra's grammar (`algorithm.gamma=0.98`, `env@env.train=metaworld_mt50`, `+new.key=1`).
Config problems are reported one per line on stderr with exit status 2, before anything is built.
"""

from __future__ import annotations

import errno
import io
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

USAGE = """usage: {prog} CONFIG [KEY=VALUE ...] [--cfg] [--validate]
       {prog} --list

  CONFIG        a config name (see --list) or a path to a YAML file
  KEY=VALUE     Hydra overrides, e.g. runner.max_epochs=10 algorithm=grpo actor.model.model_path=/ckpt
  --cfg         print the composed, resolved config and exit
  --validate    validate the config and exit
  --list        list the shipped configs
"""


def _parse(argv: Sequence[str], prog: str) -> tuple[str, list[str], set[str]] | None:
    flags = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    unknown = flags - {"--cfg", "--validate", "--list", "--help"}
    if "-h" in args or "--help" in flags:
        print(USAGE.format(prog=prog))
        return None
    if unknown:
        print(
            f"{prog}: unknown option(s) {', '.join(sorted(unknown))}\n" + USAGE.format(prog=prog),
            file=sys.stderr,
        )
        raise SystemExit(2)
    if "--list" in flags:
        from train_embodied.config import list_configs

        print("\n".join(list_configs()))
        return None
    if not args:
        print(USAGE.format(prog=prog), file=sys.stderr)
        raise SystemExit(2)
    return args[0], args[1:], flags


def _load(prog: str, config: str, overrides: list[str], flags: set[str], *, sft: bool = False):
    """The validated config of a command, or None when it only prints or validates. A problem with the config or
    with what the run would read (`train_embodied.preflight`: the run folder, the resume checkpoint and, unless
    `sft` (a policy built from scratch, the GPUs not checked), the model folder) is one line per problem on
    stderr, exit status 2."""
    from omegaconf import OmegaConf

    from train_embodied.config import (
        ConfigError,
        assign_log_dir,
        build_train_config,
        compose_config,
        to_plain,
    )
    from train_embodied.run_folder import env_interpolations, name_problem, redact_env_values

    try:
        cfg = compose_config(config, overrides)
        name = OmegaConf.select(cfg, "runner.logger.experiment_name")
        if name is not None and (problem := name_problem("runner.logger.experiment_name", name)):
            raise ConfigError([problem])  # before the name becomes a path
        assign_log_dir(cfg)
        secrets = env_interpolations(cfg)
        plain = to_plain(cfg)
        if "--cfg" in flags:
            print(OmegaConf.to_yaml(OmegaConf.create(redact_env_values(plain, secrets))))
        tc = build_train_config(plain, check_paths=not sft)
        from train_embodied.preflight import (  # reads files: a valid config's
            SFT_CHECKS,
            TRAIN_CHECKS,
            preflight,
        )

        if problems := preflight(tc, SFT_CHECKS if sft else TRAIN_CHECKS):
            raise ConfigError(problems)
        # the saved config.json (and wandb's copy) name ${oc.env:...} instead of holding the variables' values
        redacted = redact_env_values(tc.raw, secrets)
        tc.raw.clear()
        tc.raw.update(redacted)
    except ConfigError as exc:
        for line in exc.errors:
            print(f"{prog}: config error: {line}", file=sys.stderr)
        raise SystemExit(2) from None
    if "--cfg" in flags or "--validate" in flags:
        if "--validate" in flags:
            print(f"{prog}: config {config!r} is valid (log dir would be {tc.log_dir})")
        return None
    return tc


#: OSError numbers of a write the disk or the folder refused (full disk, quota, file size limit, read-only file
#: system, permissions, an I/O error): the run ends in one line naming the file.
_WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
)


def _run(prog: str, tc) -> int:
    """Run the trainer in its locked run folder; each fault the user must act on is one line on stderr: a run
    folder that cannot be written or is in use by another run, or a resume checkpoint that does not fit (exit 2,
    before any simulator starts where it can be found then); something this machine lacks that a worker found
    (a `vla_envs.SimulatorSetupError`, exit 2); a simulator that cannot start, an update that keeps diverging, a
    checkpoint save that fails (a full disk; older checkpoints stay intact), a metrics, tensorboard or video file
    that cannot be written (a full disk), a worker that does not answer within
    cluster.worker_timeout_s, a lost node or a worker that died too often, once runner.max_restarts are used up
    (exit 1; the line names the worker, the phase and the last complete checkpoint); Ctrl-C (exit 130) and SIGTERM
    (exit 143): the workers are shut down."""
    from train_embodied.checkpointing import ResumeError
    from train_embodied.numerics import TrainingDiverged
    from train_embodied.run_failures import (
        Terminated,
        failure_line,
        last_checkpoint_text,
        run_restarting,
        sigterm_stops_the_run,
    )
    from train_embodied.run_folder import RunFolderError, run_folder_lock
    from train_embodied.runner import run
    from vla_envs import SimulatorUnavailable
    from vla_infra import CheckpointError, CheckpointSaveError, WorkerFailure

    if isinstance(sys.stdout, io.TextIOWrapper):
        # each progress line reaches a pipe (`| tee run.log`, a supervising process) when it is printed, not when a
        # block of output has filled up
        sys.stdout.reconfigure(line_buffering=True)
    try:
        with run_folder_lock(tc.log_dir), _ctrl_c_reaches_this_process_only(), sigterm_stops_the_run():
            run_restarting(tc, run)
    except (RunFolderError, ResumeError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except CheckpointError as exc:
        print(
            f"{prog}: error: runner.resume_dir={tc.runner.resume_dir!r}: {_first_line(exc)}", file=sys.stderr
        )
        return 2
    except TrainingDiverged as exc:
        print(f"{prog}: error: {_first_line(exc)}; {last_checkpoint_text(tc.log_dir)}", file=sys.stderr)
        return 1
    except (SimulatorUnavailable, CheckpointSaveError) as exc:
        print(f"{prog}: error: {_first_line(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        # a full disk (or a folder that stopped being writable) while writing metrics, tensorboard events or videos
        where = exc.filename or "a file of the run"
        print(
            f"{prog}: error: cannot write {where}: {exc.strerror or _first_line(exc)}; the run stopped; "
            f"{last_checkpoint_text(tc.log_dir)}; run folder {tc.log_dir}",
            file=sys.stderr,
        )
        return 1
    except WorkerFailure as exc:
        if (lack := _setup_error(exc)) is not None:  # a worker found something this machine lacks
            print(f"{prog}: error: {_first_line(lack)}", file=sys.stderr)
            return 2
        print(f"{prog}: error: {failure_line(exc, tc.log_dir)}; workers stopped", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        stopped = f"workers stopped; {last_checkpoint_text(tc.log_dir)}; run folder {tc.log_dir}"
        print(f"{prog}: interrupted (Ctrl-C): {stopped}", file=sys.stderr)
        return 130
    except Terminated:
        stopped = f"workers stopped; {last_checkpoint_text(tc.log_dir)}; run folder {tc.log_dir}"
        print(f"{prog}: terminated (SIGTERM): {stopped}", file=sys.stderr)
        return 143
    except Exception as exc:
        if (lack := _setup_error(exc)) is None:
            raise
        print(f"{prog}: error: {_first_line(lack)}", file=sys.stderr)
        return 2
    return 0


# ---- set-up check of the machine: one call before any worker starts (a pre-run check of its own) ----
def _check_machine(prog: str, envs: Sequence[tuple[str, object]]) -> None:
    """Each env of the run checked against this machine before any worker starts (`vla_envs.check_env_setup`):
    a simulator package, asset, runtime or display library that is missing ends the command with one line per
    env naming it and the command that fixes it (exit 2). A lack that shows only inside a simulator ends the run
    with the same line from the worker (`_run`)."""
    from vla_envs import SimulatorSetupError, check_env_setup

    problems: dict[str, str] = {}
    for name, env in envs:
        try:
            check_env_setup(env)
        except SimulatorSetupError as exc:
            problems.setdefault(_first_line(exc), name)
    for line, name in problems.items():
        print(f"{prog}: error: {name}: {line}", file=sys.stderr)
    if problems:
        raise SystemExit(2)


def _run_envs(tc) -> list[tuple[str, object]]:
    """The envs a `vla-train` / `vla-eval` run builds: the train env unless it only evaluates, and the eval env."""
    return ([] if tc.runner.only_eval else [("env.train", tc.env_train)]) + [("env.eval", tc.env_eval)]


def _setup_error(exc: BaseException) -> BaseException | None:
    """The `SimulatorSetupError` that `exc` is or carries (an error a Ray worker raised holds it as `cause`), the
    innermost one, else None."""
    from vla_envs import SimulatorSetupError

    chain = [exc]
    while len(chain) < 8:
        nxt = getattr(chain[-1], "cause", None)
        nxt = nxt if isinstance(nxt, BaseException) else chain[-1].__cause__
        if nxt is None or any(nxt is seen for seen in chain):
            break
        chain.append(nxt)
    return next((e for e in reversed(chain) if isinstance(e, SimulatorSetupError)), None)


@contextmanager
def _ctrl_c_reaches_this_process_only() -> Iterator[None]:
    """A terminal sends Ctrl-C (SIGINT) to the whole process group: every env worker would die printing its own
    traceback. Env workers are forked by multiprocessing's fork server (`env.*.start_method=forkserver`, the
    default), which gives each the SIGINT disposition the server started with: the server is started here while
    SIGINT is ignored, so the workers ignore Ctrl-C and this process alone stops, shutting them down in order
    (workers started with `spawn` or `fork` still get it)."""
    if threading.current_thread() is threading.main_thread():
        from multiprocessing import forkserver

        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGINT, previous)
    yield


def _first_line(exc: BaseException) -> str:
    """The message of `exc` (of its cause, for an error a Ray worker raised), on one line."""
    cause = getattr(exc, "cause", None)
    text = str(cause if isinstance(cause, BaseException) else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def train_main(argv: Sequence[str] | None = None) -> int:
    """`vla-train CONFIG [overrides]`: RL training (or evaluation with runner.only_eval=true)."""
    parsed = _parse(list(sys.argv[1:] if argv is None else argv), "vla-train")
    if parsed is None:
        return 0
    config, overrides, flags = parsed
    tc = _load("vla-train", config, overrides, flags)
    if tc is None:
        return 0
    _check_machine("vla-train", _run_envs(tc))
    return _run("vla-train", tc)


def eval_main(argv: Sequence[str] | None = None) -> int:
    """`vla-eval CONFIG [overrides]`: held-out evaluation only (`runner.only_eval=true`)."""
    parsed = _parse(list(sys.argv[1:] if argv is None else argv), "vla-eval")
    if parsed is None:
        return 0
    config, overrides, flags = parsed
    tc = _load("vla-eval", config, [*overrides, "runner.only_eval=true"], flags)
    if tc is None:
        return 0
    _check_machine("vla-eval", _run_envs(tc))
    return _run("vla-eval", tc)


def sft_main(argv: Sequence[str] | None = None) -> int:
    """`vla-sft CONFIG [overrides]`: supervised warm start on scripted-expert demos; prints the checkpoint folder."""
    parsed = _parse(list(sys.argv[1:] if argv is None else argv), "vla-sft")
    if parsed is None:
        return 0
    config, overrides, flags = parsed
    tc = _load("vla-sft", config, overrides, flags, sft=True)
    if tc is None:
        return 0
    _check_machine("vla-sft", [("env.train", tc.env_train)])
    from train_embodied.sft import run_sft

    try:
        out = run_sft(tc)
    except Exception as exc:
        if (lack := _setup_error(exc)) is None:
            raise
        print(f"vla-sft: error: {_first_line(lack)}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(train_main())
