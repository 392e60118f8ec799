# One image for the controller, the approval gate sidecar and the kubectl plugin: the recipe for
# the published image (ghcr.io/hitl-operator/hitl-operator:<version>), for a release job with a
# container engine and access to the Rust and distroless images. No job publishes it yet; .ci/run
# builds it where those registries answer (and prints SKIP where they do not).
#   make image-dockerfile   (podman or docker build -t ghcr.io/hitl-operator/hitl-operator:<version> .)
# Where no registry is reachable, `make image` (image/build.sh) builds the same binaries into the
# same layout (non-root 65532, no shell) FROM scratch, with the libraries they load.
# Base images by their full names: podman resolves no short name without a search registry.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
# A workspace member (the tests' kit): cargo reads every member's manifest.
COPY test-kit ./test-kit
RUN cargo build --release --locked --bins

# Distroless, non-root (uid 65532), no shell. Its CA bundle (/etc/ssl/certs/ca-certificates.crt,
# the trust roots of the gate's HTTPS upstreams) is the base image's own: Debian 12's
# ca-certificates (Mozilla's set) as this distroless tag ships it. Nothing here copies the build
# host's bundle, so a CA added on the build machine is never trusted by the image. (`make image`
# takes a pinned certifi bundle instead: image/ca-bundle.env.)
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/hitl-operator /usr/local/bin/hitl-operator
COPY --from=build /src/target/release/kubectl-hitl /usr/local/bin/kubectl-hitl
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/hitl-operator"]
CMD ["controller"]
