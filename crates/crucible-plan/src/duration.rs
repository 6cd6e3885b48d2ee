//! Durations as the DSL and CLI write them: `90s`, `10m`, `2h` (RFC-0001 notes §4).

/// The longest duration anything accepts: one year. Deadlines are instants computed by adding a
/// duration to now, so an unbounded one (`18446744073709551615s`) would overflow the clock
/// (issue 11 item 5); no run, ceiling or timeout needs more.
pub const MAX_SECS: u64 = 365 * 24 * 3600;

/// Parses `<positive integer><s|m|h>` into seconds, at most [`MAX_SECS`].
pub fn parse(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = digits.parse().map_err(|_| {
        format!("`{text}` is not a duration: write a whole number and a unit, as 90s, 10m or 2h")
    })?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("`{text}` has no unit: write 90s, 10m or 2h")),
    };
    if secs > MAX_SECS {
        return Err(format!(
            "`{text}` is longer than the longest duration, {}",
            format(MAX_SECS)
        ));
    }
    if secs == 0 {
        return Err(format!(
            "`{text}` is not positive: a duration must be at least 1s"
        ));
    }
    Ok(secs)
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
        assert!(super::parse("1d").is_err());
        assert!(super::parse("-5s").is_err());
        assert!(super::parse("18446744073709551615s").is_err());
        assert!(super::parse("99999999999999999999h").is_err());
        assert_eq!(super::parse("8760h"), Ok(super::MAX_SECS));
        assert!(super::parse("8761h").is_err());
        assert_eq!(super::format(7200), "2h");
        assert_eq!(super::format(90), "90s");
    }
}
