//! Where a guest's time went: its boot, its module loading and each run, by the guest's own
//! clock (the console's markers, `vm::timeline`), and inside a run, each scenario's phases
//! summed (the run's JSON report). The matrix prints them so that a slow kernel can be taken
//! apart without a profiler.

use serde::{Deserialize, Serialize};

use crate::report::ReportedScenario;

/// One run's share of its guest's life, in seconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct GuestSeconds {
    /// The guest kernel's boot and the userland's unpacking, to `/init`'s module loading.
    pub boot: Option<f64>,
    /// Loading the preloaded modules and mounting the share.
    pub modules: Option<f64>,
    /// This run, from the job's start of it to its exit.
    pub run: Option<f64>,
    /// The guest's vCPUs during the run (summed over them): in programs, in the kernel, and
    /// idle (waits, not work).
    pub user: Option<f64>,
    pub system: Option<f64>,
    pub idle: Option<f64>,
    /// The whole VM on the host, qemu's start to its exit (every run of the guest).
    pub vm: f64,
}

impl GuestSeconds {
    pub fn of(timeline: &vm::Timeline, run: &str, vm_seconds: f64) -> GuestSeconds {
        let clock = timeline.runs.iter().find(|r| r.name == run);
        GuestSeconds {
            boot: timeline.modules_at,
            modules: timeline.up_at.zip(timeline.modules_at).map(|(up, at)| up - at),
            run: clock.and_then(|c| Some(c.ended? - c.started)),
            user: clock.and_then(|c| c.user),
            system: clock.and_then(|c| c.system),
            idle: clock.and_then(|c| c.idle),
            vm: vm_seconds,
        }
    }
}

/// `6.12 builtin-iptables: boot 6.9s, modules 4.2s, run 150.3s (CPU: user 30.1s, system 80.2s,
/// idle 40.1s; VM 320.0s on the host); 74
/// scenarios' phases summed: build 10.1s, start 30.2s, probes 250.3s, judge 3.1s, teardown 12.0s`
pub(super) fn line(
    kernel: &str,
    proxy: &str,
    seconds: &GuestSeconds,
    scenarios: &[ReportedScenario],
    cpu: Option<&crate::report::CpuSeconds>,
) -> String {
    let s = |v: Option<f64>| v.map_or("?".to_string(), |v| format!("{v:.1}s"));
    let mut out = format!(
        "{kernel} {proxy}: boot {}, modules {}, run {} (CPU: user {}, system {}, idle {}; VM {:.1}s on the host)",
        s(seconds.boot),
        s(seconds.modules),
        s(seconds.run),
        s(seconds.user),
        s(seconds.system),
        s(seconds.idle),
        seconds.vm
    );
    if let Some(cpu) = cpu {
        out.push_str(&format!(
            "; the harness user {:.1}s, system {:.1}s, the programs it ran user {:.1}s, system {:.1}s",
            cpu.harness_user, cpu.harness_system, cpu.programs_user, cpu.programs_system
        ));
    }
    let timed: Vec<_> = scenarios.iter().filter_map(|s| s.timings).collect();
    if !timed.is_empty() {
        let sum = |f: fn(&crate::report::ScenarioTimings) -> f64| timed.iter().map(f).sum::<f64>();
        out.push_str(&format!(
            "; {} scenarios' phases summed: build {:.1}s, start {:.1}s, probes {:.1}s, judge {:.1}s, teardown {:.1}s",
            timed.len(),
            sum(|t| t.build),
            sum(|t| t.start),
            sum(|t| t.probes),
            sum(|t| t.judge),
            sum(|t| t.teardown),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_timed_by_the_guest_clock_and_its_scenarios_phases_summed() {
        let timeline = vm::Timeline {
            modules_at: Some(6.5),
            up_at: Some(10.75),
            runs: vec![
                vm::RunClock {
                    name: "builtin-iptables".into(),
                    started: 11.0,
                    ended: Some(161.0),
                    user: Some(30.0),
                    system: Some(80.0),
                    idle: Some(40.0),
                },
                vm::RunClock {
                    name: "builtin-nftables".into(),
                    started: 161.0,
                    ended: None,
                    user: None,
                    system: None,
                    idle: None,
                },
            ],
            done_at: None,
        };
        let seconds = GuestSeconds::of(&timeline, "builtin-iptables", 300.0);
        assert_eq!(
            seconds,
            GuestSeconds {
                boot: Some(6.5),
                modules: Some(4.25),
                run: Some(150.0),
                user: Some(30.0),
                system: Some(80.0),
                idle: Some(40.0),
                vm: 300.0
            }
        );
        assert_eq!(GuestSeconds::of(&timeline, "builtin-nftables", 300.0).run, None);
        let scenarios: Vec<ReportedScenario> = serde_json::from_value(serde_json::json!([
            {"name": "a", "file": "a.yaml", "status": "passed", "elapsed_seconds": 2.0, "probes": [], "not_judged": [],
             "timings": {"build": 0.5, "start": 0.25, "probes": 1.0, "judge": 0.05, "teardown": 0.2}},
            {"name": "b", "file": "b.yaml", "status": "skipped", "elapsed_seconds": 0.0, "probes": [], "not_judged": []},
            {"name": "c", "file": "c.yaml", "status": "passed", "elapsed_seconds": 2.0, "probes": [], "not_judged": [],
             "timings": {"build": 0.5, "start": 0.25, "probes": 1.0, "judge": 0.05, "teardown": 0.2}}
        ]))
        .unwrap();
        assert_eq!(
            line("6.12", "builtin-iptables", &seconds, &scenarios, None),
            "6.12 builtin-iptables: boot 6.5s, modules 4.2s, run 150.0s (CPU: user 30.0s, system 80.0s, idle 40.0s; VM 300.0s on the host); 2 scenarios' \
             phases summed: build 1.0s, start 0.5s, probes 2.0s, judge 0.1s, teardown 0.4s"
        );
    }
}
