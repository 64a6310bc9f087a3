//! Netlink verbs inside one namespace: make a bridge or veth, attach a port, add an address or
//! a route. The netlink socket is created on a thread inside the namespace, so every request
//! it carries acts there, whichever thread awaits it.

use std::net::IpAddr;

use anyhow::{Context, Result, anyhow, bail};
use futures::TryStreamExt;
use ipnet::IpNet;
use netlink_packet_route::link::{InfoData, InfoVeth, LinkAttribute};
use netlink_packet_route::route::{RouteMessage, RouteScope};
use rtnetlink::{
    Handle, LinkBridge, LinkBridgePort, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder,
};

use super::netns::Netns;
use crate::model::IpFamily;

pub struct Links {
    handle: Handle,
    netns: String,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for Links {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl Links {
    /// Opens a route-netlink connection inside `ns`.
    pub async fn connect(ns: &Netns) -> Result<Links> {
        let runtime = tokio::runtime::Handle::current();
        let (connection, handle, _) = ns
            .run(move || {
                let _entered = runtime.enter();
                rtnetlink::new_connection()
            })?
            .with_context(|| format!("opening netlink in namespace {}", ns.name()))?;
        Ok(Links { handle, netns: ns.name().to_string(), connection: tokio::spawn(connection) })
    }

    /// The netlink handle, for queries this module has no verb for (topology/ready.rs).
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    pub(crate) fn context(&self, what: &str) -> String {
        format!("{what} in namespace {}", self.netns)
    }

    /// Every message of a dump (`self.handle().link().get().execute()`, …); an error says
    /// `what` was asked, and where.
    pub(crate) async fn collect<T>(
        &self,
        what: &str,
        dump: impl futures::Stream<Item = Result<T, rtnetlink::Error>>,
    ) -> Result<Vec<T>> {
        dump.try_collect().await.map_err(|e| anyhow!("{}: {e}", self.context(what)))
    }

    pub async fn index(&self, name: &str) -> Result<u32> {
        let mut links = self.handle.link().get().match_name(name.to_string()).execute();
        let link = links
            .try_next()
            .await
            .with_context(|| self.context(&format!("looking up link {name}")))?
            .ok_or_else(|| anyhow!("{}: no such link", self.context(&format!("looking up link {name}"))))?;
        Ok(link.header.index)
    }

    pub async fn up(&self, index: u32) -> Result<()> {
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .with_context(|| self.context(&format!("setting link {index} up")))
    }

    pub async fn loopback_up(&self) -> Result<()> {
        let lo = self.index("lo").await?;
        self.up(lo).await
    }

    /// Creates a bridge, up, and returns its index.
    pub async fn bridge(&self, name: &str) -> Result<u32> {
        self.handle
            .link()
            .add(LinkBridge::new(name).up().build())
            .execute()
            .await
            .with_context(|| self.context(&format!("creating bridge {name}")))?;
        self.index(name).await
    }

    /// Creates a veth pair: `name` here and `peer` straight inside `peer_ns`.
    /// Each end has one queue each way, said outright: a veth left to choose gets one per CPU
    /// and then cuts them to one, and each cut waits out an RCU grace period
    /// (drivers/net/veth.c, `veth_init_queues`); scenarios build veths by the dozen at once.
    pub async fn veth_into(&self, name: &str, peer: &str, peer_ns: &Netns) -> Result<()> {
        let mut peer_msg = LinkMessageBuilder::<LinkUnspec>::new()
            .name(peer.to_string())
            .setns_by_fd(peer_ns.raw_fd())
            .build();
        peer_msg.attributes.extend(one_queue_each_way());
        let mut message =
            LinkVeth::new(name, peer).set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg))).build();
        message.attributes.extend(one_queue_each_way());
        self.handle.link().add(message).execute().await.with_context(|| {
            self.context(&format!("creating veth {name} with peer {peer} in {}", peer_ns.name()))
        })
    }

    /// Enslaves link `port` to `bridge`, sets hairpin mode as asked, and brings it up.
    pub async fn attach(&self, port: &str, bridge: u32, hairpin: bool) -> Result<()> {
        let index = self.index(port).await?;
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).controller(bridge).up().build())
            .execute()
            .await
            .with_context(|| self.context(&format!("attaching {port} to bridge {bridge}")))?;
        if hairpin {
            self.handle
                .link()
                .set_port(LinkBridgePort::new(index).hairpin(true).build())
                .execute()
                .await
                .with_context(|| self.context(&format!("turning hairpin mode on for {port}")))?;
        }
        Ok(())
    }

    pub async fn address(&self, index: u32, ip: IpAddr, prefix: u8) -> Result<()> {
        self.handle
            .address()
            .add(index, ip, prefix)
            .execute()
            .await
            .with_context(|| self.context(&format!("adding address {ip}/{prefix} to link {index}")))
    }

    pub async fn route_via(&self, dest: IpNet, gateway: IpAddr, dev: u32) -> Result<()> {
        let route = route_message(dest, Some(gateway), dev)?;
        self.add_route(route, format!("adding route {dest} via {gateway}")).await
    }

    pub async fn route_dev(&self, dest: IpNet, dev: u32) -> Result<()> {
        let route = route_message(dest, None, dev)?;
        self.add_route(route, format!("adding route {dest} on link {dev}")).await
    }

    pub async fn default_route(&self, gateway: IpAddr, dev: u32) -> Result<()> {
        let default = IpNet::new(IpFamily::of(gateway).unspecified(), 0).expect("/0 is a valid prefix");
        let route = route_message(default, Some(gateway), dev)?;
        self.add_route(route, format!("adding default route via {gateway}")).await
    }

    /// Sends traffic for `dest` through `gateway`, replacing any route for it. A gateway that
    /// is `dest` itself (a node's own address, sent to that node) is the link: IPv6 refuses a
    /// route through its own destination ("No route to host").
    pub async fn steer(&self, dest: IpAddr, gateway: IpAddr, dev: u32) -> Result<()> {
        let route = route_message(IpNet::from(dest), (gateway != dest).then_some(gateway), dev)?;
        self.handle
            .route()
            .add(route)
            .replace()
            .execute()
            .await
            .with_context(|| self.context(&format!("routing {dest} via {gateway}")))
    }

    /// Removes the route to `dest` alone that [`Links::steer`] made.
    pub async fn unsteer(&self, dest: IpAddr) -> Result<()> {
        let family = IpFamily::of(dest);
        let prefix = if family == IpFamily::V4 { 32 } else { 128 };
        // Any scope: one steered through the address itself is on the link (scope link), and
        // IPv4 deletes only a route of the scope asked for, unless that is "nowhere".
        let route = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dest, prefix)
            .map_err(|e| anyhow!("route to {dest}: {e}"))?
            .scope(RouteScope::NoWhere)
            .build();
        self.handle
            .route()
            .del(route)
            .execute()
            .await
            .with_context(|| self.context(&format!("removing the route to {dest} a probe steered")))
    }

    async fn add_route(&self, route: RouteMessage, what: String) -> Result<()> {
        self.handle.route().add(route).execute().await.with_context(|| self.context(&what))
    }
}

/// A unicast route to `dest` out of link `dev`, through `gateway` or (without one) on the
/// link itself, in the family of `dest`. A gateway of the other family is refused: a scenario
/// is single-stack.
fn route_message(dest: IpNet, gateway: Option<IpAddr>, dev: u32) -> Result<RouteMessage> {
    let family = IpFamily::of_net(&dest);
    if let Some(gw) = gateway.filter(|gw| IpFamily::of(*gw) != family) {
        bail!(
            "route to {dest} via {gw}: the gateway is of the other address family (dual-stack is not supported)"
        );
    }
    let invalid = |e| anyhow!("route to {dest}: {e}");
    let mut builder = RouteMessageBuilder::<IpAddr>::new()
        .destination_prefix(dest.network(), dest.prefix_len())
        .map_err(invalid)?;
    if let Some(gw) = gateway {
        builder = builder.gateway(gw).map_err(invalid)?;
    }
    builder = builder.output_interface(dev);
    // IPv4 marks a gateway-less route as on-link by its scope; IPv6 routes have no scope.
    if gateway.is_none() && family == IpFamily::V4 {
        builder = builder.scope(RouteScope::Link);
    }
    Ok(builder.build())
}

/// A link's queue counts, one each way.
fn one_queue_each_way() -> [LinkAttribute; 2] {
    [LinkAttribute::NumTxQueues(1), LinkAttribute::NumRxQueues(1)]
}
