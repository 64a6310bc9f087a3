//! `packetproof run` exit codes a CI job relies on: a run in which every scenario was skipped
//! judged nothing and must not succeed (a job that lost its privileges must not go green).

use std::path::Path;
use std::process::Command;

#[test]
fn a_run_that_judged_nothing_fails() {
    let mut scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hairpin.yaml");
    let mut bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_packetproof"));
    let root = nix::unistd::Uid::effective().is_root();
    // As root, run as nobody so that the scenario is skipped for want of privileges, from a
    // copy nobody can read wherever the checkout lives.
    let copies = std::env::temp_dir().join(format!("pp-exit-codes-{}", std::process::id()));
    let mut command = if root {
        std::fs::create_dir_all(&copies).unwrap();
        std::fs::set_permissions(&copies, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        for file in [&mut bin, &mut scenario] {
            let copy = copies.join(file.file_name().unwrap());
            std::fs::copy(&*file, &copy).unwrap();
            *file = copy;
        }
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let out = command.args(["run", "--jobs", "1"]).arg(&scenario).current_dir(std::env::temp_dir()).output();
    let _ = std::fs::remove_dir_all(&copies);
    let out = out.expect("running packetproof");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("SKIP hairpin"), "{stdout}");
    assert!(stdout.contains("nothing was judged"), "{stdout}");
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// A scenario stating a kernel newer than this one (`minKernel`) is skipped with the reason,
/// never passed; a run of it alone judged nothing, so it fails as above.
#[test]
fn a_scenario_needing_a_newer_kernel_is_skipped_with_the_reason() {
    if !packetproof::privileges::scenarios_can_run() {
        return;
    }
    let original =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/hairpin.yaml"))
            .unwrap();
    // The Scenario document's spec (the Kubernetes objects after it have their own).
    let at = original.find("kind: Scenario").expect("a Scenario document");
    let spec = at + original[at..].find("\nspec:\n").expect("its spec");
    let text = format!("{}\nspec:\n  minKernel: \"999.0\"\n{}", &original[..spec], &original[spec + 7..]);
    let dir = std::env::temp_dir().join(format!("pp-min-kernel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hairpin.yaml"), text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(["run", "--jobs", "1", "hairpin.yaml"])
        .current_dir(&dir)
        .output()
        .expect("running packetproof");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        stdout.contains(&format!(
            "skipped: needs kernel 999.0 or newer (minKernel); this kernel is {}",
            release.trim()
        )),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(2), "{stdout}");
}
