#!/usr/bin/env bash
# Builds the packetproof CI image (ci/Containerfile) from this checkout.
#
#   ci/build-image.sh [--target runtime|toolchain] [--tag NAME] [--bin FILE] [-- ENGINE-BUILD-ARGS…]
#
# The runtime image holds target/release/packetproof (built here with `cargo build --release
# -p packetproof` unless --bin names one) and scenarios/ as /scenarios. The context is a
# temporary directory holding only what the Containerfile copies, never target/.
# ENGINE (podman, the default, or docker) builds it; arguments after `--` go to its `build`.
set -euo pipefail
cd "$(dirname "$0")/.."

engine=${ENGINE:-podman}
target=runtime
tag=""
bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "ci/build-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$tag" ] || tag="packetproof-ci:$target"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/ci"
cp ci/Containerfile ci/preflight.sh ci/entrypoint.sh "$ctx/ci/"
if [ "$target" = runtime ]; then
  if [ -z "$bin" ]; then
    cargo build --release -p packetproof
    bin="${CARGO_TARGET_DIR:-target}/release/packetproof"
  fi
  cp "$bin" "$ctx/packetproof"
  cp -r scenarios "$ctx/scenarios"
fi

"$engine" build --target "$target" -t "$tag" -f "$ctx/ci/Containerfile" "$@" "$ctx"
echo "ci/build-image.sh: built $tag"
