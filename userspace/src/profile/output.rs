//! Writing the profile file safely.
//!
//! In: the output path, chosen before recording starts; later the profile
//! JSON. Out: the file at that path, complete or not at all. A temporary file
//! next to the output is created at once (so an unwritable path fails before
//! anything is recorded), filled (gzip-compressed when the name ends in
//! `.gz`), flushed, and renamed over the final name.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::RecordError;

/// A profile being written: the temporary file and where it will go.
pub struct OutputFile {
    final_path: PathBuf,
    temp_path: PathBuf,
    file: Option<File>,
}

impl OutputFile {
    /// Create the temporary file next to `path`.
    pub fn create(path: &Path) -> Result<OutputFile, RecordError> {
        let err = |source| RecordError::OutputNotWritable { path: path.to_path_buf(), source };
        if path.is_dir() {
            return Err(err(std::io::Error::other("it is a directory")));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path.file_name().ok_or_else(|| err(std::io::Error::other("it has no file name")))?;
        let temp_path = dir.join(format!(".{}.{}.tmp", name.to_string_lossy(), std::process::id()));
        let file = File::create(&temp_path).map_err(err)?;
        Ok(OutputFile { final_path: path.to_path_buf(), temp_path, file: Some(file) })
    }

    /// Where the profile goes.
    pub fn path(&self) -> &Path {
        &self.final_path
    }

    /// Write `profile` and rename it into place; returns the bytes written.
    pub fn commit(mut self, profile: &impl serde::Serialize) -> Result<u64, RecordError> {
        let err = |source| RecordError::OutputNotWritable { path: self.final_path.clone(), source };
        let file = self.file.take().expect("commit once");
        let gz = self.final_path.extension().is_some_and(|e| e == "gz");
        let file = if gz {
            let mut enc = flate2::write::GzEncoder::new(BufWriter::new(file), flate2::Compression::new(6));
            serde_json::to_writer(&mut enc, profile).map_err(|e| err(e.into()))?;
            enc.finish().map_err(err)?.into_inner().map_err(|e| err(e.into_error()))?
        } else {
            let mut w = BufWriter::new(file);
            serde_json::to_writer(&mut w, profile).map_err(|e| err(e.into()))?;
            w.flush().map_err(err)?;
            w.into_inner().map_err(|e| err(e.into_error()))?
        };
        file.sync_all().map_err(err)?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        drop(file);
        std::fs::rename(&self.temp_path, &self.final_path).map_err(err)?;
        Ok(len)
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        // Not committed: leave nothing behind under any name.
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.temp_path);
        }
    }
}
