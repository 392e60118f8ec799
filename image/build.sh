#!/usr/bin/env bash
# Builds the operator's image from this checkout without a registry or a base image: the release
# binaries (`make build`) and exactly the shared libraries they load, FROM scratch, non-root
# (65532, as the published distroless image), no shell. `make image` runs it.
#
#   IMAGE   the tag (default: the chart's default image, ghcr.io/hitl-operator/hitl-operator:VERSION,
#           so a chart installed with default values finds it once loaded into the node)
#   ENGINE  podman or docker (default: whichever is installed, podman first)
#   BIN_DIR the binaries (default: target/release)
#
# Reproducible: every file's mtime and the image's creation time are the last commit's time
# (SOURCE_DATE_EPOCH), so the same binaries give the same image ID.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
IMAGE=${IMAGE:-ghcr.io/hitl-operator/hitl-operator:$VERSION}
ENGINE=${ENGINE:-$(command -v podman || command -v docker || true)}
BIN_DIR=${BIN_DIR:-target/release}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
BINARIES=(hitl-operator kubectl-hitl)

[ -n "$ENGINE" ] || { echo "image: neither podman nor docker is installed" >&2; exit 1; }
for bin in "${BINARIES[@]}"; do
  [ -x "$BIN_DIR/$bin" ] || { echo "image: no $BIN_DIR/$bin: run make build first" >&2; exit 1; }
done

CONTEXT=$(mktemp -d)
trap 'rm -rf "$CONTEXT"' EXIT
ROOT=$CONTEXT/rootfs
mkdir -p "$ROOT/usr/local/bin" "$ROOT/etc/ssl/certs" "$ROOT/tmp"
chmod 1777 "$ROOT/tmp"

# The binaries, then every library the dynamic loader resolves for them (and the loader itself),
# at the paths it resolved them to.
for bin in "${BINARIES[@]}"; do
  install -m 0755 "$BIN_DIR/$bin" "$ROOT/usr/local/bin/$bin"
  ldd "$BIN_DIR/$bin" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
done | sort -u | while read -r lib; do
  mkdir -p "$ROOT$(dirname "$lib")"
  cp -L "$lib" "$ROOT$lib"
done

# Who 65532 is (logs and tools that look the user up), and the CA bundle the platform verifier
# reads for HTTPS to anything but the apiserver (notifier webhooks).
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ROOT/etc/group"
cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

cat >"$CONTEXT/Containerfile" <<CONTAINERFILE
FROM scratch
COPY rootfs/ /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hitl-operator"]
CMD ["controller"]
CONTAINERFILE

case "$(basename "$ENGINE")" in
  podman) "$ENGINE" build --quiet --timestamp "$SOURCE_DATE_EPOCH" -t "$IMAGE" "$CONTEXT" >/dev/null ;;
  *) SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH "$ENGINE" build --quiet -t "$IMAGE" "$CONTEXT" >/dev/null ;;
esac
echo "$IMAGE $("$ENGINE" image inspect --format '{{.Id}} {{.Size}}' "$IMAGE" | awk '{ printf "id %s, %.1f MB", substr($1, 1, 12), $2 / 1e6 }')"
