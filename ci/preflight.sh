#!/usr/bin/env bash
# Says, one line each, what this host (or container) lacks for packetproof, before a run that
# would otherwise fail every scenario with a setup error and no word of why.
#
#   error: packetproof cannot run here (exit 1):
#     - not root, or no CAP_NET_ADMIN + CAP_SYS_ADMIN (`ip netns add` is tried);
#     - the host kernel's br_netfilter is not loaded (a container cannot load it);
#     - a tool the built-in proxies and probes run is missing.
#   note:  some scenarios will be skipped, never passed (exit 0):
#     - no SCTP sockets (SCTP scenarios), no IPVS (IPVS-mode proxies).
#
# Usable alone (`bash ci/preflight.sh`) or through the CI image's entrypoint, which runs it
# before `run`, `diff`, `mutants`, `bench` and `cargo` (PACKETPROOF_PREFLIGHT=0 skips it).
# It changes nothing on the host: the namespace it adds to test privileges is deleted at once.
# -q prints only errors and notes.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

quiet=0
[ "${1:-}" = "-q" ] && quiet=1
errors=0
notes=0
error() { echo "preflight: error: $*" >&2; errors=$((errors + 1)); }
note() { echo "preflight: note: $*" >&2; notes=$((notes + 1)); }
ok() { [ "$quiet" = 1 ] || echo "preflight: ok: $*" >&2; }

# Tools: command -> Debian package (as ci/install-deps.sh).
for pair in ip:iproute2 iptables-restore:iptables ip6tables-restore:iptables nft:nftables \
  conntrack:conntrack python3:python3; do
  cmd=${pair%%:*} pkg=${pair#*:}
  command -v "$cmd" >/dev/null 2>&1 || error "\`$cmd\` is missing: install the Debian package $pkg (ci/install-deps.sh)"
done

# Privileges: packetproof creates named network namespaces (/run/netns, which needs
# CAP_SYS_ADMIN) and programs links, addresses and rules in them (CAP_NET_ADMIN).
if [ "$(id -u)" != 0 ]; then
  error "not root (uid $(id -u)): packetproof needs root with CAP_NET_ADMIN and CAP_SYS_ADMIN (sudo, or a container run with --privileged)"
elif command -v ip >/dev/null 2>&1; then
  ns="packetproof-preflight-$$"
  # Removed however the script ends (an error below, Ctrl-C), not only on the path that
  # reaches its `ip netns del`.
  trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
  trap 'exit 130' INT TERM
  if out=$(ip netns add "$ns" 2>&1); then
    if out=$(ip -n "$ns" link set lo up 2>&1); then
      ok "root, and \`ip netns add\` works (CAP_SYS_ADMIN, CAP_NET_ADMIN)"
    else
      error "no CAP_NET_ADMIN: \`ip link set lo up\` in a new namespace failed ($out); run the container with --privileged"
    fi
    ip netns del "$ns" 2>/dev/null
  else
    error "cannot create a network namespace: \`ip netns add\` failed ($out); needs CAP_SYS_ADMIN and CAP_NET_ADMIN: run the container with --privileged"
  fi
fi

# br_netfilter: pods on a node's bridge reach each other's services only if bridged traffic
# passes iptables/nftables. A module of the host kernel: a container can neither load it nor
# do without it. Since Linux 5.3 its sysctls exist in every network namespace once loaded.
if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
  ok "br_netfilter is loaded"
else
  error "br_netfilter is not loaded on the host kernel (no /proc/sys/net/bridge/bridge-nf-call-iptables): run \`modprobe br_netfilter\` on the host (a container cannot load it)"
fi

# SCTP: the runner skips SCTP scenarios when it cannot open an SCTP socket; say so up front.
if [ -e /proc/net/sctp ] ||
  python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132).close()' 2>/dev/null; then
  ok "SCTP sockets are available"
else
  note "no SCTP in this kernel (no /proc/net/sctp, no SCTP socket): SCTP scenarios will be skipped (\`modprobe sctp\` on the host)"
fi

# IPVS: only IPVS-mode proxies need it (kube-proxy --proxy-mode=ipvs through the apiserver adapter).
if [ -e /proc/net/ip_vs ]; then
  ok "IPVS is available"
else
  note "no IPVS in this kernel (no /proc/net/ip_vs): IPVS-mode proxies cannot run (\`modprobe ip_vs\` on the host)"
fi

if [ "$errors" -gt 0 ]; then
  echo "preflight: $errors error(s), $notes note(s): packetproof cannot run here" >&2
  exit 1
fi
[ "$quiet" = 1 ] || echo "preflight: ready ($notes note(s))" >&2
exit 0
