//! The environment settings of the C ABI, read once per process and checked
//! then: a C program that calls `setenv` while other threads are in SAT
//! calls cannot race with them, and a bad value is an error that names the
//! setting, not a silent default.

use std::sync::OnceLock;
use std::time::Duration;

use crate::status::{sat_status, set_error_status};

/// The longest finite wait: a century, as good as forever.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How long a LOOKUP or a readSymbol waits for what nobody has allocated or
/// written yet: `SAT_LOOKUP_TIMEOUT` seconds (a non-negative number, or
/// `inf` to wait as long as it takes, as the report's calls do), 60 when
/// unset. A bad value fails the call with `SAT_ERR_ARGUMENT`.
pub(crate) fn lookup_timeout() -> Result<Duration, sat_status> {
    static PARSED: OnceLock<Result<Duration, String>> = OnceLock::new();
    PARSED
        .get_or_init(|| parse_timeout(std::env::var("SAT_LOOKUP_TIMEOUT").ok().as_deref()))
        .clone()
        .map_err(|e| set_error_status(sat_status::SAT_ERR_ARGUMENT, &e))
}

fn parse_timeout(value: Option<&str>) -> Result<Duration, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(Duration::from_secs(60));
    };
    if v.eq_ignore_ascii_case("inf") || v.eq_ignore_ascii_case("infinity") {
        return Ok(FOREVER);
    }
    match v.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Ok(Duration::try_from_secs_f64(secs).map_or(FOREVER, |d| d.min(FOREVER)))
        }
        _ => Err(format!(
            "SAT_LOOKUP_TIMEOUT={v:?} is not a number of seconds: set it to a non-negative \
             number (0.5, 60) or to inf, or unset it for 60 s"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lookup_timeout_is_seconds_or_inf_and_anything_else_is_refused() {
        assert_eq!(parse_timeout(None), Ok(Duration::from_secs(60)));
        assert_eq!(parse_timeout(Some(" ")), Ok(Duration::from_secs(60)));
        assert_eq!(parse_timeout(Some("1.5")), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_timeout(Some("0")), Ok(Duration::ZERO));
        assert_eq!(parse_timeout(Some("inf")), Ok(FOREVER));
        assert_eq!(parse_timeout(Some("1e30")), Ok(FOREVER));
        for bad in ["-1", "NaN", "abc", "-inf", "1s"] {
            let e = parse_timeout(Some(bad)).unwrap_err();
            assert!(
                e.contains("SAT_LOOKUP_TIMEOUT") && e.contains(bad),
                "{bad}: {e}"
            );
        }
    }
}
