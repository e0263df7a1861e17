//! Interpreted Java frames by name: a HotSpot `Method*` read from the JVM's
//! memory, and the line a bytecode pointer in it is on.
//!
//! In: a JVM's pid, where its `libjvm.so` lies and the file addresses of
//! its `gHotSpotVM*` tables
//! ([`HotSpotSymbols`](crate::runtimes::hotspot::binary::HotSpotSymbols)); then the (Method*,
//! bytecode pointer) pairs the kernel read from interpreter frames. Out: a
//! [`HotSpotLayout`] (the offsets of the few fields named here, from the
//! JVM's own tables, so any JDK that exports them is read without a table
//! of versions), the interpreter's code range (for the kernel's walker),
//! and per method a [`JavaMethod`]: its name as the JVM's perf map writes
//! compiled methods (`long Hot.hotOne(int)`, so an interpreted and a
//! compiled frame of one method read the same), its source file, its line
//! table. Everything is read with `process_vm_readv`, the JVM never stopped.
//!
//! The memory is the JVM's own, and whoever runs it can write any of it:
//! every count, length and index is bounded, and a method is taken only if
//! its constant pool's class points back at that constant pool; what fails
//! is an unnamed frame, never a read outside that process.
//!
//! `tables` reads libjvm's `gHotSpotVM*` structure tables, `layout` the
//! offsets wanted from them (and the interpreter's and code cache's
//! places), `flags` a boolean flag through them; `method` reads a `Method*`
//! (its ConstMethod, constant pool and symbols), `compiled` an nmethod's
//! debug information; `decode` turns HotSpot's encodings (UNSIGNED5 numbers,
//! line tables, descriptors) into numbers and names, reading no memory.

mod compiled;
mod decode;
mod flags;
mod layout;
mod method;
mod tables;

pub use compiled::{CompiledCode, MAX_DEBUG_INFO};
pub use decode::{decode_line_table, external_name};
pub use flags::bool_flag;
pub use layout::{HotSpotLayout, LayoutError};
pub use method::{JavaMethod, MethodError};

use crate::sys::memory::read_process;

/// The 8-byte word at `addr` of `pid`.
fn word(pid: u32, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_process(pid, addr, &mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

/// The 2-byte word at `addr` of `pid`.
fn half(pid: u32, addr: u64) -> Option<u16> {
    let mut b = [0u8; 2];
    read_process(pid, addr, &mut b).ok()?;
    Some(u16::from_le_bytes(b))
}

#[cfg(test)]
mod tests;
