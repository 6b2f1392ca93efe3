//! Sizes as users write them on the command line ("4M", "64K", "1MiB").

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
