#!/usr/bin/env bash
# The container lane's login node for tests/remote (run as root inside the lane's tree by
# scripts/container_lane.sh):
#   login_node.sh start|stop
# start: sshd on 127.0.0.1:$SSH_PORT letting the laptop user's key in as $USER_NAME, the
# login shell's `slurmtrain` (as a site's module puts it on PATH), and the laptop's side as a
# new user sets it up: a key, the login node's host key in known_hosts, a remotes file, and
# a bin directory with slurmtrain, ssh and rsync only (no Slurm command, no torch: its
# slurmtrain refuses to import torch, submitit and deepspeed).
set -euo pipefail
: "${PREFIX:?} ${REPO:?} ${STATE:?} ${USER_NAME:?} ${LAPTOP_USER:?} ${SSH_PORT:?}"
PID=/run/slurmtrain-sshd.pid
LOG=/var/log/slurmtrain-sshd.log

if [ "${1:-}" = stop ]; then
  [ -s "$PID" ] && kill "$(cat "$PID")" 2>/dev/null || true
  rm -f "$PID"
  exit 0
fi

cat >/usr/local/bin/slurmtrain <<EOF
#!/bin/sh
# The login node's slurmtrain: the suite's Python, this checkout, the lane's sandbox.
PATH="$PREFIX/bin:\$PATH" PYTHONPATH="$REPO" SLURM_CONF="\${SLURM_CONF:-$STATE/slurm.conf}" OMP_NUM_THREADS=1
export PATH PYTHONPATH SLURM_CONF OMP_NUM_THREADS
exec "$PREFIX/bin/python3" -m slurmtrain "\$@"
EOF
chmod 755 /usr/local/bin/slurmtrain

key=/etc/ssh/slurmtrain_host_ed25519_key
[ -s "$key" ] || ssh-keygen -q -t ed25519 -N '' -f "$key"
cat >/etc/ssh/sshd_slurmtrain <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $key
PidFile $PID
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowUsers $USER_NAME
LogLevel VERBOSE
EOF

lap=/home/$LAPTOP_USER
run_as() { local who=$1; shift; su "$who" -s /bin/sh -c "$*"; }
run_as "$LAPTOP_USER" "mkdir -p -m 700 $lap/.ssh && { [ -s $lap/.ssh/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f $lap/.ssh/id_ed25519; }"
home=/home/$USER_NAME
install -d -o "$USER_NAME" -m 700 "$home/.ssh"
install -o "$USER_NAME" -m 600 "$lap/.ssh/id_ed25519.pub" "$home/.ssh/authorized_keys"
rm -rf "$home/slurmtrain"  # the remote's directory (code snapshots, runs) of an earlier lane
echo "[127.0.0.1]:$SSH_PORT $(cut -d' ' -f1,2 "$key.pub")" >"$lap/.ssh/known_hosts"
mkdir -p "$lap/.config/slurmtrain" "$lap/laptop-bin"
cat >"$lap/.config/slurmtrain/remotes.toml" <<EOF
[lane]
host = "127.0.0.1"
port = $SSH_PORT
user = "$USER_NAME"
identity = "~/.ssh/id_ed25519"
EOF
cat >"$lap/laptop-bin/slurmtrain" <<EOF
#!/bin/sh
PYTHONPATH="$REPO/tests/remote/laptop:$REPO" exec "$PREFIX/bin/python3" -m slurmtrain "\$@"
EOF
chmod 755 "$lap/laptop-bin/slurmtrain"
ln -sf /usr/bin/ssh /usr/bin/rsync "$lap/laptop-bin/"
chown -R "$LAPTOP_USER:" "$lap/.ssh" "$lap/.config" "$lap/laptop-bin"
chmod 644 "$lap/.ssh/known_hosts"

mkdir -p /run/sshd
bash "$0" stop
/usr/sbin/sshd -f /etc/ssh/sshd_slurmtrain -E "$LOG"
chmod 644 "$LOG"
for _ in $(seq 50); do [ -s "$PID" ] && break; sleep 0.1; done
[ -s "$PID" ] || { echo "login node: sshd did not start on 127.0.0.1:$SSH_PORT:" >&2; tail -5 "$LOG" >&2; exit 1; }
