#!/usr/bin/env bash
# The container lane: jobs whose program runs inside an apptainer image (SIF), submitted by
# an ordinary user, on a sandbox of Debian 13's Slurm 24.11 (tests/containers/).
#   bash scripts/container_lane.sh [pytest args...]          (as root)
# Then tests/remote, as a second ordinary user playing a laptop that reaches the sandbox's
# login node over ssh (scripts/login_node.sh). SLURMTRAIN_LANE_PARTS: which of the two
# ("containers remote" by default); the pytest arguments go to each.
# SLURMTRAIN_CONTAINER_PREPARE_ONLY=1: build the trees (once per machine) and stop.
#
# apptainer 1.4.5 comes from Debian's unstable suite and needs glibc 2.38+: it is installed
# into a copy of the Slurm-version lane's Debian 13 tree (scripts/slurm_lane.sh). It refuses
# a chroot ("weak chrooted environment"), so the tree is entered with pivot_root in a mount
# namespace of its own. As root it cannot run here (apptainer's root mode asks for every
# capability, and this machine's bounding set lacks CAP_SYS_RESOURCE); as a user it runs in
# user-namespace mode, as most sites run it. The image is built from local files only: a
# Debian 13 minbase tree with the libraries CPython needs, and no Python of its own: the
# suite's Python (torch and slurmtrain installed) is bound into it at its own path, as sites
# bind a shared software tree; slurmtrain is this checkout's (PYTHONPATH), whatever the
# suite's Python has installed. No FUSE for users here: apptainer unpacks the SIF into a
# temporary sandbox at each `exec` (a few seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BASE=${SLURMTRAIN_LANE_TREE:-/var/cache/slurmtrain/debian13-slurm}
TREE=${SLURMTRAIN_CONTAINER_TREE:-/var/cache/slurmtrain/debian13-apptainer}
ROOTFS=${SLURMTRAIN_IMAGE_ROOTFS:-/var/cache/slurmtrain/image-rootfs}
MIRROR=${SLURMTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
USER_NAME=stuser USER_ID=2001
LAPTOP_USER=lapuser LAPTOP_ID=2002                # tests/remote: a laptop reaching the sandbox's login node
SSH_PORT=${SLURMTRAIN_LOGIN_PORT:-2238}           # the login node's sshd, on 127.0.0.1
IMAGE=/opt/images/train.sif                      # inside the tree
STATE=/var/lib/slurmtrain-sandbox-containers      # the lane's sandbox, inside the tree
IMAGE_LIBS="libffi8 libssl3t64 libsqlite3-0 libreadline8t64 libncursesw6 libbz2-1.0 liblzma5 zlib1g libgomp1 libuuid1 libgdbm6t64 libexpat1 libnsl2 libtirpc3t64 procps"
PY=${PYTHON:-python3}
PREFIX=$("$PY" -c 'import sys; print(sys.base_prefix)')  # the Python bound into the tree and the image
# `|| true`: on a fresh machine there is no tree yet, and under `set -e` a failed command
# substitution in an assignment ends the script without a word (the lanes failed so, silently).
STAMP="apptainer/unstable openssh-server $USER_NAME:$USER_ID $LAPTOP_USER:$LAPTOP_ID $(cat "$BASE/.slurmtrain-stamp" 2>/dev/null || true)"
IMAGE_STAMP="trixie minbase $IMAGE_LIBS python=$PREFIX slim"

step() { printf '\n==> container lane: %s\n' "$*"; }
in_tree() {  # in_tree ROOT CMD...: CMD as root in ROOT, entered with pivot_root (the suite's Python and this checkout bound in)
  # shellcheck disable=SC2016  # $1.. are the inner shell's
  unshare --mount --propagation private /bin/bash -c '
    set -e; T=$1 PREFIX=$2 REPO=$3; shift 3
    mount --bind "$T" "$T"; mount -t proc proc "$T/proc"; mount --rbind /dev "$T/dev"
    mkdir -p "$T$PREFIX" "$T$REPO" "$T/opt/image-rootfs"
    mount --bind -o ro "$PREFIX" "$T$PREFIX"; mount --bind "$REPO" "$T$REPO"
    cd "$T"; mkdir -p .oldroot; pivot_root . .oldroot; umount -l /.oldroot
    exec /usr/bin/env -i PATH="$PREFIX/bin:/usr/bin:/bin:/usr/sbin:/sbin" HOME=/root LANG=C.UTF-8 "$@"' \
    in-tree "$@"
}

if [ "$(id -u)" != 0 ]; then echo "container lane: needs root (debootstrap, namespaces, pivot_root)" >&2; exit 2; fi
if [ "$(cat "$TREE/.slurmtrain-container-stamp" 2>/dev/null)" != "$STAMP" ] || [ ! -d "$BASE" ]; then
  SLURMTRAIN_LANE_TREE_ONLY=1 bash scripts/slurm_lane.sh
  STAMP="apptainer/unstable openssh-server $USER_NAME:$USER_ID $LAPTOP_USER:$LAPTOP_ID $(cat "$BASE/.slurmtrain-stamp")"
  step "the Slurm-version lane's tree with apptainer from Debian unstable in $TREE (once per machine)"
  rm -rf "$TREE.new" && cp -a "$BASE" "$TREE.new"
  # The registry's copy of unstable has an expired Release date; only apptainer comes from it.
  echo "deb [check-valid-until=no] $MIRROR unstable main" > "$TREE.new/etc/apt/sources.list.d/unstable.list"
  printf 'Package: *\nPin: release a=unstable\nPin-Priority: 100\n' > "$TREE.new/etc/apt/preferences.d/unstable"
  printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' > "$TREE.new/etc/apt/apt.conf.d/90unstable"
  in_tree "$TREE.new" "$PREFIX" "$REPO" /usr/bin/env DEBIAN_FRONTEND=noninteractive \
    sh -c 'apt-get update -qq && apt-get install -y -qq apptainer/unstable openssh-server rsync >/dev/null && apptainer --version'
  chroot "$TREE.new" useradd -m -u "$USER_ID" -s /bin/bash "$USER_NAME"
  chroot "$TREE.new" useradd -m -u "$LAPTOP_ID" -s /bin/bash "$LAPTOP_USER"
  chroot "$TREE.new" usermod -p '*' "$USER_NAME"  # no password, not locked: sshd lets keys in
  # A user's own namespaces for `apptainer build --fakeroot`, as sites give them.
  echo "$USER_NAME:200000:65536" > "$TREE.new/etc/subuid"; cp "$TREE.new/etc/subuid" "$TREE.new/etc/subgid"
  chmod 755 "$TREE.new/root"  # the suite's Python may live under /root: users pass through to it
  echo "$STAMP" > "$TREE.new/.slurmtrain-container-stamp"
  rm -rf "$TREE" && mv "$TREE.new" "$TREE"
fi
if [ "$(cat "$ROOTFS/.slurmtrain-stamp" 2>/dev/null)" != "$IMAGE_STAMP" ]; then
  step "the image's tree: Debian 13 minbase and CPython's libraries in $ROOTFS (once per machine)"
  rm -rf "$ROOTFS.new"
  debootstrap --variant=minbase --include="${IMAGE_LIBS// /,}" trixie "$ROOTFS.new" "$MIRROR" >"$ROOTFS.log" 2>&1 \
    || { tail -20 "$ROOTFS.log" >&2; exit 1; }
  # `python` in the image is the bound one; an image's /dev is the runtime's; a user builds it,
  # so every file must be readable (the tree's shadow files hold no password).
  ln -sf "$PREFIX/bin/python3" "$ROOTFS.new/usr/local/bin/python"
  ln -sf "$PREFIX/bin/python3" "$ROOTFS.new/usr/local/bin/python3"
  rm -rf "${ROOTFS:?}.new/dev/"* "$ROOTFS.new/var/cache/apt/archives/"*.deb
  # Every `exec` unpacks the whole image (no FUSE here): what no program reads stays out
  # (apt's lists, documentation, translations), half of the minbase tree.
  rm -rf "$ROOTFS.new/var/lib/apt/lists/"* "$ROOTFS.new/usr/share/"{doc,man,info,locale}
  chmod -R a+rX "$ROOTFS.new"
  echo "$IMAGE_STAMP" > "$ROOTFS.new/.slurmtrain-stamp"
  rm -rf "$ROOTFS" && mv "$ROOTFS.new" "$ROOTFS"
  rm -f "$TREE$IMAGE"
fi
mkdir -p "$TREE/opt/images" && chmod 1777 "$TREE/opt/images"
cp /etc/resolv.conf "$TREE/etc/resolv.conf"
# scripts/test.sh builds the trees first, then runs this lane beside the Slurm-version lane,
# which writes into the tree this one is copied from.
if [ "${SLURMTRAIN_CONTAINER_PREPARE_ONLY:-}" = 1 ]; then exit 0; fi

# What runs inside the tree: the image (built by the user, once), the sandbox, the tests as the user.
cat >"$TREE/usr/local/bin/slurmtrain-container-lane" <<EOF2
#!/bin/bash
set -u
cd "$REPO"
mount --bind /opt/image-rootfs-src /opt/image-rootfs 2>/dev/null || true
if [ ! -s $IMAGE ]; then
  # lz4: an unpack at each exec costs less CPU than with the default gzip.
  su $USER_NAME -c "cd /tmp && apptainer -q build --mksquashfs-args '-comp lz4' $IMAGE /opt/image-rootfs" || exit 1
fi
export SLURMTRAIN_SANDBOX_DIR=$STATE
slurmtrain sandbox down >/dev/null 2>&1 || true
slurmtrain sandbox up --nodes 2 >/dev/null || { echo "container lane: sandbox up failed" >&2; exit 1; }
status=0
args=""  # pytest's arguments, each quoted for the user's shell (none: printf would give '', the whole tests/)
[ \$# = 0 ] || args=\$(printf ' %q' "\$@")
parts=" \${SLURMTRAIN_LANE_PARTS:-containers remote} "
if [ "\$parts" != "\${parts/ containers /}" ]; then
  su $USER_NAME -c "export PATH='$PREFIX/bin:/usr/bin:/bin' PYTHONPATH='$REPO' SLURM_CONF=$STATE/slurm.conf SLURMTRAIN_CONTAINER_TESTS=1 \\
    SLURMTRAIN_CONTAINER_IMAGE=$IMAGE SLURMTRAIN_CONTAINER_PYTHON='$PREFIX' CI='${CI:-}' OMP_NUM_THREADS=1; \\
    cd '$REPO' && python3 -m pytest -q -rs -p no:cacheprovider --durations=10 --basetemp=/home/$USER_NAME/pytest \\
    tests/containers\$args" || status=\$?
fi
if [ "\$parts" != "\${parts/ remote /}" ]; then
  # The laptop (another user, no Slurm on the PATH its commands get) and the login node.
  export PREFIX='$PREFIX' REPO='$REPO' STATE=$STATE USER_NAME=$USER_NAME LAPTOP_USER=$LAPTOP_USER SSH_PORT=$SSH_PORT
  bash '$REPO/scripts/login_node.sh' start || status=1
  su $LAPTOP_USER -c "export PATH='$PREFIX/bin:/usr/bin:/bin' PYTHONPATH='$REPO' SLURM_CONF=$STATE/slurm.conf SLURMTRAIN_REMOTE_TESTS=1 \\
    SLURMTRAIN_LAPTOP_BIN=/home/$LAPTOP_USER/laptop-bin SLURMTRAIN_LOGIN_LOG=/var/log/slurmtrain-sshd.log \\
    SLURMTRAIN_LOGIN_USER=$USER_NAME SLURMTRAIN_LOGIN_PORT=$SSH_PORT CI='${CI:-}' OMP_NUM_THREADS=1; \\
    cd '$REPO' && python3 -m pytest -q -rs -p no:cacheprovider --durations=10 --basetemp=/home/$LAPTOP_USER/pytest \\
    tests/remote\$args" || status=\$?
  bash '$REPO/scripts/login_node.sh' stop
fi
if [ "\$parts" != "\${parts/ bench /}" ]; then  # scripts/bench_remote.py (BENCHMARKS.md), not in CI
  export PREFIX='$PREFIX' REPO='$REPO' STATE=$STATE USER_NAME=$USER_NAME LAPTOP_USER=$LAPTOP_USER SSH_PORT=$SSH_PORT
  bash '$REPO/scripts/login_node.sh' start || status=1
  su $LAPTOP_USER -c "export PATH=/home/$LAPTOP_USER/laptop-bin XDG_RUNTIME_DIR=/tmp/bench-remote-\$\$; \\
    cd '$REPO' && '$PREFIX/bin/python3' scripts/bench_remote.py --remote lane --login-log /var/log/slurmtrain-sshd.log" || status=1
  bash '$REPO/scripts/login_node.sh' stop
fi
slurmtrain sandbox down >/dev/null || true
exit "\$status"
EOF2
chmod +x "$TREE/usr/local/bin/slurmtrain-container-lane"
mkdir -p "$TREE/opt/image-rootfs-src"
# shellcheck disable=SC2016  # dpkg-query's own ${Version}
step "apptainer $(chroot "$TREE" dpkg-query -W -f '${Version}' apptainer), $("$PY" -V) bound at $PREFIX: tests/containers as $USER_NAME, tests/remote as $LAPTOP_USER"
# shellcheck disable=SC2016
exec unshare --mount --propagation private /bin/bash -c '
  set -e; T=$1 PREFIX=$2 REPO=$3 ROOTFS=$4 PARTS=$5; shift 5
  mount --bind "$T" "$T"; mount -t proc proc "$T/proc"; mount --rbind /dev "$T/dev"
  mkdir -p "$T$PREFIX" "$T$REPO"
  mount --bind -o ro "$PREFIX" "$T$PREFIX"; mount --bind "$REPO" "$T$REPO"
  mount --bind -o ro "$ROOTFS" "$T/opt/image-rootfs-src"
  cd "$T"; mkdir -p .oldroot; pivot_root . .oldroot; umount -l /.oldroot
  exec /usr/bin/env -i PATH="$PREFIX/bin:/usr/bin:/bin:/usr/sbin:/sbin" HOME=/root LANG=C.UTF-8 PYTHONPATH="$REPO" \
    SLURMTRAIN_LANE_PARTS="$PARTS" "$@"' \
  lane "$TREE" "$PREFIX" "$REPO" "$ROOTFS" "${SLURMTRAIN_LANE_PARTS:-containers remote}" \
  /usr/local/bin/slurmtrain-container-lane "$@"
