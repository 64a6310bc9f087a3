//! `matrix --mutants`: the mutation catalog hunted inside each VM, for the modes whose kernel
//! machinery the host lacks (IPVS). Each guest runs `packetproof mutants` over the given
//! scenarios and writes every mutant's verdict as JSON where `run` writes its report, so the
//! matrix brings it back and prints it in the same lines and table.

use crate::commands::mutants::HuntReport;

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

/// `21 killed, 1 survived (service-addresses-not-bound), 0 with setup errors`.
pub(crate) fn counts(report: &HuntReport) -> String {
    let mutants = &report.mutants;
    let survived: Vec<&str> = mutants.iter().filter(|m| !m.killed).map(|m| m.name.as_str()).collect();
    let errors: Vec<&str> =
        mutants.iter().filter(|m| !m.errors.is_empty()).map(|m| m.name.as_str()).collect();
    let listed =
        |names: &[&str]| if names.is_empty() { String::new() } else { format!(" ({})", names.join(", ")) };
    format!(
        "{} killed, {} survived{}, {} with setup errors{}",
        mutants.len() - survived.len(),
        survived.len(),
        listed(&survived),
        errors.len(),
        listed(&errors)
    )
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
        let report = serde_json::json!({"proxy": "builtin-ipvs", "killed": 1, "survived": 1, "errors": 1,
          "baseline": [], "mutants": [
            {"name": "no-affinity", "killed": true, "killed_by": ["session-affinity"], "errors": []},
            {"name": "service-addresses-not-bound", "killed": false, "killed_by": [], "errors": ["x: boom"]},
        ]});
        let read: super::super::GuestReport = serde_json::from_value(report).unwrap();
        let super::super::GuestReport::Hunt(hunt) = read else { panic!("a hunt's report reads as one") };
        assert_eq!(
            counts(&hunt),
            "1 killed, 1 survived (service-addresses-not-bound), 1 with setup errors (service-addresses-not-bound)"
        );
    }
}
