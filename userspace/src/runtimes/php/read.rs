//! PHP functions by name: a `zend_function` read from its process's memory.
//!
//! In: a pid, the address of a function the kernel found in a frame, with
//! the fingerprint it read of it (its name and file pointers and first
//! line: [`crate::runtimes::chain::fingerprint`], the line table's word 0),
//! and the version's layout. Out: a [`CodeInfo`] (`Class::method`,
//! `function`, `{closure}`, `{main}` for a file's top-level code, `{eval}`
//! for `eval`'s; its
//! file and first line), read once per function with `process_vm_readv`.
//! The memory is the process's own: every length is bounded, and what is
//! not a PHP function, or no longer the one the kernel saw, is refused.

use crate::bpf::abi::{PHP_EVAL_CODE, PHP_USER_FUNCTION};
use crate::model::recording::FrameKind;
use crate::runtimes::chain::fingerprint;
pub use crate::runtimes::frames::CodeInfo;
use crate::runtimes::php::binary::PhpLayout;
use crate::runtimes::python::read::{layout_word as word, CodeError};
use crate::sys::memory::read_process;

/// Longest function or class name and file name read (longer are refused).
const MAX_NAME_CHARS: u64 = 1024;
const MAX_FILE_CHARS: u64 = 4096;

/// The `zend_string` at `addr`, of at most `max` bytes.
fn read_string(pid: u32, addr: u64, l: &PhpLayout, max: u64) -> Result<String, CodeError> {
    let mut len = [0u8; 8];
    read_process(pid, addr.wrapping_add(l.str_len), &mut len).map_err(|_| CodeError::Unreadable)?;
    let len = u64::from_le_bytes(len);
    if len > max {
        return Err(CodeError::Malformed("string"));
    }
    let mut bytes = vec![0u8; len as usize];
    read_process(pid, addr.wrapping_add(l.str_val), &mut bytes)
        .map_err(|_| CodeError::Unreadable)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Read the PHP function at `addr` of `pid`, if it is still the one of
/// fingerprint `expected`.
pub fn read_function(
    pid: u32,
    addr: u64,
    expected: u32,
    l: &PhpLayout,
) -> Result<CodeInfo, CodeError> {
    let mut head = [0u8; 176];
    let size = (l.op_line_start + 8) as usize;
    let head = &mut head[..size.min(176)];
    read_process(pid, addr, head).map_err(|_| CodeError::Unreadable)?;
    let eval = head[0] == PHP_EVAL_CODE;
    if head[0] != PHP_USER_FUNCTION && !eval {
        return Err(CodeError::NotCode);
    }
    let (name, scope, file) = (
        word(head, l.fn_name)?,
        word(head, l.fn_scope)?,
        word(head, l.op_filename)?,
    );
    let first_line = word(head, l.op_line_start)? as u32;
    if fingerprint(name, file, 0, first_line) != expected {
        return Err(CodeError::Replaced);
    }
    let function = if eval {
        "{eval}".to_string()
    } else if name == 0 {
        "{main}".to_string()
    } else {
        read_string(pid, name, l, MAX_NAME_CHARS)?
    };
    let qualname = if scope == 0 {
        function
    } else {
        let mut class = [0u8; 8];
        read_process(pid, scope.wrapping_add(l.class_name), &mut class)
            .map_err(|_| CodeError::Unreadable)?;
        let class = read_string(pid, u64::from_le_bytes(class), l, MAX_NAME_CHARS)?;
        format!("{class}::{function}")
    };
    let filename = read_string(pid, file, l, MAX_FILE_CHARS)?;
    Ok(CodeInfo {
        kind: FrameKind::Php,
        qualname: qualname.into(),
        filename: filename.into(),
        first_line,
        line_table: Box::new([]),
    })
}
