//! Reading a profile file back (`report`, `validate`), within bounds.
//!
//! In: a path some user named, holding JSON or gzip-compressed JSON. Out:
//! the JSON bytes, or one line saying why not. The file must be a regular
//! file (a FIFO or a device would never end). A gzip stream is inflated
//! through a counting limit: at most [`MIN_INFLATED`] or [`MAX_RATIO`] times
//! the compressed size, whichever is more. Profiles sysprof writes compress
//! 6 to 10 times, so the limit never stops one, while a gzip bomb (which
//! inflates a thousand times) is refused after at most that many bytes, so
//! memory stays bounded by the file's size rather than by what it claims.
//! Errors are [`ReadError`], each one line.

use std::io::Read;
use std::path::Path;

/// Inflated bytes always allowed, whatever the compressed size.
pub const MIN_INFLATED: u64 = 64 << 20;

/// Inflated bytes allowed per compressed byte past [`MIN_INFLATED`].
pub const MAX_RATIO: u64 = 64;

/// Why a profile could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not opened: missing, unreadable, or not a regular file (the
    /// message names the path).
    #[error("{0}")]
    Open(#[from] crate::binaries::OpenError),
    /// Opened, but reading failed.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path, escaped.
        path: String,
        /// What reading said.
        #[source]
        source: std::io::Error,
    },
    /// It starts as gzip but does not inflate.
    #[error("{path} is not gzip ({source})")]
    NotGzip {
        /// The path, escaped.
        path: String,
        /// What inflating said.
        #[source]
        source: std::io::Error,
    },
    /// It inflates past [`inflated_limit`]: a gzip bomb, or a profile
    /// that must be given uncompressed.
    #[error("{path} inflates past {} MiB ({MAX_RATIO} times its {} KiB), far more than a profile compresses; if it is one, gunzip it and give the .json", limit >> 20, compressed >> 10)]
    TooLarge {
        /// The path, escaped.
        path: String,
        /// The most it could inflate to, bytes.
        limit: u64,
        /// Its size, bytes.
        compressed: usize,
    },
}

impl ReadError {
    /// Whether the message already says what to do next (otherwise the
    /// caller says which profile to give).
    pub fn says_what_to_do(&self) -> bool {
        matches!(self, ReadError::NotGzip { .. } | ReadError::TooLarge { .. })
    }
}

/// The JSON of the profile at `path`, inflated when it is gzip.
pub fn read_profile_bytes(path: &Path) -> Result<Vec<u8>, ReadError> {
    let shown = crate::escape::path(path);
    // Not a FIFO or a device: a read must end.
    let file = crate::binaries::open_regular(&path.to_string_lossy(), true)?;
    let mut bytes = Vec::new();
    { file }.read_to_end(&mut bytes).map_err(|source| ReadError::Read { path: shown.clone(), source })?;
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(bytes);
    }
    let limit = inflated_limit(bytes.len() as u64);
    let not_gzip = |source: std::io::Error| ReadError::NotGzip { path: shown.clone(), source };
    // Counted first, kept nowhere: a bomb is refused having held nothing,
    // and a real profile is then inflated into a buffer of its exact size
    // (a growing one held up to three times it while copying).
    let inflated = std::io::copy(&mut flate2::read::MultiGzDecoder::new(&bytes[..]).take(limit + 1), &mut std::io::sink()).map_err(not_gzip)?;
    if inflated > limit {
        return Err(ReadError::TooLarge { path: shown.clone(), limit, compressed: bytes.len() });
    }
    // Inflated whole (serde reading through the decoder pulls a byte per call).
    let mut json = Vec::with_capacity(inflated as usize);
    flate2::read::MultiGzDecoder::new(&bytes[..]).take(inflated).read_to_end(&mut json).map_err(not_gzip)?;
    Ok(json)
}

/// The most a gzip file of `compressed` bytes may inflate to.
pub fn inflated_limit(compressed: u64) -> u64 {
    MIN_INFLATED.max(compressed.saturating_mul(MAX_RATIO))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that a gzip bomb (100 MiB of spaces in 100 KiB: a 1 MiB gzip
    /// member repeated, as gzip allows) is refused with one line naming the
    /// limit.
    #[test]
    fn a_gzip_bomb_is_refused_at_the_limit() {
        let dir = std::env::temp_dir().join(format!("sysprof-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bomb.json.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut enc, &vec![b' '; 1 << 20]).unwrap();
        let member = enc.finish().unwrap();
        std::fs::write(&path, member.repeat(100)).unwrap();
        let e = read_profile_bytes(&path).unwrap_err().to_string();
        assert!(e.contains("inflates past 64 MiB") && !e.contains('\n'), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Check that a real-sized profile's ratio is far inside the limit.
    #[test]
    fn the_limit_grows_with_the_file() {
        assert_eq!(inflated_limit(1000), MIN_INFLATED);
        assert_eq!(inflated_limit(10 << 20), 640 << 20);
    }

    /// Check that a file with gzip's magic that does not inflate, and a
    /// missing file, are refused with one line naming the file, and that
    /// only the first already says what to do.
    #[test]
    fn broken_gzip_and_missing_files_are_one_line_each() {
        let dir = std::env::temp_dir().join(format!("sysprof-input-broken-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("broken.json.gz");
        std::fs::write(&path, [0x1f, 0x8b, 0, 1, 2, 3]).unwrap();
        let e = read_profile_bytes(&path).unwrap_err();
        assert!(e.to_string().starts_with(&format!("{} is not gzip (", path.display())) && e.says_what_to_do(), "{e}");
        let e = read_profile_bytes(&dir.join("missing.json")).unwrap_err();
        assert!(e.to_string().contains("missing.json") && !e.to_string().contains('\n') && !e.says_what_to_do(), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
