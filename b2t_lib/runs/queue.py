"""The detached queue: one process per group that prepares the data and starts the group's runs, one
per device slot, in the order of its plan, and outlives the notebook (or terminal) that asked for it.

``launch`` (:mod:`.launch`) writes ``runs/<group>/.launch/plan.json`` and starts
``python -m b2t_lib launch-queue runs/<group>/.launch/plan.json`` in a new session (so a kernel
restart, a closed browser tab or a Ctrl-C in the terminal does not reach it), with its output in
``queue.log`` beside the plan. The queue runner

1. takes the group's lock (``.launch/lock``, ``flock``): a second runner of the same group exits at
   once, so re-running a cell never starts a run twice;
2. prepares each data set the plan needs (the task's ``prepare_data``, the same functions as
   ``data_scripts/``; for WMT at small/full scale: download and preparation), once per data folder;
3. starts every run that is ``new`` or ``interrupted`` (:mod:`.runs`) on a free slot as its own process,
   in a new session too: ``python -m b2t_lib train --config <run>/config.json`` (the plan's config of the
   run, written as data), or ``python -m torch.distributed.run --nproc_per_node N ...`` (``torchrun``) when
   the slot has N > 1 GPUs; ``CUDA_VISIBLE_DEVICES`` is the slot's; output appended to ``<run>/train.log``; the launch
   record ``<run>/launch.json`` written atomically (pid, command, start time, device, session) before
   the runner looks away, and completed with the exit code and end time when the process ends;
4. re-reads the plan at every poll (a later ``launch`` of the same group replaces it: new runs join the
   queue, runs that failed in an older session are retried), and exits when no run of the plan is left
   to start or running.

A slot is busy while any launched process of any group under ``runs_root()`` uses it (read from the
launch records), so two groups never put two runs on one GPU. Killing the runner stops no run: the
next ``launch`` starts a new runner, which waits for the live runs and resumes those that died.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from ..config import ConfigError
from ..errors import EXIT_USER_ERROR, UserError
from ..errors import message as error_line
from ..files import read_json, write_json_atomic
from ..files import process_token
from ..train.records import LAUNCH_RECORD, RUN_CONFIG, TRAIN_LOG
from .state import busy_devices, repo_root, run_status

PLAN, STATE, QUEUE_LOG, LOCK = "plan.json", "state.json", "queue.log", "lock"
POLL_S = 0.5


def now_iso() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------------- slots
def make_slots(devices: list[str]) -> list[dict]:
    """Device slots from specs: ``"cpu"`` (no GPU), or CUDA ids as ``CUDA_VISIBLE_DEVICES`` writes them
    (``"0"``, ``"2,3"``: a slot of two GPUs runs one run on both through torchrun)."""
    slots, cpus = [], 0
    for spec in devices:
        spec = str(spec).strip()
        if spec == "cpu":
            slots.append({"name": f"cpu{cpus}", "cuda": "", "nproc": 1})
            cpus += 1
        else:
            ids = [x.strip() for x in spec.split(",") if x.strip()]
            if not ids:
                raise ConfigError(f"device {spec!r}: give 'cpu' or CUDA ids such as '0' or '0,1'")
            slots.append({"name": "gpu" + ",".join(ids), "cuda": ",".join(ids), "nproc": len(ids)})
    names = [s["name"] for s in slots]
    if len(set(names)) != len(names):
        raise ConfigError(f"devices {devices} name one GPU twice")
    return slots


def visible_gpus() -> list[str]:
    """The CUDA ids this process may use (:func:`b2t_lib.scale.cuda_devices`: stand-ins under the rehearsal)."""
    from ..scale import cuda_devices

    return cuda_devices()


# ---------------------------------------------------------------------------------------------- one run
def run_command(config_file: Path, slot: dict, python: str = sys.executable) -> list[str]:
    """The command that trains one run from its config file (``TrainConfig.to_dict`` as JSON) on ``slot``: the
    config crosses the process boundary as data, as it stands in the plan."""
    train = ["-m", "b2t_lib", "train", "--config", str(config_file)]
    if slot["nproc"] > 1:
        return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={slot['nproc']}", *train]
    return [python, *train]


def start_run(name: str, cfg_values: dict, slot: dict, session: str, cwd: str) -> subprocess.Popen:
    """Start one run detached on ``slot``; write its launch record before returning."""
    run_dir = Path(cfg_values["save_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    previous = read_json(run_dir / LAUNCH_RECORD) or {}
    config_file = run_dir / RUN_CONFIG
    write_json_atomic(config_file, {**cfg_values, "resume": True})  # a detached run always resumes its folder
    command = run_command(config_file, slot)
    env = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES=slot["cuda"])
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
    attempt = int(previous.get("attempt", 0)) + 1
    with open(run_dir / TRAIN_LOG, "ab") as log:
        log.write(f"\n=== {now_iso()} attempt {attempt} on {slot['name']}: {shlex.join(command)}\n".encode())
        log.flush()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    write_json_atomic(
        run_dir / LAUNCH_RECORD,
        {
            "name": name,
            "pid": process.pid,
            "token": process_token(process.pid),
            "command": shlex.join(command),
            "started": now_iso(),
            "started_unix": time.time(),
            "device": slot["name"],
            "cuda_visible_devices": slot["cuda"],
            "nproc": slot["nproc"],
            "host": socket.gethostname(),
            "session": session,
            "attempt": attempt,
            "queue_pid": os.getpid(),
            "log": str(run_dir / TRAIN_LOG),
            "config": cfg_values,
            "exit_code": None,
            "ended": None,
        },
    )
    return process


def record_exit(run_dir: Path, returncode: int) -> None:
    record = read_json(run_dir / LAUNCH_RECORD) or {}
    record.update(exit_code=returncode, ended=now_iso(), ended_unix=time.time())
    write_json_atomic(run_dir / LAUNCH_RECORD, record)


# ---------------------------------------------------------------------------------------------- the queue
def try_lock(path: Path):
    """An open file holding the exclusive lock at ``path``, or None when another process holds it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def queue_alive(queue: Path) -> bool:
    """True while a queue runner holds the group's lock."""
    handle = try_lock(queue / LOCK)
    if handle is None:
        return True
    handle.close()  # closing releases the lock
    return False


def start_queue(queue: Path) -> subprocess.Popen:
    """Start the queue runner of ``queue/plan.json`` in a new session; its output goes to ``queue.log``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
    with open(queue / QUEUE_LOG, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "b2t_lib", "launch-queue", str(queue / PLAN)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(repo_root()),
            env=env,
            start_new_session=True,
        )


def _say(message: str) -> None:
    print(f"[{now_iso()}] {message}", flush=True)


def _prepare(cfg_values: dict) -> None:
    from ..train.options import TrainConfig
    from ..train.registry import build_task

    build_task(TrainConfig.from_dict(cfg_values)).prepare_data()


def run_queue(plan_path: str | Path, poll: float = POLL_S) -> int:
    """The queue runner's loop (``python -m b2t_lib launch-queue PLAN``); returns its exit status."""
    plan_path = Path(plan_path)
    queue = plan_path.parent
    lock = try_lock(queue / LOCK)
    if lock is None:
        _say("another queue runner holds this group's lock; it reads the new plan; exiting")
        return 0
    state_path = queue / STATE
    children: dict[str, tuple[subprocess.Popen, dict, Path]] = {}  # name -> (process, slot, run folder)
    prepared: set[tuple[str, str]] = set()
    plan: dict = {}

    def state(phase: str, **more) -> None:
        write_json_atomic(
            state_path, {"session": plan.get("session"), "pid": os.getpid(), "phase": phase, "time": now_iso(), **more}
        )

    try:
        while True:
            plan = read_json(plan_path) or plan  # a later launch may have replaced it
            runs, session = plan_runs(plan), plan["session"]
            for name, (process, _, run_dir) in list(children.items()):  # reap what ended
                code = process.poll()
                if code is not None:
                    record_exit(run_dir, code)
                    _say(f"{name} ended with exit code {code}")
                    del children[name]
            statuses = {name: run_status(Path(values["save_dir"]), session, name) for name, values in runs.items()}
            todo = [n for n, s in statuses.items() if s.state in ("new", "interrupted") and n not in children]
            live = {n for n, s in statuses.items() if s.state == "running"} | set(children)
            if not todo and not live:
                state("done")
                _say("nothing left to start or wait for; the queue ends")
                return 0
            for name in todo:  # data first, once per data folder
                key = (runs[name]["task"], runs[name]["data"])
                if key not in prepared:
                    state("preparing", data=runs[name]["data"])
                    _say(f"preparing the data of {name}: {runs[name]['data']} (nothing to do if prepared)")
                    _prepare(runs[name])
                    prepared.add(key)
            busy = busy_devices(Path(plan["runs_root"])) | {slot["name"] for _, slot, _ in children.values()}
            free = [slot for slot in plan["slots"] if slot["name"] not in busy]
            capacity = plan["workers"] - len(live)
            for name in todo[: max(0, min(capacity, len(free)))]:
                slot = free.pop(0)
                process = start_run(name, runs[name], slot, session, plan["cwd"])
                children[name] = (process, slot, Path(runs[name]["save_dir"]))
                _say(f"started {name} on {slot['name']} (pid {process.pid})")
            state("running", running=sorted(live | set(children)))
            time.sleep(poll)
    except UserError as error:  # a mistake in the plan's input (its data, its options): one line, no traceback
        _say(error_line(error))
        state("failed", message=str(error))
        return EXIT_USER_ERROR
    except Exception as error:  # noqa: BLE001 - said in state.json, where the waiting launch reads it
        import traceback

        traceback.print_exc()
        state("failed", message=f"{type(error).__name__}: {error}")
        return 1
    finally:
        lock.close()


def plan_runs(plan: dict) -> dict[str, dict]:
    """``{name: config values}`` of a plan, in its order."""
    return {run["name"]: run["config"] for run in plan["runs"]}
