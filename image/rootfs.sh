# Assembling an image FROM scratch out of what the host has installed, with no registry and no
# base image (sourced). image/build.sh builds the operator's image with it, tests/images/build.sh
# the test peers' images.
#
# The caller sets ENGINE (podman or docker) and SOURCE_DATE_EPOCH (every file's mtime and the
# image's creation time, so the same inputs give the same image). Images are built without the
# engine's layer cache: podman keys a COPY layer by content, not mtimes, so a layer cached under
# another SOURCE_DATE_EPOCH (an earlier commit, same binaries) would be reused and change the ID.
# CA_BUNDLE_CACHE is where the pinned CA bundle's wheel is kept between builds (default
# ~/.cache/hitl-operator), outside every image's context.

# CA_BUNDLE_VERSION, CA_BUNDLE_WHEEL, CA_BUNDLE_SHA256: the pinned CA bundle.
source "$(dirname "${BASH_SOURCE[0]}")/ca-bundle.env"
CA_BUNDLE_CACHE=${CA_BUNDLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hitl-operator}

die() {
  echo "${0##*/}: $*" >&2
  exit 1
}

# new_rootfs DIR UID USER GROUP HOME: a new root filesystem in DIR with what every image needs:
# the host's merged-/usr symlinks (/lib -> usr/lib, ...; the loader's path in every binary is
# /lib64/...), a /tmp anyone may write (mode 1777, as on any Linux), the pinned CA bundle at
# /etc/ssl/certs/ca-certificates.crt (HTTPS to anything but the apiserver; install_ca_bundle),
# and /etc/passwd and /etc/group naming root and the image's user.
# The user's home is made by the Containerfile (COPY --chown of an empty directory), since COPY
# gives every file it copies to root.
new_rootfs() {
  local dir=$1 uid=$2 user=$3 group=$4 home=$5
  # The home's parent too: COPY would give the directories it creates to the user.
  mkdir -p "$dir"/{etc/ssl/certs,tmp,usr} "$dir$(dirname "$home")"
  local d
  for d in bin sbin lib lib64; do
    if [[ -L /$d ]]; then
      ln -s "$(readlink "/$d")" "$dir/$d"
      mkdir -p "$dir/usr/$d"
    fi
  done
  chmod 1777 "$dir/tmp"
  install_ca_bundle "$dir/etc/ssl/certs/ca-certificates.crt"
  printf 'root:x:0:0:root:/root:/sbin/nologin\n%s:x:%s:%s::%s:/sbin/nologin\n' \
    "$user" "$uid" "$uid" "$home" >"$dir/etc/passwd"
  printf 'root:x:0:\n%s:x:%s:\n' "$group" "$uid" >"$dir/etc/group"
  # glibc's default for hosts is "dns files", which asks the cluster DNS for localhost first.
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$dir/etc/nsswitch.conf"
}

# ca_bundle_sha256_wrong FILE: prints FILE's sha256 and succeeds when it is not the one
# image/ca-bundle.env pins.
ca_bundle_sha256_wrong() {
  local sum
  sum=$(sha256sum "$1" | cut -d' ' -f1)
  [[ $sum != "$CA_BUNDLE_SHA256" ]] && echo "$sum"
}

# ca_bundle_wheel: the pinned certifi wheel in CA_BUNDLE_CACHE, downloaded from PyPI (pip's
# index settings apply) the first time and its sha256 checked every time; sets CA_BUNDLE_PATH.
ca_bundle_wheel() {
  CA_BUNDLE_PATH=$CA_BUNDLE_CACHE/$CA_BUNDLE_WHEEL
  local pinned="image/ca-bundle.env pins sha256 $CA_BUNDLE_SHA256 for $CA_BUNDLE_WHEEL" sum
  if [[ ! -f $CA_BUNDLE_PATH ]]; then
    python3 -m pip --version >/dev/null 2>&1 ||
      die "python3 -m pip is needed to download the images' CA bundle ($CA_BUNDLE_WHEEL from PyPI): install pip (Debian: apt-get install python3-pip), or put that wheel in $CA_BUNDLE_CACHE"
    mkdir -p "$CA_BUNDLE_CACHE"
    local download got
    download=$(mktemp -d "$CA_BUNDLE_CACHE/download.XXXXXX")
    if ! python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --dest "$download" "certifi==$CA_BUNDLE_VERSION" >&2; then
      rm -rf "$download"
      die "pip download certifi==$CA_BUNDLE_VERSION failed (the images' CA bundle, image/ca-bundle.env)"
    fi
    got=$(ls "$download")
    if [[ $got != "$CA_BUNDLE_WHEEL" ]]; then
      rm -rf "$download"
      die "pip download certifi==$CA_BUNDLE_VERSION gave '$got', not $CA_BUNDLE_WHEEL"
    fi
    # Checked before it is kept: a wrong download never lands in the cache.
    if sum=$(ca_bundle_sha256_wrong "$download/$got"); then
      rm -rf "$download"
      die "the $got downloaded has sha256 $sum, but $pinned: not the pinned CA bundle; not building"
    fi
    mv "$download/$got" "$CA_BUNDLE_PATH"
    rm -rf "$download"
  fi
  if sum=$(ca_bundle_sha256_wrong "$CA_BUNDLE_PATH"); then
    die "$CA_BUNDLE_PATH has sha256 $sum, but $pinned: not the pinned CA bundle; not building (delete it to download it again)"
  fi
}

# install_ca_bundle FILE: the pinned CA bundle (certifi's cacert.pem from the wheel of
# image/ca-bundle.env, checked against its sha256) written to FILE, mode 0644. The build host's
# own bundle is never used: its local additions would be trusted wherever the image runs.
install_ca_bundle() {
  ca_bundle_wheel
  python3 -c '
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[2], "wb") as out:
    out.write(wheel.read("certifi/cacert.pem"))' "$CA_BUNDLE_PATH" "$1" ||
    die "no certifi/cacert.pem in $CA_BUNDLE_PATH"
  chmod 0644 "$1"
}

# copy_at_same_path ROOTFS FILE: FILE into ROOTFS at the same path, dereferenced. ROOTFS has the
# host's merged-/usr symlinks (new_rootfs), so /lib/x86_64-linux-gnu/libc.so.6 lands in usr/lib,
# as on the host.
copy_at_same_path() {
  local rootfs=$1 file=$2
  cp -L --parents "$file" "$rootfs/"
}

# copy_libraries ROOTFS SOURCES ELF...: every shared library the ELF files load, and the dynamic
# loader, into ROOTFS (ldd resolves them through their RUNPATHs, so this follows the dependencies
# of dependencies too). Libraries in ROOTFS or under SOURCES (space-separated real paths of
# directories whose files are in the image already: a venv, a Python prefix) are skipped. A
# library ldd cannot find is fatal, except one lying next to the object that needs it: wheels
# repaired by auditwheel put a library's own dependencies in its directory (shapely.libs), found
# at run time because the extension module loading them loads that directory first.
copy_libraries() {
  local rootfs=$1 sources=$2
  shift 2
  local file name arrow path src skip
  declare -A seen=()
  for file in "$@"; do
    # Lines are `libc.so.6 => /lib/.../libc.so.6 (0x...)`, `libx.so => not found`,
    # `/lib64/ld-linux-x86-64.so.2 (0x...)` (the loader) and `linux-vdso.so.1 (0x...)`
    # (the kernel's).
    while read -r name arrow path _; do
      if [[ $arrow == "=>" && $path == not ]]; then
        [[ -e $(dirname "$file")/$name ]] || die "$file needs $name, which ldd cannot find"
        continue
      fi
      [[ $arrow == "=>" ]] || path=$name
      [[ $path == /* ]] || continue
      [[ -n ${seen[$path]:-} ]] && continue
      seen[$path]=1
      skip=
      for src in "$rootfs" $sources; do
        [[ $(realpath "$path") == "$src"/* ]] && skip=1
      done
      [[ -n $skip ]] || copy_at_same_path "$rootfs" "$path"
    done < <(ldd "$file")
  done
}

# build_image TAG CONTEXT: builds TAG from CONTEXT (its Containerfile and the directories it
# copies) with every mtime and the creation time at SOURCE_DATE_EPOCH; prints the tag, the
# image ID and the size.
build_image() {
  local tag=$1 context=$2
  [[ -n ${ENGINE:-} ]] || die "neither podman nor docker is installed"
  find "$context" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
  local epoch
  case $(basename "$ENGINE") in
    podman) epoch=(--timestamp "$SOURCE_DATE_EPOCH") ;;
    docker) epoch=(--build-arg "SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH") ;;
    *) die "ENGINE must be podman or docker, not $ENGINE" ;;
  esac
  "$ENGINE" build --quiet --no-cache "${epoch[@]}" -t "$tag" -f "$context/Containerfile" "$context" >/dev/null
  "$ENGINE" image inspect --format '{{.Id}} {{.Size}}' "$tag" |
    awk -v tag="$tag" '{ printf "%s: id %s, %.1f MB\n", tag, substr($1, 1, 12), $2 / 1e6 }'
}
