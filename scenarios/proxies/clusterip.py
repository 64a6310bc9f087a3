#!/usr/bin/env python3
"""A small service proxy for ClusterIP Services, run by packetproof's `command` adapter.

It reads the desired state the adapter writes (a Kubernetes List of Nodes, Services and
EndpointSlices, as JSON) and loads iptables rules with iptables-restore into the network
namespace it runs in (the node's):
  - nat: cluster IP:port -> one ready endpoint, chosen at random with equal shares (the
    1/n, 1/(n-1), ... probability ladder), DNAT to the endpoint's target port;
  - masquerade for clients outside --cluster-cidr (the node itself) and for a pod that
    reaches itself through its Service (hairpin), by a mark that POSTROUTING turns into SNAT;
  - filter: REJECT (ICMP port unreachable) for a Service port without ready endpoints.
IPv4, TCP and UDP only. Standard library only.

Usage:
  clusterip.py --state FILE --cluster-cidr CIDR             apply once and exit
  clusterip.py --state FILE --cluster-cidr CIDR --daemon    apply, then again on each SIGHUP,
      writing the applied List's metadata.resourceVersion to FILE.applied each time; exit on
      SIGTERM
  clusterip.py --state FILE --cluster-cidr CIDR --daemon --watch
      the same, but re-reads FILE whenever its resourceVersion changes (polled every 50 ms)
      instead of waiting for SIGHUP
  --bug dnat-to-service-port   a deliberate bug, for tests: DNAT to the Service port instead
                               of the endpoint's target port
"""

import argparse
import json
import signal
import subprocess
import sys

MARK = "0x4000/0x4000"


def read_state(path):
    with open(path) as f:
        state = json.load(f)
    if state.get("kind") != "List":
        raise SystemExit(f"{path}: expected a List, got kind {state.get('kind')!r}")
    return state


def endpoints_by_service(items):
    """(namespace, service) -> list of (address, {port name: (port, protocol)}) of ready endpoints."""
    found = {}
    for s in items:
        if s.get("kind") != "EndpointSlice" or s.get("addressType") != "IPv4":
            continue
        meta = s["metadata"]
        service = meta.get("labels", {}).get("kubernetes.io/service-name")
        if not service:
            continue
        ports = {p.get("name", ""): (p["port"], p.get("protocol", "TCP")) for p in s.get("ports") or []}
        for e in s.get("endpoints") or []:
            # EndpointSlice semantics: an unset `ready` means ready.
            if e.get("conditions", {}).get("ready") is False:
                continue
            for address in e["addresses"]:
                found.setdefault((meta["namespace"], service), []).append((address, ports))
    return found


def rules(state, cluster_cidr, bug):
    items = state["items"]
    endpoints = endpoints_by_service(items)
    nat = [
        "*nat",
        ":PREROUTING ACCEPT [0:0]", ":INPUT ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":POSTROUTING ACCEPT [0:0]",
        ":PP-SERVICES - [0:0]", ":PP-POSTROUTING - [0:0]", ":PP-MARK-MASQ - [0:0]",
        "-A PREROUTING -j PP-SERVICES",
        "-A OUTPUT -j PP-SERVICES",
        "-A POSTROUTING -j PP-POSTROUTING",
        f"-A PP-MARK-MASQ -j MARK --set-xmark {MARK}",
        f"-A PP-POSTROUTING -m mark --mark {MARK} -j MASQUERADE",
    ]
    chains = []
    filt = [
        "*filter",
        ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]", ":PP-REJECT - [0:0]",
        "-A INPUT -j PP-REJECT", "-A FORWARD -j PP-REJECT", "-A OUTPUT -j PP-REJECT",
    ]
    n = 0
    for svc in items:
        if svc.get("kind") != "Service":
            continue
        spec, meta = svc["spec"], svc["metadata"]
        vip = spec.get("clusterIP")
        if not vip or vip == "None" or ":" in vip:
            continue
        for port in spec.get("ports", []):
            proto = port.get("protocol", "TCP")
            if proto not in ("TCP", "UDP"):
                continue
            p = proto.lower()
            name = port.get("name", "")
            match = f"-d {vip}/32 -p {p} -m {p} --dport {port['port']}"
            backends = [
                (addr, ports[name][0]) for addr, ports in endpoints.get((meta["namespace"], meta["name"]), [])
                if name in ports and ports[name][1] == proto
            ]
            if not backends:
                filt.append(f"-A PP-REJECT {match} -j REJECT --reject-with icmp-port-unreachable")
                continue
            n += 1
            svc_chain = f"PP-SVC-{n}"
            chains.append(svc_chain)
            nat.append(f"-A PP-SERVICES {match} -j {svc_chain}")
            nat.append(f"-A {svc_chain} ! -s {cluster_cidr} -j PP-MARK-MASQ")
            for i, (addr, target) in enumerate(backends):
                sep = f"PP-SEP-{n}-{i}"
                chains.append(sep)
                left = len(backends) - i
                ladder = f"-m statistic --mode random --probability {1 / left:.11f} " if left > 1 else ""
                nat.append(f"-A {svc_chain} {ladder}-j {sep}")
                to = port["port"] if bug == "dnat-to-service-port" else target
                nat.append(f"-A {sep} -s {addr}/32 -j PP-MARK-MASQ")
                nat.append(f"-A {sep} -p {p} -j DNAT --to-destination {addr}:{to}")
    nat[8:8] = [f":{c} - [0:0]" for c in chains]
    return "\n".join(nat + ["COMMIT"] + filt + ["COMMIT", ""])


def apply(args):
    state = read_state(args.state)
    text = rules(state, args.cluster_cidr, args.bug)
    done = subprocess.run([args.restore, "-w"], input=text, text=True, capture_output=True)
    if done.returncode != 0:
        sys.stderr.write(text)
        raise SystemExit(f"{args.restore} failed: {done.stderr.strip()}")
    version = state.get("metadata", {}).get("resourceVersion", "")
    print(f"applied generation {version}: {text.count('-j DNAT')} endpoints", flush=True)
    return version


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", required=True)
    parser.add_argument("--cluster-cidr", required=True)
    parser.add_argument("--daemon", action="store_true")
    parser.add_argument("--watch", action="store_true")
    parser.add_argument("--bug", choices=["dnat-to-service-port"])
    # The legacy backend writes x_tables, which nftables tracing cannot see (coverage counts them).
    parser.add_argument("--restore", choices=["iptables-restore", "iptables-legacy-restore"], default="iptables-restore")
    args = parser.parse_args()
    if not args.daemon:
        apply(args)
        return
    # Block the signals before the first apply, so one sent meanwhile waits for sigwait.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP, signal.SIGTERM})
    applied = None
    while True:
        if not args.watch or read_state(args.state).get("metadata", {}).get("resourceVersion") != applied:
            applied = apply(args)
            with open(args.state + ".applied", "w") as f:
                f.write(applied)
        if args.watch:
            got = signal.sigtimedwait({signal.SIGTERM}, 0.05)
        else:
            got = signal.sigwait({signal.SIGHUP, signal.SIGTERM})
        if got == signal.SIGTERM or getattr(got, "si_signo", None) == signal.SIGTERM:
            print("stopping on SIGTERM", flush=True)
            return


if __name__ == "__main__":
    main()
