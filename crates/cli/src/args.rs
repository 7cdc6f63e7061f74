//! Argument parsers that more than one subcommand's flags use.

use std::time::Duration;

/// A positive duration in humantime's syntax (250ms, 2s, 500us).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!("{s:?}: durations cannot be negative"));
    }
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}); use e.g. 250ms, 2s, 500us"))?;
    if d.is_zero() {
        return Err(format!("{s:?}: the duration must be greater than zero"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_positive() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("0s")
            .unwrap_err()
            .contains("greater than zero"));
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("soon")
            .unwrap_err()
            .contains("not a duration"));
    }
}
