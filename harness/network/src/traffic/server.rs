//! A small server on every declared container port of every pod, inside the pod's namespace,
//! and on every endpoint port of an external host or node that backs a Service.
//! TCP: on accept, write the reply line, then answer every line the client sends with it again
//! until the client closes (a held connection; one-shot clients close their side at once).
//! SCTP (traffic/sctp.rs): write the reply line and close. UDP: answer each datagram with it.
//! Each binds the unspecified address of each of the pod's families (a dual-stack pod serves
//! every port on both, with separate sockets; the IPv6 one IPv6-only, so that IPv4 peers are
//! seen as themselves, never as `::ffff:` mapped addresses).

use std::net::{IpAddr, SocketAddr};

use anyhow::{Context, Result};
use socket2::{Domain, Socket, Type};
use tokio::task::JoinSet;

use super::reply;
use crate::model::{Cluster, IpFamily, Protocol};
use crate::topology::{Netns, Topology};

/// Running servers; dropping this stops them and closes their sockets.
pub struct Servers {
    tasks: JoinSet<()>,
    /// `(pod, port, protocol)` not served because the kernel lacks the socket type.
    pub unserved: Vec<(String, u16, Protocol)>,
}

impl Servers {
    /// Binds every pod's declared ports inside its namespace and serves them on the current
    /// tokio runtime.
    pub fn start(cluster: &Cluster, topology: &Topology) -> Result<Servers> {
        let mut servers = Servers { tasks: JoinSet::new(), unserved: Vec::new() };
        for pod in &cluster.pods {
            let ns =
                topology.pods.get(&pod.name).with_context(|| format!("no namespace for pod {}", pod.name))?;
            // `0.0.0.0` and/or `[::]`, after the pod's own families.
            let families = pod.ips.copied().map(IpFamily::of);
            for (unspecified, port) in
                families.flat_map(|f| pod.ports.iter().map(move |p| (f.unspecified(), p)))
            {
                servers.serve(
                    ns,
                    SocketAddr::new(unspecified, port.port),
                    port.protocol,
                    &pod.name,
                    "pod",
                )?;
            }
        }
        // External hosts and nodes that are endpoints (no pod: a database outside the cluster,
        // host-network API servers) serve the endpoint ports the slices name for them.
        let hosts = cluster.external_hosts.iter().map(|h| {
            let ips: Vec<IpAddr> = h.ips.copied().collect();
            (h.name.as_str(), ips, topology.external_hosts.get(&h.name), "external host")
        });
        let nodes = cluster.nodes.iter().map(|n| {
            let ips: Vec<IpAddr> = n.all_ips().collect();
            let ns = topology.nodes.iter().find(|h| h.name == n.name).map(|h| &h.netns);
            (n.name.as_str(), ips, ns, "node")
        });
        for (name, ips, ns, what) in hosts.chain(nodes) {
            let mut ports: Vec<(SocketAddr, Protocol)> = cluster
                .services
                .iter()
                .flat_map(|s| &s.ports)
                .flat_map(|p| p.endpoints.iter().map(move |e| (e, p.protocol)))
                .filter(|(e, _)| e.pod == name && ips.contains(&e.ip))
                .map(|(e, protocol)| (SocketAddr::new(bound_address(e.ip, protocol), e.port), protocol))
                .collect();
            ports.sort();
            ports.dedup();
            if ports.is_empty() {
                continue;
            }
            let ns = ns.with_context(|| format!("no namespace for {what} {name}"))?;
            for (bind, protocol) in ports {
                servers.serve(ns, bind, protocol, name, what)?;
            }
        }
        Ok(servers)
    }

    /// Serves `bind` over `protocol` inside `ns`, answering as `name` (a `what`, for errors).
    fn serve(
        &mut self,
        ns: &Netns,
        bind: SocketAddr,
        protocol: Protocol,
        name: &str,
        what: &str,
    ) -> Result<()> {
        let context = || format!("serving {}/{protocol} on {bind} in {what} {name}", bind.port());
        let name = name.to_string();
        match protocol {
            Protocol::Tcp => {
                let listener = ns.run(move || socket(bind, Type::STREAM))?.with_context(context)?;
                let listener = std::net::TcpListener::from(listener);
                listener.set_nonblocking(true).with_context(context)?;
                let listener = tokio::net::TcpListener::from_std(listener).with_context(context)?;
                self.tasks.spawn(serve_tcp(listener, name));
            }
            Protocol::Udp => {
                let socket = ns.run(move || socket(bind, Type::DGRAM))?.with_context(context)?;
                let socket = std::net::UdpSocket::from(socket);
                socket.set_nonblocking(true).with_context(context)?;
                let socket = tokio::net::UdpSocket::from_std(socket).with_context(context)?;
                self.tasks.spawn(serve_udp(socket, name));
            }
            Protocol::Sctp => match ns.run(move || super::sctp::listen(bind))? {
                // A kernel without SCTP: the scenario is skipped with its reason.
                Err(e) if super::sctp::unsupported(&e) => {
                    let unserved = (name, bind.port(), protocol);
                    if !self.unserved.contains(&unserved) {
                        self.unserved.push(unserved);
                    }
                }
                listener => {
                    let listener =
                        super::sctp::into_tokio(listener.with_context(context)?).with_context(context)?;
                    self.tasks.spawn(serve_sctp(listener, name));
                }
            },
        }
        Ok(())
    }

    /// A TCP listener on 127.0.0.1:`port` in a node's own namespace, as node-local services
    /// (a kubelet's healthz) listen, that accepts and closes: what martian traffic from outside
    /// the node must never reach.
    pub fn listen_on_localhost(&mut self, node: &Netns, port: u16) -> Result<()> {
        let bind = SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), port);
        let what = || format!("listening on {bind} in {}", node.name());
        let listener = node.run(move || socket(bind, Type::STREAM))?.with_context(what)?;
        let listener = std::net::TcpListener::from(listener);
        listener.set_nonblocking(true).with_context(what)?;
        let listener = tokio::net::TcpListener::from_std(listener).with_context(what)?;
        self.tasks.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(stream);
            }
        });
        Ok(())
    }

    /// Stops every server and waits until their sockets are closed, so the pod namespaces can go.
    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}

/// The address a host's (a node's, an external host's) server for endpoint address `ip` binds.
/// UDP binds `ip` itself: a host has several addresses, and a datagram socket on the unspecified
/// address answers from whichever its route to the client picks (a node's pod-bridge address
/// toward a pod of its own), which conntrack cannot match to the translated flow, so the client
/// never hears back. Servers on hosts answer from the address asked (CoreDNS binds each, others
/// use `IP_PKTINFO`); found by `packetproof explore`. TCP answers from the address asked anyway.
fn bound_address(ip: IpAddr, protocol: Protocol) -> IpAddr {
    match protocol {
        Protocol::Udp => ip,
        _ => IpFamily::of(ip).unspecified(),
    }
}

/// A bound socket as `std::net` binds one (a listening TCP socket reuses its address), but
/// IPv6-only on an IPv6 address, so that a pod's IPv4 and IPv6 servers share each port.
fn socket(addr: SocketAddr, kind: Type) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), kind, None)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    if kind == Type::STREAM {
        socket.set_reuse_address(true)?;
    }
    socket.bind(&addr.into())?;
    if kind == Type::STREAM {
        socket.listen(128)?;
    }
    Ok(socket)
}

async fn serve_tcp(listener: tokio::net::TcpListener, pod: String) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors or similar: back off instead of spinning.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        // Each connection on its own: a held one stays open while others come and go.
        tokio::spawn(super::held::answer_and_echo(stream, peer, pod.clone()));
    }
}

/// SCTP has no half-close (a client's shutdown ends the whole association), so its server
/// answers and closes at once; held connections are TCP's.
async fn serve_sctp(listener: tokio::net::TcpListener, pod: String) {
    use tokio::io::AsyncWriteExt;
    loop {
        let Ok((mut stream, peer)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let line = reply::encode(&pod, peer);
        tokio::spawn(async move {
            let _ = stream.write_all(line.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Each datagram is answered with the reply line; a request that carries an id gets it back,
/// so a client can tell its own answer from a late one to an earlier attempt.
async fn serve_udp(socket: tokio::net::UdpSocket, pod: String) {
    let mut buf = [0u8; 512];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else { continue };
        let line = match reply::request_id(&buf[..n]) {
            Some(id) => reply::encode_answer_to(&pod, peer, id),
            None => reply::encode(&pod, peer),
        };
        let _ = socket.send_to(line.as_bytes(), peer).await;
    }
}
