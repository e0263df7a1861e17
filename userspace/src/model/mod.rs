//! The model every layer shares: a recording's processes, threads,
//! samples as columns, frames and the stack prefix tree, markers and
//! counters, what symbolication found for an address, where a process runs,
//! the string table the writers share.
//! In: nothing (plain data, with the operations on it: merging windows,
//! clipping to a range, folding brief processes of one name, summing
//! waits per minute for the store's compacted segments). Out: the types the collector produces and the
//! profile writer, the store and the exporters read.

pub mod cgroup;
pub mod coarse;
pub mod fold;
pub mod frame_kind;
pub mod goroutine_labels;
pub mod merge;
pub mod recording;
pub mod short_name;
pub mod stack_end;
pub mod stack_tree;
pub mod strings;
pub mod symbols;
pub mod wait_kind;
