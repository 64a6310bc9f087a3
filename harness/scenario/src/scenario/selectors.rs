//! Whom a Service's selector picks, looked up by label rather than by trying every pod for
//! every Service: a cluster has both by the ten thousand.

use std::collections::{BTreeMap, HashMap};

/// A Service's selector as its entry keeps it: the pairs alone, in key order, without a
/// map's room (a map holds eleven; a file holds Services by the hundred thousand).
#[derive(Debug, Clone)]
pub(crate) struct Selector(Box<[(String, String)]>);

impl Selector {
    pub fn of(labels: &BTreeMap<String, String>) -> Self {
        Selector(labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &String)> {
        self.into_iter()
    }
}

impl<'s> IntoIterator for &'s Selector {
    type Item = (&'s String, &'s String);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'s, (String, String)>, fn(&'s (String, String)) -> Self::Item>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

/// Items (pods) by namespace, label key and label value.
pub(crate) struct ByLabel<'p, T> {
    items: Vec<(&'p T, &'p str, &'p BTreeMap<String, String>)>,
    /// Indexes into `items`, ascending.
    index: HashMap<&'p str, HashMap<&'p str, HashMap<&'p str, Vec<usize>>>>,
}

impl<'p, T> ByLabel<'p, T> {
    /// `items` in their order, each with its namespace and labels.
    pub fn new(items: impl Iterator<Item = (&'p T, &'p str, &'p BTreeMap<String, String>)>) -> Self {
        let items: Vec<_> = items.collect();
        let mut index: HashMap<&str, HashMap<&str, HashMap<&str, Vec<usize>>>> = HashMap::new();
        for (i, &(_, namespace, labels)) in items.iter().enumerate() {
            let by_key = index.entry(namespace).or_default();
            for (key, value) in labels {
                by_key.entry(key.as_str()).or_default().entry(value.as_str()).or_default().push(i);
            }
        }
        ByLabel { items, index }
    }

    /// The items of `namespace` with every label of `selector` (a [`Selector`] or a map), in
    /// order; an empty selector picks nothing (a Service without one selects no pods).
    pub(crate) fn selected<'s, S: ?Sized>(
        &'s self,
        namespace: &str,
        selector: &'s S,
    ) -> impl Iterator<Item = &'p T> + 's
    where
        &'s S: IntoIterator<Item = (&'s String, &'s String)>,
    {
        let by_key = self.index.get(namespace);
        // Every label must match: the rarest one's list holds all the candidates.
        let rarest = selector
            .into_iter()
            .map(|(k, v)| by_key.and_then(|m| m.get(k.as_str())).and_then(|m| m.get(v.as_str())))
            .min_by_key(|list| list.map_or(0, |l| l.len()))
            .flatten();
        rarest
            .into_iter()
            .flatten()
            .map(|&i| self.items[i])
            .filter(move |(_, _, labels)| selector.into_iter().all(|(k, v)| labels.get(k) == Some(v)))
            .map(|(item, _, _)| item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn picks_the_pods_of_the_namespace_with_every_label_in_order() {
        let pods = [
            ("web-0", "default", labels(&[("app", "web"), ("tier", "front")])),
            ("web-1", "default", labels(&[("app", "web")])),
            ("other", "kube-system", labels(&[("app", "web"), ("tier", "front")])),
            ("web-2", "default", labels(&[("tier", "front"), ("app", "web")])),
            ("db", "default", labels(&[("app", "db"), ("tier", "front")])),
        ];
        let index = ByLabel::new(pods.iter().map(|p| (p, p.1, &p.2)));
        let names = |ns: &str, selector: &BTreeMap<String, String>| {
            index.selected(ns, selector).map(|p| p.0).collect::<Vec<_>>()
        };
        assert_eq!(names("default", &labels(&[("app", "web")])), ["web-0", "web-1", "web-2"]);
        assert_eq!(names("default", &labels(&[("app", "web"), ("tier", "front")])), ["web-0", "web-2"]);
        assert_eq!(names("kube-system", &labels(&[("tier", "front")])), ["other"]);
        assert!(names("default", &labels(&[("app", "web"), ("tier", "back")])).is_empty());
        assert!(names("nowhere", &labels(&[("app", "web")])).is_empty());
        assert!(names("default", &labels(&[])).is_empty());
    }
}
