#!/usr/bin/env bash
# Installs the system packages a fresh Debian/Ubuntu machine lacks for packetproof:
# iproute2 (ip, bridge: debugging and `ip netns`), iptables (iptables-restore/-save, which the
# built-in proxy loads rules with), nftables (nft), conntrack (conntrack-tools), python3 (the
# example proxy program scenarios/command-clusterip.yaml runs through the command adapter),
# libxml2-utils (xmllint, which harness/tests/junit_schema.rs validates our JUnit XML with).
# Installs only what is missing; needs root (or sudo) when something is.
set -euo pipefail

# command -> Debian package
declare -A wanted=(
  [ip]=iproute2
  [iptables-restore]=iptables
  [nft]=nftables
  [conntrack]=conntrack
  [python3]=python3
  [xmllint]=libxml2-utils
)

missing=()
for cmd in "${!wanted[@]}"; do
  if ! command -v "$cmd" >/dev/null 2>&1 && ! [ -x "/usr/sbin/$cmd" ] && ! [ -x "/sbin/$cmd" ]; then
    missing+=("${wanted[$cmd]}")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "ci/install-deps.sh: all system packages present"
  exit 0
fi

echo "ci/install-deps.sh: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
