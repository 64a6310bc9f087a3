//! Backends answer with their bare name (a pod's, an external host's, a node's: see
//! traffic/server.rs) and endpoints refer to them by it, so a name two kinds of backend share
//! would make an answer ambiguous: which one answered could not be told. Refused.

use std::collections::HashMap;

use super::error::Diagnostics;
use super::registry::Registry;
use super::yaml::Pos;

/// One kind of backend: how messages call it, and its names with where each is defined.
pub(crate) struct Kind<'r> {
    what: &'static str,
    names: Vec<(&'r str, Pos)>,
}

impl<'r> Kind<'r> {
    pub fn of<T>(registry: &'r Registry<T>) -> Kind<'r> {
        Kind { what: registry.what(), names: registry.names_with_places().collect() }
    }
}

/// Reports, at the later definition, every name that two kinds of backend share.
pub(crate) fn refuse_shared(kinds: &[Kind<'_>], diag: &mut Diagnostics) {
    for (i, first) in kinds.iter().enumerate() {
        for second in &kinds[i + 1..] {
            let mut places: HashMap<&str, Pos> = HashMap::new();
            for &(name, at) in &second.names {
                places.entry(name).or_insert(at);
            }
            for &(name, at_first) in &first.names {
                let Some(&at_second) = places.get(name) else { continue };
                let ((later, later_what), (earlier, earlier_what)) =
                    sorted((at_first, first.what), (at_second, second.what));
                diag.push(
                    later,
                    format!("{later_what} {name}: name"),
                    format!(
                        "{name:?} is also the name of the {earlier_what} on line {}: backends answer with their bare \
                         name, so an answer from either could not be told apart; rename one",
                        earlier.line
                    ),
                );
            }
        }
    }
}

/// `(later, earlier)` by position in the file.
fn sorted<'w>(a: (Pos, &'w str), b: (Pos, &'w str)) -> ((Pos, &'w str), (Pos, &'w str)) {
    if (a.0.line, a.0.column) >= (b.0.line, b.0.column) { (a, b) } else { (b, a) }
}
