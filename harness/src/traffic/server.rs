//! A small server on every declared container port of every pod, inside the pod's namespace.
//! TCP and SCTP (traffic/sctp.rs): on accept, write the reply line and close. UDP: answer
//! each datagram with the line.
//! Each binds the unspecified address of each of the pod's families (a dual-stack pod serves
//! every port on both, with separate sockets; the IPv6 one IPv6-only, so that IPv4 peers are
//! seen as themselves, never as `::ffff:` mapped addresses).

use std::net::SocketAddr;

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
            let families = std::iter::once(pod.ip).chain(pod.second_ip).map(IpFamily::of);
            for (unspecified, port) in
                families.flat_map(|f| pod.ports.iter().map(move |p| (f.unspecified(), p)))
            {
                let bind = SocketAddr::new(unspecified, port.port);
                let what =
                    || format!("serving {}/{} on {bind} in pod {}", port.port, port.protocol, pod.name);
                let name = pod.name.clone();
                match port.protocol {
                    Protocol::Tcp => {
                        let listener = ns.run(move || socket(bind, Type::STREAM))?.with_context(what)?;
                        let listener = std::net::TcpListener::from(listener);
                        listener.set_nonblocking(true).with_context(what)?;
                        let listener = tokio::net::TcpListener::from_std(listener).with_context(what)?;
                        servers.tasks.spawn(serve_tcp(listener, name));
                    }
                    Protocol::Udp => {
                        let socket = ns.run(move || socket(bind, Type::DGRAM))?.with_context(what)?;
                        let socket = std::net::UdpSocket::from(socket);
                        socket.set_nonblocking(true).with_context(what)?;
                        let socket = tokio::net::UdpSocket::from_std(socket).with_context(what)?;
                        servers.tasks.spawn(serve_udp(socket, name));
                    }
                    Protocol::Sctp => match ns.run(move || super::sctp::listen(bind))? {
                        Err(e) if super::sctp::unsupported(&e) => {
                            if !servers.unserved.contains(&(pod.name.clone(), port.port, port.protocol)) {
                                servers.unserved.push((pod.name.clone(), port.port, port.protocol));
                            }
                        }
                        listener => {
                            let listener =
                                super::sctp::into_tokio(listener.with_context(what)?).with_context(what)?;
                            servers.tasks.spawn(serve_tcp(listener, name));
                        }
                    },
                }
            }
        }
        Ok(servers)
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
    use tokio::io::AsyncWriteExt;
    loop {
        let (mut stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of descriptors or similar: back off instead of spinning.
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        // One short line fits any socket buffer; a client that gave up early is its own business.
        let _ = stream.write_all(reply::encode(&pod, peer).as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

async fn serve_udp(socket: tokio::net::UdpSocket, pod: String) {
    let mut buf = [0u8; 512];
    loop {
        let Ok((_, peer)) = socket.recv_from(&mut buf).await else { continue };
        let _ = socket.send_to(reply::encode(&pod, peer).as_bytes(), peer).await;
    }
}
