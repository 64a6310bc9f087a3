#!/usr/bin/env bash
# Entrypoint of the packetproof CI image (ci/Containerfile).
#   IMAGE run /scenarios          preflight (ci/preflight.sh), then `packetproof run /scenarios`
#   IMAGE preflight               only the preflight
#   IMAGE check FILE…             packetproof subcommands that need no privileges: no preflight
#   IMAGE cargo test              (the toolchain image) preflight, then the command as given
#   IMAGE bash                    any other program on PATH, as given
# PACKETPROOF_PREFLIGHT=0 skips the preflight.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

preflight() {
  [ "${PACKETPROOF_PREFLIGHT:-1}" = 0 ] && return 0
  /usr/local/lib/packetproof/preflight.sh -q || exit 2
}

case "${1:-}" in
  "") exec packetproof --help ;;
  preflight) shift; exec /usr/local/lib/packetproof/preflight.sh "$@" ;;
  run | diff | mutants | bench | cleanup) preflight; exec packetproof "$@" ;;
  cargo) preflight; exec "$@" ;;
  -*) exec packetproof "$@" ;;
  *)
    if packetproof help "$1" >/dev/null 2>&1 || ! command -v "$1" >/dev/null 2>&1; then
      exec packetproof "$@"
    fi
    exec "$@"
    ;;
esac
