//! Sizes and durations as people write and read them. In: `512MiB`, `10m`
//! from flags and the config file; byte counts and durations. Out: numbers,
//! and "1.5 MiB", "2.0 min" for the terminal; or a [`ParseError`] saying
//! what would be understood.

use std::time::Duration;

/// Why a size or duration was not understood.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// No number in front.
    #[error("{0:?} is not a size (like 512MiB, 1GiB, 500MB)")]
    NotASize(String),
    /// No number in front.
    #[error("{0:?} is not a duration (like 30s, 10m, 2h, 7d)")]
    NotADuration(String),
    /// A size in a unit we do not know.
    #[error("{input:?}: unknown unit {unit:?} (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)")]
    SizeUnit {
        /// What was given.
        input: String,
        /// Its unit.
        unit: String,
    },
    /// A duration in a unit we do not know.
    #[error("{input:?}: unknown unit {unit:?} (use ms, s, m, h, d or w)")]
    DurationUnit {
        /// What was given.
        input: String,
        /// Its unit.
        unit: String,
    },
    /// Too large (or negative) to hold.
    #[error("{0:?} is out of range")]
    OutOfRange(String),
}

/// Bytes as B, KiB or MiB.
pub fn human_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A duration as "7 d", "1.5 h", "2.0 min" or "30 s".
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 86400 && s % 86400 == 0 => format!("{} d", s / 86400),
        s if s >= 3600 => format!("{:.1} h", s as f64 / 3600.0),
        s if s >= 60 => format!("{:.1} min", s as f64 / 60.0),
        s => format!("{s} s"),
    }
}

/// Bytes from `512MiB`, `1GiB`, `2G` (binary), `500MB` (decimal), `4096`.
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| ParseError::NotASize(s.into()))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "kb" => 1e3,
        "m" | "mib" => 1048576.0,
        "mb" => 1e6,
        "g" | "gib" => 1073741824.0,
        "gb" => 1e9,
        "t" | "tib" => 1099511627776.0,
        "tb" => 1e12,
        _ => {
            return Err(ParseError::SizeUnit {
                input: s.into(),
                unit: unit.into(),
            })
        }
    };
    let v = n * mult;
    if !(0.0..=1.8e19).contains(&v) {
        return Err(ParseError::OutOfRange(s.into()));
    }
    Ok(v as u64)
}

/// A duration from `30s`, `10m`, `2h`, `7d`, `1w`, `250ms`, or a number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| ParseError::NotADuration(s.into()))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" => n,
        "ms" => n / 1e3,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        "w" => n * 7.0 * 86400.0,
        u => {
            return Err(ParseError::DurationUnit {
                input: s.into(),
                unit: u.into(),
            })
        }
    };
    if !(0.0..=3.2e9).contains(&secs) {
        return Err(ParseError::OutOfRange(s.into()));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check sizes and durations in the units people write, and that
    /// nonsense is refused with the units that would work.
    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("1 parsec")
            .unwrap_err()
            .to_string()
            .contains("MiB"));
        assert_eq!(parse_duration("7d").unwrap(), Duration::from_secs(604800));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5m").is_err());
    }
}
