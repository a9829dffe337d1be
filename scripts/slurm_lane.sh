#!/usr/bin/env bash
# The Slurm-version lane: the torch-free end-to-end tests (tests/e2e/test_slurm_versions.py)
# on Debian 13's Slurm 24.11, beside the suite's Debian 12 Slurm 22.05. They run in a
# Debian 13 tree of their own, built here from Debian's packages with debootstrap and kept
# between runs, with that tree's Python 3.13 and no torch, against a sandbox in its own
# state directory (so its own ports and job ids) and with no cgroup file system mounted.
#   bash scripts/slurm_lane.sh [pytest args...]          (as root)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
TREE=${SLURMTRAIN_LANE_TREE:-/var/cache/slurmtrain/debian13-slurm}
MIRROR=${SLURMTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=slurm-wlm,munge,python3,python3-venv,ca-certificates,procps
PIP_PACKAGES=(click jinja2 "submitit>=1.5,<=1.5.4" numpy pytest)
VENV=/opt/slurmtrain-venv
# The sandbox's state directory inside the tree: a name no sandbox of this machine's own
# Slurm uses, so neither one's `down` nor a test's process search takes the other's.
STATE=/var/lib/slurmtrain-sandbox-slurm24
STAMP="trixie ${PACKAGES} ${PIP_PACKAGES[*]}"

step() { printf '\n==> slurm lane: %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then echo "slurm lane: needs root (debootstrap, chroot)" >&2; exit 2; fi
command -v debootstrap >/dev/null || {
  step "apt-get install debootstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

if [ "$(cat "$TREE/.slurmtrain-stamp" 2>/dev/null)" != "$STAMP" ]; then
  step "building a Debian 13 tree with Slurm 24.11 in $TREE (once per machine; about a minute)"
  rm -rf "$TREE.new"
  mkdir -p "$(dirname "$TREE")"
  debootstrap --variant=minbase --include="$PACKAGES" trixie "$TREE.new" "$MIRROR" >"$TREE.log" 2>&1 \
    || { tail -20 "$TREE.log" >&2; exit 1; }
  # pip inside the tree trusts what this machine trusts (a proxy's CA included).
  cp /etc/ssl/certs/ca-certificates.crt "$TREE.new/etc/ssl/certs/host-ca-bundle.crt"
  cp /etc/resolv.conf "$TREE.new/etc/resolv.conf"
  chroot "$TREE.new" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root PIP_CERT=/etc/ssl/certs/host-ca-bundle.crt \
    sh -c "python3 -m venv $VENV && $VENV/bin/pip install -q --disable-pip-version-check $(printf "'%s' " "${PIP_PACKAGES[@]}")"
  printf '#!%s/bin/python\nfrom slurmtrain.cli import main\nmain()\n' "$VENV" > "$TREE.new$VENV/bin/slurmtrain"
  chmod +x "$TREE.new$VENV/bin/slurmtrain"
  echo "$STAMP" > "$TREE.new/.slurmtrain-stamp"
  rm -rf "$TREE" && mv "$TREE.new" "$TREE"
fi
cp /etc/resolv.conf "$TREE/etc/resolv.conf"
# The container lane (scripts/container_lane.sh) builds on this tree: it asks for the tree only.
if [ "${SLURMTRAIN_LANE_TREE_ONLY:-}" = 1 ]; then exit 0; fi
mkdir -p "$TREE$REPO"
# The CLI from this checkout, as an editable install would give it, without writing into the
# checkout. Written on every run: the tree outlives the checkout it was built beside (CI clones
# to a path of its own).
site=$(chroot "$TREE" $VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$REPO" > "$TREE$site/slurmtrain-checkout.pth"

# What runs inside the tree: the lane's tests, then its sandbox down.
cat >"$TREE/usr/local/bin/slurmtrain-lane" <<'EOF'
#!/bin/bash
cd "$1" && shift
[ ! -e /sys/fs/cgroup ] || { echo "slurm lane: the tree has a cgroup file system; it must run without one" >&2; exit 1; }
status=0
SLURMTRAIN_SLURM_LANE_TESTS=1 python3 -m pytest -q -rs -p no:cacheprovider --durations=10 \
  tests/e2e/test_slurm_versions.py tests/e2e/test_dead_batch_host_24.py "$@" || status=$?
slurmtrain sandbox down >/dev/null || true
exit "$status"
EOF
chmod +x "$TREE/usr/local/bin/slurmtrain-lane"

step "$(chroot "$TREE" slurmctld -V), $(chroot "$TREE" python3 -V): tests/e2e/test_slurm_versions.py, tests/e2e/test_dead_batch_host_24.py"
# A mount namespace of its own: the tree's /proc, /dev and the checkout go when the lane ends.
# No /sys: slurmd 24.11 finds no cgroup file system, as in a container (the sandbox's cgroup.conf).
# shellcheck disable=SC2016  # $1, $2 and $@ are the inner shell's
exec unshare --mount --propagation private /bin/bash -c \
  'set -e; mount -t proc proc "$1/proc"; mount --rbind /dev "$1/dev"; mount --bind "$2" "$1$2"; exec chroot "$1" "${@:3}"' \
  lane "$TREE" "$REPO" /usr/bin/env -i PATH="$VENV/bin:/usr/bin:/bin:/usr/sbin:/sbin" HOME=/root LANG=C.UTF-8 \
  CI="${CI:-}" SLURMTRAIN_SANDBOX_DIR="$STATE" /usr/local/bin/slurmtrain-lane "$REPO" "$@"
