//! What a PHP binary is: its version, where its executor's globals and its
//! VM loop are, and the layout of the structures the kernel walks and
//! userspace reads.
//!
//! In: an [`ElfReader`] over a mapped file whose name may be PHP's
//! (`php8.2`, `php-fpm8.2`, `php-cgi8.2`), read as an attacker wrote it.
//! Out: a [`PhpBinary`] for a PHP this build reads, an error that names the
//! version for another PHP, nothing for other files.
//!
//! The version is the file's name: PHP's binaries say it there (Debian's
//! `/usr/bin/php8.2`, the alternatives' `php` links to it), and no symbol
//! does. A binary misnamed can only misname its own process's frames: the
//! kernel reads nothing but that process's memory, and userspace names a
//! function only if what it reads has the function's type and the
//! fingerprint the kernel read. Offsets are PHP 8.2's structures on x86_64
//! (`zend_executor_globals`, `zend_execute_data`, `zend_op_array`,
//! `zend_op`), measured on Debian's 8.2.36 by reading a running script's
//! memory (`tests/oracles/php_layout.py`), checked against it by
//! `tests/tests/php.rs`.

use crate::binaries::elf::ElfReader;

/// Structure offsets of one PHP minor version (bytes).
#[derive(Debug, PartialEq, Eq)]
pub struct PhpLayout {
    /// "8.2".
    pub version: &'static str,
    /// `executor_globals.current_execute_data`.
    pub eg_current_execute_data: u64,
    /// `zend_execute_data.opline`.
    pub ex_opline: u16,
    /// `zend_execute_data.func`.
    pub ex_func: u16,
    /// `zend_execute_data.This.u1.type_info`: the call's flags.
    pub ex_call_info: u16,
    /// `zend_execute_data.prev_execute_data`.
    pub ex_prev: u16,
    /// `zend_function.common.function_name` (a `zend_string`, NULL for a
    /// script's top-level code).
    pub fn_name: u64,
    /// `zend_function.common.scope` (a `zend_class_entry`, NULL outside a class).
    pub fn_scope: u64,
    /// `zend_class_entry.name`.
    pub class_name: u64,
    /// `zend_op_array.filename`; `line_start` follows it.
    pub op_filename: u64,
    /// `zend_op_array.line_start`.
    pub op_line_start: u64,
    /// `zend_op.lineno`.
    pub opline_lineno: u16,
    /// `zend_string.len`; its characters follow it.
    pub str_len: u64,
    /// `zend_string.val`.
    pub str_val: u64,
}

const LAYOUTS: [PhpLayout; 1] = [PhpLayout {
    version: "8.2",
    eg_current_execute_data: 488,
    ex_opline: 0,
    ex_func: 24,
    ex_call_info: 40,
    ex_prev: 48,
    fn_name: 8,
    fn_scope: 16,
    class_name: 8,
    op_filename: 152,
    op_line_start: 160,
    opline_lineno: 24,
    str_len: 16,
    str_val: 24,
}];

/// The versions read, as said to users.
pub const SUPPORTED: &str = "8.2";

/// The layout of PHP `version` ("8.2"), if this build knows it.
pub fn layout(version: &str) -> Option<&'static PhpLayout> {
    LAYOUTS.iter().find(|l| l.version == version)
}

/// A PHP binary: addresses in the file's address space.
#[derive(Debug)]
pub struct PhpBinary {
    /// `executor_globals`.
    pub executor_globals: u64,
    /// The VM's loop, `execute_ex`: [start, end).
    pub execute_ex: (u64, u64),
    /// The version's layout.
    pub layout: &'static PhpLayout,
}

/// The version a PHP binary's name says ("8.2" of `php8.2`,
/// `php-fpm8.2`, `php-cgi8.2`), if the name is one of PHP's.
pub fn version_of(file_name: &str) -> Option<&str> {
    let rest = ["php-fpm", "php-cgi", "php"]
        .iter()
        .find_map(|p| file_name.strip_prefix(p))?;
    let mut parts = rest.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    (parts.next().is_none()
        && !major.is_empty()
        && !minor.is_empty()
        && major
            .bytes()
            .chain(minor.bytes())
            .all(|b| b.is_ascii_digit()))
    .then_some(rest)
}

/// Whether a mapped file may be a PHP binary, by its name: only those are
/// read.
pub fn may_be_php(file_name: &str) -> bool {
    version_of(file_name).is_some()
}

/// Why a PHP binary's frames are not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRead {
    /// A version this build has no layout for.
    #[error("PHP {0}: this build reads the frames of PHP {SUPPORTED}")]
    Version(String),
    /// A thread-safe build (its globals per thread), or one without the
    /// symbols the walk needs.
    #[error("{0}")]
    Damaged(&'static str),
}

/// Read what makes `elf` (a file named `file_name`) a PHP binary: Ok(None)
/// for a file that is none.
pub fn read(elf: &ElfReader<'_>, file_name: &str) -> Result<Option<PhpBinary>, NotRead> {
    let Some(version) = version_of(file_name) else {
        return Ok(None);
    };
    let symbols = elf.symbols_where(|n| {
        matches!(
            n,
            b"executor_globals" | b"execute_ex" | b"executor_globals_offset"
        )
    });
    let find = |name: &str| {
        symbols
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, addr, size)| (addr, size))
    };
    if find("execute_ex").is_none() {
        return Ok(None); // named so, but no PHP VM in it
    }
    let Some(layout) = layout(version) else {
        return Err(NotRead::Version(version.to_string()));
    };
    if find("executor_globals_offset").is_some() {
        return Err(NotRead::Damaged(
            "a thread-safe PHP (its executor per thread): its frames are not read",
        ));
    }
    let (executor_globals, _) =
        find("executor_globals").ok_or(NotRead::Damaged("no executor_globals symbol"))?;
    let (start, size) = find("execute_ex").expect("checked above");
    if size == 0 {
        return Err(NotRead::Damaged("execute_ex has no size"));
    }
    Ok(Some(PhpBinary {
        executor_globals,
        execute_ex: (start, start.saturating_add(size)),
        layout,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check that PHP's binaries are told by name and nothing else is.
    #[test]
    fn php_binaries_are_told_by_their_name() {
        assert_eq!(version_of("php8.2"), Some("8.2"));
        assert_eq!(version_of("php-fpm8.2"), Some("8.2"));
        assert_eq!(version_of("php-cgi8.3"), Some("8.3"));
        for other in [
            "php",
            "phpize",
            "php8",
            "php8.2.so",
            "php8.x",
            "php-fpm",
            "python3.11",
            "libphp8.2.so",
        ] {
            assert_eq!(version_of(other), None, "{other}");
        }
    }

    /// Check that each layout's offsets fit the kernel walk's reads: the
    /// frame's fields within the PHP_FRAME_READ bytes read of it.
    #[test]
    fn layouts_fit_the_kernel_walk() {
        for l in &LAYOUTS {
            for word in [l.ex_opline, l.ex_func, l.ex_call_info, l.ex_prev] {
                assert!(
                    word + 8 <= crate::bpf::abi::PHP_FRAME_READ,
                    "{}: {word}",
                    l.version
                );
            }
            assert_eq!(
                l.op_line_start,
                l.op_filename + 8,
                "the kernel reads them as one"
            );
        }
    }

    /// Check that Debian's PHP 8.2, where installed, is read.
    #[test]
    fn debians_php_is_read() {
        let Ok(f) = std::fs::File::open("/usr/bin/php8.2") else {
            eprintln!("no /usr/bin/php8.2: NOT CHECKED");
            return;
        };
        let p = read(&ElfReader::new(&f, Default::default()), "php8.2")
            .unwrap()
            .expect("PHP 8.2");
        assert!(
            p.execute_ex.1 - p.execute_ex.0 > 10_000,
            "{:x?}",
            p.execute_ex
        );
        assert!(p.executor_globals > 0);
    }
}
