//! Which run a worker starts next. Runs go in the order [`super::longest_first`] gives. Where
//! workers keep their topologies (`RunOptions::reuse_topologies`), a worker takes the next run
//! of the scenario it last ran, and otherwise one of a scenario no other worker is on: each
//! scenario's runs (one per mutant, both sides of a diff) then play one after another on one
//! worker's topology, built once, instead of one topology per worker that took one of them.
//! Runs marked ahead still start first, and once every scenario left is some worker's, an idle
//! worker joins the earliest rather than wait.

use std::collections::{HashMap, VecDeque};

/// The runs not yet started, by scenario, and which worker is on which scenario.
pub(super) struct Schedule {
    /// The run at each position of the starting order, and whether it is marked ahead.
    order: Vec<(usize, bool)>,
    /// The scenario (by number) at each position.
    group_at: Vec<usize>,
    taken: Vec<bool>,
    /// No position before it is left.
    first_left: usize,
    /// Per scenario: its positions not yet known taken, in order.
    left_of: Vec<VecDeque<usize>>,
    /// Per scenario: the worker that took it as its own.
    holder: Vec<Option<usize>>,
    /// Per worker: the scenario of its last run (whose topology it keeps).
    last: Vec<Option<usize>>,
    /// Whether workers keep to their scenarios.
    sticky: bool,
}

impl Schedule {
    /// `order`: each run's index in starting order, with its scenario (any key that two runs
    /// of one scenario share) and whether it is marked ahead.
    pub(super) fn new<K: std::hash::Hash + Eq>(
        order: impl IntoIterator<Item = (usize, K, bool)>,
        workers: usize,
        sticky: bool,
    ) -> Schedule {
        let mut number: HashMap<K, usize> = HashMap::new();
        let (mut positions, mut group_at, mut left_of) =
            (Vec::new(), Vec::new(), Vec::<VecDeque<usize>>::new());
        for (position, (run, scenario, ahead)) in order.into_iter().enumerate() {
            let next = left_of.len();
            let group = *number.entry(scenario).or_insert(next);
            if group == next {
                left_of.push(VecDeque::new());
            }
            left_of[group].push_back(position);
            positions.push((run, ahead));
            group_at.push(group);
        }
        Schedule {
            taken: vec![false; positions.len()],
            holder: vec![None; left_of.len()],
            order: positions,
            group_at,
            first_left: 0,
            left_of,
            last: vec![None; workers],
            sticky,
        }
    }

    /// The run `worker` starts next, or `None` once every run is taken.
    pub(super) fn next(&mut self, worker: usize) -> Option<usize> {
        while self.taken.get(self.first_left) == Some(&true) {
            self.first_left += 1;
        }
        if self.first_left == self.order.len() {
            self.release(worker);
            return None;
        }
        let first = self.first_left;
        if !self.sticky {
            return Some(self.take(worker, first));
        }
        if let Some(own) = self.last[worker]
            && let Some(mine) = self.left(own)
            // A run marked ahead goes before a worker's own scenario's next run, unless that
            // one is ahead too.
            && (!self.order[first].1 || self.order[mine].1)
        {
            return Some(self.take(worker, mine));
        }
        self.release(worker);
        // The first run left of a scenario no worker is on; else the first left (join it).
        let free =
            (first..self.order.len()).find(|&p| !self.taken[p] && self.holder[self.group_at[p]].is_none());
        if let Some(p) = free {
            self.holder[self.group_at[p]] = Some(worker);
        }
        Some(self.take(worker, free.unwrap_or(first)))
    }

    /// The position of `group`'s next run left.
    fn left(&mut self, group: usize) -> Option<usize> {
        let left = &mut self.left_of[group];
        while left.front().is_some_and(|&p| self.taken[p]) {
            left.pop_front();
        }
        left.front().copied()
    }

    fn take(&mut self, worker: usize, position: usize) -> usize {
        self.taken[position] = true;
        self.last[worker] = Some(self.group_at[position]);
        self.order[position].0
    }

    fn release(&mut self, worker: usize) {
        if let Some(own) = self.last[worker].take()
            && self.holder[own] == Some(worker)
        {
            self.holder[own] = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs named by scenario letter, in starting order, none ahead.
    fn schedule(scenarios: &str, workers: usize, sticky: bool) -> Schedule {
        Schedule::new(scenarios.chars().enumerate().map(|(i, s)| (i, s, false)), workers, sticky)
    }

    /// `(worker, run)` for each pick in `workers` order, until none is left.
    fn picks(s: &mut Schedule, workers: &[usize]) -> Vec<(usize, usize)> {
        workers.iter().filter_map(|&w| Some((w, s.next(w)?))).collect()
    }

    #[test]
    fn without_reuse_runs_start_in_the_order_given() {
        let mut s = schedule("aabb", 2, false);
        assert_eq!(picks(&mut s, &[0, 1, 1, 0, 0]), [(0, 0), (1, 1), (1, 2), (0, 3)]);
    }

    #[test]
    fn a_worker_keeps_to_its_scenario_and_another_takes_the_next_scenario() {
        // Both sides of a diff: a, a, b, b, c, c.
        let mut s = schedule("aabbcc", 2, true);
        assert_eq!(picks(&mut s, &[0, 1, 0, 1, 0, 1]), [(0, 0), (1, 2), (0, 1), (1, 3), (0, 4), (1, 5)]);
    }

    #[test]
    fn once_every_scenario_left_is_taken_an_idle_worker_joins_the_earliest() {
        let mut s = schedule("aaaab", 3, true);
        // Worker 0 is on a, worker 1 on b; worker 2 finds no free scenario and joins a.
        assert_eq!(picks(&mut s, &[0, 1, 2]), [(0, 0), (1, 4), (2, 1)]);
        // Worker 1's scenario has no run left: it joins a too; each goes on with a.
        assert_eq!(picks(&mut s, &[1, 0, 2]), [(1, 2), (0, 3)]);
        assert_eq!(s.next(2), None);
    }

    #[test]
    fn a_run_marked_ahead_comes_before_a_workers_own_scenario() {
        // Starting order: a's run ahead, then b's, then a's and b's others.
        let order = [(0, 'a', true), (1, 'b', true), (2, 'a', false), (3, 'b', false)];
        let mut s = Schedule::new(order, 1, true);
        assert_eq!(picks(&mut s, &[0, 0, 0, 0]), [(0, 0), (0, 1), (0, 3), (0, 2)]);
    }

    #[test]
    fn a_worker_that_moves_on_frees_its_scenario_for_others() {
        let mut s = schedule("abc", 2, true);
        assert_eq!(picks(&mut s, &[0, 1]), [(0, 0), (1, 1)]);
        // Worker 0's a is done: it takes c, the only run left.
        assert_eq!(s.next(0), Some(2));
        assert_eq!(s.next(1), None);
    }
}
