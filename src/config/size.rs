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

#[cfg(test)]
mod tests {
    use super::*;

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
