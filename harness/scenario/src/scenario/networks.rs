//! The cluster's networks as the scenario document states them, read by `scenario_doc` and
//! checked against by the readers of Services, nodes and external hosts.

use ipnet::IpNet;

use crate::model::{IpFamily, SecondFamily};

/// The cluster networks; each is `None` when it was invalid (and reported). The fields are
/// the primary family's; `second` the other family's, in a dual-stack cluster.
#[derive(Default)]
pub(crate) struct Networks {
    pub pod_cidr: Option<IpNet>,
    pub service_cidr: Option<IpNet>,
    pub node_network: Option<IpNet>,
    pub second: Option<Box<Networks>>,
    /// The cluster's families, primary first (empty when unknown).
    pub families: Vec<IpFamily>,
    /// Where node ports must lie (`serviceNodePortRange`); `None`: kube-apiserver's default.
    pub node_port_range: Option<std::ops::RangeInclusive<u16>>,
}

impl Networks {
    /// The networks of `family`: these or `second`'s.
    pub fn of(&self, family: IpFamily) -> &Networks {
        match &self.second {
            Some(second) if self.families.get(1) == Some(&family) => second,
            _ => self,
        }
    }

    pub(crate) fn is_dual(&self) -> bool {
        self.second.is_some()
    }

    /// The model's second family, when every network of it is valid.
    pub(crate) fn second_family(&self) -> Option<Option<SecondFamily>> {
        match &self.second {
            None => Some(None),
            Some(s) => Some(Some(SecondFamily {
                pod_cidr: s.pod_cidr?,
                service_cidr: s.service_cidr?,
                node_network: s.node_network?,
            })),
        }
    }
}
