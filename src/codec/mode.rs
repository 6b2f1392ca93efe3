//! What `--compress` names: a fixed codec and level, or `auto`.

use std::fmt;
use std::str::FromStr;

/// What the user asked for with `--compress`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Send raw bytes.
    None,
    /// LZ4 (fast, modest ratio).
    Lz4,
    /// zstd at the given level.
    Zstd(i32),
    /// Chosen per unit from measurements (see [`tune`]).
    Auto,
}

impl FromStr for Compression {
    type Err = String;

    fn from_str(s: &str) -> Result<Compression, String> {
        let bad =
            || format!("invalid compression '{s}': use auto, none, lz4, zstd or zstd:LEVEL (1-19)");
        match s {
            "auto" => Ok(Compression::Auto),
            "none" | "off" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd(1)),
            _ => {
                let level = s.strip_prefix("zstd:").ok_or_else(bad)?;
                let level: i32 = level.parse().map_err(|_| bad())?;
                if !(1..=19).contains(&level) {
                    return Err(bad());
                }
                Ok(Compression::Zstd(level))
            }
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::None => f.write_str("none"),
            Compression::Lz4 => f.write_str("lz4"),
            Compression::Zstd(l) => write!(f, "zstd:{l}"),
            Compression::Auto => f.write_str("auto"),
        }
    }
}
