//! The manual's command reference (`docs/src/reference/commands.md`) is the binary's own help,
//! `packetproof help` and `packetproof <command> --help` for every command `packetproof
//! --help` lists: a changed help text fails here until the page is regenerated with
//! `PACKETPROOF_BLESS=1 cargo test --test command_reference`. Beside it: the help of `rules`
//! and `mutants` names exactly the proxies each accepts, and the book's annotated scenario is
//! one `packetproof check` accepts. Needs no root.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The page, from the repository's root.
const PAGE: &str = "docs/src/reference/commands.md";
const REGENERATE: &str = "PACKETPROOF_BLESS=1 cargo test --test command_reference";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the binary from the repository's root. Its help must not depend on the terminal:
/// clap wraps help to the terminal's width only with its `wrap_help` feature (then read from
/// `COLUMNS`), and colours it only on a terminal; both are pinned here.
fn packetproof(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packetproof"))
        .args(args)
        .current_dir(repo())
        .env("COLUMNS", "100")
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .unwrap_or_else(|e| panic!("running packetproof {args:?}: {e}"))
}

fn help(args: &[&str]) -> String {
    let out = packetproof(args);
    assert!(
        out.status.success(),
        "packetproof {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The commands `packetproof --help` lists under "Commands:", but `help` itself.
fn commands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|line| line.trim_end() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        // A command's own line; a wrapped description would start further in.
        .filter(|line| !line[2..].starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(String::from)
        .collect()
}

/// The page as the binary's help makes it now.
fn reference() -> String {
    let top = help(&["help"]);
    let mut page = String::from(
        "# Command reference\n\n\
         <!-- Generated from the binary's help by `PACKETPROOF_BLESS=1 cargo test --test command_reference`; \
         do not edit by hand. -->\n\n\
         Every command's help, as `packetproof` prints it. Exit codes: 0 everything passed, 1 a \
         proxy failed (a probe, a differing flow, a surviving mutant), 2 the input or the machine \
         is at fault.\n",
    );
    page.push_str(&section("packetproof help", &top));
    let commands = commands(&top);
    assert!(commands.len() >= 8, "too few commands found in `packetproof help`:\n{top}");
    for command in &commands {
        page.push_str(&section(&format!("packetproof {command} --help"), &help(&[command, "--help"])));
    }
    page
}

fn section(title: &str, text: &str) -> String {
    format!("\n## `{title}`\n\n```text\n{}\n```\n", text.trim_end())
}

#[test]
fn the_command_reference_is_the_binarys_help() {
    let path = repo().join(PAGE);
    let fresh = reference();
    if std::env::var_os("PACKETPROOF_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).unwrap_or_else(|e| panic!("writing {PAGE}: {e}"));
        println!("wrote {PAGE}");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let first = committed
            .lines()
            .zip(fresh.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(fresh.lines().count()));
        panic!(
            "{PAGE} is not the binary's help (first difference at line {}):\n  committed: {:?}\n  help now:  {:?}\n\
             Regenerate it with `{REGENERATE}` and commit it.",
            first + 1,
            committed.lines().nth(first).unwrap_or("<end of file>"),
            fresh.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

/// The proxies the help of `packetproof COMMAND` offers for `--proxy`: the list after the
/// option's "…: " and before its default.
fn proxies_in_help(command: &str) -> Vec<String> {
    let text = help(&[command, "--help"]);
    let line = text
        .lines()
        .find(|line| line.trim_start().starts_with("--proxy <"))
        .unwrap_or_else(|| panic!("no --proxy option in `{command} --help`:\n{text}"));
    let described = line.split_once(": ").map_or("", |(_, list)| list);
    let list = described.split(" [default").next().unwrap_or("");
    let names: Vec<String> = list
        .split(',')
        .map(|name| name.trim().trim_end_matches('.').to_string())
        .filter(|name| !name.is_empty())
        .collect();
    assert!(!names.is_empty(), "`{command} --help` names no proxy: {line:?}");
    names
}

/// `packetproof rules` and `packetproof mutants` each accept exactly the proxies their help
/// names: every named one is used (its rules printed; its mutants looked up), and every other
/// proxy this build knows is refused as having no rules or no mutants.
#[test]
fn rules_and_mutants_help_name_exactly_the_proxies_they_accept() {
    let known = packetproof::proxy::registry::names();
    let rules = proxies_in_help("rules");
    let mutants = proxies_in_help("mutants");
    for name in rules.iter().chain(&mutants) {
        assert!(known.contains(&name.as_str()), "the help names {name:?}, which is no proxy of this build");
    }

    for name in &known {
        let out = packetproof(&["rules", "scenarios/hairpin.yaml", "--proxy", name]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if rules.iter().any(|n| n == name) {
            assert!(
                out.status.success() && !out.stdout.is_empty(),
                "`rules --help` offers {name}, but `rules --proxy {name}` fails ({}): {stderr}",
                out.status
            );
        } else {
            assert!(
                stderr.contains("no rules to print for proxy"),
                "`rules --proxy {name}` is not refused ({}), but `rules --help` leaves it out: {stderr}",
                out.status
            );
        }
    }

    // The mutant name is unknown, so nothing runs: the proxy is looked up first, then the
    // mutant (or, without root, the hunt is refused before that).
    for name in &known {
        let out =
            packetproof(&["mutants", "scenarios/hairpin.yaml", "--only", "no-such-mutant", "--proxy", name]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "`mutants --proxy {name} --only no-such-mutant`: {stderr}");
        let refused = stderr.contains("no mutants of proxy");
        if mutants.iter().any(|n| n == name) {
            assert!(
                !refused,
                "`mutants --help` offers {name}, but `mutants --proxy {name}` refuses it: {stderr}"
            );
            assert!(
                stderr.contains("no mutant \"no-such-mutant\"")
                    || stderr.contains("cannot hunt mutants here"),
                "`mutants --proxy {name}` failed for another reason: {stderr}"
            );
        } else {
            assert!(
                refused,
                "`mutants --proxy {name}` is not refused, but `mutants --help` leaves it out: {stderr}"
            );
        }
    }
}

/// The manual's "every object, commented" scenario is a valid scenario.
#[test]
fn the_books_annotated_scenario_passes_check() {
    let out = packetproof(&["check", "docs/src/scenarios/annotated.yaml"]);
    assert!(
        out.status.success(),
        "packetproof check docs/src/scenarios/annotated.yaml ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
