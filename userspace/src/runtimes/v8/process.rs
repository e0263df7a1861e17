//! V8 as one process embeds it.
//!
//! In: the constants of the binary that embeds it, from the runtimes
//! registry. Out: [`V8Runtime`], whose frame constants the process's
//! kernel entry carries and from which [`super::read`] names functions.

use std::sync::Arc;

use super::binary::V8Symbols;

/// V8 as one process embeds it: its binary's constants, from which the
/// kernel reads its frames and the collector its functions
/// ([`super::read`]).
#[derive(Debug, Clone)]
pub struct V8Runtime {
    /// The `v8dbg_` constants' values.
    pub symbols: Arc<V8Symbols>,
}
