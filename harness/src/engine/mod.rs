//! The suite engine: schedules runs (one scenario with one proxy) on worker threads and turns
//! what happens into a stream of [`Event`]s that [`Reporter`]s consume. `run`, `diff`,
//! `mutants` and `bench` all schedule through it; what each prints or writes is a reporter.
//!
//! Shaped after vmtest's engine/UI split (workers send events over a channel; one thread, the
//! caller's, hands them to the reporters in order) and nextest's `Reporter::write_event`
//! fanning one event out to every output. Reporters therefore need not be `Send` or `Sync`,
//! and never see two events at once.

mod reporters;
mod schedule;

pub use reporters::{CoverageReport, MachineReports, RunProgress, TerminalReport};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::model::{ProxyChoice, Scenario};
use crate::proxy::{self, Proxy};
use crate::results::{Outcome, ScenarioReport};
use crate::runner::{self, RunOptions};
use crate::stage::Keeper;
use crate::verdict::ProbeVerdict;

/// Which proxy programs a run's nodes.
#[derive(Clone, Copy)]
pub enum RunProxy<'a> {
    /// The one the scenario names.
    Own,
    /// A choice (name and options), built for the run.
    Choice(&'a ProxyChoice),
    /// One already built, shared by every run that names it (the mutants' broken proxies).
    Built(&'a dyn Proxy),
}

/// One scenario with one proxy.
#[derive(Clone, Copy)]
pub struct Run<'a> {
    pub scenario: &'a Scenario,
    pub proxy: RunProxy<'a>,
    /// Where this run's evidence goes instead of the options' folder: `diff` runs each
    /// scenario twice, and keeps each side's apart.
    pub artifacts: Option<&'a Path>,
    /// Started before every run that is not: a first-kill hunt's runs of a mutant's known
    /// killers, whose kill cancels the mutant's other runs.
    pub ahead: bool,
}

impl<'a> Run<'a> {
    /// `scenario` with `proxy`, its evidence where the options say.
    pub fn new(scenario: &'a Scenario, proxy: RunProxy<'a>) -> Run<'a> {
        Run { scenario, proxy, artifacts: None, ahead: false }
    }

    /// Every scenario with its own proxy, or with `proxy` instead where given.
    pub fn each(scenarios: &'a [Scenario], proxy: Option<&'a ProxyChoice>) -> Vec<Run<'a>> {
        let proxy = proxy.map_or(RunProxy::Own, RunProxy::Choice);
        scenarios.iter().map(|scenario| Run::new(scenario, proxy)).collect()
    }
}

/// What happened, in the order the reporters see it. `index` is the run's position in the
/// list given to [`execute`].
pub enum Event<'e> {
    SuiteStarted {
        total: usize,
    },
    ScenarioStarted {
        index: usize,
        scenario: &'e Scenario,
    },
    /// One probe's verdict, for each probe of a judged scenario, just before its
    /// `ScenarioFinished`.
    ProbeJudged {
        index: usize,
        scenario: &'e Scenario,
        verdict: &'e ProbeVerdict,
    },
    ScenarioFinished {
        index: usize,
        scenario: &'e Scenario,
        result: &'e Result<ScenarioReport>,
        done: usize,
        total: usize,
    },
    /// Every run ended (or the rest were cancelled by a reporter's [`Control::Stop`]).
    SuiteFinished {
        results: &'e [(&'e Scenario, Result<ScenarioReport>)],
        elapsed: Duration,
    },
}

/// A reporter's answer to an event: go on, start no further runs, or start none of the runs
/// `from..to` (a killed mutant's, when others are hunted beside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Continue,
    Stop,
    Cancel { from: usize, to: usize },
}

/// Something that consumes the event stream: the terminal, JUnit and JSON writers, a
/// mutant's kill counter, the `cargo test` runner.
pub trait Reporter {
    fn event(&mut self, event: &Event<'_>) -> Result<Control>;
}

/// The engine's settings.
#[derive(Clone)]
pub struct Engine {
    pub options: RunOptions,
    /// Runs at once.
    pub jobs: usize,
}

impl Engine {
    /// Four runs per core: a scenario mostly waits (on answers, silences, proxies' syncs), and
    /// on 2 cores the suite measured 8.0 s with eight jobs, 8.8–9.5 s with six and 10.5 s
    /// with four; twelve gained nothing more.
    pub(crate) fn default_jobs() -> usize {
        4 * std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// Runs `runs`, `jobs` at a time, feeding every event to every reporter in turn; returns
    /// each run's result in the order given (runs a reporter cancelled end as errors saying so).
    /// A reporter's error ends nothing early: it is returned after the runs, first one wins.
    pub fn execute<'a>(
        &self,
        runs: &[Run<'a>],
        reporters: &mut [&mut dyn Reporter],
    ) -> Result<Vec<(&'a Scenario, Result<ScenarioReport>)>> {
        let total = runs.len();
        let started = Instant::now();
        let mut results: Vec<Option<Result<ScenarioReport>>> = (0..total).map(|_| None).collect();
        let mut failure: Option<anyhow::Error> = None;
        let mut stopped = false;
        let cancelled: Vec<AtomicBool> = (0..total).map(|_| AtomicBool::new(false)).collect();
        let mut tell = |event: &Event<'_>, failure: &mut Option<anyhow::Error>| {
            let mut control = Control::Continue;
            for r in reporters.iter_mut() {
                match r.event(event) {
                    Ok(Control::Stop) => control = Control::Stop,
                    Ok(Control::Cancel { from, to }) => {
                        for flag in cancelled.get(from..to.min(total)).unwrap_or_default() {
                            flag.store(true, Ordering::Relaxed);
                        }
                    }
                    Ok(Control::Continue) => {}
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
            }
            control
        };
        tell(&Event::SuiteStarted { total }, &mut failure);
        // Once per suite: a host that cannot run scenarios skips every one with the reason.
        let skip_all = crate::privileges::preflight();
        let workers = self.jobs.clamp(1, total.max(1));
        let order =
            longest_first(runs).into_iter().map(|i| (i, std::ptr::from_ref(runs[i].scenario), runs[i].ahead));
        let schedule = Mutex::new(schedule::Schedule::new(order, workers, self.options.reuse_topologies));
        let stop = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel::<Message>();
        std::thread::scope(|scope| {
            for worker in 0..workers {
                let tx = tx.clone();
                let (schedule, stop, skip_all) = (&schedule, &stop, skip_all.as_deref());
                let cancelled = &cancelled;
                scope.spawn(move || {
                    // The reporters' answer to each finished run: a worker waits for it, so
                    // that once a reporter says stop, no worker starts another run.
                    let (answer, answered) = mpsc::channel::<Control>();
                    let mut keeper = self.options.reuse_topologies.then(Keeper::default);
                    while !stop.load(Ordering::Relaxed) {
                        let next = schedule.lock().unwrap_or_else(|e| e.into_inner()).next(worker);
                        let Some(index) = next else { break };
                        if cancelled[index].load(Ordering::Relaxed) {
                            continue;
                        }
                        let run = &runs[index];
                        let _ = tx.send(Message::Started(index));
                        let result = run_caught(run, &self.options, skip_all, keeper.as_mut());
                        let _ = tx.send(Message::Finished(index, Box::new(result), answer.clone()));
                        if answered.recv() != Ok(Control::Continue) {
                            break;
                        }
                    }
                });
            }
            drop(tx);
            let mut done = 0;
            for message in rx {
                match message {
                    Message::Started(index) => {
                        let scenario = runs[index].scenario;
                        if tell(&Event::ScenarioStarted { index, scenario }, &mut failure) == Control::Stop {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    Message::Finished(index, result, answer) => {
                        let result = *result;
                        done += 1;
                        let scenario = runs[index].scenario;
                        let mut control = Control::Continue;
                        if let Ok(report) = &result
                            && let Outcome::Judged(verdicts) = &report.outcome
                        {
                            for verdict in verdicts {
                                let event = Event::ProbeJudged { index, scenario, verdict };
                                if tell(&event, &mut failure) == Control::Stop {
                                    control = Control::Stop;
                                }
                            }
                        }
                        let event = Event::ScenarioFinished { index, scenario, result: &result, done, total };
                        if tell(&event, &mut failure) == Control::Stop {
                            control = Control::Stop;
                        }
                        if control == Control::Stop {
                            stopped = true;
                            stop.store(true, Ordering::Relaxed);
                        }
                        results[index] = Some(result);
                        let _ = answer.send(control);
                    }
                }
            }
        });
        let results: Vec<(&Scenario, Result<ScenarioReport>)> = runs
            .iter()
            .zip(results)
            .zip(&cancelled)
            .map(|((run, result), cancelled)| {
                let result = result.unwrap_or_else(|| {
                    Err(anyhow::anyhow!(if cancelled.load(Ordering::Relaxed) {
                        "not run: cancelled"
                    } else if stopped {
                        "not run: the suite was stopped"
                    } else {
                        "the scenario never ran"
                    }))
                });
                (run.scenario, result)
            })
            .collect();
        tell(&Event::SuiteFinished { results: &results, elapsed: started.elapsed() }, &mut failure);
        match failure {
            Some(e) => Err(e),
            None => Ok(results),
        }
    }
}

/// The order to start `runs` in: the longest deliberate waits first (a probe's pauses
/// between attempts, e.g. outlasting a session-affinity timeout), then the most phases, else
/// as given. A long run started last would run alone while the other workers sit idle.
///
/// Runs of one scenario (each with another mutant) come one after another. Runs marked
/// [`Run::ahead`] start before all others, in the same order among themselves. Where workers
/// keep their topologies, [`schedule`] lets each keep to its scenario's runs.
fn longest_first(runs: &[Run<'_>]) -> Vec<usize> {
    let mut first_of: std::collections::HashMap<*const Scenario, usize> = Default::default();
    for (i, run) in runs.iter().enumerate() {
        first_of.entry(std::ptr::from_ref(run.scenario)).or_insert(i);
    }
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&i| {
        let scenario = runs[i].scenario;
        let first = first_of[&std::ptr::from_ref(scenario)];
        (std::cmp::Reverse(runs[i].ahead), std::cmp::Reverse(expected_waits(scenario)), first)
    });
    order
}

/// What `scenario` waits for whatever the proxy: its probes' pauses, and its phases.
fn expected_waits(scenario: &Scenario) -> (Duration, usize) {
    let phases = scenario.phases();
    let paused = phases
        .iter()
        .flat_map(|p| p.probes)
        .map(|probe| probe.interval.unwrap_or_default() * probe.count.saturating_sub(1))
        .sum();
    (paused, phases.len())
}

enum Message {
    Started(usize),
    /// A run's result (boxed: a report is large beside a start), and where to send the
    /// reporters' [`Control`] for it.
    Finished(usize, Box<Result<ScenarioReport>>, mpsc::Sender<Control>),
}

/// One run; a panic becomes its error, so the other runs go on and reporters hear of it.
pub(crate) fn run_caught(
    run: &Run<'_>,
    options: &RunOptions,
    skip_all: Option<&str>,
    keeper: Option<&mut Keeper>,
) -> Result<ScenarioReport> {
    let run_it = || run_one(run, options, skip_all, keeper);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run_it)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(anyhow::anyhow!("the run panicked: {what}"))
    })
}

/// Runs one scenario with its proxy; skipped with `skip_reason` when the host cannot run it.
pub fn run_one(
    run: &Run<'_>,
    options: &RunOptions,
    skip_reason: Option<&str>,
    keeper: Option<&mut Keeper>,
) -> Result<ScenarioReport> {
    let s = run.scenario;
    let chosen = match run.proxy {
        RunProxy::Built(_) => None,
        RunProxy::Own => Some(&s.proxy),
        RunProxy::Choice(c) => Some(c),
    };
    let built;
    let proxy: &dyn Proxy = match (run.proxy, chosen) {
        (RunProxy::Built(p), _) => p,
        (_, Some(choice)) => {
            built = proxy::build(choice, crate::model::folder_of(&s.source))?;
            built.as_ref()
        }
        (_, None) => unreachable!("a proxy not built is chosen"),
    };
    if let Some(reason) = skip_reason {
        return Ok(ScenarioReport::skipped(s, proxy.name(), reason.to_string()));
    }
    let own_folder;
    let options = match run.artifacts {
        Some(dir) => {
            own_folder = RunOptions { artifacts: Some(dir.to_path_buf()), ..options.clone() };
            &own_folder
        }
        None => options,
    };
    let mut report = runner::run_kept(s, proxy, options, keeper)?;
    // Reports say what was judged: a proxy's options too (a mutant, a mode, a program).
    if let Some(choice) = chosen.filter(|c| !c.options.is_empty()) {
        report.proxy = choice.label();
    }
    // The runner keeps the kernel's evidence; the flow table is written beside it.
    if let (Some(dir), Outcome::Judged(verdicts)) = (&report.artifacts, &report.outcome) {
        crate::report::evidence::summary(dir, &s.cluster, verdicts)?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
