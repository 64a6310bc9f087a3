//! `matrix --mutants`: the mutation catalog hunted inside each VM, for the modes whose kernel
//! machinery the host lacks (IPVS). Each guest runs `packetproof mutants` over the given
//! scenarios and writes every mutant's verdict as JSON where `run` writes its report, so the
//! matrix brings it back and prints it in the same lines and table.

use serde_json::Value;

/// The `packetproof mutants` command line of `proxy` in the guest: first kills only (a
/// mutant is killed or not; which scenarios all kill it is the host's longer question).
pub(crate) fn guest_args(proxy: &str, only: &[String], report: &str, paths: &[String]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "mutants".into(),
        "--proxy".into(),
        proxy.into(),
        "--first-kill".into(),
        "--json".into(),
        report.into(),
    ];
    for name in only {
        args.extend(["--only".into(), name.clone()]);
    }
    args.extend(paths.iter().cloned());
    args
}

/// `21 killed, 1 survived (service-addresses-not-bound), 0 with setup errors`, for a report
/// that is a hunt's; `None` for a run's report.
pub(crate) fn counts(report: &Value) -> Option<String> {
    let mutants = report.get("mutants")?.as_array()?;
    let names = |pick: &dyn Fn(&Value) -> bool| -> Vec<&str> {
        mutants.iter().filter(|m| pick(m)).filter_map(|m| m["name"].as_str()).collect()
    };
    let survived = names(&|m| m["killed"] != true);
    let errors = names(&|m| m["errors"].as_array().is_some_and(|e| !e.is_empty()));
    let listed =
        |names: &[&str]| if names.is_empty() { String::new() } else { format!(" ({})", names.join(", ")) };
    Some(format!(
        "{} killed, {} survived{}, {} with setup errors{}",
        mutants.len() - survived.len(),
        survived.len(),
        listed(&survived),
        errors.len(),
        listed(&errors)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guest_hunts_first_kills_of_the_chosen_mutants_into_the_report_file() {
        let args = guest_args(
            "builtin-ipvs",
            &["no-affinity".into()],
            "/share/builtin-ipvs/report.json",
            &["scenarios/hairpin.yaml".into()],
        );
        assert_eq!(
            args.join(" "),
            "mutants --proxy builtin-ipvs --first-kill --json /share/builtin-ipvs/report.json --only no-affinity \
             scenarios/hairpin.yaml"
        );
    }

    #[test]
    fn a_hunts_counts_name_the_survivors() {
        let report = serde_json::json!({"mutants": [
            {"name": "no-affinity", "killed": true, "killed_by": ["session-affinity"], "errors": []},
            {"name": "service-addresses-not-bound", "killed": false, "killed_by": [], "errors": ["x: boom"]},
        ]});
        assert_eq!(
            counts(&report).unwrap(),
            "1 killed, 1 survived (service-addresses-not-bound), 1 with setup errors (service-addresses-not-bound)"
        );
        assert_eq!(counts(&serde_json::json!({"passed": 3})), None);
    }
}
