//! Sizes and rates as users write them on the command line ("4M", "64K", "1MiB").

use crate::error::{Error, Result};

/// Parses "4M", "64K", "1MiB", "65536".
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// A rate in bytes per second: "10M", "500K", "1G"; a bare number is `unit` bytes.
pub fn parse_rate(s: &str, unit: u64) -> Result<u64> {
    let bare = s.bytes().all(|b| b.is_ascii_digit());
    let n = if bare {
        s.parse::<u64>().ok().and_then(|n| n.checked_mul(unit))
    } else {
        parse_size(s)
    };
    match n {
        Some(n) if n > 0 => Ok(n),
        _ => Err(Error::Usage(format!(
            "invalid rate '{s}': use bytes per second, e.g. 10M (MiB/s) or 500K"
        ))),
    }
}

/// A bandwidth cap (`--limit`, `--bwlimit`, `haul limit`): a rate, or `None` for no cap
/// when it is zero ("0", "0K"), as rsync reads `--bwlimit=0`.
pub fn parse_limit(s: &str, unit: u64) -> Result<Option<u64>> {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if !digits.is_empty() && digits.bytes().all(|b| b == b'0') && parse_size(s).is_some() {
        return Ok(None);
    }
    parse_rate(s, unit).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_no_limit() {
        assert_eq!(parse_limit("0", 1024).unwrap(), None);
        assert_eq!(parse_limit("0M", 1).unwrap(), None);
        assert_eq!(parse_limit("10", 1024).unwrap(), Some(10 << 10));
        assert!(parse_limit("0Q", 1).is_err());
        assert!(parse_limit("", 1).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4M"), Some(4 << 20));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("4Q"), None);
    }
}
