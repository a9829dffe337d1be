"""slurmtrain.remote without a network: the remotes file checked at load, the command line
the login node's shell gets (run here by a real sh), ssh's failures as one line each, and
the code's size guard. The end-to-end tests over a real sshd are tests/remote/."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurmtrain import remote as rm
from slurmtrain.errors import ConfigError

HOSTILE = ["a b", "$(touch pwned)", "x; touch pwned2", "it's", '"q"', "`id`", "*", "--flag=$HOME", "tab\there",
           "\\n", "new\nline", "", "-"]


def test_a_spec_is_a_host_with_user_and_port_and_hostile_ones_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMTRAIN_REMOTES", str(tmp_path / "none.toml"))
    r = rm.load("alice@login.example.org:2222")
    assert (r.user, r.host, r.port, r.where) == ("alice", "login.example.org", 2222, "alice@login.example.org:2222")
    assert rm.load("[::1]:22").host == "[::1]"
    for bad, what in (("-oProxyCommand=touch x", "host"), ("a;b@h", "user"), ("h o", "host"),
                      ("$(id)@h", "user"), ("h:99999", "port")):
        with pytest.raises(rm.RemoteError, match=what):
            rm.load(bad)


def test_the_remotes_file_is_checked_at_load_naming_file_and_key(tmp_path, monkeypatch):
    path = tmp_path / "remotes.toml"
    monkeypatch.setenv("SLURMTRAIN_REMOTES", str(path))
    path.write_text('[c]\nhost = "login"\nport = 2222\nidentity = "~/.ssh/k"\ndir = "~/work space"\n'
                    'ssh_options = ["ProxyJump=bastion"]\n')
    r = rm.load("c")
    assert (r.host, r.port, r.dir, r.ssh_options) == ("login", 2222, "~/work space", ["ProxyJump=bastion"])
    for text, key in (('[c]\nhost = "h"\nprot = 1\n', "c.prot: unknown key"),
                      ('[c]\nhost = "h"\nport = "22"\n', "c.port: expected an integer"),
                      ('[c]\nport = 22\n', "c: has no host"),
                      ('[c]\nhost = "h"\nssh_options = [1]\n', "c.ssh_options"),
                      ('c = 1\n', "c: each remote is a table"),
                      ('[c\n', "not valid TOML")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=key) as err:
            rm.load("c")
        assert str(path) in str(err.value)
    path.write_text('[c]\nhost = "h"\nssh_options = ["-oProxyCommand=x"]\n')
    with pytest.raises(rm.RemoteError, match="not Key=Value"):
        rm.load("c")


def _fake_slurmtrain(tmp_path: Path) -> Path:
    prog = tmp_path / "bin" / "fake slurmtrain"
    prog.parent.mkdir()
    prog.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                    "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(),"
                    " 'runs': os.environ['SLURMTRAIN_RUNS_DIR'], 'remote': os.environ.get('SLURMTRAIN_REMOTE'),"
                    " 'via': os.environ.get('SLURMTRAIN_VIA_REMOTE')}))\n")
    prog.chmod(prog.stat().st_mode | stat.S_IXUSR)
    return prog


def test_the_login_shell_gets_every_argument_literally(tmp_path, monkeypatch):
    """What ssh hands the login shell, run by a real sh: each argument arrives as it was typed,
    in the remote's directory (spaces, quotes, `$()` and `;` in its name), runs under its runs/."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    odd_dir = "~/work dir $(touch pwned3); 'q' \"d\""
    r = rm.Remote(name="c d$(x)", host="h", dir=odd_dir, command=str(_fake_slurmtrain(tmp_path)))
    script = rm.remote_script(r, ["status", *HOSTILE])
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "SLURMTRAIN_REMOTE": "loop"}
    # ssh hands `sh -c QUOTED` to the login shell: the same two levels here.
    remote_command = rm.Ssh(r).argv(script)[-1]
    done = subprocess.run(["bash", "-c", remote_command], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["argv"] == ["status", *HOSTILE]
    there = home / odd_dir[2:]
    assert got["cwd"] == str(there) and got["runs"] == str(there / "runs")
    assert got["remote"] is None  # not sent on again from the login node
    assert got["via"] == "c d$(x)"  # hints it prints name the way back: slurmtrain --remote NAME
    assert not list(tmp_path.rglob("pwned*"))


def test_the_command_may_be_an_interpreter_and_its_arguments(tmp_path, monkeypatch):
    """`command = "~/venv/bin/python -m slurmtrain"` was one path that does not exist; a
    list is the path and its arguments (a string stays one path: spaces and all)."""
    path = tmp_path / "remotes.toml"
    monkeypatch.setenv("SLURMTRAIN_REMOTES", str(path))
    path.write_text('[c]\nhost = "login"\ncommand = ["~/venv/bin/python", "-m", "slurmtrain"]\n')
    r = rm.load("c")
    assert rm.command_line(r) == '"$HOME"/venv/bin/python -m slurmtrain'
    assert rm.remote_script(r, ["runs"]).endswith('exec "$HOME"/venv/bin/python -m slurmtrain runs')
    assert rm.command_line(rm.Remote(name="c", host="h", command="~/my env/bin/slurmtrain")) == \
        '"$HOME"\'/my env/bin/slurmtrain\''
    path.write_text('[c]\nhost = "login"\ncommand = 3\n')
    with pytest.raises(ConfigError, match="c.command: expected a string or a list of strings"):
        rm.load("c")


def test_ssh_failures_are_one_line_that_says_what_to_do():
    r = rm.Remote(name="c", host="login", user="alice", port=2222, identity="~/.ssh/k")
    cases = {
        "ssh: connect to host login port 2222: Connection refused\r\n": "cannot reach alice@login:2222: connection refused",
        "ssh: Could not resolve hostname login: Name or service not known\r\n": "cannot reach alice@login:2222: could not",
        "alice@login: Permission denied (publickey).\r\n": "alice@login:2222 refused the login with ~/.ssh/k",
        "Host key verification failed.\r\n": "host key of alice@login:2222 is not known here",
        "@@@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n@@@@@\nHost key verification failed.\n":
            "host key of alice@login:2222 has changed since it was recorded in known_hosts: if the login node was "
            "reinstalled, remove the old key (ssh-keygen -R '[login]:2222')",
        "kex_exchange_identification: read: Connection reset by peer\r\n": "ssh to alice@login:2222 failed: kex",
    }
    for stderr, said in cases.items():
        line = rm.ssh_failure(stderr, r)
        assert said in line and "\n" not in line, (stderr, line)


def test_the_size_guard_names_the_largest_files_and_gitignore_keeps_files_home(tmp_path):
    (tmp_path / ".gitignore").write_text("outputs/\n*.ckpt\n")
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "huge.bin").write_bytes(b"\0" * 2_000_000)
    (tmp_path / "model.ckpt").write_bytes(b"\0" * 2_000_000)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "pack").write_bytes(b"\0" * 2_000_000)
    (tmp_path / "train.py").write_text("print(1)\n")
    r = rm.Remote(name="c", host="h", max_upload_mb=1)
    up = rm.plan_upload(tmp_path, r)  # 10 bytes travel: the ignored files and .git do not count
    assert up.path.startswith(f"code/{tmp_path.name}/") and up.stamp.endswith(f"-{os.getpid()}")
    (tmp_path / "data.bin").write_bytes(b"\0" * 1_500_000)
    with pytest.raises(rm.RemoteError, match=r"1\.5 MB of code to send, over the remote's max_upload_mb = 1; "
                                             r"largest: data\.bin \(1\.5 MB\)"):
        rm.plan_upload(tmp_path, r)


def test_keys_credentials_and_every_git_folder_stay_home(tmp_path):
    """A home folder's .ssh travelled with it (a laptop user submitted from ~); a vendored
    library's .git did too (only the top one stayed)."""
    for name in (".ssh/id_ed25519", ".aws/credentials", ".netrc", "vendor/lib/.git/HEAD", ".git/HEAD", "train.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    listing = subprocess.run(["rsync", "-r", "--list-only", *rm._rsync_filters(), f"{tmp_path}/"],
                             capture_output=True, text=True, check=True).stdout
    files = sorted(line.split(None, 4)[4] for line in listing.splitlines() if line.startswith("-"))
    assert files == ["train.py"], files


def test_submit_sends_the_repository_it_runs_in_and_never_a_home_folder(tmp_path, monkeypatch):
    """From a subfolder of a git repository: the repository travels, the command runs in
    the subfolder (`python ../train.py` was refused, its parent left behind). From the home
    folder itself, or a home that is a dotfiles repository: refused, or the folder alone."""
    home = tmp_path / "home"
    (home / "proj" / ".git").mkdir(parents=True)
    (home / "proj" / "sub").mkdir()
    (home / "loose").mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert rm.project_root(home / "proj" / "sub") == ((home / "proj").resolve(), "sub")
    assert rm.project_root(home / "proj") == ((home / "proj").resolve(), ".")
    assert rm.project_root(home / "loose") == ((home / "loose").resolve(), ".")
    with pytest.raises(rm.RemoteError, match="is your home folder; cd into the project's folder first"):
        rm.project_root(home)
    (home / ".git").mkdir()  # dotfiles: the home folder is a repository
    assert rm.project_root(home / "loose") == ((home / "loose").resolve(), ".")
    assert rm._laptop_paths(["--data", str(home / "x.json"), f"--out={home / 'proj' / 'o'}", "/data/shared"],
                            (home / "proj").resolve()) == [str(home / "x.json")]


def test_remote_paths_keep_home_and_quote_the_rest():
    assert rm.rpath("~/a b") == '"$HOME"\'/a b\''
    assert rm.rpath("/x/$(id)") == "'/x/$(id)'"
    assert rm.home_relative("~/a") == "a" and rm.home_relative("/abs") == "/abs" and rm.home_relative("~") == "."


def test_the_sandbox_does_not_take_remote_and_a_bad_remote_is_one_line(tmp_path):
    env = {**os.environ, "SLURMTRAIN_REMOTES": str(tmp_path / "none.toml")}
    for args, said in ((["--remote", "login", "sandbox", "up"], "sandbox does not take --remote"),
                       (["--remote", "-oProxyCommand=x", "status"], "is not a host name")):
        done = subprocess.run([sys.executable, "-m", "slurmtrain", *args], env=env, capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    # from the environment, never typed: the variable is named
    done = subprocess.run([sys.executable, "-m", "slurmtrain", "sandbox", "env"], env={**env, "SLURMTRAIN_REMOTE": "c"},
                          capture_output=True, text=True)
    assert done.returncode == 2 and "SLURMTRAIN_REMOTE is set in this shell" in done.stderr, done.stderr


def test_a_remote_command_goes_before_the_command_line_loads(tmp_path):
    """`slurmtrain --remote ...` (and SLURMTRAIN_REMOTE) reach slurmtrain.remote without
    click, jinja2 or the profiles: a laptop's call is Python's start-up and the login
    node's answer. Other options first (--help, --version) are the click group's."""
    from slurmtrain.entry import _remote_of
    assert _remote_of(["--remote", "h", "status", "-n", "3"]) == ("h", ["status", "-n", "3"])
    assert _remote_of(["--remote=h", "plot", "r"]) == ("h", ["plot", "r"])
    assert _remote_of(["--version"]) == (None, ["--version"])
    probe = ("import sys\nsys.argv = ['slurmtrain', '--remote', 'a;b@h', 'status']\n"
             "from slurmtrain.entry import main\ntry:\n    main()\nexcept SystemExit as e:\n"
             "    print(e.code, sorted(m for m in ('click', 'jinja2', 'slurmtrain.cli', 'slurmtrain.profile')"
             " if m in sys.modules))\n")
    env = {**os.environ, "SLURMTRAIN_REMOTES": str(tmp_path / "none.toml")}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "2 []", done.stdout + done.stderr
    assert done.stderr.strip() == "slurmtrain: error: --remote: user 'a;b' is not a user name"
    env["SLURMTRAIN_REMOTE"] = "h"
    version = subprocess.run([sys.executable, "-m", "slurmtrain", "--version"], env=env, capture_output=True, text=True)
    assert version.returncode == 0 and "version" in version.stdout, version.stderr


def test_a_submit_reached_through_a_remote_says_how_to_follow_it_from_the_laptop(monkeypatch):
    from slurmtrain.cli.refs import follow_up
    monkeypatch.delenv("SLURMTRAIN_VIA_REMOTE", raising=False)
    assert follow_up("runs") == ("slurmtrain", "") and follow_up("/x/runs") == ("slurmtrain", " --runs-dir /x/runs")
    monkeypatch.setenv("SLURMTRAIN_VIA_REMOTE", "my cluster")
    assert follow_up("/home/u/.slurmtrain/runs") == ("slurmtrain --remote 'my cluster'", "")


def test_a_login_node_without_slurm_conf_is_told_where_to_set_it(monkeypatch):
    """Over --remote, "run eval ... in this shell first" named the laptop's shell; the login
    shell's startup file is where a command over ssh gets it."""
    from slurmtrain.slurmtext import where_to_set_slurm_conf
    monkeypatch.delenv("SLURMTRAIN_VIA_REMOTE", raising=False)
    assert where_to_set_slurm_conf().startswith("for the sandbox, run eval")
    monkeypatch.setenv("SLURMTRAIN_VIA_REMOTE", "cl")
    assert where_to_set_slurm_conf().startswith("on the login node, export it in the login shell's startup file")
