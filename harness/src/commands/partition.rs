//! Slices of a suite for many machines, as nextest's partitions: `hash:K/N` puts each item in
//! the slice its key's SHA-256 names, the same on every machine and whatever else the suite
//! holds; `count:K/N` deals the items, sorted by key, round-robin (even slices, but an item
//! added to the suite can move others). Either way every item is in exactly one of the N slices.
//! A scenario's key is its path relative to the suite folder it was found in (its file name for
//! a file given by itself); a mutant's is its name.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// How items are dealt into slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scheme {
    Hash,
    Count,
}

/// Slice `slice` (1-based) of `of`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition {
    pub scheme: Scheme,
    pub slice: u32,
    pub of: u32,
}

/// More slices than this is a typing mistake, not a CI fleet.
const MOST_SLICES: u32 = 1000;

impl FromStr for Partition {
    type Err = String;

    fn from_str(text: &str) -> Result<Partition, String> {
        let usage =
            || format!("{text:?}: expected hash:K/N or count:K/N (slice K of N, 1 ≤ K ≤ N ≤ {MOST_SLICES})");
        let (scheme, rest) = text.split_once(':').ok_or_else(usage)?;
        let scheme = match scheme {
            "hash" => Scheme::Hash,
            "count" => Scheme::Count,
            _ => return Err(usage()),
        };
        let (slice, of) = rest.split_once('/').ok_or_else(usage)?;
        let number =
            |s: &str| s.parse::<u32>().ok().filter(|n| s.bytes().all(|b| b.is_ascii_digit()) && *n >= 1);
        let (Some(slice), Some(of)) = (number(slice), number(of)) else { return Err(usage()) };
        if slice > of || of > MOST_SLICES {
            return Err(usage());
        }
        Ok(Partition { scheme, slice, of })
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match self.scheme {
            Scheme::Hash => "hash",
            Scheme::Count => "count",
        };
        write!(f, "{scheme}:{}/{}", self.slice, self.of)
    }
}

impl Partition {
    /// Whether each of `keys` is in this slice.
    pub fn select(&self, keys: &[String]) -> Vec<bool> {
        match self.scheme {
            Scheme::Hash => keys.iter().map(|k| hash_slice(k, self.of) == self.slice).collect(),
            Scheme::Count => {
                let mut order: Vec<usize> = (0..keys.len()).collect();
                order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
                let mut chosen = vec![false; keys.len()];
                for (position, &i) in order.iter().enumerate() {
                    chosen[i] = position as u64 % u64::from(self.of) + 1 == u64::from(self.slice);
                }
                chosen
            }
        }
    }

    /// The items of `items` in this slice, keyed by `key`, in their order.
    pub fn keep<T>(&self, items: Vec<T>, key: impl Fn(&T) -> String) -> Vec<T> {
        let keys: Vec<String> = items.iter().map(key).collect();
        items.into_iter().zip(self.select(&keys)).filter_map(|(item, kept)| kept.then_some(item)).collect()
    }
}

/// The slice (1-based) of `of` the first eight bytes of `key`'s SHA-256 name.
fn hash_slice(key: &str, of: u32) -> u32 {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(of)) as u32 + 1
}

/// `file`'s key: its path relative to the folder of `roots` it lies in, with `/` between
/// parts, else its file name; the same on every machine that runs the same command.
pub fn scenario_key(file: &Path, roots: &[PathBuf]) -> String {
    let relative = roots
        .iter()
        .filter(|root| root.is_dir())
        .find_map(|root| file.strip_prefix(root).ok())
        .filter(|r| r.components().next().is_some());
    let relative = relative.unwrap_or_else(|| file.file_name().map_or(file, Path::new));
    relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("scenario-{i}.yaml")).collect()
    }

    #[test]
    fn every_item_is_in_exactly_one_slice_of_either_scheme() {
        let keys = keys(76);
        for scheme in ["hash", "count"] {
            let mut seen = vec![0; keys.len()];
            for k in 1..=3 {
                let p: Partition = format!("{scheme}:{k}/3").parse().unwrap();
                for (i, chosen) in p.select(&keys).into_iter().enumerate() {
                    seen[i] += usize::from(chosen);
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{scheme}: {seen:?}");
        }
        let count: Vec<usize> = (1..=3)
            .map(|k| {
                Partition { scheme: Scheme::Count, slice: k, of: 3 }
                    .select(&keys)
                    .iter()
                    .filter(|c| **c)
                    .count()
            })
            .collect();
        assert_eq!(count, [26, 25, 25], "count deals evenly");
    }

    #[test]
    fn a_hash_slice_depends_on_the_key_alone() {
        let p = |k| Partition { scheme: Scheme::Hash, slice: k, of: 3 };
        let slice_of = |key: &str| (1..=3).find(|&k| p(k).select(&[key.to_string()])[0]).unwrap();
        let alone = slice_of("hairpin.yaml");
        let among: Vec<String> = ["a.yaml", "hairpin.yaml", "z.yaml"].map(String::from).to_vec();
        assert!(p(alone).select(&among)[1], "other files move nothing");
        // As `sha256sum` and a few lines of Python compute them.
        assert_eq!(
            [hash_slice("hairpin.yaml", 3), hash_slice("sctp.yaml", 3), hash_slice("kube-dns-udp.yaml", 3)],
            [3, 1, 1]
        );
    }

    #[test]
    fn partitions_are_read_strictly() {
        assert_eq!("hash:1/3".parse::<Partition>().unwrap().to_string(), "hash:1/3");
        assert_eq!("count:3/3".parse::<Partition>().unwrap().to_string(), "count:3/3");
        for bad in
            ["1/3", "hash:0/3", "hash:4/3", "hash:1/0", "hash:+1/3", "rand:1/3", "hash:1/3/4", "hash:1/1001"]
        {
            assert!(bad.parse::<Partition>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_scenarios_key_is_its_path_below_the_suite_folder() {
        let dir = std::env::temp_dir();
        let file = dir.join("suite-x.yaml");
        assert_eq!(scenario_key(&file, std::slice::from_ref(&dir)), "suite-x.yaml");
        assert_eq!(scenario_key(Path::new("/elsewhere/scenarios/hairpin.yaml"), &[file]), "hairpin.yaml");
    }
}
