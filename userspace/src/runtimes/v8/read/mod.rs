//! V8's JavaScript functions named from the process's memory: the
//! function's name and its script's, as V8's own profiler names them.
//!
//! In: a V8 process's pid and its binary's `v8dbg_` constants
//! ([`crate::runtimes::v8::binary`]); then, per JavaScript frame the kernel walked,
//! the SharedFunctionInfo it read and the word it read at the object's
//! name-or-scope-info field. Out: each function's name and file
//! ([`V8Layout::function`]).
//!
//! V8 moves and frees its objects: a function is named only if the object
//! is still a SharedFunctionInfo (its map says so) holding the word the
//! kernel read at the sample. A function's own name lives in its
//! ScopeInfo when it has one; V8 publishes no layout for that, so, as the
//! OpenTelemetry profiler does, the first string after the context locals
//! is taken, looked for only where V8 puts it. Every read goes through `process_vm_readv`, bounded: strings
//! to [`MAX_CHARS`] characters through at most [`MAX_STRING_PARTS`] cons,
//! thin or sliced links; nothing from the process sizes an allocation
//! beyond those bounds.
//!
//! `layout` holds the constants objects are read with (and an object's
//! type and a Smi's value), `function` names a SharedFunctionInfo and its
//! Script, `strings` reads V8's strings; `optimized` reads a function's
//! optimized code (its Code object, deoptimization data and on-stack
//! replaced code), `code` is that code as read and what runs where in it.

mod code;
mod function;
mod layout;
mod optimized;
mod strings;

pub use code::{decode_positions, JsCode, MAX_SCOPES};
pub use function::JsFunction;
pub use layout::{CodeLayout, V8Layout};
pub use optimized::{CodeAt, FunctionGone};
pub use strings::MAX_CHARS;

use crate::bpf::abi::{V8_HEAP_OBJECT_TAG, V8_HEAP_OBJECT_TAG_MASK};
use crate::sys::memory::read_process;

/// Whether `w` is a tagged pointer to a heap object (in user space).
fn is_heap_object(w: u64) -> bool {
    w & V8_HEAP_OBJECT_TAG_MASK == V8_HEAP_OBJECT_TAG && w < (1 << 47)
}

/// The 8-byte word at `addr` of `pid`.
fn read_u64(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_process(pid, addr, &mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests;
