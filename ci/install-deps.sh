#!/usr/bin/env bash
# Installs the system packages a fresh Debian/Ubuntu machine lacks for packetproof:
# iproute2 (ip, bridge: debugging and `ip netns`), iptables (iptables-restore/-save, which the
# built-in proxy loads rules with), nftables (nft), conntrack (conntrack-tools), python3 (the
# example proxy program scenarios/command-clusterip.yaml runs through the command adapter),
# libxml2-utils (xmllint, which harness/tests/junit_schema.rs validates our JUnit XML with);
# and for the kernel matrix (vm/, harness/tests/vm_matrix.rs, which `.ci/run` runs):
# qemu-system-x86 (qemu), busybox-static (the guest's shell), kmod (depmod, and modprobe inside
# the guest), xz-utils and zstd (to unpack kernel modules), debian-archive-keyring (to verify
# Debian's kernel packages), dpkg (dpkg-deb, to unpack them) and binutils (strip: a debug
# build's 290 MB binary goes into the guest without its debug sections), ipvsadm and ipset
# (builtin-ipvs, which runs only inside the VMs: the guest takes the host's tools). `--no-vm` leaves
# the matrix's packages out (vm_matrix.rs then skips, or fails under
# PACKETPROOF_REQUIRE_PRIVILEGES=1); `--vm` is accepted for older callers.
# Then mdBook, from crates.io, which builds and tests the manual in docs/ (`.ci/run` runs
# `mdbook build docs` and `mdbook test docs`); `--no-docs` leaves it out, `--docs-only` installs
# only it.
# And for the existing-nodes tests' stand-in nodes (harness/tests/existing_nodes.rs), which are
# containers: podman and runc (crun refuses hybrid cgroups), and busybox-static, from which the
# harness makes the nodes' image offline; `--no-containers` leaves them out (the container
# tests then skip, or fail under PACKETPROOF_REQUIRE_CONTAINERS=1, as `.ci/run` sets it).
# Installs only what is missing; needs root (or sudo) when a system package is.
set -euo pipefail

# mdBook's release, pinned; only the `search` feature (the book's search box): without
# `serve` and `watch` it compiles in about two thirds of the time (6.4 min against 9.3 min
# for the default features, optimised, on 2 cores shared with other builds).
MDBOOK_VERSION=0.5.4

# command -> Debian package
declare -A wanted=(
  [ip]=iproute2
  [iptables-restore]=iptables
  [nft]=nftables
  [conntrack]=conntrack
  [python3]=python3
  [xmllint]=libxml2-utils
)
vm=true
containers=true
docs=true
docs_only=false
for arg in "$@"; do
  case "$arg" in
    --no-vm) vm=false ;;
    --no-containers) containers=false ;;
    --vm) ;;
    --no-docs) docs=false ;;
    --docs-only) docs_only=true ;;
    *) echo "ci/install-deps.sh: unknown option $arg (--no-vm leaves out the kernel matrix's packages, --no-containers podman, --no-docs mdBook, --docs-only only mdBook)" >&2; exit 2 ;;
  esac
done

install_docs() {
  if [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
  fi
  if command -v mdbook >/dev/null 2>&1; then
    echo "ci/install-deps.sh: mdbook present ($(mdbook --version))"
  elif ! command -v cargo >/dev/null 2>&1; then
    echo "ci/install-deps.sh: mdbook is missing and there is no cargo to install it with (install Rust, or pass --no-docs)" >&2
    exit 1
  else
    echo "ci/install-deps.sh: installing mdbook $MDBOOK_VERSION from crates.io"
    # Unoptimised: a fresh machine compiles it beside the tests, and the manual is small. At
    # opt-level 0 it compiles in 2 min 24 s of CPU (3 min 42 s on 2 cores shared with a VM)
    # and builds the manual in 1.4 s instead of 0.3 s.
    CARGO_PROFILE_RELEASE_OPT_LEVEL=0 CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
      CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=true \
      cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search
  fi
}

if $docs_only; then
  install_docs
  exit 0
fi
if $vm; then
  wanted+=(
    [qemu-system-x86_64]=qemu-system-x86
    [busybox]=busybox-static
    [depmod]=kmod
    [xz]=xz-utils
    [zstd]=zstd
    [dpkg-deb]=dpkg
    [apt-get]=apt
    [ipvsadm]=ipvsadm
    [ipset]=ipset
    [strip]=binutils
  )
fi
if $containers; then
  wanted+=(
    [podman]=podman
    [runc]=runc
    [busybox]=busybox-static
  )
fi

missing=()
for cmd in "${!wanted[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$cmd" ] && ! [ -x "/sbin/$cmd" ]; then
    missing+=("${wanted[$cmd]}")
  fi
done
# The guest's shell and the node image's busybox must be static: a dynamic one would need its libraries.
if { $vm || $containers; } && command -v busybox >/dev/null 2>&1 && ldd "$(command -v busybox)" >/dev/null 2>&1; then
  missing+=(busybox-static)
fi
if $vm && ! [ -f /usr/share/keyrings/debian-archive-keyring.gpg ]; then
  missing+=(debian-archive-keyring)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "ci/install-deps.sh: all system packages present"
else
  echo "ci/install-deps.sh: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # On Debian bookworm with backports enabled, qemu-utils may come from backports while
  # qemu-system-x86 would come from bookworm (they conflict): then take qemu from backports too.
  if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    $sudo apt-get install -y -qq --no-install-recommends -t "$(. /etc/os-release; echo "$VERSION_CODENAME")-backports" "${missing[@]}"
  fi
fi

if $docs; then
  install_docs
fi
