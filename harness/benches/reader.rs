//! `cargo bench --bench reader [N...]`: how long reading a scenario of N Services takes, and
//! the peak memory it needs; figures, never assertions. Each N is read twice: Services that
//! select two pods (slices derived), and Services with a pasted EndpointSlice each. The files
//! are made in memory; N defaults to 1,000, 10,000 and 100,000.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

const DEFAULT_SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// A two-node cluster, two web pods behind Service `web` and a client probing it.
const HEAD: &str = "\
apiVersion: packetproof.dev/v1alpha1
kind: Scenario
metadata: {name: reader-bench}
spec:
  cluster: {podCIDR: 10.244.0.0/16, serviceCIDR: 10.96.0.0/12, nodeNetwork: 192.168.50.0/24}
  nodes:
    - {name: node-a, ip: 192.168.50.11, podCIDR: 10.244.1.0/24}
    - {name: node-b, ip: 192.168.50.12, podCIDR: 10.244.2.0/24}
  probes:
    - name: client-to-web
      from: {pod: client}
      to: {service: web, port: http}
      expect: {verdict: answered, backends: [web-0, web-1], source: client}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.0.30
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080, protocol: TCP}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, namespace: default, labels: {app: web}}
spec: {nodeName: node-a, containers: [{name: web, image: web, ports: [{containerPort: 8080}]}]}
status: {podIP: 10.244.1.10}
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: default, labels: {app: web}}
spec: {nodeName: node-b, containers: [{name: web, image: web, ports: [{containerPort: 8080}]}]}
status: {podIP: 10.244.2.10}
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: default}
spec: {nodeName: node-b, containers: [{name: client, image: busybox}]}
status: {podIP: 10.244.2.5}
";

#[derive(Clone, Copy)]
enum Endpoints {
    /// Each Service selects the web pods; the reader derives its slice.
    Derived,
    /// Each Service has an EndpointSlice of its own in the file.
    Given,
}

/// The scenario plus `n` ClusterIP Services, each with its own cluster IP.
fn scenario(n: usize, endpoints: Endpoints) -> String {
    let mut text = String::from(HEAD);
    for i in 0..n {
        // 10.96.1.0 onwards: inside the service CIDR, clear of `web`'s.
        let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 96, 1, 0)) + i as u32);
        let selector = match endpoints {
            Endpoints::Derived => "\n  selector: {app: web}",
            Endpoints::Given => "",
        };
        write!(
            text,
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: svc-{i}, namespace: default}}\nspec:\n  \
             type: ClusterIP\n  clusterIP: {ip}{selector}\n  ports: [{{name: http, port: 80, targetPort: 8080, \
             protocol: TCP}}]\n"
        )
        .unwrap();
        if let Endpoints::Given = endpoints {
            write!(
                text,
                "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: svc-{i}-abcde\n  \
                 namespace: default\n  labels: {{kubernetes.io/service-name: svc-{i}}}\naddressType: IPv4\n\
                 ports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n  \
                 - {{addresses: [10.244.1.10], conditions: {{ready: true}}, nodeName: node-a}}\n  \
                 - {{addresses: [10.244.2.10], conditions: {{ready: true}}, nodeName: node-b}}\n"
            )
            .unwrap();
        }
    }
    text
}

/// A `/proc/self/status` field in kB (VmHWM: peak resident memory), where Linux has one.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// Starts the peak anew at the current resident size (Linux: "5" to clear_refs), once the
/// memory an earlier read freed is handed back: kept by malloc, it would be reused unseen.
fn reset_peak() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn main() {
    // `cargo bench` passes `--bench`; any numbers are the sizes to read.
    let sizes: Vec<usize> =
        std::env::args().skip(1).filter_map(|a| a.replace('_', "").parse().ok()).collect();
    let sizes = if sizes.is_empty() { DEFAULT_SIZES.to_vec() } else { sizes };
    println!("{:>9}  {:<8}  {:>10}  {:>8}  {:>9}", "services", "slices", "MB of text", "seconds", "peak MB");
    for &n in &sizes {
        for (endpoints, shown) in [(Endpoints::Derived, "derived"), (Endpoints::Given, "given")] {
            let text = scenario(n, endpoints);
            reset_peak();
            let before = status_kb("VmRSS:");
            let start = Instant::now();
            let read = packetproof::admission::load_str(&text, Path::new("reader-bench.yaml"));
            let seconds = start.elapsed().as_secs_f64();
            if let Err(errors) = &read {
                eprintln!("{errors}");
                std::process::exit(1);
            }
            drop(read);
            // Above what was resident before reading (the text itself among it).
            let peak = match (status_kb("VmHWM:"), before) {
                (Some(peak), Some(before)) => format!("{:.0}", peak.saturating_sub(before) as f64 / 1024.0),
                _ => "?".to_string(),
            };
            let mb = text.len() as f64 / 1e6;
            println!("{n:>9}  {shown:<8}  {mb:>10.1}  {seconds:>8.2}  {peak:>9}");
        }
    }
}
