//! Durations as scenario authors write them: a whole number with a unit, `1500ms` or `2s`.

use std::time::Duration;

/// The longest pause between a probe's attempts: longer would make a run crawl, and no
/// Kubernetes timeout a probe needs to outlast is longer (affinity timeouts are configurable).
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// `interval:` of a probe: more than zero, at most [`MAX_INTERVAL`].
pub(crate) fn parse_interval(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let (number, from): (&str, fn(u64) -> Duration) = if let Some(n) = trimmed.strip_suffix("ms") {
        (n, Duration::from_millis)
    } else if let Some(n) = trimmed.strip_suffix('s') {
        (n, Duration::from_secs)
    } else if trimmed.ends_with(|c: char| c.is_ascii_alphabetic()) {
        return Err(format!("{text:?}: the unit must be ms or s, e.g. 1500ms or 2s"));
    } else {
        return Err(format!("{text:?} has no unit: write e.g. 1500ms or 2s"));
    };
    let number = number.trim();
    let value =
        number.parse::<u64>().ok().filter(|_| number.bytes().all(|b| b.is_ascii_digit())).ok_or_else(
            || format!("{text:?} is not a duration: write a whole number of ms or s, e.g. 1500ms or 2s"),
        )?;
    let duration = from(value);
    if duration.is_zero() {
        return Err("interval must be more than 0".to_string());
    }
    if duration > MAX_INTERVAL {
        return Err(format!("interval {trimmed} is longer than the maximum of {}s", MAX_INTERVAL.as_secs()));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_and_seconds() {
        assert_eq!(parse_interval("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval(" 3 s "), Ok(Duration::from_secs(3)));
        assert_eq!(parse_interval("60s"), Ok(MAX_INTERVAL));
        assert_eq!(parse_interval("60000ms"), Ok(MAX_INTERVAL));
    }

    #[test]
    fn bad_durations_say_what_to_write() {
        assert_eq!(parse_interval("2").unwrap_err(), "\"2\" has no unit: write e.g. 1500ms or 2s");
        assert_eq!(parse_interval("2m").unwrap_err(), "\"2m\": the unit must be ms or s, e.g. 1500ms or 2s");
        assert_eq!(parse_interval("2h").unwrap_err(), "\"2h\": the unit must be ms or s, e.g. 1500ms or 2s");
        assert_eq!(
            parse_interval("1.5s").unwrap_err(),
            "\"1.5s\" is not a duration: write a whole number of ms or s, e.g. 1500ms or 2s"
        );
        assert!(
            parse_interval("+5s").is_err() && parse_interval("-5s").is_err() && parse_interval("s").is_err()
        );
        assert_eq!(parse_interval("0ms").unwrap_err(), "interval must be more than 0");
        assert_eq!(parse_interval("61s").unwrap_err(), "interval 61s is longer than the maximum of 60s");
        assert_eq!(
            parse_interval("60001ms").unwrap_err(),
            "interval 60001ms is longer than the maximum of 60s"
        );
    }
}
