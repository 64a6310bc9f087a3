//! What runs inside the guest: `/init` (mounts, modules, the results share) and the job
//! script the host writes into the share (one `packetproof` command line per run, each
//! leaving its output and exit code in its own directory of the share).

/// Where the share from the host is mounted in the guest.
pub const SHARE: &str = "/share";
/// The guest's working directory: scenario files are copied under it at their relative paths.
pub const WORKDIR: &str = "/work";
/// Where the user's programs (`--guest-file`) land; first on the guest's PATH.
pub const PROGRAMS: &str = "/usr/local/bin";
/// The file in the share `/init` runs.
pub const JOB_FILE: &str = "job.sh";
/// Printed on the console when the guest is up and when its job is over.
pub const READY_MARKER: &str = "packetproof-guest: up";
pub const DONE_MARKER: &str = "packetproof-guest: done";

/// One `packetproof` command line to run in the guest; its output, exit code and whatever it
/// writes under `SHARE/name` come back to the host in the share's `name` directory.
#[derive(Debug, Clone)]
pub struct GuestRun {
    pub name: String,
    /// The arguments after `packetproof`.
    pub args: Vec<String>,
}

impl GuestRun {
    /// Where the run's files are, seen from the guest (for `--json`, `--artifacts`, …).
    pub fn guest_dir(&self) -> String {
        format!("{SHARE}/{}", self.name)
    }
}

/// `/init`: busybox sets up the guest, loads the networking modules (br_netfilter is never
/// loaded on demand), mounts the share and runs the job, then powers off.
pub fn init_script() -> String {
    format!(
        r#"#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /bbin {SHARE}
/bin/busybox --install -s /bbin
export PATH={PROGRAMS}:/usr/sbin:/usr/bin:/sbin:/bin:/bbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /var
ln -sf /run /var/run
echo /usr/sbin/modprobe > /proc/sys/kernel/modprobe
ip link set lo up
echo "packetproof-guest: loading modules at $(cut -d' ' -f1 /proc/uptime)s"
modprobe -a -q $(cat /{preload}) 2>/tmp/modprobe.err || {{ echo "packetproof-guest: some modules failed to load:"; cat /tmp/modprobe.err; }}
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share {SHARE}; then
  echo "packetproof-guest: cannot mount the results share"
  poweroff -f
fi
echo "{READY_MARKER} $(uname -r) $(nproc) cpus at $(cut -d' ' -f1 /proc/uptime)s"
cd {WORKDIR}
sh {SHARE}/{JOB_FILE}
sync
echo "{DONE_MARKER} at $(cut -d' ' -f1 /proc/uptime)s"
poweroff -f
"#,
        preload = crate::modules::PRELOAD_LIST,
    )
}

/// The job: every run one after another, each writing `output.txt` and `exit-code` into its
/// directory of the share.
pub fn job_script(runs: &[GuestRun]) -> String {
    let mut script = String::from("#!/bin/sh\n");
    for run in runs {
        let dir = run.guest_dir();
        let args: Vec<String> = run.args.iter().map(|a| quote(a)).collect();
        script.push_str(&format!(
            "mkdir -p {dir}\necho {marker} \"started at $(cut -d' ' -f1 /proc/uptime)s, $({CPU_SECONDS})\"\n/usr/bin/packetproof {args} > {dir}/output.txt 2>&1\ncode=$?\necho $code > {dir}/exit-code\necho {marker} \"exited $code at $(cut -d' ' -f1 /proc/uptime)s, $({CPU_SECONDS})\"\n",
            dir = quote(&dir),
            // Quoted: the name is the user's (`--proxy`), the rest of the line is expanded.
            marker = quote(&format!("packetproof-guest: {}", run.name)),
            args = args.join(" "),
        ));
    }
    script
}

/// When the guest reached each point of its life, by its own clock (seconds since its kernel
/// started), read from the markers `/init` and the job print on the console.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// `/init` began loading modules: the kernel's boot and the userland's unpacking before it.
    pub modules_at: Option<f64>,
    /// Modules loaded and the share mounted.
    pub up_at: Option<f64>,
    /// Each run's start and end.
    pub runs: Vec<RunClock>,
    /// Every run over, before the power-off.
    pub done_at: Option<f64>,
}

/// One run by the guest's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct RunClock {
    pub name: String,
    pub started: f64,
    /// `None` when the guest never finished the run.
    pub ended: Option<f64>,
    /// The guest's CPU time during the run, summed over its vCPUs (`/proc/stat`): computing
    /// in programs and in the kernel, and waiting.
    pub user: Option<f64>,
    pub system: Option<f64>,
    pub idle: Option<f64>,
}

/// The guest's timeline from its console.
pub fn timeline(console: &str) -> Timeline {
    let mut t = Timeline::default();
    // Marker lines end `… at 12.34s` or `… at 12.34s, user 1.00s, system 2.00s, idle 3.00s`.
    let clock = |rest: &str| -> Option<(f64, [Option<f64>; 3])> {
        let (_, tail) = rest.rsplit_once(" at ")?;
        let mut fields = tail.split(", ");
        let seconds = |v: &str| v.strip_suffix('s')?.parse::<f64>().ok();
        let at = seconds(fields.next()?)?;
        let mut cpu = [None; 3];
        for field in fields {
            let Some((key, value)) = field.split_once(' ') else { continue };
            if let Some(i) = ["user", "system", "idle"].iter().position(|k| *k == key) {
                cpu[i] = seconds(value);
            }
        }
        Some((at, cpu))
    };
    let at = |rest: &str| clock(rest).map(|(at, _)| at);
    let mut cpu_at_start = [None; 3];
    for line in console.lines() {
        let Some((_, rest)) = line.split_once("packetproof-guest: ") else { continue };
        let rest = rest.trim_end();
        if let Some((name, tail)) = rest.split_once(" started at ") {
            if let Some((started, cpu)) = clock(&format!(" at {tail}")) {
                cpu_at_start = cpu;
                t.runs.push(RunClock {
                    name: name.to_string(),
                    started,
                    ended: None,
                    user: None,
                    system: None,
                    idle: None,
                });
            }
        } else if let Some((name, tail)) = rest.split_once(" exited ") {
            if let Some(run) = t.runs.iter_mut().rev().find(|r| r.name == name) {
                let ended = clock(tail);
                run.ended = ended.map(|(at, _)| at);
                let spent = |i: usize| Some(ended?.1[i]? - cpu_at_start[i]?);
                (run.user, run.system, run.idle) = (spent(0), spent(1), spent(2));
            }
        } else if rest.starts_with("loading modules at ") {
            t.modules_at = at(rest);
        } else if rest.starts_with("up ") {
            t.up_at = at(rest);
        } else if rest.starts_with("done at ") {
            t.done_at = at(rest);
        }
    }
    t
}

/// The guest's CPU time so far, summed over its vCPUs, from `/proc/stat` (in USER_HZ, 100 a
/// second on x86): `user 1.00s, system 2.00s, idle 3.00s` (nice counts as user; iowait as
/// idle; interrupts as system).
const CPU_SECONDS: &str = r#"awk '/^cpu /{printf "user %.2fs, system %.2fs, idle %.2fs", ($2+$3)/100, ($4+$7+$8)/100, ($5+$6)/100}' /proc/stat"#;

/// A word for sh: single-quoted, with `'` written as `'\''`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_runs_each_command_line_quoted_and_keeps_its_exit_code() {
        let runs = [GuestRun {
            name: "builtin-iptables".into(),
            args: vec!["run".into(), "--proxy-option".into(), "mutant=it's".into()],
        }];
        let script = job_script(&runs);
        assert!(script.contains(
            "/usr/bin/packetproof 'run' '--proxy-option' 'mutant=it'\\''s' > '/share/builtin-iptables'/output.txt 2>&1"
        ));
        assert!(script.contains("echo $code > '/share/builtin-iptables'/exit-code"));
        assert!(script.contains("echo 'packetproof-guest: builtin-iptables' \"started at $(cut"));
        let hostile = job_script(&[GuestRun { name: "$(reboot)".into(), args: vec![] }]);
        assert!(hostile.contains("echo 'packetproof-guest: $(reboot)' \"exited $code at"), "{hostile}");
    }

    #[test]
    fn the_timeline_is_read_from_the_console_markers() {
        let console = "[    0.0] Linux version 6.12\n\
            packetproof-guest: loading modules at 6.71s\n\
            packetproof-guest: up 6.12.118+deb13-amd64 1 cpus at 10.90s\n\
            packetproof-guest: builtin-iptables started at 10.95s, user 1.00s, system 2.00s, idle 4.00s\n\
            [   50.1] IPVS: some kernel line\n\
            packetproof-guest: builtin-iptables exited 1 at 160.20s, user 31.00s, system 62.00s, idle 64.50s\n\
            packetproof-guest: builtin-nftables started at 160.21s, user 31.00s, system 62.00s, idle 64.50s\n\
            packetproof-guest: done at 290.00s\n";
        let t = timeline(console);
        assert_eq!(t.modules_at, Some(6.71));
        assert_eq!(t.up_at, Some(10.90));
        assert_eq!(t.done_at, Some(290.0));
        assert_eq!(
            t.runs,
            vec![
                RunClock {
                    name: "builtin-iptables".into(),
                    started: 10.95,
                    ended: Some(160.20),
                    user: Some(30.0),
                    system: Some(60.0),
                    idle: Some(60.5)
                },
                RunClock {
                    name: "builtin-nftables".into(),
                    started: 160.21,
                    ended: None,
                    user: None,
                    system: None,
                    idle: None
                }
            ]
        );
    }

    #[test]
    fn init_loads_modules_mounts_the_share_and_powers_off() {
        let init = init_script();
        assert!(init.starts_with("#!/bin/busybox sh\n"));
        assert!(init.contains("modprobe -a -q $(cat /etc/packetproof/preload)"));
        assert!(init.contains("mount -t 9p"));
        assert!(init.trim_end().ends_with("poweroff -f"));
    }
}
