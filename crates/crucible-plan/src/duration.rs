//! Durations as the DSL and CLI write them: `90s`, `10m`, `2h` (RFC-0001 notes §4), and parts
//! together or in fractions, `1h30m`, `1.5m` (issue 19).

/// The longest duration anything accepts: one year. Deadlines are instants computed by adding a
/// duration to now, so an unbounded one (`18446744073709551615s`) would overflow the clock
/// (issue 11 item 5); no run, ceiling or timeout needs more.
pub const MAX_SECS: u64 = 365 * 24 * 3600;

/// Parses a duration into whole seconds, at most [`MAX_SECS`]: one or more parts, each a number
/// and a unit (`s`, `m`, `h`), as `90s`, `10m`, `2h`, `1h30m` or `1.5m`.
pub fn parse(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bad = || {
        format!("`{text}` is not a duration: write a number and a unit, as 90s, 10m, 1.5m or 1h30m")
    };
    if text.is_empty() {
        return Err(bad());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let Some(at) = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')) else {
            return Err(format!("`{text}` has no unit: write 90s, 10m or 2h"));
        };
        let (number, tail) = rest.split_at(at);
        if !number.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(bad());
        }
        let n: f64 = number.parse().map_err(|_| bad())?;
        let unit = match tail.as_bytes()[0] {
            b's' => 1.0,
            b'm' => 60.0,
            b'h' => 3600.0,
            _ => {
                return Err(format!(
                    "`{text}` has an unknown unit: the units are s, m and h, as 90s, 10m or 1h30m"
                ))
            }
        };
        total += n * unit;
        rest = &tail[1..];
    }
    if total > MAX_SECS as f64 {
        return Err(format!(
            "`{text}` is longer than the longest duration, {}",
            format(MAX_SECS)
        ));
    }
    // Float parts (`1.1m`) carry rounding noise; a duration is whole seconds all the same.
    let secs = total.round();
    if (total - secs).abs() > 1e-6 {
        return Err(format!("`{text}` is not a whole number of seconds"));
    }
    if secs == 0.0 {
        return Err(format!(
            "`{text}` is not positive: a duration must be at least 1s"
        ));
    }
    Ok(secs as u64)
}

/// Formats seconds back in the largest exact unit.
pub fn format(secs: u64) -> String {
    if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_and_formats() {
        assert_eq!(super::parse("90s"), Ok(90));
        assert_eq!(super::parse("10m"), Ok(600));
        assert_eq!(super::parse("2h"), Ok(7200));
        assert!(super::parse("0s").is_err());
        assert!(super::parse("10").is_err());
        assert!(super::parse("1d").unwrap_err().contains("unknown unit"));
        assert!(super::parse("10").unwrap_err().contains("has no unit"));
        assert!(super::parse("-5s").is_err());
        assert!(super::parse("18446744073709551615s").is_err());
        assert!(super::parse("99999999999999999999h").is_err());
        assert_eq!(super::parse("8760h"), Ok(super::MAX_SECS));
        assert!(super::parse("8761h").is_err());
        assert_eq!(super::parse("1h30m"), Ok(5400));
        assert_eq!(super::parse("1.5m"), Ok(90));
        assert_eq!(super::parse("1.1m"), Ok(66));
        assert_eq!(super::parse("2m30s"), Ok(150));
        for bad in [
            "1.25s", "m", "1ms", "1.5", "h1", ".5m", "1m 30s", "1e3s", "",
        ] {
            assert!(super::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(super::format(7200), "2h");
        assert_eq!(super::format(90), "90s");
    }
}
