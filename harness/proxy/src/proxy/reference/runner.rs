//! When a proxier's sync runs: kube-proxy's `BoundedFrequencyRunner`
//! (pkg/util/async/bounded_frequency_runner.go), its decisions without its goroutine. A
//! requested run happens at once if the rate limiter (a token bucket of `burstSyncs` = 2,
//! refilled once per `minSyncPeriod`) allows, else when the min interval since the last run
//! is out; with nothing requested it runs every `maxInterval`; a failed run retries sooner.

use std::time::{Duration, Instant};

/// The `burstSyncs` both proxiers pass (pkg/proxy/iptables/proxier.go, nftables/proxier.go).
const BURST: f64 = 2.0;

/// client-go's token bucket limiter (`NewTokenBucketRateLimiterWithClock`, over
/// golang.org/x/time/rate): full at first, one token per `per` back, up to the burst.
#[derive(Debug, Clone)]
struct TokenBucket {
    per: Duration,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    fn try_accept(&mut self, now: Instant) -> bool {
        self.tokens = match self.last {
            None => BURST,
            Some(last) => (self.tokens
                + now.saturating_duration_since(last).as_secs_f64() / self.per.as_secs_f64())
            .min(BURST),
        };
        self.last = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[derive(Debug, Clone)]
pub struct Runner {
    min_interval: Duration,
    max_interval: Duration,
    /// `None` for a zero min interval (`nullLimiter`: every run allowed).
    limiter: Option<TokenBucket>,
    last_run: Option<Instant>,
    /// When the timer fires next.
    timer: Instant,
    /// A pending `RetryAfter`.
    retry: Option<Instant>,
}

impl Runner {
    /// A runner whose `Loop` starts at `now` (the timer set to the max interval).
    pub fn new(min_interval: Duration, max_interval: Duration, now: Instant) -> Runner {
        let limiter =
            (!min_interval.is_zero()).then_some(TokenBucket { per: min_interval, tokens: BURST, last: None });
        Runner { min_interval, max_interval, limiter, last_run: None, timer: now + max_interval, retry: None }
    }

    /// When the timer fires: then call [`Runner::try_run`].
    pub fn deadline(&self) -> Instant {
        self.timer
    }

    /// `tryRun`: whether to run now. If not, the timer is moved to when the min interval
    /// since the last run is out (or kept, if it fires sooner).
    pub(crate) fn try_run(&mut self, now: Instant) -> bool {
        if self.limiter.as_mut().is_none_or(|l| l.try_accept(now)) {
            return true;
        }
        let elapsed = self.last_run.map_or(Duration::MAX, |l| now.saturating_duration_since(l));
        let next_possible = self.min_interval.saturating_sub(elapsed);
        let next_scheduled = self.timer.saturating_duration_since(now);
        self.timer = now + next_possible.min(next_scheduled);
        false
    }

    /// After a run that [`Runner::try_run`] allowed: the next periodic run is a max interval
    /// away, unless the run asked to be retried sooner (`doRetry`).
    pub fn ran(&mut self, now: Instant) {
        self.last_run = Some(now);
        self.timer = now + self.max_interval;
        self.apply_retry(now);
    }

    /// `RetryAfter`: run again `interval` from now at the latest (the earliest retry asked
    /// for wins).
    pub(crate) fn retry_after(&mut self, interval: Duration, now: Instant) {
        let at = now + interval;
        if self.retry.is_none_or(|r| at < r) {
            self.retry = Some(at);
        }
    }

    /// `doRetry`: a retry sooner than the timer moves it.
    pub(crate) fn apply_retry(&mut self, now: Instant) {
        if let Some(at) = self.retry.take()
            && at.saturating_duration_since(now) < self.timer.saturating_duration_since(now)
        {
            self.timer = at.max(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(1);
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn after_a_quiet_period_two_runs_go_at_once_and_the_third_waits_out_the_min_interval() {
        let t0 = Instant::now();
        let mut r = Runner::new(MIN, HOUR, t0);
        assert_eq!(r.deadline(), t0 + HOUR);
        let ms = |n: u64| t0 + Duration::from_millis(n);
        assert!(r.try_run(ms(0)));
        r.ran(ms(10));
        assert!(r.try_run(ms(20)));
        r.ran(ms(30));
        // The bucket is empty: wait until a second after the last run.
        assert!(!r.try_run(ms(40)));
        assert_eq!(r.deadline(), ms(1030));
        assert!(r.try_run(ms(1030)));
        r.ran(ms(1040));
        // Quiet for long enough, the burst is back.
        assert!(r.try_run(ms(5000)));
        r.ran(ms(5000));
        assert!(r.try_run(ms(5001)));
    }

    #[test]
    fn a_zero_min_interval_never_waits() {
        let t0 = Instant::now();
        let mut r = Runner::new(Duration::ZERO, HOUR, t0);
        for i in 0..5 {
            assert!(r.try_run(t0 + Duration::from_millis(i)));
            r.ran(t0 + Duration::from_millis(i));
        }
    }

    #[test]
    fn a_failed_run_retries_after_the_sync_period_unless_the_timer_is_sooner() {
        let t0 = Instant::now();
        let thirty = Duration::from_secs(30);
        let mut r = Runner::new(MIN, HOUR, t0);
        assert!(r.try_run(t0));
        r.retry_after(thirty, t0);
        r.ran(t0);
        assert_eq!(r.deadline(), t0 + thirty);
        // With the max interval shorter than the retry (nftables: both the sync period), the
        // periodic run stays.
        let mut r = Runner::new(MIN, Duration::from_secs(10), t0);
        assert!(r.try_run(t0));
        r.retry_after(thirty, t0);
        r.ran(t0);
        assert_eq!(r.deadline(), t0 + Duration::from_secs(10));
    }
}
