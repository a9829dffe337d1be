"""A cluster's login node, reached over ssh from a laptop (``slurmtrain --remote NAME ...``).

The laptop runs no Slurm command and imports no torch: each command is the login node's
own ``slurmtrain``, run there over one multiplexed ssh connection (OpenSSH's ControlMaster,
kept a few minutes, so a run of commands or a ``watch`` makes one handshake). Only three
things happen on the laptop: the code goes up before ``submit`` (rsync into a new snapshot
per submission, hard-linked to the previous one, so only what changed travels and a queued
or requeued job keeps the code it was submitted with), ``plot``'s picture comes back, and
ssh's own failures become one line each.

Every value that reaches the remote shell is quoted here (:func:`shlex.quote`), and the
command line is run by ``sh -c`` whatever the login shell is; the host, user and port go to
ssh as arguments, never through a shell, and are checked first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from . import __version__
from ._toml import TOMLDecodeError, loads
from .errors import ConfigError, UsageError

REMOTES_ENV = "SLURMTRAIN_REMOTES"  # the remotes file, if not ~/.config/slurmtrain/remotes.toml
PERSIST_S = 300  # how long an idle shared connection stays up
HERE_ONLY = {"sandbox": "the sandbox is a cluster on this machine"}
FOLLOWING = {"logs", "watch"}  # a terminal for them, so that Ctrl-C ends them there too
BIG_UPLOAD = 20e6  # bytes: a copy of the code said before it starts
_HOST = re.compile(r"[A-Za-z0-9_.:%\[\]-]+")
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*")
_SPEC = re.compile(r"(?:(?P<user>[^@]+)@)?(?P<host>\[[^\]]+\]|[^:]+)(?::(?P<port>\d+))?")


class RemoteError(UsageError):
    """ssh, rsync or the login node refused: one line, exit 2, nothing submitted."""


@dataclass(frozen=True)
class Remote:
    """A login node: where to connect, and the directory there for code and runs."""

    name: str
    host: str
    user: str | None = None
    port: int | None = None
    identity: str | None = None      # a private key on the laptop
    known_hosts: str | None = None   # a known_hosts file other than ssh's own
    dir: str = "slurmtrain"          # relative to the remote home, or absolute
    command: str | tuple[str, ...] = "slurmtrain"  # the login node's slurmtrain: a path, or a path and its args
    rsync_path: str = "rsync"        # the login node's rsync
    max_upload_mb: float = 200.0     # the code's size guard
    ssh_options: list[str] = field(default_factory=list)  # more `-o Key=Value` for ssh

    @property
    def where(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


def remotes_file() -> Path:
    env = os.environ.get(REMOTES_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "slurmtrain" / "remotes.toml"


def load(spec: str) -> Remote:
    """A remote by name (a table of the remotes file) or as ``[USER@]HOST[:PORT]``."""
    path = remotes_file()
    table = _read_remotes(path).get(spec)
    if table is not None:
        return _from_table(spec, table, str(path))
    m = _SPEC.fullmatch(spec.strip())
    if not m:
        raise RemoteError(f"--remote {spec!r}: not a remote in {path} nor [USER@]HOST[:PORT]")
    port = int(m["port"]) if m["port"] else None
    return _checked(Remote(name=spec, host=m["host"], user=m["user"], port=port), "--remote")


def _read_remotes(path: Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise ConfigError(str(path), "", f"cannot read: {err.strerror}") from None
    try:
        data = loads(text)
    except TOMLDecodeError as err:
        raise ConfigError(str(path), "", f"not valid TOML: {err}") from None
    for name, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(str(path), name, "each remote is a table: [NAME] with host = ...")
    return data


def _from_table(name: str, table: dict, source: str) -> Remote:
    known = {f.name for f in fields(Remote)} - {"name"}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(source, f"{name}.{key}", f"unknown key; known: {', '.join(sorted(known))}")
        want = {"port": int, "max_upload_mb": (int, float), "ssh_options": list, "command": (str, list)}.get(key, str)
        if not isinstance(value, want) or isinstance(value, bool):
            raise ConfigError(source, f"{name}.{key}", f"expected {_kind(want)}, got {value!r}")
    if "host" not in table:
        raise ConfigError(source, name, "has no host")
    if not all(isinstance(o, str) for o in table.get("ssh_options", [])):
        raise ConfigError(source, f"{name}.ssh_options", "expected a list of strings (Key=Value)")
    if isinstance(table.get("command"), list):
        if not table["command"] or not all(isinstance(w, str) for w in table["command"]):
            raise ConfigError(source, f"{name}.command", "expected a path, or a list of strings: the path and its "
                                                          "arguments")
        table = {**table, "command": tuple(table["command"])}  # hashable: the connection's key
    return _checked(Remote(name=name, **table), f"{source}: {name}")


def _kind(want) -> str:
    return {int: "an integer", list: "a list", str: "a string", (str, list): "a string or a list of strings"}.get(
        want, "a number")


def _checked(r: Remote, where: str) -> Remote:
    """Values that go to ssh as arguments: no option-looking or shell-looking ones."""
    if not _HOST.fullmatch(r.host) or r.host.startswith("-"):
        raise RemoteError(f"{where}: host {r.host!r} is not a host name or address")
    if r.user is not None and not _USER.fullmatch(r.user):
        raise RemoteError(f"{where}: user {r.user!r} is not a user name")
    if r.port is not None and not 0 < r.port < 65536:
        raise RemoteError(f"{where}: port {r.port} is not a port")
    for opt in r.ssh_options:
        if "=" not in opt or opt.startswith("-"):
            raise RemoteError(f"{where}: ssh option {opt!r} is not Key=Value")
    if not r.dir or not r.command or not all(r.command):
        raise RemoteError(f"{where}: dir and command cannot be empty")
    return r


def _control_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    d = Path(base) / "slurmtrain" / "ssh"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


class Ssh:
    """One login node: its shared connection, and commands run through it."""

    def __init__(self, remote: Remote):
        self.remote = remote
        # One shared connection per remote's settings, not per host as ssh's %C: a connection
        # made with one key, known_hosts or slurmtrain must not serve another.
        key = hashlib.sha1(repr(dataclasses.replace(remote, name="")).encode()).hexdigest()[:20]
        self.control_path = str(_control_dir() / key)

    def options(self) -> list[str]:
        """ssh's options, without the host: shared by ssh and rsync's ``-e``."""
        r = self.remote
        opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=15",
                "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path}",
                "-o", f"ControlPersist={PERSIST_S}", "-e", "none"]
        if r.port:
            opts += ["-p", str(r.port)]
        if r.user:
            opts += ["-l", r.user]
        if r.identity:
            opts += ["-i", os.path.expanduser(r.identity), "-o", "IdentitiesOnly=yes"]
        if r.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={os.path.expanduser(r.known_hosts)}"]
        for opt in r.ssh_options:
            opts += ["-o", opt]
        return opts

    def argv(self, script: str, *, tty: bool = False) -> list[str]:
        """ssh running SCRIPT with ``sh -c`` on the login node, whatever the login shell is."""
        return ["ssh", *self.options(), "-tt" if tty else "-T", "--", self.host,
                "sh -c " + shlex.quote(script)]

    @property
    def host(self) -> str:
        """The host as ssh takes it (an IPv6 address without its brackets)."""
        h = self.remote.host
        return h[1:-1] if h.startswith("[") else h

    def control(self, op: str) -> int:
        """``ssh -O OP`` (check, exit) to the shared connection; its exit status."""
        return subprocess.run(["ssh", *self.options(), "-O", op, "--", self.host], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode

    def connect(self) -> None:
        """The shared connection, made (and the login node's slurmtrain checked) if not up."""
        if shutil.which("ssh") is None:
            raise RemoteError("ssh is not installed here (OpenSSH's client is needed for --remote)")
        if self.control("check") == 0:
            return
        # The master goes to the background and keeps its stderr: a file, not a pipe, so
        # reading it does not wait for the master to end.
        with tempfile.TemporaryFile() as err:
            rc = subprocess.run(["ssh", *self.options(), "-M", "-f", "-N", "--", self.host],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err).returncode
            if rc != 0:
                err.seek(0)
                raise RemoteError(ssh_failure(err.read().decode(errors="replace"), self.remote))
        self._check_program()

    def _check_program(self) -> None:
        try:
            self._check_program_once()
        except RemoteError:
            # Ended, so that the next command checks again instead of riding this connection.
            self.control("exit")
            raise

    def _check_program_once(self) -> None:
        prog, first = command_line(self.remote), rpath(command_words(self.remote)[0])
        # Where the commands run (remote_script): not the home folder, whose `slurmtrain/`
        # (the remote's own default dir) `python -m slurmtrain` would import instead.
        out = self.capture(f"mkdir -p -- {rpath(self.remote.dir)} && cd -- {rpath(self.remote.dir)}; "
                           f"command -v {first} >/dev/null 2>&1 || exit 127; exec {prog} --version")
        where = f"{self.remote.where}"
        if out.returncode == 127:
            raise RemoteError(f"slurmtrain is not installed on {where} ({self.remote.command!r} is not "
                              "on the login shell's PATH; set `command` in the remote's table to its path)")
        if out.returncode != 0:
            said = (out.stderr.strip().splitlines() or ["no message"])[-1]
            raise RemoteError(f"slurmtrain on {where} does not run ({self.remote.command} --version exited "
                              f"{out.returncode}: {said})")
        found = out.stdout.strip().rsplit(" ", 1)[-1]
        if found != __version__:
            raise RemoteError(f"slurmtrain on {where} is {found or 'of no version'}, here {__version__}: "
                              "install the same version on both")

    def capture(self, script: str, *, binary: bool = False) -> subprocess.CompletedProcess:
        done = subprocess.run(self.argv(script), stdin=subprocess.DEVNULL, capture_output=True,
                              text=not binary)
        if done.returncode == 255:
            err = done.stderr if isinstance(done.stderr, str) else done.stderr.decode(errors="replace")
            raise RemoteError(ssh_failure(err, self.remote))
        return done

    def run(self, script: str, *, tty: bool = False) -> int:
        """SCRIPT's exit status; its output and errors are this command's own. A SIGTERM
        here ends ssh too (Ctrl-C reaches both as it is)."""
        proc = subprocess.Popen(self.argv(script, tty=tty))
        before = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
        try:
            return proc.wait()
        except KeyboardInterrupt:
            proc.wait()
            return 130
        finally:
            signal.signal(signal.SIGTERM, before)


def ssh_failure(stderr: str, remote: Remote) -> str:
    """ssh's reasons, as one line that says what to do."""
    where = remote.where
    said = " ".join(line.strip() for line in stderr.splitlines() if line.strip()
                    and not line.startswith(("@", "Warning: Permanently added")))
    if "IDENTIFICATION HAS CHANGED" in stderr or "Host key for" in stderr and "has changed" in stderr:
        file = f"-f {remote.known_hosts} " if remote.known_hosts else ""
        host = f"'[{remote.host.strip('[]')}]:{remote.port}'" if remote.port and remote.port != 22 else remote.host
        return (f"the host key of {where} has changed since it was recorded in known_hosts: if the "
                f"login node was reinstalled, remove the old key (ssh-keygen {file}-R {host}) and connect once "
                "by hand")
    if "Host key verification failed" in stderr or "No ED25519 host key is known" in stderr:
        return (f"the host key of {where} is not known here: connect once with ssh to check and "
                "record it (or give the remote a known_hosts file)")
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        key = f" with {remote.identity}" if remote.identity else ""
        return f"{where} refused the login{key}: {said}"
    for reason in ("Connection refused", "Could not resolve hostname", "No route to host",
                   "Connection timed out", "Network is unreachable", "Connection closed"):
        if reason in stderr:
            return f"cannot reach {where}: {reason.lower()} ({said})"
    return f"ssh to {where} failed: {said or 'no message'}"


def rpath(path: str) -> str:
    """PATH for the remote shell, quoted; a leading ``~/`` is the remote user's home."""
    if path == "~" or path.startswith("~/"):
        return '"$HOME"' + (shlex.quote(path[1:]) if len(path) > 1 else "")
    return shlex.quote(path)


def command_words(remote: Remote) -> list[str]:
    """The remote's ``command``: a path, or a list, a path and its own arguments
    (``["~/venv/bin/python", "-m", "slurmtrain"]``)."""
    return [remote.command] if isinstance(remote.command, str) else list(remote.command)


def command_line(remote: Remote) -> str:
    """``command`` for the login shell: its path (``~/``: the remote home) and arguments, quoted."""
    first, *rest = command_words(remote)
    return " ".join([rpath(first), *map(shlex.quote, rest)])


def home_relative(path: str) -> str:
    """PATH as rsync's remote side takes it unexpanded: ``~/x`` is ``x`` (ssh starts at home)."""
    return path[2:] or "." if path.startswith("~/") else ("." if path == "~" else path)


def remote_script(remote: Remote, argv: list[str], *, code: str | None = None) -> str:
    """The login node's ``slurmtrain ARGV``, run in the remote's directory (its runs under
    ``runs/`` there unless ``--runs-dir`` says otherwise), or in a code snapshot for ``submit``."""
    lines = [f"mkdir -p -- {rpath(remote.dir)} && cd -- {rpath(remote.dir)} || exit 2",
             # A SLURMTRAIN_REMOTE there would send the command on again.
             'unset SLURMTRAIN_REMOTE; SLURMTRAIN_RUNS_DIR="$PWD/runs"; export SLURMTRAIN_RUNS_DIR',
             # Hints the command prints name the way back: `slurmtrain --remote NAME ...`.
             f"SLURMTRAIN_VIA_REMOTE={shlex.quote(remote.name)}; export SLURMTRAIN_VIA_REMOTE"]
    if code:
        lines.append(f"cd -- {shlex.quote(code)} || exit 2")
    lines.append(f"exec {command_line(remote)} {shlex.join(argv)}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Upload:
    """What ``submit`` sends: a snapshot under ``<dir>/code/<project>/``."""

    source: Path
    project: str
    stamp: str
    files: int
    size: int  # bytes, before rsync leaves out what the previous snapshot has

    @property
    def parent(self) -> str:
        return f"code/{self.project}"

    @property
    def path(self) -> str:
        return f"{self.parent}/{self.stamp}"


# Never sent, wherever they are: a repository's own folder (a vendored one's too), and
# where keys and credentials live.
_NEVER_SENT = (".git", ".ssh", ".gnupg", ".aws", ".netrc", ".git-credentials")


def _rsync_filters() -> list[str]:
    # .gitignore files are read in every directory as rsync excludes.
    return ["--filter=:- .gitignore", *(f"--exclude={name}" for name in _NEVER_SENT)]


def project_root(here: Path) -> tuple[Path, str]:
    """The folder ``submit`` sends, and ``here`` within it: the git repository ``here`` is
    in (from a subfolder, the program's ``../train.py`` travels too), else ``here``. Never
    the home folder or ``/``: everything in it would travel, keys included."""
    here = here.resolve()
    root = next((d for d in (here, *here.parents) if (d / ".git").exists()), here)
    if root in (Path.home().resolve(), Path("/")):
        root = here
    if root in (Path.home().resolve(), Path("/")):
        raise RemoteError(f"submit sends the folder it runs in, and everything under it, to the login node: "
                          f"{root} is {'your home folder' if root != Path('/') else '/'}; cd into the project's "
                          "folder first")
    return root, here.relative_to(root).as_posix()


def plan_upload(source: Path, remote: Remote) -> Upload:
    """The code to send, refused if larger than the remote's guard (its largest files named)."""
    if shutil.which("rsync") is None:
        raise RemoteError("rsync is not installed here (it copies the code to the login node)")
    listing = subprocess.run(["rsync", "-r", "--list-only", "--no-h", *_rsync_filters(), f"{source}/"],
                             capture_output=True, text=True)
    if listing.returncode != 0:
        raise RemoteError(f"cannot list {source}: {listing.stderr.strip()}")
    sizes = []
    for line in listing.stdout.splitlines():
        parts = line.split(None, 4)
        if len(parts) == 5 and line.startswith("-"):
            sizes.append((int(parts[1].replace(",", "").replace(".", "")), parts[4]))
    total = sum(s for s, _ in sizes)
    if total > remote.max_upload_mb * 1e6:
        big = ", ".join(f"{name} ({size_text(s)})" for s, name in sorted(sizes, reverse=True)[:5])
        raise RemoteError(f"{source}: {size_text(total)} of code to send, over the remote's "
                          f"max_upload_mb = {remote.max_upload_mb:g}; largest: {big} (list what should "
                          "not travel in .gitignore, or raise max_upload_mb)")
    project = re.sub(r"[^A-Za-z0-9._-]", "_", source.resolve().name) or "code"
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid()}"
    return Upload(source=source, project=project, stamp=stamp, files=len(sizes), size=total)


def size_text(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def upload(ssh: Ssh, up: Upload) -> None:
    """rsync into ``<stamp>.partial`` hard-linked to the previous snapshot, then rename it:
    a snapshot that exists is whole."""
    r = ssh.remote
    base = rpath(f"{r.dir}/{up.parent}")
    made = ssh.capture(f"mkdir -p -- {base}")
    if made.returncode != 0:
        raise RemoteError(f"cannot make {r.dir}/{up.parent} on {r.where}: {made.stderr.strip()}")
    # an upload cut short (Ctrl-C, a lost link) leaves its .partial: gone after an hour
    ssh.capture(f"find {base} -maxdepth 1 -name '*.partial' -mmin +60 -exec rm -rf -- {{}} + 2>/dev/null; true")
    dest = f"{home_relative(r.dir)}/{up.path}.partial/"
    argv = ["rsync", "-rlptz", "--delete", "-s", *_rsync_filters(), "--link-dest=../latest",
            f"--rsync-path={shlex.quote(r.rsync_path)}", "-e", shlex.join(["ssh", *ssh.options()]),
            f"{up.source}/", f"{ssh.host}:{dest}"]
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode == 255:
        raise RemoteError(ssh_failure(done.stderr, r))
    if done.returncode != 0:
        said = [ln for ln in done.stderr.splitlines() if ln.strip() and "--link-dest" not in ln]
        gone = "unexpectedly closed (0 bytes received" in done.stderr and any(
            "not found" in ln or "No such file" in ln for ln in said)
        if done.returncode == 127 or gone:
            raise RemoteError(f"rsync is missing on {r.where} ({r.rsync_path!r}; set rsync_path in "
                              "the remote's table to its path)")
        raise RemoteError(f"copying {up.source} to {r.where} failed: {' '.join(said) or done.returncode}")
    whole = rpath(f"{r.dir}/{up.parent}")
    moved = ssh.capture(f"cd -- {whole} && mv -- {shlex.quote(up.stamp + '.partial')} "
                        f"{shlex.quote(up.stamp)} && ln -sfn -- {shlex.quote(up.stamp)} latest")
    if moved.returncode != 0:
        raise RemoteError(f"cannot finish the code snapshot on {r.where}: {moved.stderr.strip()}")


def forward(spec: str, argv: list[str]) -> int:
    """ARGV (a command and its arguments, not ``plot``) run by the slurmtrain of the login
    node SPEC; its exit status. ``submit`` first sends the code (the current directory) and
    runs in its snapshot."""
    r = load(spec)
    command = argv[0] if argv else ""
    if command in HERE_ONLY:
        via = (" (SLURMTRAIN_REMOTE is set in this shell: run it as `env -u SLURMTRAIN_REMOTE slurmtrain "
               f"{command} ...`)") if os.environ.get("SLURMTRAIN_REMOTE") else ""
        raise UsageError(f"{command} does not take --remote: {HERE_ONLY[command]}{via}")
    ssh = Ssh(r)
    code = None
    submitting = command == "submit" and not {"-h", "--help"} & set(argv)
    if submitting:
        code = _send_code(ssh, argv)
    ssh.connect()
    tty = command in FOLLOWING and sys.stdout.isatty() and sys.stdin.isatty()
    rc = ssh.run(remote_script(r, argv, code=code), tty=tty)
    if rc == 130 and submitting:
        print(f"slurmtrain: interrupted: the job may have been submitted already (`slurmtrain --remote {r.name} "
              "runs` shows it)", file=sys.stderr)
    elif rc == 255:  # ssh's own: the remote slurmtrain exits 0-2 (130 on Ctrl-C)
        print(f"slurmtrain: the connection to {r.where} ended (ssh exit status 255); run the command again",
              file=sys.stderr)
    return rc


def _send_code(ssh: Ssh, argv: list[str]) -> str:
    """The project's code, sent (``project_root``); the folder the command runs in there."""
    r = ssh.remote
    root, sub = project_root(Path.cwd())
    try:
        up = plan_upload(root, r)
        ssh.connect()
        if up.size > BIG_UPLOAD:  # seconds to minutes: said before, not only once it is done
            print(f"slurmtrain: sending {root} ({up.files} files, {size_text(up.size)}; what the last snapshot "
                  f"has already stays there) to {r.where} ...", file=sys.stderr, flush=True)
        upload(ssh, up)  # said after it is whole: a failure is then its own line only
    except KeyboardInterrupt:
        raise RemoteError(f"interrupted while sending the code to {r.where}: nothing was submitted") from None
    print(f"slurmtrain: code: {up.source} ({up.files} files, {size_text(up.size)}) "
          f"-> {r.where}:{r.dir}/{up.path}", file=sys.stderr, flush=True)
    for word in _laptop_paths(argv, root):
        print(f"slurmtrain: warning: {word} in the command is a path of this machine, outside the code sent "
              f"({root}): the job runs on the cluster, where it may not be", file=sys.stderr)
    return up.path if sub == "." else f"{up.path}/{sub}"


def _laptop_paths(argv: list[str], root: Path) -> list[str]:
    """The command's absolute paths (``--data=/home/me/x``, ``~/x`` expanded by this shell)
    under this machine's home but outside the code sent."""
    home, out = Path.home().resolve(), []
    for word in argv:
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if value.startswith("/"):
            path = Path(value)
            if path.is_relative_to(home) and not path.is_relative_to(root):
                out.append(value)
    return out
