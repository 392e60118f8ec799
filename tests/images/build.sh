#!/usr/bin/env bash
# Builds the test peers as container images FROM scratch, for the pod e2e suite, which loads
# them into a kubelet's containerd and runs them with `imagePullPolicy: Never`.
#
#   tests/images/build.sh kagent-adk [VERSION]   localhost/kagent-adk:VERSION (default 0.7.4)
#   tests/images/build.sh mcp-peers              localhost/hitl-mcp-peers:test
#   (make test-images builds both; mk/test-images.mk)
#
# Why FROM scratch: this machine reaches no container registry, so no base image can be pulled.
# Each image is a root filesystem assembled here from what is installed on the host and copied
# in with COPY:
# - kagent-adk: kagent's agent runtime as cr.kagent.dev/kagent-dev/kagent/app:VERSION lays it
#   out (python/Dockerfile and python/Dockerfile.app of kagent): the venv of `make
#   runtime-peers` (tests/kagent-runtime/.venv-VERSION) at /.kagent/.venv, the Python it was
#   made with at /usr/local, ENTRYPOINT ["kagent-adk", "static"], WORKDIR /app, and the user,
#   HOME and environment of that release's image. tests/kagent-runtime/model.py and a2a_send.py
#   and tests/e2e/receiver.py are at /opt/hitl-tests, so the same image runs the scripted model,
#   the A2A client and the webhook receiver (`python3` is on PATH).
# - mcp-peers: the host's `node` and tests/mcp-peers (node_modules from `npm ci`) at
#   /opt/mcp-peers, ENTRYPOINT ["node"], WORKDIR /opt/mcp-peers, USER 65532.
# Every shared library the binaries and extension modules need is found with ldd and copied
# from the host at its own path, with the dynamic loader.
#
# Environment:
#   ENGINE             podman or docker (default: whichever is installed, podman first)
#   RUNTIME_VENV       the kagent-adk venv (default tests/kagent-runtime/.venv-VERSION)
#   MCP_PEERS_DIR      the npm project (default tests/mcp-peers, after `npm ci`)
#   SOURCE_DATE_EPOCH  the images' creation time and every file's mtime (default: the time of
#                      the checkout's last commit), so a rebuild of the same inputs is the same
# Runs as root: `ldconfig -r` chroots into the root filesystem it indexes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ENGINE=${ENGINE:-$(command -v podman || command -v docker || true)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct)}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# new_rootfs, copy_libraries, copy_at_same_path, build_image, die.
source "$ROOT/image/rootfs.sh"

# ELF files (shared objects and executables) under the directories given.
elf_files() {
  find "$@" -type f \( -name '*.so' -o -name '*.so.*' -o -perm -u+x \) -print0 |
    while IFS= read -r -d '' f; do
      if [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == '177ELF' ]]; then
        printf '%s\n' "$f"
      fi
    done
}

build_kagent_adk() {
  local version=$1
  local venv=${RUNTIME_VENV:-$ROOT/tests/kagent-runtime/.venv-$version}
  [[ -x $venv/bin/kagent-adk ]] || die "no kagent-adk in $venv: run make runtime-peers"

  # The user, home and environment of kagent's image for this release. Up to 0.9 it is built on
  # wolfi as user python (1001) with HOME /.kagent and PYTHONOPTIMIZE=2; from 0.10 on it is
  # distroless's nonroot (65532), with /config made for it, and Python's defaults. `writable`:
  # the directories the user owns.
  local uid user group home writable optimize image_env
  case $version in
    0.[0-9].*)
      uid=1001 user=python group=pythongroup home=/.kagent writable=/.kagent optimize=2
      image_env='PYTHONOPTIMIZE=2 MALLOC_TRIM_THRESHOLD_=262144 MALLOC_ARENA_MAX=2'
      ;;
    *)
      uid=65532 user=nonroot group=nonroot home=/home/nonroot optimize=0
      writable='/home/nonroot /config'
      image_env='VIRTUAL_ENV=/.kagent/.venv'
      ;;
  esac

  # The venv's base Python (pyenv's, say): its binary, stdlib and, when built with
  # --enable-shared, libpython.
  local base_python pyver stdlib prefix
  read -r base_python pyver stdlib prefix < <("$venv/bin/python" -c '
import os, sys, sysconfig
print(os.path.realpath(sys._base_executable), sysconfig.get_python_version(),
      sysconfig.get_path("stdlib"), os.path.realpath(sys.base_prefix))')

  local work=$WORK/kagent-adk-$version
  local rootfs=$work/rootfs
  new_rootfs "$rootfs" "$uid" "$user" "$group" "$home"
  mkdir -p "$work/empty"

  # Python at /usr/local. It finds its stdlib from where its binary is (lib/pythonX.Y/os.py
  # next to ../bin), so moving it from its build prefix needs nothing else; left out: the test
  # suite, IDLE, Tk (whose module would pull in X11), ensurepip, the static library and
  # Makefile for building extensions, the base's own site-packages (pip), and the bytecode,
  # compiled again below.
  mkdir -p "$rootfs/usr/local/bin" "$rootfs/usr/local/lib/python$pyver"
  cp "$base_python" "$rootfs/usr/local/bin/python$pyver"
  ln -s "python$pyver" "$rootfs/usr/local/bin/python3"
  ln -s python3 "$rootfs/usr/local/bin/python"
  tar -C "$stdlib" -cf - \
    --exclude=__pycache__ --exclude=./test --exclude=./idlelib --exclude=./tkinter \
    --exclude=./turtledemo --exclude=./ensurepip --exclude='./config-*' \
    --exclude=./site-packages --exclude='./lib-dynload/_tkinter.*' . |
    tar -C "$rootfs/usr/local/lib/python$pyver" -xf -
  mkdir "$rootfs/usr/local/lib/python$pyver/site-packages"
  # libpython lies in the build prefix's lib/, which the binary's RUNPATH names; in the image it
  # is in /usr/local/lib, found through /etc/ld.so.cache (ldconfig, below), as on Debian.
  local libpython
  for libpython in $(ldd "$base_python" | awk -v p="$prefix/" 'index($3, p) == 1 {print $3}'); do
    cp -L "$libpython" "$rootfs/usr/local/lib/"
  done

  # The venv at /.kagent/.venv, as kagent has it: its python linked to /usr/local, its console
  # scripts' shebangs pointed at its new place. Left out: pip (nothing installs at run time),
  # the activate scripts and the bytecode.
  local v=/.kagent/.venv venvfs=$work/venv
  mkdir -p "$venvfs/bin" "$venvfs/lib/python$pyver"
  ln -s lib "$venvfs/lib64"
  printf 'home = /usr/local/bin\ninclude-system-site-packages = false\nversion = %s\n' \
    "$("$base_python" -c 'import platform; print(platform.python_version())')" >"$venvfs/pyvenv.cfg"
  tar -C "$venv/lib/python$pyver/site-packages" -cf - \
    --exclude=__pycache__ --exclude=./pip --exclude='./pip-*.dist-info' . |
    tar -C "$venvfs/lib/python$pyver" --transform='s,^\.,site-packages,' -xf -
  ln -s "/usr/local/bin/python$pyver" "$venvfs/bin/python$pyver"
  ln -s "python$pyver" "$venvfs/bin/python3"
  ln -s python3 "$venvfs/bin/python"
  local script copy
  for script in "$venv"/bin/*; do
    case $(basename "$script") in
      python* | pip* | activate* | Activate.ps1 | __pycache__) continue ;;
    esac
    copy=$venvfs/bin/$(basename "$script")
    sed "1s,^#!$venv/bin/python[0-9.]*\$,#!$v/bin/python," "$script" >"$copy"
    chmod 755 "$copy"
  done
  if grep -rlF "$venv" "$venvfs/bin"; then
    die "the scripts above still name $venv"
  fi

  mkdir -p "$rootfs/opt/hitl-tests" "$rootfs/app"
  cp "$ROOT"/tests/kagent-runtime/{model.py,a2a_send.py} "$ROOT"/tests/e2e/receiver.py "$rootfs/opt/hitl-tests/"

  local elves
  mapfile -t elves < <(elf_files "$rootfs/usr/local" "$venvfs")
  copy_libraries "$rootfs" "$prefix $venvfs" "$base_python" "${elves[@]}"
  # glibc loads libgcc_s with dlopen (to unwind a thread at pthread_exit or cancellation), so
  # ldd does not list it for Python; numpy and grpc's modules also link it.
  copy_at_same_path "$rootfs" "$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64/ {print $NF; exit}')"
  echo /usr/local/lib >"$rootfs/etc/ld.so.conf"
  ldconfig -r "$rootfs"

  # Bytecode for every module, at the optimization level the image runs with, so no import
  # compiles (the image's user may not write there). unchecked-hash: a .pyc is used without
  # comparing the source's mtime, which build_image sets to SOURCE_DATE_EPOCH. Left out: the
  # macOS metadata files (`._name.py`, not Python) that google-adk's wheel ships.
  local compile=("$base_python" -m compileall -q -j 1 -o "$optimize"
    --invalidation-mode unchecked-hash -x '/\._[^/]*$')
  "${compile[@]}" -s "$rootfs" -p / "$rootfs/usr/local/lib/python$pyver"
  "${compile[@]}" -s "$venvfs" -p "$v" "$venvfs/lib/python$pyver"

  local path=$v/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  cat >"$work/Containerfile" <<EOF
FROM scratch
COPY rootfs/ /
$(for dir in $writable; do echo "COPY --chown=$uid:$uid empty/ $dir/"; done)
COPY venv/ $v/
ENV LANG=C.UTF-8 LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1 PATH=$path HOME=$home $image_env
WORKDIR /app
USER $uid:$uid
EXPOSE 8080
LABEL org.opencontainers.image.description="kagent-adk $version for the hitl-operator tests" \\
      org.opencontainers.image.version="$version"
ENTRYPOINT ["kagent-adk", "static"]
CMD ["--host", "0.0.0.0", "--port", "8080"]
EOF
  build_image "localhost/kagent-adk:$version" "$work"
}

build_mcp_peers() {
  local peers=${MCP_PEERS_DIR:-$ROOT/tests/mcp-peers}
  [[ -d $peers/node_modules ]] || die "no $peers/node_modules: run npm ci --prefix $peers"
  local node
  node=$(realpath "$(command -v node)") || die "no node on PATH"

  local work=$WORK/mcp-peers
  local rootfs=$work/rootfs
  new_rootfs "$rootfs" 65532 nonroot nonroot /home/nonroot
  mkdir -p "$work/empty" "$rootfs/usr/local/bin" "$rootfs/opt/mcp-peers"
  cp "$node" "$rootfs/usr/local/bin/node"
  cp "$peers"/package.json "$peers"/package-lock.json "$peers"/*.mjs "$rootfs/opt/mcp-peers/"
  cp -a "$peers/node_modules" "$rootfs/opt/mcp-peers/"

  local elves
  mapfile -t elves < <(elf_files "$rootfs/opt/mcp-peers")
  copy_libraries "$rootfs" "" "$node" "${elves[@]}"

  cat >"$work/Containerfile" <<EOF
FROM scratch
COPY rootfs/ /
COPY --chown=65532:65532 empty/ /home/nonroot/
ENV PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/nonroot
WORKDIR /opt/mcp-peers
USER 65532:65532
LABEL org.opencontainers.image.description="node $("$node" --version), tests/mcp-peers"
ENTRYPOINT ["node"]
EOF
  build_image localhost/hitl-mcp-peers:test "$work"
}

case ${1:-} in
  kagent-adk) build_kagent_adk "${2:-0.7.4}" ;;
  mcp-peers) build_mcp_peers ;;
  *) die "usage: build.sh kagent-adk [VERSION] | build.sh mcp-peers" ;;
esac
