"""A real one-node SLURM cluster for tests, started and stopped by a pytest fixture.

Use it from a test module with ``from slurm_cluster import slurm_cluster``. The fixture
``slurm_cluster`` (session scope) yields a :class:`SlurmCluster`: ``env`` is the environment
to give to subprocesses (or to put into ``os.environ``) so that ``sbatch``, ``squeue``,
``scancel`` and a stand-in ``sacct`` reach this cluster; ``base`` is the cluster's private
temporary directory; ``partition`` is the name of its only partition.

Everything lives in a fresh temporary directory: the munge key and socket, slurm.conf, state,
spool and logs. Nothing of the host's configuration is read or written (/etc/slurm, /etc/munge,
/run/munge): the daemons are pointed at the private files (``SLURM_CONF`` and ``-f``,
``munged --socket/--key-file``, free TCP ports), so a SLURM or munge already installed and
running on the machine is left alone. No cgroup.conf is needed (proctrack/linuxproc,
task/none: memory limits are not enforced).

Needs root (slurmd must be root to launch jobs; munged is started as the ``munge`` user) and
the Debian packages ``slurmctld slurmd slurm-client munge`` (Slurm 22.05). Without them, or if the cluster does not come
up within ``START_TIMEOUT_S``, every test that uses the fixture is skipped with a one-line reason.

There is no accounting database, so the real ``sacct`` only says accounting is disabled. A
small ``sacct`` on the cluster's PATH answers the usual queries (``-j``, ``-o``/``--format``,
``-P``/``--parsable2``, ``-p``, ``-n``) from ``squeue -t all``; ``MinJobAge=600`` keeps
finished jobs visible to it for ten minutes.

On teardown every job is cancelled, the daemons are stopped by PID (SIGTERM, then SIGKILL
after a few seconds: slurmd has been seen to ignore SIGTERM while a job step hung), and every
leftover process of this cluster (``slurmstepd``, job processes: found by the private
``SLURM_CONF`` path in their environment) is killed the same way. The directory is removed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

START_TIMEOUT_S = 30.0
STOP_GRACE_S = 3.0
PARTITION = "debug"
REQUIRED_BINARIES = (
    "slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo", "scontrol", "scancel",
)

_SACCT_STANDIN = '''#!{python}
"""sacct without an accounting database: answers from `squeue -t all`.

Understands -j/--jobs, -o/--format, -P/--parsable2, -p/--parsable, -n/--noheader and ignores
other options. Job steps are not listed.
"""
import subprocess
import sys

# sacct field (lower case) -> squeue format code
CODES = {{
    "jobid": "%i", "jobidraw": "%A", "state": "%T", "nodelist": "%N", "jobname": "%j",
    "partition": "%P", "user": "%u", "elapsed": "%M", "timelimit": "%l", "reason": "%r",
    "nnodes": "%D", "ncpus": "%C", "submit": "%V", "start": "%S", "end": "%e",
    "restartcnt": "%R",
}}
SEP = "\\x1f"


def main(argv):
    fields = ["JobID", "JobName", "Partition", "State", "NodeList"]
    jobs, delim, trailing, header = set(), None, False, True
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = None
        for short, long in (("-o", "--format"), ("-j", "--jobs")):
            if arg in (short, long) and i + 1 < len(argv):
                value, i = argv[i + 1], i + 1
            elif arg.startswith(long + "="):
                value = arg[len(long) + 1:]
            elif arg.startswith(short) and len(arg) > 2 and not arg.startswith("--"):
                value = arg[2:]
            if value is not None:
                if short == "-o":
                    fields = [f.split("%")[0] for f in value.split(",") if f]
                else:
                    jobs.update(j for j in value.split(",") if j)
                break
        if value is None:
            if arg in ("-P", "--parsable2"):
                delim, trailing = "|", False
            elif arg in ("-p", "--parsable"):
                delim, trailing = "|", True
            elif arg in ("-n", "--noheader"):
                header = False
        i += 1
    codes = [CODES.get(f.lower(), "") for f in fields]
    # Unknown fields come out empty; %i, %A and %F (job, raw and array job id) select rows.
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", SEP.join([c or "-" for c in codes] + ["%i", "%A", "%F"])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        return out.returncode
    rows = []
    for line in out.stdout.splitlines():
        cells = line.split(SEP)
        if len(cells) != len(codes) + 3:
            continue
        if jobs and not jobs.intersection(cells[-3:]):
            continue
        rows.append([v if c else "" for c, v in zip(codes, cells)])
    if delim is None:
        widths = [max([len(f)] + [len(r[k]) for r in rows]) for k, f in enumerate(fields)]
        lines = [" ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
        if header:
            lines[:0] = [" ".join(f.ljust(w) for f, w in zip(fields, widths)),
                         " ".join("-" * w for w in widths)]
    else:
        end = delim if trailing else ""
        lines = [delim.join(r) + end for r in rows]
        if header:
            lines.insert(0, delim.join(fields) + end)
    if lines:
        print("\\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


@dataclass
class SlurmCluster:
    """A running one-node cluster. ``env`` reaches it; ``base`` holds its files."""

    base: Path
    env: dict
    partition: str
    node: str
    conf: Path
    pids: dict = field(default_factory=dict)
    _procs: dict = field(default_factory=dict, repr=False)
    _stopped: bool = field(default=False, repr=False)

    def run(self, *args: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
        """Runs a command (e.g. ``"squeue"``) against this cluster; output captured as text."""
        return subprocess.run(
            list(args), env=self.env, cwd=self.base, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False,
        )

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of every daemon log, for assertion messages."""
        parts = []
        for path in sorted((self.base / "log").glob("*.log")):
            with contextlib.suppress(OSError):
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancels all jobs and stops every process of this cluster; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        if "slurmctld" in self._procs and self._procs["slurmctld"].poll() is None:
            with contextlib.suppress(Exception):
                subprocess.run(
                    ["scancel", "--full", "--signal=KILL", "--state=RUNNING"], env=self.env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5,
                )
                subprocess.run(
                    ["scancel", "--user", pwd.getpwuid(os.geteuid()).pw_name], env=self.env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=5,
                )
        # Job processes and slurmstepd first (slurmd ignores SIGTERM while a step lives), then
        # slurmd, slurmctld and munged one at a time (slurmd talks to slurmctld on its way out),
        # each followed by a sweep of what is left. The daemons' own children are spared
        # until their parent is gone: slurmctld hangs on SIGTERM once its slurmscriptd is dead.
        daemons = {proc.pid for proc in self._procs.values()}

        def strays() -> list:
            return [
                pid for pid in _cluster_pids(self.conf)
                if pid not in daemons and _ppid(pid) not in daemons
            ]

        _terminate_pids(strays(), 1.0)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in self._procs:
                _terminate([self._procs[name]])
            _terminate_pids(strays(), 1.0)
        _terminate_pids(_cluster_pids(self.conf), 1.0)
        shutil.rmtree(self.base, ignore_errors=True)


def _terminate(procs: list) -> None:
    """SIGTERM, wait up to STOP_GRACE_S, SIGKILL, reap."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_GRACE_S)


def _terminate_pids(pids: list, grace_s: float = STOP_GRACE_S) -> None:
    """The same for processes that are not our children (slurmstepd, job processes)."""
    if not pids:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _cluster_pids(conf: Path) -> list:
    """PIDs of live processes whose environment names this cluster's slurm.conf."""
    marker = f"SLURM_CONF={conf}".encode()
    spared = {os.getpid()}
    pid = os.getppid()
    while pid > 1 and pid not in spared:  # never this process or its ancestors
        spared.add(pid)
        pid = _ppid(pid)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0") and _alive(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _free_ports(count: int) -> list:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        for ln in reversed(lines):
            low = ln.lower()
            if "fatal" in low or ("error" in low and "pmix" not in low):
                return ln
        if lines:
            return lines[-1]
    return "no output"


class _StartError(Exception):
    pass


def _slurm_conf(base: Path, node_line: str, node: str, ports: list, munge_socket: Path) -> str:
    return "\n".join([
        "ClusterName=ci",
        f"SlurmctldHost={node}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire=10 and the short scheduler intervals let a requeued job start again
        # within seconds instead of about two minutes.
        f"AuthInfo=socket={munge_socket},cred_expire=10",
        "MailProg=/bin/true",
        f"StateSaveLocation={base / 'state'}",
        f"SlurmdSpoolDir={base / 'spool'}",
        f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={base / 'run' / 'slurmd.pid'}",
        f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={base / 'log' / 'slurmd.log'}",
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_interval=2,bf_interval=2",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=1024",
        "ReturnToService=2",
        "KillWait=10",
        "MinJobAge=600",
        f"{node_line} NodeAddr=127.0.0.1 State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _start(base: Path, cluster_holder: list) -> SlurmCluster:
    """Starts munged, slurmctld and slurmd in ``base``; raises _StartError with one line."""
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        munge_user = pwd.getpwnam("munge")
    except KeyError:
        raise _StartError("no 'munge' user (is the munge package installed?)") from None

    for sub in ("state", "spool", "log", "run", "bin"):
        (base / sub).mkdir()
    # munged wants its socket directory reachable by all, owned by it, writable by none else.
    munge_dir = base / "munge"
    munge_dir.mkdir(mode=0o755)
    key = munge_dir / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for path in (munge_dir, key):
        os.chown(path, munge_user.pw_uid, munge_user.pw_gid)
    munge_socket = munge_dir / "munge.socket"

    probe = subprocess.run(
        ["slurmd", "-C"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=10, check=False,
    )
    node_line = next((ln for ln in probe.stdout.splitlines() if ln.startswith("NodeName=")), "")
    if not node_line:
        raise _StartError(f"`slurmd -C` printed no NodeName line (rc {probe.returncode})")
    node = node_line.split()[0].split("=", 1)[1]

    conf = base / "slurm.conf"
    conf.write_text(_slurm_conf(base, node_line, node, _free_ports(2), munge_socket))
    sacct = base / "bin" / "sacct"
    sacct.write_text(_SACCT_STANDIN.format(python=sys.executable))
    sacct.chmod(0o755)

    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_"))
    }
    env["SLURM_CONF"] = str(conf)
    env["PATH"] = os.pathsep.join([str(base / "bin"), env.get("PATH", os.defpath)])
    cluster = SlurmCluster(base=base, env=env, partition=PARTITION, node=node, conf=conf)
    cluster_holder.append(cluster)

    def launch(name: str, cmd: list, **kwargs) -> subprocess.Popen:
        with open(base / "log" / f"{name}.out", "wb") as out:
            proc = subprocess.Popen(
                cmd, env=env, cwd=base, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, **kwargs,
            )
        cluster._procs[name] = proc
        cluster.pids[name] = proc.pid
        return proc

    def check_alive() -> None:
        for name, proc in cluster._procs.items():
            if proc.poll() is not None:
                raise _StartError(
                    f"{name} exited (rc {proc.returncode}): "
                    f"{_last_line(base / 'log' / f'{name}.out')}"
                )

    launch(
        "munged",
        ["munged", "--foreground", f"--socket={munge_socket}", f"--key-file={key}",
         f"--log-file={munge_dir / 'munged.log'}", f"--pid-file={munge_dir / 'munged.pid'}",
         f"--seed-file={munge_dir / 'munged.seed'}"],
        user=munge_user.pw_uid, group=munge_user.pw_gid, extra_groups=[],
    )
    while not munge_socket.exists():
        check_alive()
        if time.monotonic() > deadline:
            raise _StartError(f"munged socket did not appear within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.05)

    launch("slurmctld", ["slurmctld", "-D", "-f", str(conf)])
    launch("slurmd", ["slurmd", "-D", "-f", str(conf)])
    state = ""
    while state != "idle":
        check_alive()
        if time.monotonic() > deadline:
            raise _StartError(
                f"node {node} not idle within {START_TIMEOUT_S:.0f} s (state {state or 'none'!r}): "
                f"{_last_line(base / 'log' / 'slurmd.out')}"
            )
        with contextlib.suppress(subprocess.TimeoutExpired):
            state = cluster.run("sinfo", "-h", "-N", "-n", node, "-o", "%T", timeout=5).stdout
            state = state.strip()  # "idle*" (not responding) is not ready
        if state != "idle":
            time.sleep(0.2)
    return cluster


def start_slurm_cluster() -> SlurmCluster:
    """Starts a cluster or calls pytest.skip with one line. Call ``.stop()`` when done."""
    if os.geteuid() != 0:
        pytest.skip(f"SLURM test cluster needs root (running as uid {os.geteuid()})")
    missing = [b for b in REQUIRED_BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(
            f"SLURM not installed: {', '.join(missing)} not on PATH "
            "(Debian: apt-get install slurmctld slurmd slurm-client munge)"
        )
    base = Path(tempfile.mkdtemp(prefix="slurm-cluster-"))
    base.chmod(0o755)  # munged, running as its own user, must reach its socket inside
    holder: list = []
    try:
        cluster = _start(base, holder)
    except (_StartError, OSError, subprocess.SubprocessError) as exc:
        if holder:
            holder[0].stop()
        shutil.rmtree(base, ignore_errors=True)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        pytest.skip(f"SLURM test cluster did not start: {reason}")
    except BaseException:
        if holder:
            holder[0].stop()
        shutil.rmtree(base, ignore_errors=True)
        raise
    atexit.register(cluster.stop)  # in case the session dies before teardown
    return cluster


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running one-node SLURM cluster (:class:`SlurmCluster`); stopped after the session."""
    cluster = start_slurm_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
