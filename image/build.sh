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
source image/rootfs.sh
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
IMAGE=${IMAGE:-ghcr.io/hitl-operator/hitl-operator:$VERSION}
ENGINE=${ENGINE:-$(command -v podman || command -v docker || true)}
BIN_DIR=${BIN_DIR:-target/release}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
BINARIES=(hitl-operator kubectl-hitl)

for bin in "${BINARIES[@]}"; do
  [ -x "$BIN_DIR/$bin" ] || die "no $BIN_DIR/$bin: run make build first"
done

CONTEXT=$(mktemp -d)
trap 'rm -rf "$CONTEXT"' EXIT
new_rootfs "$CONTEXT/rootfs" 65532 nonroot nonroot /home/nonroot
mkdir -p "$CONTEXT/rootfs/usr/local/bin" "$CONTEXT/empty"
for bin in "${BINARIES[@]}"; do
  install -m 0755 "$BIN_DIR/$bin" "$CONTEXT/rootfs/usr/local/bin/$bin"
done
copy_libraries "$CONTEXT/rootfs" "" "${BINARIES[@]/#/$BIN_DIR/}"

cat >"$CONTEXT/Containerfile" <<CONTAINERFILE
FROM scratch
COPY rootfs/ /
COPY --chown=65532:65532 empty/ /home/nonroot/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hitl-operator"]
CMD ["controller"]
CONTAINERFILE
build_image "$IMAGE" "$CONTEXT"
